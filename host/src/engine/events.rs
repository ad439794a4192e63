//! What comes into the core: orchestration events, resume requests, and refusals.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::invocation::InvocationResult;
use super::records::ErrorInfo;
use super::schema::Violation;
use super::state::RunStatus;
use super::time::Millis;

/// An event the core takes (ARCHITECTURE.md: the orchestration events).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "type")]
pub(crate) enum Event {
    /// Start a pending run.
    Start {
        /// Now.
        at: Millis,
    },
    /// An invocation ended.
    StepEnded {
        /// The invocation.
        token: u64,
        /// What it produced (boxed: inline, it would make every event as large as itself).
        result: Box<InvocationResult>,
        /// Now.
        at: Millis,
    },
    /// A sleep or retry wait is over.
    TimerFired {
        /// The timer.
        token: u64,
        /// Now.
        at: Millis,
    },
    /// Resume suspended steps.
    Resume {
        /// Which and with what.
        request: ResumeRequest,
        /// Now.
        at: Millis,
    },
    /// Cancel the run; with `failure`, the host stops it (a run over the bytes it may write)
    /// and it ends `failed` with that error instead of `cancelled`.
    Cancel {
        /// Now.
        at: Millis,
        /// Why the host stopped the run.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<ErrorInfo>,
    },
    /// The process that drove the run died: issue again what was in flight (S102, S103).
    Recover {
        /// Now.
        at: Millis,
    },
}

impl Event {
    /// When the event happened.
    pub(crate) fn at(&self) -> Millis {
        match self {
            Self::Start { at }
            | Self::StepEnded { at, .. }
            | Self::TimerFired { at, .. }
            | Self::Resume { at, .. }
            | Self::Cancel { at, .. }
            | Self::Recover { at } => *at,
        }
    }
}

/// What `weft resume` asks for (S67).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResumeRequest {
    /// `--step PATH`.
    pub step: Option<String>,
    /// `--label L`.
    pub label: Option<String>,
    /// `--foreach-index N`.
    pub foreach_index: Option<u32>,
    /// `--data` (default `{}`).
    pub data: Value,
}

/// Why the core refused an event; nothing changed (S62, S69, S75).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// The run is not suspended.
    #[error("run {run} is not suspended (status: {status})")]
    NotSuspended {
        /// The run.
        run: String,
        /// Its status.
        status: RunStatus,
    },
    /// The run has ended.
    #[error("run {run} has already ended (status: {status})")]
    AlreadyEnded {
        /// The run.
        run: String,
        /// Its status.
        status: RunStatus,
    },
    /// Any other refusal, with its message.
    #[error("{0}")]
    Other(String),
    /// Resume data that breaks the step's resume schema.
    #[error("{message}")]
    InvalidData {
        /// What was checked and what is wrong.
        message: String,
        /// Each violation.
        violations: Vec<Violation>,
    },
}
