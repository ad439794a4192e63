//! What goes out of the core: commands for the driver and the tracking events they carry.

use std::sync::Arc;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::invocation::StepCall;
use super::model::StepKind;
use super::time::Millis;

/// What the core asks the driver to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Run a plugin step.
    Invoke(Box<Invoke>),
    /// Fire [`Event::TimerFired`](super::Event::TimerFired) with this token at this instant (at once when overdue).
    Timer {
        /// The timer.
        token: u64,
        /// When.
        at: Millis,
    },
    /// Tell these invocations they are cancelled (S76).
    Abort {
        /// The invocations.
        tokens: Vec<u64>,
    },
    /// Store and publish a tracking event.
    Emit(Tracking),
}

/// One invocation to carry out.
#[derive(Debug, Clone, PartialEq)]
pub struct Invoke {
    /// Names the invocation in [`Event::StepEnded`](super::Event::StepEnded).
    pub token: u64,
    /// The plugin key in the graph.
    pub plugin: String,
    /// The step's name in the plugin.
    pub step: String,
    /// Whether `step` names a step or a tool (S120).
    pub kind: StepKind,
    /// The call.
    pub call: StepCall,
    /// The step's own timeout, overriding the plugin's.
    pub timeout_ms: Option<u64>,
    /// What `run.init-data` and `run.step-result` answer.
    pub view: StepsView,
}

/// What a step may read of its run (S8, S9).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StepsView {
    /// The input of the step's own workflow file.
    pub init: Arc<Value>,
    /// Outputs of succeeded entries, by id and by path, shared with the run's state.
    pub steps: IndexMap<String, Arc<Value>>,
}

/// The kinds of tracking events (WORKFLOW-FORMAT.md §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum EventKind {
    /// The run started.
    RunStarted,
    /// An entry started.
    StepStarted,
    /// A writer chunk.
    StepOutput,
    /// A custom writer event.
    StepCustom,
    /// A foreach item ended or suspended.
    StepProgress,
    /// An entry succeeded.
    StepSucceeded,
    /// An entry failed.
    StepFailed,
    /// A step will be tried again.
    StepRetrying,
    /// A step suspended.
    StepSuspended,
    /// A sleep waits.
    StepWaiting,
    /// An execution ended `cancelled`: by a cancel, or by the end of the run around it (S74).
    StepCancelled,
    /// A resume was accepted.
    RunResumed,
    /// The run succeeded.
    RunSucceeded,
    /// The run failed.
    RunFailed,
    /// The run suspended.
    RunSuspended,
    /// The run was cancelled.
    RunCancelled,
    /// A guardrail ended the run.
    RunTripwire,
    /// A log line.
    Log,
}

impl EventKind {
    /// Whether this event closes the run's stream (S88).
    pub fn is_closing(self) -> bool {
        matches!(
            self,
            Self::RunSucceeded | Self::RunFailed | Self::RunCancelled | Self::RunTripwire
        )
    }
}

/// A tracking event before the driver stamps it with `seq`, `run_id` and `at`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tracking {
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
