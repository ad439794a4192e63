//! A run's whole state: its status, file instances, visible results, records and the
//! execution tree.

use std::collections::BTreeMap;
use std::sync::Arc;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::commands::ScopeResults;

use super::nodes::Seq;
use super::records::{ErrorInfo, RestartedFrom, StepRecord, TripwireInfo, present};
use super::time::Millis;

/// The format version of [`RunState`]; bumped when its serialized shape changes.
pub(crate) const STATE_FORMAT: u32 = 1;

/// Where a run stands (WORKFLOW-FORMAT.md §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunStatus {
    /// Stored, not started yet (S114).
    Pending,
    /// Something runs or waits.
    Running,
    /// Waiting for a resume (S65).
    Suspended,
    /// Ended with a result.
    Success,
    /// Ended with an error.
    Failed,
    /// Ended by a cancel.
    Cancelled,
    /// Ended by a guardrail.
    Tripwire,
}

impl RunStatus {
    /// Whether the run has ended.
    pub fn is_ended(self) -> bool {
        matches!(
            self,
            Self::Success | Self::Failed | Self::Cancelled | Self::Tripwire
        )
    }

    /// The status as written in records and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Suspended => "suspended",
            Self::Success => "success",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Tripwire => "tripwire",
        }
    }

    /// Parses a status name.
    pub fn parse(text: &str) -> Option<Self> {
        [
            Self::Pending,
            Self::Running,
            Self::Suspended,
            Self::Success,
            Self::Failed,
            Self::Cancelled,
            Self::Tripwire,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of one file instance of a run: its input, state and bail flag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct FileState {
    /// The file's input (`.init`, `run.init-data`), shared with the invocations that may read
    /// it rather than copied into each.
    pub input: Arc<Value>,
    /// The file's state, shared with the invocations that read it rather than copied into
    /// each; a patch replaces it.
    pub state: Arc<Value>,
    /// Top-level state keys written by this file's steps (merged into the parent, S43).
    pub written: Vec<String>,
    /// The first bail value recorded in this file (S79, S81).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub bailed: Option<Value>,
}

/// The whole state of a run: what the core needs, and what the run record shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RunState {
    /// [`STATE_FORMAT`] when written.
    pub format: u32,
    /// The run's id.
    pub run_id: String,
    /// The top-level workflow's id.
    pub workflow_id: String,
    /// Where the run stands.
    pub status: RunStatus,
    /// The run input, defaults filled.
    pub input: Value,
    /// When the run was created.
    pub created_at: Millis,
    /// When the run last changed.
    pub updated_at: Millis,
    /// The execution tree: the top-level sequence.
    pub root: Seq,
    /// File instances by key (`""` for the top level, else the `workflow:` entry's path).
    pub files: BTreeMap<String, FileState>,
    /// Outputs visible to `.steps` and `run.step-result`, by scope key (S8, S9).
    pub results: BTreeMap<String, Arc<ScopeResults>>,
    /// Records by path, in the order entries started.
    pub records: IndexMap<String, StepRecord, super::KeyHasher>,
    /// The next invocation or timer token.
    pub next_token: u64,
    /// A cancel has been accepted.
    pub cancelling: bool,
    /// The result, once succeeded.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub result: Option<Value>,
    /// The error, once failed.
    pub error: Option<ErrorInfo>,
    /// The tripwire, once tripped.
    pub tripwire: Option<TripwireInfo>,
    /// Set for a re-run.
    pub restarted_from: Option<RestartedFrom>,
    /// For the child run of a workflow tool (S125): the call that started it, which the
    /// agent checks before it takes a run stored under its child's id for its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_of: Option<ToolCallOf>,
    /// The most bytes of compact JSON any value the run makes may take (an invocation's
    /// result, an expression's value): set from the runtime's setting when the run starts and
    /// kept, so a run replays and resumes under the limit it ran with.
    #[serde(default = "stored_before_value_limit")]
    pub value_limit: u64,
    /// Set with [`RunState::cancelling`] when the host stopped the run: the error it ends
    /// `failed` with once what was under way has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<ErrorInfo>,
    /// The run's tags (`key: value`), given at its start: listed with it and searched by.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

/// [`RunState::value_limit`] of a state stored before runs kept their own.
fn stored_before_value_limit() -> u64 {
    crate::limits::STORED_BEFORE_VALUE_LIMIT
}

/// The workflow-tool call a child run was started by (S125).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ToolCallOf {
    /// The parent run.
    pub run_id: String,
    /// The call's path in it.
    pub path: String,
    /// The call's foreach item, inside one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreach_index: Option<u32>,
    /// The call's loop iteration, inside one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iteration: Option<u32>,
}
