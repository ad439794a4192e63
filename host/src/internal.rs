//! Below the public API, for weft's own integration tests and benchmarks: the store trait and
//! its backends, the plugin host's parts, the engine's expressions and the loader's limits.
//! Nothing here is API: it changes with the code, without notice.

pub use crate::engine::expr::{Expr, ExprError, MAX_VALUE_DEPTH};
pub use crate::engine::rfc3339;
pub use crate::executor::{DiscardEvents, EventLog, NoRun};
pub use crate::plugin::{
    DirGrant, DirMode, EnvValue, Grants, Limits, Plugin, PluginExports, Sandbox, ToolCall, ToolInfo,
};
#[cfg(feature = "postgres")]
pub use crate::store::PgStore;
pub use crate::store::{
    Claim, Definition, NewRun, Notice, PluginsOf, Reclaimed, RecordKey, Request, RunsPage,
    STORE_FORMAT, SharedStore, SledStore, Store,
};
pub use crate::workflow::{MAX_ENTRIES, MAX_FILE_NESTING};

/// How many entries the workflow's graph holds, every file instance's.
pub fn entry_count(workflow: &crate::LoadedWorkflow) -> usize {
    workflow.graph.entries.len()
}

/// The config of the step at `path`, defaults filled in (S116); `None` when no step is there.
pub fn step_config(workflow: &crate::LoadedWorkflow, path: &str) -> Option<serde_json::Value> {
    match &workflow.graph.entry_by_path(path)?.kind {
        crate::engine::model::EntryKind::Step(def) => Some(serde_json::Value::clone(&def.config)),
        _ => None,
    }
}

/// The definition runs of the workflow store (S10), as its blob holds it.
pub fn definition(
    workflow: &crate::LoadedWorkflow,
) -> Result<std::sync::Arc<Definition>, serde_json::Error> {
    workflow.shared().map(|(_, definition)| definition)
}
