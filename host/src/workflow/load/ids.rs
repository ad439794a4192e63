//! Entry ids and paths: an id claimed once within its file, and an entry's path (`PREFIX.ID`)
//! in the graph, which holds at most [`MAX_ENTRIES`] entries.

use serde_saphyr::Spanned;

use super::{Builder, FileCx, MAX_ENTRIES};
use crate::engine::model::{EntryDef, EntryId, EntryKind};
use crate::workflow::{WorkflowError, checks};

impl Builder<'_> {
    /// Claims entry id `id` in its file: refused when it is not valid or is taken already.
    pub(super) fn claim_id(
        &mut self,
        id: &Spanned<String>,
        fcx: &mut FileCx,
    ) -> Result<(), WorkflowError> {
        let name = &id.value;
        let ln = id.referenced.line();
        if !checks::valid_id(name) {
            return Err(WorkflowError::at(
                fcx.path,
                Some(ln),
                format!("id `{name}` is not valid"),
                "use lowercase letters, digits, `-` and `_` only (`[a-z0-9-_]+`)",
            ));
        }
        if let Some(first) = fcx.ids.insert(name.clone(), ln) {
            return Err(WorkflowError::at(
                fcx.path,
                Some(ln),
                format!("duplicate id `{name}` (first used on line {first})"),
                "give every entry an id unique within its file",
            ));
        }
        Ok(())
    }

    /// Adds an entry `id` under the path `prefix` to the graph (its kind set by the caller), and
    /// returns it with its path; refused past [`MAX_ENTRIES`] entries.
    pub(super) fn push(
        &mut self,
        id: &str,
        prefix: &str,
        fcx: &FileCx,
    ) -> Result<(EntryId, String), WorkflowError> {
        if self.graph.entries.len() >= MAX_ENTRIES {
            return Err(WorkflowError::at(
                fcx.path,
                None,
                format!(
                    "the workflow expands to more than {MAX_ENTRIES} entries (each use of a nested \
                     workflow file counts all its entries again)"
                ),
                "use fewer nested workflows, or fewer entries in them",
            ));
        }
        let path = if prefix.is_empty() {
            id.to_owned()
        } else {
            format!("{prefix}.{id}")
        };
        let eid = self.graph.entries.len() as EntryId;
        self.graph.entries.push(EntryDef {
            id: id.to_owned(),
            path: path.clone(),
            file: fcx.file,
            kind: EntryKind::Group { body: Vec::new() },
        });
        Ok((eid, path))
    }
}
