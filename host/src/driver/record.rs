//! What readers see: the run record (WORKFLOW-FORMAT.md §3) and stored events (§4). How the
//! store encodes a run's history is `codec`'s.

use std::sync::Arc;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::{
    self, ErrorInfo, EventKind, Graph, RestartedFrom, RunState, RunStatus, StepRecord,
    SuspendedEntry, TripwireInfo,
};

/// Reads a member that is present as `Some`, even when it is `null` (a `null` result, S4).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// A run as `weft show --json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct RunRecord {
    /// The run's id.
    pub run_id: String,
    /// The top-level workflow id.
    pub workflow_id: String,
    /// Where it stands.
    pub status: RunStatus,
    /// The input, defaults filled.
    pub input: Value,
    /// Present only on success.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub result: Option<Value>,
    /// Present only on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// Present only on tripwire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tripwire: Option<TripwireInfo>,
    /// The current (or final) state.
    pub state: Value,
    /// Present only while suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended: Option<Vec<SuspendedEntry>>,
    /// One record per entry that started, by path.
    pub steps: IndexMap<String, StepRecord, engine::KeyHasher>,
    /// Set for a re-run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarted_from: Option<RestartedFrom>,
    /// When the run was created (RFC 3339).
    pub created_at: String,
    /// When it last changed (RFC 3339).
    pub updated_at: String,
    /// Its tags, given at its start.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tags: std::collections::BTreeMap<String, String>,
}

impl RunRecord {
    /// The record of `state`.
    pub(crate) fn new(state: &RunState, graph: &Graph) -> Self {
        let parts = Parts {
            suspended: suspended(state, graph),
            input: state.input.clone(),
            result: state.result.clone(),
            error: state.error.clone(),
            tripwire: state.tripwire.clone(),
            state: state.files.get("").map(|f| Value::clone(&f.state)),
            records: state.records.clone(),
            restarted_from: state.restarted_from.clone(),
        };
        Self::assemble(state, parts)
    }

    /// The record of `state`, its values moved rather than copied: for a state that is not
    /// needed any more (a retiring actor's, one read from the store to show).
    pub(crate) fn from_state(mut state: RunState, graph: &Graph) -> Self {
        let parts = Parts {
            // Before anything is moved out of the state it reads.
            suspended: suspended(&state, graph),
            input: std::mem::take(&mut state.input),
            result: state.result.take(),
            error: state.error.take(),
            tripwire: state.tripwire.take(),
            state: state
                .files
                .remove("")
                .map(|f| Arc::unwrap_or_clone(f.state)),
            records: std::mem::take(&mut state.records),
            restarted_from: state.restarted_from.take(),
        };
        Self::assemble(&state, parts)
    }

    /// The record of the run in `state`, with its values in `parts`.
    fn assemble(state: &RunState, parts: Parts) -> Self {
        let status = state.status;
        RunRecord {
            run_id: state.run_id.clone(),
            workflow_id: state.workflow_id.clone(),
            status,
            input: parts.input,
            result: parts.result.filter(|_| status == RunStatus::Success),
            error: parts.error.filter(|_| status == RunStatus::Failed),
            tripwire: parts.tripwire.filter(|_| status == RunStatus::Tripwire),
            state: parts.state.unwrap_or_default(),
            suspended: parts.suspended,
            steps: parts.records,
            restarted_from: parts.restarted_from,
            created_at: engine::rfc3339(state.created_at),
            updated_at: engine::rfc3339(state.updated_at),
            tags: state.tags.clone(),
        }
    }
}

/// The entries a run in `state` is suspended at, when it is suspended.
fn suspended(state: &RunState, graph: &Graph) -> Option<Vec<SuspendedEntry>> {
    (state.status == RunStatus::Suspended).then(|| engine::suspended(state, graph))
}

/// The values of a run record that come from its state, copied or moved out of it.
struct Parts {
    suspended: Option<Vec<SuspendedEntry>>,
    input: Value,
    result: Option<Value>,
    error: Option<ErrorInfo>,
    tripwire: Option<TripwireInfo>,
    state: Option<Value>,
    records: IndexMap<String, StepRecord, engine::KeyHasher>,
    restarted_from: Option<RestartedFrom>,
}

/// One stored tracking event (WORKFLOW-FORMAT.md §4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct StoredEvent {
    /// Strictly increasing per run, from 1.
    pub seq: u64,
    /// The run.
    pub run_id: String,
    /// When it was stored (RFC 3339).
    pub at: String,
    /// The event's type.
    #[serde(rename = "type")]
    pub kind: EventKind,
    /// The entry it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The foreach item it comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreach_index: Option<u32>,
    /// The loop iteration it comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iteration: Option<u32>,
    /// Its data.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub data: Value,
}
