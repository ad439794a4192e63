//! A run's state, its records, and what goes in and out of the core.

use std::collections::BTreeMap;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::invocation::{InvocationResult, Resumption, StepCall};
use super::model::{EntryId, FileId};
use super::schema::Violation;

/// Reads a member that is present as `Some`, even when it is `null`: a step's output may be
/// `null` (S4), and `Option<Value>` would read that back as absent.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// The format version of [`RunState`]; bumped when its serialized shape changes.
pub const STATE_FORMAT: u32 = 1;

/// Milliseconds since the Unix epoch, UTC. Time only enters the core inside events.
pub type Millis = i64;

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
    /// What it received.
    pub input: Value,
    /// What it produced.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub output: Option<Value>,
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
    /// What it received.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub input: Option<Value>,
    /// What it produced.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub output: Option<Value>,
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

/// The state of one file instance of a run: its input, state and bail flag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileState {
    /// The file's input (`.init`, `run.init-data`).
    pub input: Value,
    /// The file's state.
    pub state: Value,
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
pub struct RunState {
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
    pub results: BTreeMap<String, IndexMap<String, Value>>,
    /// Records by path, in the order entries started.
    pub records: IndexMap<String, StepRecord>,
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
}

/// A sequence of entries under way: a file's `steps:` or a `do:` list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Seq {
    /// Which list.
    pub list: ListRef,
    /// Where the sequence as a whole stands.
    pub phase: Phase,
    /// The index of the current entry.
    pub pos: u32,
    /// The current entry.
    pub current: Box<Node>,
}

/// Names an entry list of the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ListRef {
    /// A file's top-level `steps:`.
    File(FileId),
    /// A block's `do:` body.
    Body(EntryId),
}

/// How an execution ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum End {
    /// With an output.
    Success(Value),
    /// With an error.
    Failed(ErrorInfo),
    /// With a bail value for its file (S79).
    Bail(Value),
    /// With a tripped guardrail (S82).
    Tripwire(TripwireInfo),
    /// By a cancel, or by the end of the run around it.
    Cancelled,
}

/// Where an execution stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Phase {
    /// Created, not started.
    New,
    /// Something inside runs or waits.
    Running,
    /// Waiting for a resume, nothing inside runs.
    Suspended,
    /// Ended.
    Done(End),
}

/// One execution of an entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// The entry.
    pub entry: EntryId,
    /// What it received.
    pub input: Value,
    /// Where it stands.
    pub phase: Phase,
    /// Its kind's own state.
    pub kind: NodeKind,
}

/// The kind-specific state of an execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum NodeKind {
    /// Nothing of its own yet (before start), or nothing at all (map).
    Plain,
    /// A plugin step.
    Step(StepNode),
    /// Parallel arms.
    Parallel(Vec<Node>),
    /// Branch arms; `None` for arms not taken.
    Branch(Vec<Option<Node>>),
    /// Foreach items.
    Foreach(ForeachNode),
    /// A loop's current iteration.
    Loop {
        /// 1-based.
        iteration: u32,
        /// The body of this iteration.
        body: Seq,
    },
    /// A sleep's timer.
    Sleep {
        /// The timer.
        token: u64,
        /// When it wakes.
        until: Millis,
    },
    /// A nested workflow or a branch arm's list.
    Nested(Seq),
}

/// A plugin step's own state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepNode {
    /// The current attempt (0-based).
    pub attempt: u32,
    /// Given to the invocations of a resumed execution (S72).
    pub resume: Option<Resumption>,
    /// What it waits for.
    pub wait: StepWait,
}

/// What a step waits for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum StepWait {
    /// An invocation's end; `state` is the state it was given (re-issued as is, S102).
    Invocation {
        /// The invocation's token.
        token: u64,
        /// The state at the invocation's start.
        state: Value,
    },
    /// A retry wait's end.
    Retry {
        /// The timer.
        token: u64,
        /// When it wakes.
        until: Millis,
    },
    /// A resume.
    Resume {
        /// The suspension's payload.
        payload: Value,
        /// The suspension's labels.
        labels: Vec<String>,
    },
    /// Nothing: the step has ended.
    Nothing,
}

/// A foreach's items.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForeachNode {
    /// One per element.
    pub items: Vec<Item>,
    /// Items succeeded so far.
    pub done: u32,
    /// Items started so far; they start in index order, so these are the first ones.
    pub started: u32,
    /// The indexes of the items in progress (running or suspended), ascending.
    pub active: Vec<u32>,
    /// An item failed, tripped or bailed: no further item starts (S28, S79).
    pub stopped: bool,
}

/// One foreach item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Item {
    /// Not started.
    Pending,
    /// Started: its body, and whether its suspension was reported already.
    Active {
        /// The item's body.
        body: Seq,
        /// `step-progress` said it is suspended.
        reported_suspended: bool,
    },
    /// Ended.
    Done(End),
}

/// An event the core takes (ARCHITECTURE.md: the orchestration events).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "type")]
pub enum Event {
    /// Start a pending run.
    Start {
        /// Now.
        at: Millis,
    },
    /// An invocation ended.
    StepEnded {
        /// The invocation.
        token: u64,
        /// What it produced.
        result: InvocationResult,
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
    /// Cancel the run.
    Cancel {
        /// Now.
        at: Millis,
    },
    /// The process that drove the run died: issue again what was in flight (S102, S103).
    Recover {
        /// Now.
        at: Millis,
    },
}

impl Event {
    /// When the event happened.
    pub fn at(&self) -> Millis {
        match self {
            Self::Start { at }
            | Self::StepEnded { at, .. }
            | Self::TimerFired { at, .. }
            | Self::Resume { at, .. }
            | Self::Cancel { at }
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

/// What the core asks the driver to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Run a plugin step.
    Invoke(Box<Invoke>),
    /// Fire [`Event::TimerFired`] with this token at this instant (at once when overdue).
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
    /// Names the invocation in [`Event::StepEnded`].
    pub token: u64,
    /// The plugin key in the graph.
    pub plugin: String,
    /// The step's name in the plugin.
    pub step: String,
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
    pub init: Value,
    /// Outputs of succeeded entries, by id and by path.
    pub steps: IndexMap<String, Value>,
}

/// The kinds of tracking events (WORKFLOW-FORMAT.md §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
