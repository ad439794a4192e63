//! Workflow files → a checked [`Graph`]: parse, resolve paths, load plugins, check everything
//! before anything runs (WORKFLOW-FORMAT.md §1, S17, S42, S108).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde_json::{Value, json};
use serde_saphyr::{Location, Spanned};

use super::raw::*;
use super::{WorkflowError, checks, syntax};
use crate::engine::expr::Expr;
use crate::engine::model::*;
use crate::engine::schema::{self, Schema};
use crate::executor::StepInfo;
use crate::limits::files::{MAX_WORKFLOW_FILE_BYTES, read_at_most};
use crate::native::{NATIVE_PLUGIN, NativeSteps};
use crate::plugin::{Plugin, PluginError, PluginHost, Sandbox, ToolInfo};
use crate::store::Definition;

mod agent;

/// A checked workflow with the plugins it uses.
pub struct LoadedWorkflow {
    /// The graph, ready to run.
    pub graph: Graph,
    /// Each plugin by digest: its component bytes (stored with runs, S10) and the loaded plugin.
    pub plugins: BTreeMap<String, LoadedPlugin>,
    shared: OnceLock<(Arc<Graph>, Arc<Definition>)>,
}

impl LoadedWorkflow {
    /// The graph as runs share it, and its definition as each run stores it (S10), digest
    /// included; made once, however many runs start.
    pub fn shared(&self) -> Result<(Arc<Graph>, Arc<Definition>), serde_json::Error> {
        if let Some(s) = self.shared.get() {
            return Ok(s.clone());
        }
        let definition = Definition::new(serde_json::to_vec(&self.graph)?);
        Ok(self
            .shared
            .get_or_init(|| (Arc::new(self.graph.clone()), Arc::new(definition)))
            .clone())
    }
}

/// A plugin a workflow uses.
#[derive(Clone)]
pub struct LoadedPlugin {
    /// The component as loaded.
    pub bytes: Arc<[u8]>,
    /// The compiled plugin.
    pub plugin: Arc<Plugin>,
}

/// Reads, parses and checks the workflow file at `path` and every file it names.
pub async fn load_workflow(
    path: &Path,
    host: &PluginHost,
) -> Result<LoadedWorkflow, WorkflowError> {
    load_workflow_with(path, None, host, &NativeSteps::default()).await
}

/// Like [`load_workflow`], with native steps available, and optionally with the top-level file's
/// text given instead of read from `path` (paths in it are then relative to `path`'s directory).
pub async fn load_workflow_with(
    path: &Path,
    text: Option<&str>,
    host: &PluginHost,
    natives: &NativeSteps,
) -> Result<LoadedWorkflow, WorkflowError> {
    load(path, text, host, natives)
        .await
        .map_err(WorkflowError::bounded)
}

async fn load(
    path: &Path,
    text: Option<&str>,
    host: &PluginHost,
    natives: &NativeSteps,
) -> Result<LoadedWorkflow, WorkflowError> {
    let mut files: HashMap<PathBuf, ParsedFile> = HashMap::new();
    let top = Resolved::new(path);
    let mut plugins: BTreeMap<String, LoadedPlugin> = BTreeMap::new();
    let mut by_path: HashMap<PathBuf, String> = HashMap::new();
    // Each file to read, with the chain of files that named it (outermost first).
    let mut todo: Vec<(Resolved, Vec<(PathBuf, u64)>)> = vec![(top.clone(), Vec::new())];
    while let Some((file, chain)) = todo.pop() {
        if files.contains_key(&file.key) {
            continue;
        }
        if chain.len() > MAX_FILE_NESTING {
            return Err(too_deep(&chain, &file.path));
        }
        let parsed = match text {
            Some(text) if file.key == top.key => parse_text(&file.path, text)?,
            _ => parse_file(&file.path)?,
        };
        for wasm in parsed.plugin_paths.values() {
            let (path, pin, line) = wasm;
            if by_path.contains_key(path) {
                continue;
            }
            // Read and hashed once per process while the file is unchanged (see `load_path`).
            let (plugin, bytes) = host.load_path(path, pin.as_deref()).await.map_err(|e| {
                let (message, fix) = match &e {
                    PluginError::Read { source, .. } => (
                        format!("cannot read plugin {}: {source}", path.display()),
                        "fix the `wasm:` path; it is relative to this file's directory",
                    ),
                    // Other errors name the plugin by its path already.
                    _ => {
                        let text = e.to_string();
                        if text.contains(&path.display().to_string()) {
                            (text, "")
                        } else {
                            (format!("plugin {}: {text}", path.display()), "")
                        }
                    }
                };
                WorkflowError::at(&file.path, Some(*line), message, fix)
            })?;
            by_path.insert(path.clone(), plugin.digest().to_owned());
            plugins.insert(plugin.digest().to_owned(), LoadedPlugin { bytes, plugin });
        }
        for (nested, line) in &parsed.nested {
            let mut named = chain.clone();
            named.push((file.path.clone(), *line));
            todo.push((nested.clone(), named));
        }
        files.insert(file.key, parsed);
    }
    let mut builder = Builder {
        files: &files,
        plugins: &plugins,
        by_path: &by_path,
        natives,
        host,
        graph: Graph::empty(),
        stack: Vec::new(),
    };
    builder.file(&top.key, String::new(), None)?;
    Ok(LoadedWorkflow {
        graph: builder.graph,
        plugins,
        shared: OnceLock::new(),
    })
}

