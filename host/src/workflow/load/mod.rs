//! Workflow files → a checked [`Graph`]: parse, resolve paths, load plugins, check everything
//! before anything runs (WORKFLOW-FORMAT.md §1, S17, S42, S108).
//!
//! Loading reads every file first (`read`: each file parsed once, the files it nests and the
//! plugins it declares found and loaded), then builds the graph from the top-level file down
//! with a `Builder`, one concern a file: a file's own definition (`file`), entry ids and
//! paths (`ids`), an entry dispatched by its kind (`entry`) to blocks (`blocks`), steps
//! (`step`) or agents (`agent`), plugins and their grants (`plugins`), models (`models`),
//! retry policies (`retry`), and the jq expressions and JSON Schemas a file writes (`compile`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde_saphyr::Location;

use super::WorkflowError;
use super::raw::RawRetry;
use crate::engine::model::{FileId, Graph};
use crate::native::NativeSteps;
use crate::plugin::{Plugin, PluginHost};
use crate::store::Definition;
use read::{ParsedFile, ReadFiles, Resolved, read_files};

mod agent;
mod blocks;
mod compile;
mod entry;
mod file;
mod ids;
mod models;
mod plugins;
mod read;
mod retry;
mod step;

/// A checked workflow with the plugins it uses.
pub struct LoadedWorkflow {
    /// The graph, ready to run.
    pub(crate) graph: Graph,
    /// Each plugin by digest: its component bytes (stored with runs, S10) and the loaded plugin.
    pub(crate) plugins: BTreeMap<String, LoadedPlugin>,
    /// How long its ended runs are kept (the top-level file's `retention:`).
    pub(crate) retention: Option<std::time::Duration>,
    shared: OnceLock<(Arc<Graph>, Arc<Definition>)>,
}

impl LoadedWorkflow {
    /// The workflow's id (`id:` of its top-level file).
    pub fn workflow_id(&self) -> &str {
        self.graph.workflow_id()
    }

    /// How long its ended runs are kept before a runtime that loaded it deletes them: the
    /// top-level file's `retention:` (`None`: the runtime's own retention applies).
    pub fn retention(&self) -> Option<std::time::Duration> {
        self.retention
    }

    /// The checked definition runs of this workflow start with.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The graph as runs share it, and its definition as each run stores it (S10), digest
    /// included; made once, however many runs start.
    pub(crate) fn shared(&self) -> Result<(Arc<Graph>, Arc<Definition>), serde_json::Error> {
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
pub(crate) struct LoadedPlugin {
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
pub(crate) async fn load_workflow_with(
    path: &Path,
    text: Option<&str>,
    host: &PluginHost,
    natives: &NativeSteps,
) -> Result<LoadedWorkflow, WorkflowError> {
    load(path, text, host, natives)
        .await
        .map_err(|e| super::quote::with_source(e.bounded(), path, text))
}

async fn load(
    path: &Path,
    text: Option<&str>,
    host: &PluginHost,
    natives: &NativeSteps,
) -> Result<LoadedWorkflow, WorkflowError> {
    let top = Resolved::new(path);
    let ReadFiles {
        files,
        plugins,
        by_path,
    } = read_files(&top, text, host).await?;
    let mut builder = Builder {
        files: &files,
        plugins: &plugins,
        by_path: &by_path,
        natives,
        host,
        graph: Graph::empty(),
        stack: Vec::new(),
        retention: None,
    };
    builder.file(&top.key, String::new(), None)?;
    Ok(LoadedWorkflow {
        graph: builder.graph,
        retention: builder.retention,
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

/// The line of a location in a file, as a [`WorkflowError`] takes it.
fn line(loc: &Location) -> Option<u64> {
    Some(loc.line())
}

/// `names` of the file's own (declared plugins, models, tools) as a message lists them: each
/// quoted, as every quote of the file is, so that whoever shows the message without the file's
/// words (`weft serve`) can leave them all out.
fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Builds the graph of a workflow from its files, read and parsed before.
struct Builder<'a> {
    files: &'a HashMap<PathBuf, ParsedFile>,
    plugins: &'a BTreeMap<String, LoadedPlugin>,
    by_path: &'a HashMap<PathBuf, String>,
    natives: &'a NativeSteps,
    host: &'a PluginHost,
    graph: Graph,
    /// Files being expanded, outermost first (S42: a file may not name itself).
    stack: Vec<PathBuf>,
    /// The top-level file's `retention:`.
    retention: Option<std::time::Duration>,
}

/// Per-file bookkeeping while its entries are built.
struct FileCx<'a> {
    path: &'a Path,
    parsed: &'a ParsedFile,
    file: FileId,
    ids: HashMap<String, u64>,
    retry: RawRetry,
}
