//! What crosses between the core and whoever runs a plugin step: the call and its result.
//!
//! These types mirror `weft:plugin/types` with JSON already parsed, so the plugin host and the
//! engine agree on them without either knowing the other.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Everything one invocation of a step receives (`step-context` in the WIT contract, S12).
///
/// Its values are shared with the run's state (`Arc`), not copied into each call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepCall {
    /// The run this invocation belongs to.
    pub run_id: String,
    /// The id of the workflow file the step is written in.
    pub workflow_id: String,
    /// The step's path: ids joined by `.`.
    pub step_path: String,
    /// 0 on the first attempt, +1 on each retry.
    pub attempt: u32,
    /// The entry's input.
    pub input: Arc<Value>,
    /// The step's configuration, defaults filled.
    pub config: Arc<Value>,
    /// The run state as it stood when the invocation started.
    pub state: Arc<Value>,
    /// Set when this invocation resumes a suspension of this step.
    pub resume: Option<Resumption>,
    /// The index of the innermost enclosing foreach item.
    pub foreach_index: Option<u32>,
    /// The 1-based iteration of the innermost enclosing loop.
    pub iteration: Option<u32>,
}

/// The data a resume brings to the step it resumes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resumption {
    /// What whoever resumed the run gave.
    pub data: Value,
    /// The payload the step suspended with.
    pub suspend_payload: Value,
}

/// A step's successful answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "value")]
pub enum StepOutcome {
    /// Finished with this output.
    Done(Value),
    /// Pause until resumed.
    Suspend {
        /// Shown to whoever resumes.
        payload: Value,
        /// Extra names to address the suspension by.
        labels: Vec<String>,
    },
    /// End the workflow file now with this result.
    Bail(Value),
}

/// Why an invocation failed: the plugin's own `failure` or one the host detected (S14, S83).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepFailure {
    /// One line saying what went wrong.
    pub message: String,
    /// Machine-readable code (`trap`, `timeout`, `step-failed`, ...).
    pub code: String,
    /// False: never retried, whatever the policy says.
    pub retryable: bool,
    /// Structured details, always a JSON object when present.
    pub details: Option<Value>,
    /// Set when a guardrail tripped.
    pub tripwire: Option<Tripwire>,
}

impl StepFailure {
    /// A retryable failure with `code` and `message` and nothing else.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: code.into(),
            retryable: true,
            details: None,
            tripwire: None,
        }
    }

    /// The same failure, marked never to be retried.
    pub fn not_retryable(mut self) -> Self {
        self.retryable = false;
        self
    }

    /// The same failure with these details.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
}

/// A guardrail's refusal (S82).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tripwire {
    /// Why it tripped.
    pub reason: String,
    /// The caller may try again with changed input.
    pub retry: bool,
    /// Extra data about the refusal.
    pub metadata: Option<Value>,
    /// Which guardrail tripped.
    pub processor_id: Option<String>,
}

/// What one invocation produced: its outcome and the state patches it asked for, in call order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InvocationResult {
    /// The outcome, or why the invocation failed.
    pub outcome: Result<StepOutcome, StepFailure>,
    /// Patches given to `run.set-state`, each already parsed (S16).
    pub patches: Vec<Value>,
}