/// How deep `workflow:` entries may nest files: a file naming a file naming a file… at most this
/// many levels below the top-level file.
pub const MAX_FILE_NESTING: usize = 16;

/// The most entries a workflow may expand to, nested files included (each use of a nested file
/// expands it again).
pub const MAX_ENTRIES: usize = 100_000;

fn absolute(path: &Path) -> PathBuf {
    normalize(&std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()))
}

/// `path` with `.` and `..` components worked out lexically.
fn normalize(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push(part);
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// A workflow file's path as messages name it, and the key that identifies the file on disk.
#[derive(Clone, Debug)]
struct Resolved {
    /// Absolute, `..` worked out, links kept: relative paths inside the file start from here.
    path: PathBuf,
    /// The file itself (links followed), so that a file reached by two spellings is one file.
    key: PathBuf,
}

impl Resolved {
    fn new(path: &Path) -> Self {
        let path = absolute(path);
        let key = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        Resolved { path, key }
    }
}

/// The refusal of `file`, named by the last file of `chain`, for nesting too deeply.
fn too_deep(chain: &[(PathBuf, u64)], file: &Path) -> WorkflowError {
    let names: Vec<String> = chain
        .iter()
        .map(|(p, _)| p.display().to_string())
        .chain(std::iter::once(file.display().to_string()))
        .collect();
    let (by, line) = chain
        .last()
        .map(|(p, l)| (p.as_path(), Some(*l)))
        .unwrap_or((file, None));
    WorkflowError::at(
        by,
        line,
        format!(
            "workflow files nest more than {MAX_FILE_NESTING} levels deep: {}",
            names.join(" → ")
        ),
        "inline some of the nested workflows, or flatten the chain of `workflow:` entries",
    )
}

struct ParsedFile {
    raw: RawFile,
    /// The file's path, as messages name it.
    path: PathBuf,
    dir: PathBuf,
    /// Plugin alias → (resolved wasm path, pin, line).
    plugin_paths: BTreeMap<String, (PathBuf, Option<String>, u64)>,
    /// Nested files named by `workflow:` entries, resolved, with the line naming each.
    nested: Vec<(Resolved, u64)>,
}

fn parse_file(path: &Path) -> Result<ParsedFile, WorkflowError> {
    let cannot_read = |e: &dyn std::fmt::Display| {
        WorkflowError::at(
            path,
            None,
            format!("cannot read the workflow file: {e}"),
            "check the path",
        )
    };
    let bytes = read_at_most(path, MAX_WORKFLOW_FILE_BYTES).map_err(|e| cannot_read(&e))?;
    let text = String::from_utf8(bytes).map_err(|e| cannot_read(&e.utf8_error()))?;
    parse_text(path, &text)
}

fn parse_text(path: &Path, text: &str) -> Result<ParsedFile, WorkflowError> {
    let raw: RawFile = {
        // YAML 1.2 booleans only: in schemas and configs, `n`, `y`, `no` stay strings.
        let mut options = serde_saphyr::Options::default();
        options.strict_booleans = true;
        serde_saphyr::from_str_with_options(text, options)
    }
    .map_err(|e| {
        let loc = e.location();
        WorkflowError {
            file: path.to_path_buf(),
            line: loc.map(|l| l.line()),
            column: loc.map(|l| l.column()),
            message: syntax::message(&e),
            fix: "see WORKFLOW-FORMAT.md §1 for the file format".into(),
        }
    })?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let plugin_paths = raw
        .plugins
        .iter()
        .map(|(alias, p)| {
            (
                alias.clone(),
                (
                    dir.join(&p.value.wasm.value),
                    p.value.sha256.clone(),
                    p.value.wasm.referenced.line(),
                ),
            )
        })
        .collect();
    let mut nested = Vec::new();
    for e in &raw.steps.value {
        collect_nested(e, &dir, &mut nested);
    }
    Ok(ParsedFile {
        raw,
        path: path.to_path_buf(),
        dir,
        plugin_paths,
        nested,
    })
}

fn collect_nested(e: &RawEntry, dir: &Path, out: &mut Vec<(Resolved, u64)>) {
    let each_do = |d: &RawDo, out: &mut Vec<(Resolved, u64)>| match d {
        RawDo::One(e) => collect_nested(e, dir, out),
        RawDo::List(l) => l.iter().for_each(|e| collect_nested(e, dir, out)),
    };
    if let Some(w) = &e.workflow {
        out.push((
            Resolved::new(&dir.join(&w.file.value)),
            w.file.referenced.line(),
        ));
    }
    if let Some(p) = &e.parallel {
        p.steps.iter().for_each(|e| collect_nested(e, dir, out));
    }
    if let Some(b) = &e.branch {
        b.arms.iter().for_each(|a| each_do(&a.do_, out));
    }
    if let Some(f) = &e.foreach {
        each_do(&f.do_, out);
    }
    if let Some(l) = &e.loop_ {
        each_do(&l.do_, out);
    }
    if let Some(a) = &e.agent {
        for tool in &a.tools {
            if let Some(w) = &tool.value.workflow {
                out.push((
                    Resolved::new(&dir.join(&w.file.value)),
                    w.file.referenced.line(),
                ));
            }
        }
    }
}

fn line(loc: &Location) -> Option<u64> {
    Some(loc.line())
}

struct Builder<'a> {
    files: &'a HashMap<PathBuf, ParsedFile>,
    plugins: &'a BTreeMap<String, LoadedPlugin>,
    by_path: &'a HashMap<PathBuf, String>,
    natives: &'a NativeSteps,
    host: &'a PluginHost,
    graph: Graph,
    /// Files being expanded, outermost first (S42: a file may not name itself).
    stack: Vec<PathBuf>,
}

