//! One workflow file built into the graph: its id, `retry:`, schemas and initial state, then
//! its entries; a file that names itself through nested workflows, or nests too deeply, is
//! refused.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::compile::file_schema;
use super::read::too_deep;
use super::retry::check_retry;
use super::{Builder, FileCx, MAX_FILE_NESTING, line};
use crate::engine::model::{FileDef, FileId};
use crate::engine::schema;
use crate::workflow::{WorkflowError, checks};

impl Builder<'_> {
    /// Builds the workflow file `key` into the graph under the entry path `prefix` (named at
    /// `named_at`, unless it is the top-level file): its definition, then its entries.
    pub(super) fn file(
        &mut self,
        key: &Path,
        prefix: String,
        named_at: Option<(&Path, u64)>,
    ) -> Result<FileId, WorkflowError> {
        let files = self.files;
        let Some(parsed) = files.get(key) else {
            return Err(WorkflowError::at(
                key,
                None,
                "file was not loaded".into(),
                "",
            ));
        };
        let path = parsed.path.as_path();
        if self.stack.iter().any(|p| p == key) {
            let (by, line) = named_at.unwrap_or((path, 0));
            return Err(WorkflowError::at(
                by,
                Some(line),
                format!(
                    "workflow file {} names itself through nested workflows",
                    path.display()
                ),
                "remove the cycle of `workflow:` entries",
            ));
        }
        if self.stack.len() > MAX_FILE_NESTING {
            let chain: Vec<(PathBuf, u64)> = self
                .stack
                .iter()
                .filter_map(|k| files.get(k))
                .map(|f| (f.path.clone(), 0))
                .collect();
            let mut err = too_deep(&chain, path);
            if let Some((by, line)) = named_at {
                err.file = by.to_path_buf();
                err.line = Some(line);
            }
            return Err(err);
        }
        let raw = &parsed.raw;
        let id = &raw.id.value;
        if !checks::valid_id(id) {
            return Err(WorkflowError::at(
                path,
                line(&raw.id.referenced),
                format!("workflow id `{id}` is not valid"),
                "use lowercase letters, digits, `-` and `_` only",
            ));
        }
        if let Some(r) = &raw.retry {
            check_retry(path, r)?;
        }
        if let Some(r) = &raw.retention {
            let retention = crate::age::parse_age(&r.value).map_err(|_| {
                WorkflowError::at(
                    path,
                    line(&r.referenced),
                    format!("retention `{}` is not a duration", r.value),
                    "write how long ended runs are kept, e.g. `retention: 30d`, `12h` or `1h 30m`",
                )
            })?;
            if self.stack.is_empty() {
                self.retention = Some(retention);
            }
        }
        let file_id = self.graph.files.len() as FileId;
        let input_schema = file_schema(path, raw.input_schema.as_ref(), "input-schema")?;
        let state_schema = file_schema(path, raw.state_schema.as_ref(), "state-schema")?;
        let mut initial_state = raw.initial_state.clone().unwrap_or_else(|| json!({}));
        if !initial_state.is_object() {
            return Err(WorkflowError::at(
                path,
                None,
                "initial-state must be an object".into(),
                "write `initial-state: {}`",
            ));
        }
        if let Some(s) = &state_schema
            && let Err(v) = s.fill_and_check(&mut initial_state)
        {
            return Err(WorkflowError::at(
                path,
                None,
                format!(
                    "initial-state breaks state-schema: {}",
                    schema::summarize(&v)
                ),
                "make initial-state satisfy state-schema",
            ));
        }
        self.graph.files.push(FileDef {
            id: id.clone(),
            source: path.display().to_string(),
            description: raw.description.clone(),
            prefix: prefix.clone(),
            input_schema,
            state_schema,
            initial_state,
            body: Vec::new(),
        });
        self.stack.push(key.to_path_buf());
        let mut fcx = FileCx {
            path,
            parsed,
            file: file_id,
            ids: HashMap::new(),
            retry: raw
                .retry
                .as_ref()
                .map(|r| r.value.clone())
                .unwrap_or_default(),
        };
        if raw.steps.value.is_empty() {
            return Err(WorkflowError::at(
                path,
                line(&raw.steps.referenced),
                "`steps:` is empty".into(),
                "add at least one entry",
            ));
        }
        let mut body = Vec::new();
        for e in &raw.steps.value {
            body.push(self.entry(e, &prefix, &mut fcx)?);
        }
        self.graph.files[file_id as usize].body = body;
        self.stack.pop();
        Ok(file_id)
    }
}
