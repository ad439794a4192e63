//! Reading a workflow's files: each file read and parsed once, however many entries name it,
//! the files it nests (`workflow:` entries, workflow tools) found, its plugins loaded, and
//! nesting bounded to [`MAX_FILE_NESTING`] levels. Paths are resolved here: a file's relative
//! paths start from its own directory, and a file reached by two spellings is one file.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::plugins::load_plugins;
use super::{LoadedPlugin, MAX_FILE_NESTING};
use crate::limits::files::{MAX_WORKFLOW_FILE_BYTES, read_at_most};
use crate::plugin::PluginHost;
use crate::workflow::raw::{RawDo, RawEntry, RawFile};
use crate::workflow::{WorkflowError, syntax};

/// Every file a workflow names, read and parsed, and the plugins they declare, loaded.
pub(super) struct ReadFiles {
    /// Each file by its key ([`Resolved::key`]).
    pub(super) files: HashMap<PathBuf, ParsedFile>,
    /// Each plugin by digest.
    pub(super) plugins: BTreeMap<String, LoadedPlugin>,
    /// The digest of the plugin at each component path.
    pub(super) by_path: HashMap<PathBuf, String>,
}

/// Reads and parses the file `top` (its text `text` when given) and every file it nests, and
/// loads the plugins each declares; refuses a file nested more than [`MAX_FILE_NESTING`]
/// levels deep.
pub(super) async fn read_files(
    top: &Resolved,
    text: Option<&str>,
    host: &PluginHost,
) -> Result<ReadFiles, WorkflowError> {
    let mut files: HashMap<PathBuf, ParsedFile> = HashMap::new();
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
        load_plugins(&parsed, &file.path, host, &mut plugins, &mut by_path).await?;
        for (nested, line) in &parsed.nested {
            let mut named = chain.clone();
            named.push((file.path.clone(), *line));
            todo.push((nested.clone(), named));
        }
        files.insert(file.key, parsed);
    }
    Ok(ReadFiles {
        files,
        plugins,
        by_path,
    })
}

/// `path` made absolute, with `.` and `..` worked out lexically.
pub(super) fn absolute(path: &Path) -> PathBuf {
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
pub(super) struct Resolved {
    /// Absolute, `..` worked out, links kept: relative paths inside the file start from here.
    pub(super) path: PathBuf,
    /// The file itself (links followed), so that a file reached by two spellings is one file.
    pub(super) key: PathBuf,
}

impl Resolved {
    /// The file at `path`, as messages name it and as it is on disk.
    pub(super) fn new(path: &Path) -> Self {
        let path = absolute(path);
        let key = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        Resolved { path, key }
    }
}

/// The refusal of `file`, named by the last file of `chain`, for nesting too deeply.
pub(super) fn too_deep(chain: &[(PathBuf, u64)], file: &Path) -> WorkflowError {
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

/// A workflow file as parsed, with the paths it names resolved.
pub(super) struct ParsedFile {
    /// The file as written.
    pub(super) raw: RawFile,
    /// The file's path, as messages name it.
    pub(super) path: PathBuf,
    /// The file's directory, where its relative paths start.
    pub(super) dir: PathBuf,
    /// Plugin alias → (resolved wasm path, pin, line).
    pub(super) plugin_paths: BTreeMap<String, (PathBuf, Option<String>, u64)>,
    /// Nested files named by `workflow:` entries, resolved, with the line naming each.
    pub(super) nested: Vec<(Resolved, u64)>,
}

/// Reads and parses the workflow file at `path` (at most [`MAX_WORKFLOW_FILE_BYTES`]).
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

/// Parses a workflow file's text, resolving the plugins and nested files it names.
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
            source_line: None,
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

/// Adds the nested files entry `e` names, and those of the entries inside it, to `out`.
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