/// Per-file bookkeeping while its entries are built.
struct FileCx<'a> {
    path: &'a Path,
    parsed: &'a ParsedFile,
    file: FileId,
    ids: HashMap<String, u64>,
    retry: RawRetry,
}

impl<'a> Builder<'a> {
    fn file(
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

    fn claim_id(&mut self, id: &Spanned<String>, fcx: &mut FileCx) -> Result<(), WorkflowError> {
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

    fn push(
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

    fn list(
        &mut self,
        d: &RawDo,
        prefix: &str,
        fcx: &mut FileCx,
    ) -> Result<Vec<EntryId>, WorkflowError> {
        match d {
            RawDo::One(e) => Ok(vec![self.entry(e, prefix, fcx)?]),
            RawDo::List(list) => {
                if list.is_empty() {
                    return Err(WorkflowError::at(
                        fcx.path,
                        None,
                        format!("an empty `do:` list under {prefix}"),
                        "add at least one entry",
                    ));
                }
                list.iter().map(|e| self.entry(e, prefix, fcx)).collect()
            }
        }
    }

    fn expr(&self, s: &Spanned<String>, what: &str, fcx: &FileCx) -> Result<Expr, WorkflowError> {
        let e = Expr::new(s.value.clone());
        e.check().map_err(|msg| {
            WorkflowError::at(
                fcx.path,
                line(&s.referenced),
                format!("{what}: {msg}"),
                "fix the jq expression",
            )
        })?;
        Ok(e)
    }

    fn entry(
        &mut self,
        e: &RawEntry,
        prefix: &str,
        fcx: &mut FileCx,
    ) -> Result<EntryId, WorkflowError> {
        let blocks = [
            e.parallel.is_some(),
            e.branch.is_some(),
            e.foreach.is_some(),
            e.loop_.is_some(),
            e.sleep.is_some(),
            e.map.is_some(),
            e.workflow.is_some(),
            e.agent.is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count();
        let step_fields = e.id.is_some()
            || e.plugin.is_some()
            || e.native.is_some()
            || e.step.is_some()
            || e.tool.is_some()
            || e.model.is_some()
            || e.input.is_some()
            || e.config.is_some();
        if blocks > 1 || (blocks == 1 && step_fields) {
            let ln = e.id.as_ref().map(|i| i.referenced.line());
            return Err(WorkflowError::at(
                fcx.path,
                ln,
                "an entry mixes a step and blocks, or several blocks".into(),
                "write one step or one block per entry",
            ));
        }
        if let Some(p) = &e.parallel {
            self.claim_id(&p.id, fcx)?;
            let (eid, path) = self.push(&p.id.value, prefix, fcx)?;
            let arms = p
                .steps
                .iter()
                .map(|a| self.entry(a, &path, fcx))
                .collect::<Result<Vec<_>, _>>()?;
            if arms.is_empty() {
                return Err(WorkflowError::at(
                    fcx.path,
                    line(&p.id.referenced),
                    format!("parallel {path} has no steps"),
                    "add arms under `steps:`",
                ));
            }
            self.graph.entries[eid as usize].kind = EntryKind::Parallel { arms };
            return Ok(eid);
        }
        if let Some(b) = &e.branch {
            self.claim_id(&b.id, fcx)?;
            let (eid, path) = self.push(&b.id.value, prefix, fcx)?;
            let mut arms = Vec::new();
            for arm in &b.arms {
                let when = self.expr(&arm.when, &format!("branch {path}: when"), fcx)?;
                let entry = match (&arm.do_, &arm.id) {
                    (RawDo::One(one), id) => {
                        if let Some(id) = id.as_ref().filter(|id| !checks::valid_id(&id.value)) {
                            return Err(WorkflowError::at(
                                fcx.path,
                                line(&id.referenced),
                                format!("arm id `{}` is not valid", id.value),
                                "use lowercase letters, digits, `-` and `_` only (`[a-z0-9-_]+`)",
                            ));
                        }
                        self.entry(one, &path, fcx)?
                    }
                    (RawDo::List(_), Some(id)) => {
                        self.claim_id(id, fcx)?;
                        let (gid, gpath) = self.push(&id.value, &path, fcx)?;
                        let body = self.list(&arm.do_, &gpath, fcx)?;
                        self.graph.entries[gid as usize].kind = EntryKind::Group { body };
                        gid
                    }
                    (RawDo::List(_), None) => {
                        return Err(WorkflowError::at(
                            fcx.path,
                            line(&arm.when.referenced),
                            format!("an arm of branch {path} has a `do:` list but no `id:`"),
                            "give the arm an `id:` (S107)",
                        ));
                    }
                };
                arms.push(BranchArm { when, entry });
            }
            self.graph.entries[eid as usize].kind = EntryKind::Branch { arms };
            return Ok(eid);
        }
        if let Some(f) = &e.foreach {
            self.claim_id(&f.id, fcx)?;
            let (eid, path) = self.push(&f.id.value, prefix, fcx)?;
            let concurrency = f.concurrency.unwrap_or(1);
            if concurrency == 0 {
                return Err(WorkflowError::at(
                    fcx.path,
                    line(&f.id.referenced),
                    format!("foreach {path}: concurrency 0"),
                    "use 1 or more",
                ));
            }
            let body = self.list(&f.do_, &path, fcx)?;
            self.graph.entries[eid as usize].kind = EntryKind::Foreach { concurrency, body };
            return Ok(eid);
        }
        if let Some(l) = &e.loop_ {
            self.claim_id(&l.id, fcx)?;
            let (eid, path) = self.push(&l.id.value, prefix, fcx)?;
            let (test, until) = match (&l.do_while, &l.do_until) {
                (Some(w), None) => (self.expr(w, &format!("loop {path}: do-while"), fcx)?, false),
                (None, Some(u)) => (self.expr(u, &format!("loop {path}: do-until"), fcx)?, true),
                _ => {
                    return Err(WorkflowError::at(
                        fcx.path,
                        line(&l.id.referenced),
                        format!("loop {path} needs exactly one of do-while and do-until"),
                        "keep one of them",
                    ));
                }
            };
            let body = self.list(&l.do_, &path, fcx)?;
            self.graph.entries[eid as usize].kind = EntryKind::Loop {
                test,
                until,
                max_iterations: l.max_iterations,
                body,
            };
            return Ok(eid);
        }
        if let Some(s) = &e.sleep {
            self.claim_id(&s.id, fcx)?;
            let (eid, path) = self.push(&s.id.value, prefix, fcx)?;
            let until = match (&s.ms, &s.until) {
                (Some(_), None) => None,
                (None, Some(u)) => Some(self.expr(u, &format!("sleep {path}: until"), fcx)?),
                _ => {
                    return Err(WorkflowError::at(
                        fcx.path,
                        line(&s.id.referenced),
                        format!("sleep {path} needs exactly one of ms and until"),
                        "keep one of them",
                    ));
                }
            };
            self.graph.entries[eid as usize].kind = EntryKind::Sleep { ms: s.ms, until };
            return Ok(eid);
        }
        if let Some(m) = &e.map {
            self.claim_id(&m.id, fcx)?;
            let (eid, path) = self.push(&m.id.value, prefix, fcx)?;
            let expr = self.expr(&m.expr, &format!("map {path}: expr"), fcx)?;
            self.graph.entries[eid as usize].kind = EntryKind::Map { expr };
            return Ok(eid);
        }
        if let Some(w) = &e.workflow {
            self.claim_id(&w.id, fcx)?;
            let (eid, path) = self.push(&w.id.value, prefix, fcx)?;
            let nested = Resolved::new(&fcx.parsed.dir.join(&w.file.value));
            let file = self.file(
                &nested.key,
                path,
                Some((fcx.path, w.file.referenced.line())),
            )?;
            self.graph.entries[eid as usize].kind = EntryKind::Workflow { file };
            return Ok(eid);
        }
        if let Some(a) = &e.agent {
            return self.agent(a, prefix, fcx);
        }
        self.step(e, prefix, fcx)
    }

    fn step(
        &mut self,
        e: &RawEntry,
        prefix: &str,
        fcx: &mut FileCx,
    ) -> Result<EntryId, WorkflowError> {
        let Some(id) = &e.id else {
            let ln = e.plugin.as_ref().map(|p| p.referenced.line());
            return Err(WorkflowError::at(
                fcx.path,
                ln,
                "a step has no `id:`".into(),
                "give every step an id",
            ));
        };
        let ln = Some(id.referenced.line());
        if let (Some(step), Some(_)) = (&e.step, &e.tool) {
            return Err(WorkflowError::at(
                fcx.path,
                line(&step.referenced),
                format!("step `{}` has both `step:` and `tool:`", id.value),
                "keep one: `step:` invokes a step of the plugin, `tool:` calls one of its tools",
            ));
        }
        if let Some(model) = &e.model {
            if e.plugin.is_some() || e.step.is_some() || e.tool.is_some() || e.native.is_some() {
                return Err(WorkflowError::at(
                    fcx.path,
                    ln,
                    format!(
                        "step `{}` has `model:` and also `plugin:`, `step:`, `tool:` or `native:`",
                        id.value
                    ),
                    "a model step names only its model: keep `model:` or the others",
                ));
            }
            self.claim_id(id, fcx)?;
            let key = self.model_key(model, fcx)?;
            return self.finish_step(
                e,
                id,
                prefix,
                fcx,
                MODEL_PLUGIN.to_owned(),
                &model_info(&key),
            );
        }
        if let Some(name) = &e.native {
            if e.plugin.is_some() || e.step.is_some() || e.tool.is_some() {
                return Err(WorkflowError::at(
                    fcx.path,
                    ln,
                    format!(
                        "step `{}` has both `native:` and `plugin:`/`step:`/`tool:`",
                        id.value
                    ),
                    "keep one of them",
                ));
            }
            self.claim_id(id, fcx)?;
            let Some(info) = self.natives.info(&name.value) else {
                let names = self.natives.names();
                return Err(WorkflowError::at(
                    fcx.path,
                    line(&name.referenced),
                    format!(
                        "no native step `{}` is registered (registered: {})",
                        name.value,
                        if names.is_empty() {
                            "none".into()
                        } else {
                            names.join(", ")
                        }
                    ),
                    "register it with Runtime::register before loading the workflow",
                ));
            };
            return self.finish_step(e, id, prefix, fcx, NATIVE_PLUGIN.to_owned(), &info);
        }
        let Some(alias) = &e.plugin else {
            return Err(WorkflowError::at(
                fcx.path,
                ln,
                format!("step `{}` names no plugin and is no block", id.value),
                "add `plugin:` or a block key (parallel, branch, foreach, loop, sleep, map, workflow)",
            ));
        };
        self.claim_id(id, fcx)?;
        let (digest, wasm, plugin) =
            self.declared_plugin(alias, &format!("step `{}`", id.value), fcx)?;
        if let Some(tool) = &e.tool {
            let info = plugin_tool(&plugin, alias, tool, fcx)?;
            // A tool is called like a step: its arguments are the step's input, checked against
            // its input schema, and its result the step's output, checked against its output
            // schema (S120).
            let info = StepInfo {
                name: info.name.clone(),
                description: info.description.clone(),
                input_schema: Some(info.input_schema.clone()),
                output_schema: info.output_schema.clone(),
                suspend_schema: None,
                resume_schema: None,
                config_schema: None,
            };
            let key = self.plugin_key(alias, &digest, &wasm, fcx)?;
            return self.finish_step(e, id, prefix, fcx, key, &info);
        }
        let names: Vec<&str> = plugin.steps().iter().map(|s| s.name.as_str()).collect();
        let info = match &e.step {
            Some(name) => plugin
                .steps()
                .iter()
                .find(|s| s.name == name.value)
                .ok_or_else(|| {
                    WorkflowError::at(
                        fcx.path,
                        line(&name.referenced),
                        format!(
                            "plugin `{}` has no step `{}` (it has: {})",
                            alias.value,
                            name.value,
                            if names.is_empty() {
                                "none".into()
                            } else {
                                names.join(", ")
                            }
                        ),
                        "fix the step name; `weft plugin inspect` lists a plugin's steps",
                    )
                })?,
            None if names.len() == 1 => &plugin.steps()[0],
            None => {
                return Err(WorkflowError::at(
                    fcx.path,
                    ln,
                    format!(
                        "step `{}`: plugin `{}` has {} steps ({}); say which with `step:`",
                        id.value,
                        alias.value,
                        names.len(),
                        names.join(", ")
                    ),
                    "add `step: NAME`",
                ));
            }
        };
        let key = self.plugin_key(alias, &digest, &wasm, fcx)?;
        let info = info.clone();
        self.finish_step(e, id, prefix, fcx, key, &info)
    }

    /// The plugin `alias` of this file, which `who` names: its digest, its component's path and
    /// the loaded plugin.
    fn declared_plugin(
        &self,
        alias: &Spanned<String>,
        who: &str,
        fcx: &FileCx,
    ) -> Result<(String, PathBuf, Arc<Plugin>), WorkflowError> {
        let parsed = fcx.parsed;
        let Some((wasm, _, _)) = parsed.plugin_paths.get(&alias.value) else {
            let declared: Vec<&str> = parsed.plugin_paths.keys().map(String::as_str).collect();
            return Err(WorkflowError::at(
                fcx.path,
                line(&alias.referenced),
                format!(
                    "{who} names plugin `{}`, which is not declared (declared: {})",
                    alias.value,
                    if declared.is_empty() {
                        "none".into()
                    } else {
                        declared.join(", ")
                    }
                ),
                "fix the name or declare the plugin under `plugins:`",
            ));
        };
        let Some((digest, loaded)) = self
            .by_path
            .get(wasm)
            .and_then(|d| self.plugins.get_key_value(d))
        else {
            return Err(WorkflowError::at(
                fcx.path,
                line(&alias.referenced),
                format!("plugin `{}` was not loaded", alias.value),
                "",
            ));
        };
        Ok((digest.clone(), wasm.clone(), loaded.plugin.clone()))
    }

    /// The graph's key of the model `name` of this file, its declaration checked and the model
    /// added to the graph the first time (S122).
    fn model_key(&mut self, name: &Spanned<String>, fcx: &FileCx) -> Result<String, WorkflowError> {
        let Some(declared) = fcx.parsed.raw.models.get(&name.value) else {
            let names: Vec<&str> = fcx.parsed.raw.models.keys().map(String::as_str).collect();
            return Err(WorkflowError::at(
                fcx.path,
                line(&name.referenced),
                format!(
                    "model `{}` is not declared (declared: {})",
                    name.value,
                    if names.is_empty() {
                        "none".into()
                    } else {
                        names.join(", ")
                    }
                ),
                "declare it under `models:` (WORKFLOW-FORMAT.md §1)",
            ));
        };
        let key = format!("{}/{}", fcx.file, name.value);
        if self.graph.models.contains_key(&key) {
            return Ok(key);
        }
        let raw = &declared.value;
        let at = |s: &Spanned<String>| line(&s.referenced);
        let api = match raw.api.value.as_str() {
            "openai-chat" => ModelApi::OpenaiChat,
            "anthropic-messages" => ModelApi::AnthropicMessages,
            other => {
                return Err(WorkflowError::at(
                    fcx.path,
                    at(&raw.api),
                    format!(
                        "model `{}`: api `{other}` is not one weft speaks",
                        name.value
                    ),
                    "use `openai-chat` (OpenAI and compatible servers) or `anthropic-messages`",
                ));
            }
        };
        let base = raw.base_url.value.trim();
        if !(base.starts_with("http://") || base.starts_with("https://")) || base.len() < 10 {
            return Err(WorkflowError::at(
                fcx.path,
                at(&raw.base_url),
                format!(
                    "model `{}`: base-url `{base}` is not an http(s) URL",
                    name.value
                ),
                "give the API's base, e.g. `https://api.openai.com/v1`",
            ));
        }
        if let Some(var) = &raw.api_key_env
            && (var.is_empty() || var.contains(['=', '\0']))
        {
            return Err(WorkflowError::at(
                fcx.path,
                line(&declared.referenced),
                format!(
                    "model `{}`: api-key-env `{var}` is no variable name",
                    name.value
                ),
                "name the environment variable that holds the key, e.g. OPENAI_API_KEY",
            ));
        }
        if let Some(r) = &raw.retry {
            check_retry(fcx.path, r)?;
        }
        self.graph.models.insert(
            key.clone(),
            ModelDef {
                api,
                base_url: base.to_owned(),
                model: raw.model.clone(),
                api_key_env: raw.api_key_env.clone(),
                headers: raw
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            },
        );
        Ok(key)
    }

    /// The graph's key of the plugin `alias` of this file, its sandbox checked and the plugin
    /// added to the graph the first time.
    fn plugin_key(
        &mut self,
        alias: &Spanned<String>,
        digest: &str,
        wasm: &Path,
        fcx: &FileCx,
    ) -> Result<String, WorkflowError> {
        let parsed = fcx.parsed;
        let key = format!("{}/{}", fcx.file, alias.value);
        if !self.graph.plugins.contains_key(&key) {
            let raw = &parsed.raw.plugins[&alias.value].value;
            let sandbox = sandbox_value(raw, &parsed.dir);
            let declared = &parsed.raw.plugins[&alias.value];
            let at = |part: Option<checks::Part>| {
                match part {
                    Some(checks::Part::Limits) => raw.limits.as_ref().map(|l| l.referenced.line()),
                    Some(checks::Part::Grants) => raw.grants.as_ref().map(|g| g.referenced.line()),
                    None => None,
                }
                .or_else(|| line(&declared.referenced))
            };
            let checked = checks::sandbox_shape(
                raw.limits.as_ref().map(|l| &l.value),
                raw.grants.as_ref().map(|g| &g.value),
            )
            .map_err(|(m, part)| (m, Some(part)))
            .and_then(|()| {
                serde_json::from_value::<Sandbox>(sandbox.clone())
                    .map_err(|e| (e.to_string(), None))
            })
            .and_then(|s| {
                // The values first, so a malformed grant is named as such before its place.
                s.check().map_err(|e| (e.to_string(), None))?;
                checks::sandbox_values(&s).map_err(|(m, part)| (m, Some(part)))?;
                self.host
                    .check_sandbox(&s)
                    .map_err(|e| (e.to_string(), None))
            });
            if let Err((err, part)) = checked {
                return Err(WorkflowError::at(
                    fcx.path,
                    at(part),
                    format!("plugin `{}`: {err}", alias.value),
                    "fix `limits:` / `grants:` (WORKFLOW-FORMAT.md §1)",
                ));
            }
            self.graph.plugins.insert(
                key.clone(),
                PluginRef {
                    digest: digest.to_owned(),
                    source: wasm.display().to_string(),
                    sandbox,
                },
            );
        }
        Ok(key)
    }

    fn finish_step(
        &mut self,
        e: &RawEntry,
        id: &Spanned<String>,
        prefix: &str,
        fcx: &mut FileCx,
        key: String,
        info: &StepInfo,
    ) -> Result<EntryId, WorkflowError> {
        let kind = if e.tool.is_some() {
            StepKind::Tool
        } else {
            StepKind::Step
        };
        let ln = Some(id.referenced.line());
        let input = match &e.input {
            Some(expr) => Some(self.expr(expr, &format!("step {}: input", id.value), fcx)?),
            None => None,
        };
        let config = filled_config(
            e.config.clone(),
            info,
            &format!("step `{}`", id.value),
            ln,
            fcx,
        )?;
        if let Some(r) = &e.retry {
            check_retry(fcx.path, r)?;
        }
        let own = e.retry.as_ref().map(|r| &r.value);
        let retry = match &e.model {
            Some(model) => retry_under_model(&model.value, own, fcx),
            None => merge_retry(&fcx.retry, own),
        };
        let schemas = StepSchemas {
            input: compile_schema(fcx.path, info.input_schema.clone(), "input-schema")?,
            output: compile_schema(fcx.path, info.output_schema.clone(), "output-schema")?,
            suspend: compile_schema(fcx.path, info.suspend_schema.clone(), "suspend-schema")?,
            resume: compile_schema(fcx.path, info.resume_schema.clone(), "resume-schema")?,
        };
        let (eid, _) = self.push(&id.value, prefix, fcx)?;
        self.graph.entries[eid as usize].kind = EntryKind::Step(Box::new(StepDef {
            plugin: key,
            step: info.name.clone(),
            config: config.into(),
            retry,
            timeout_ms: e.timeout_ms,
            schemas,
            kind,
            input,
        }));
        Ok(eid)
    }
}

/// The tool `tool` of `plugin` (declared as `alias`), or a refusal listing its tools.
fn plugin_tool<'p>(
    plugin: &'p Plugin,
    alias: &Spanned<String>,
    tool: &Spanned<String>,
    fcx: &FileCx,
) -> Result<&'p ToolInfo, WorkflowError> {
    plugin
        .tools()
        .iter()
        .find(|t| t.name == tool.value)
        .ok_or_else(|| {
            let names: Vec<&str> = plugin.tools().iter().map(|t| t.name.as_str()).collect();
            WorkflowError::at(
                fcx.path,
                line(&tool.referenced),
                format!(
                    "plugin `{}` has no tool `{}` (it has: {})",
                    alias.value,
                    tool.value,
                    if names.is_empty() {
                        "none".into()
                    } else {
                        names.join(", ")
                    }
                ),
                "fix the tool name; `weft plugin inspect` lists a plugin's tools",
            )
        })
}

/// `config` (`{}` when absent) with the defaults of `info`'s config schema filled, or the
/// refusal of what breaks it (S17).
fn filled_config(
    config: Option<Value>,
    info: &StepInfo,
    who: &str,
    ln: Option<u64>,
    fcx: &FileCx,
) -> Result<Value, WorkflowError> {
    let mut config = config.unwrap_or_else(|| json!({}));
    if let Some(cs) = &info.config_schema {
        let schema = compile_schema(
            fcx.path,
            Some(cs.clone()),
            &format!("config-schema of step {}", info.name),
        )?
        .unwrap_or_else(|| Schema::new(json!({})));
        if let Err(v) = schema.fill_and_check(&mut config) {
            return Err(WorkflowError::at(
                fcx.path,
                ln,
                format!("{who}: config: {}", schema::summarize(&v)),
                "fix `config:` to satisfy the step's config-schema (S17)",
            ));
        }
    }
    Ok(config)
}

/// Refuses a `retry:` policy with numbers outside their range (S51, S52).
fn check_retry(path: &Path, r: &Spanned<RawRetry>) -> Result<(), WorkflowError> {
    checks::retry(&r.value)
        .map_err(|(message, fix)| WorkflowError::at(path, line(&r.referenced), message, fix))
}

/// The retry policy of a call of model `model` (a model step, an agent's model calls): the
/// model's `retry:` over the file's, `own` over both (S122).
fn retry_under_model(model: &str, own: Option<&RawRetry>, fcx: &FileCx) -> RetryPolicy {
    let model_retry = fcx
        .parsed
        .raw
        .models
        .get(model)
        .and_then(|m| m.value.retry.as_ref())
        .map(|r| overlay_retry(&fcx.retry, &r.value));
    merge_retry(model_retry.as_ref().unwrap_or(&fcx.retry), own)
}

/// `own`'s fields where it has them, else `default`'s.
fn overlay_retry(default: &RawRetry, own: &RawRetry) -> RawRetry {
    RawRetry {
        attempts: own.attempts.or(default.attempts),
        delay_ms: own.delay_ms.or(default.delay_ms),
        backoff: own.backoff.or(default.backoff),
        max_delay_ms: own.max_delay_ms.or(default.max_delay_ms),
    }
}

/// What a model step declares: its input (`{prompt}` or `{messages}`, with `system` and
/// `tools`) and its config (`max-tokens`, `temperature`).
fn model_info(key: &str) -> StepInfo {
    let message = json!({
        "type": "object",
        "required": ["role"],
        "properties": {
            "role": { "enum": ["system", "user", "assistant", "tool"] },
            "content": { "type": ["string", "null"] },
            "tool_calls": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["id", "name", "arguments"],
                    "properties": { "id": { "type": "string" }, "name": { "type": "string" } }
                }
            },
            "tool_call_id": { "type": "string" }
        },
        "additionalProperties": false
    });
    StepInfo {
        name: key.to_owned(),
        description: "a call of a model".into(),
        input_schema: Some(json!({
            "type": "object",
            "properties": {
                "prompt": { "type": "string" },
                "messages": { "type": "array", "minItems": 1, "items": message },
                "system": { "type": "string" },
                "tools": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "input_schema"],
                        "properties": {
                            "name": { "type": "string" },
                            "description": { "type": "string" },
                            "input_schema": { "type": "object" }
                        },
                        "additionalProperties": false
                    }
                }
            },
            "oneOf": [
                { "required": ["prompt"], "not": { "required": ["messages"] } },
                { "required": ["messages"], "not": { "required": ["prompt"] } }
            ],
            "additionalProperties": false
        })),
        output_schema: None,
        suspend_schema: None,
        resume_schema: None,
        config_schema: Some(json!({
            "type": "object",
            "properties": {
                "max-tokens": { "type": "integer", "minimum": 1 },
                "temperature": { "type": "number", "minimum": 0 }
            },
            "additionalProperties": false
        })),
    }
}

