//! The run record's per-entry parts: step and item records, errors, tripwires, suspensions.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Reads a member that is present as `Some`, even when it is `null`: a step's output may be
/// `null` (S4), and `Option<Value>` would read that back as absent.
pub(crate) fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// [`present`], shared.
fn present_shared<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Arc<Value>>, D::Error> {
    present(d).map(|v| v.map(Arc::new))
}

/// An error as records and events show it (S83).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorInfo {
    /// One line.
    pub message: String,
    /// Machine-readable code.
    pub code: String,
    /// The path where it arose.
    pub step: String,
    /// Structured details (an object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// The foreach item it arose in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreach_index: Option<u32>,
    /// The loop iteration it arose in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iteration: Option<u32>,
}

/// A tripped guardrail as the run record shows it (S82, S112).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TripwireInfo {
    /// Why it tripped.
    pub reason: String,
    /// The caller may try again with changed input.
    pub retry: bool,
    /// Extra data.
    pub metadata: Value,
    /// Which guardrail.
    pub processor_id: Option<String>,
}

/// Status of one entry's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepStatus {
    /// Ended with an output.
    Success,
    /// Ended with an error.
    Failed,
    /// Waiting for a resume.
    Suspended,
    /// Started, not ended.
    Running,
    /// A sleep that waits.
    Waiting,
    /// A branch arm not taken.
    Skipped,
    /// Ended by a cancel or by the end of the run around it.
    Cancelled,
}

/// One foreach item of a step inside a foreach body (S31).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemRecord {
    /// The item's index.
    pub index: u32,
    /// Where the item's execution of this step stands.
    pub status: StepStatus,
    /// What it received, shared with the run's state.
    pub input: Arc<Value>,
    /// What it produced, shared with the run's state.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_shared"
    )]
    pub output: Option<Arc<Value>>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// Invocations of this execution.
    pub attempts: u32,
}

/// The record of one entry, keyed by path in the run record (S7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Where it stands.
    pub status: StepStatus,
    /// What it received, shared with the run's state.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_shared"
    )]
    pub input: Option<Arc<Value>>,
    /// What it produced, shared with the run's state.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_shared"
    )]
    pub output: Option<Arc<Value>>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// The tripwire it raised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tripwire: Option<TripwireInfo>,
    /// Invocations of the latest execution (plugin steps only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// Set when the step bailed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bail: Option<bool>,
    /// The payload of its suspension.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub suspend_payload: Option<Value>,
    /// The labels of its suspension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
    /// The iteration of the enclosing loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iteration: Option<u32>,
    /// Foreach items, for steps inside a foreach body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<Vec<ItemRecord>>,
    /// When it started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When it last suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended_at: Option<String>,
    /// When it was last resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_at: Option<String>,
    /// The data of the last resume.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub resume_data: Option<Value>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
}

impl StepRecord {
    /// A fresh record with this status.
    pub fn new(status: StepStatus) -> Self {
        Self {
            status,
            input: None,
            output: None,
            error: None,
            tripwire: None,
            attempts: None,
            bail: None,
            suspend_payload: None,
            labels: None,
            iteration: None,
            items: None,
            started_at: None,
            suspended_at: None,
            resumed_at: None,
            resume_data: None,
            ended_at: None,
        }
    }
}

/// Where a re-run came from (S99).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestartedFrom {
    /// The source run.
    pub run_id: String,
    /// The step the new run starts from.
    pub path: String,
}

/// One suspended step or item as the run record lists it (S66, S112).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuspendedEntry {
    /// The step's full path.
    pub path: String,
    /// Its labels.
    pub labels: Vec<String>,
    /// Exactly what it suspended with.
    pub payload: Value,
    /// The foreach item, if inside one.
    pub foreach_index: Option<u32>,
}