fn merge_retry(default: &RawRetry, own: Option<&RawRetry>) -> RetryPolicy {
    let base = RetryPolicy::default();
    let pick = |f: fn(&RawRetry) -> Option<u64>| own.and_then(f).or_else(|| f(default));
    RetryPolicy {
        attempts: own
            .and_then(|r| r.attempts)
            .or(default.attempts)
            .unwrap_or(base.attempts)
            .max(1),
        delay_ms: pick(|r| r.delay_ms).unwrap_or(base.delay_ms),
        backoff: own
            .and_then(|r| r.backoff)
            .or(default.backoff)
            .unwrap_or(base.backoff),
        max_delay_ms: pick(|r| r.max_delay_ms),
    }
}

fn sandbox_value(raw: &RawPlugin, dir: &Path) -> Value {
    let mut grants = raw
        .grants
        .as_ref()
        .map(|g| g.value.clone())
        .unwrap_or_else(|| json!({}));
    if let Some(dirs) = grants.get_mut("dirs").and_then(Value::as_array_mut) {
        for d in dirs {
            if let Some(host) = d.get("host").and_then(Value::as_str) {
                let resolved = absolute(&dir.join(host));
                d["host"] = json!(resolved.display().to_string());
            }
        }
    }
    let limits = raw
        .limits
        .as_ref()
        .map(|l| l.value.clone())
        .unwrap_or_else(|| json!({}));
    json!({ "limits": limits, "grants": grants })
}

/// A schema written in the file, refused with its line when it is not a valid schema.
fn file_schema(
    path: &Path,
    value: Option<&Spanned<Value>>,
    what: &str,
) -> Result<Option<Schema>, WorkflowError> {
    let Some(value) = value else { return Ok(None) };
    compile_schema(path, Some(value.value.clone()), what).map_err(|mut e| {
        e.line = line(&value.referenced);
        e
    })
}

fn compile_schema(
    path: &Path,
    value: Option<Value>,
    what: &str,
) -> Result<Option<Schema>, WorkflowError> {
    let Some(value) = value else { return Ok(None) };
    let schema = Schema::new(value);
    schema.compile().map_err(|e| {
        WorkflowError::at(
            path,
            None,
            format!("{what}: {e}"),
            "fix the JSON Schema (draft 2020-12)",
        )
    })?;
    Ok(Some(schema))
}
