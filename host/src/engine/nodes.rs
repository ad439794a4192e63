//! The execution tree: sequences, nodes and each construct's own state inside a run.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::invocation::Resumption;
use super::model::{EntryId, FileId};
use super::records::{ErrorInfo, TripwireInfo};
use super::time::Millis;

/// A sequence of entries under way: a file's `steps:` or a `do:` list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Seq {
    /// Which list.
    pub list: ListRef,
    /// Where the sequence as a whole stands.
    pub phase: Phase,
    /// The index of the current entry.
    pub pos: u32,
    /// The current entry.
    pub current: Box<Node>,
}

impl Seq {
    /// A sequence over `list`, starting with its first entry `first`.
    pub(crate) fn new(list: ListRef, first: EntryId, input: impl Into<Arc<Value>>) -> Self {
        Seq {
            list,
            phase: Phase::Running,
            pos: 0,
            current: Box::new(Node::new(first, input)),
        }
    }
}

/// Names an entry list of the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum ListRef {
    /// A file's top-level `steps:`.
    File(FileId),
    /// A block's `do:` body.
    Body(EntryId),
}

/// How an execution ended. An output is shared (`Arc`) with what reads it next: the next
/// entry's input, `.steps`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum End {
    /// With an output.
    Success(Arc<Value>),
    /// With an error.
    Failed(ErrorInfo),
    /// With a bail value for its file (S79).
    Bail(Arc<Value>),
    /// With a tripped guardrail (S82).
    Tripwire(TripwireInfo),
    /// By a cancel, or by the end of the run around it.
    Cancelled,
}

/// Where an execution stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum Phase {
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
pub(crate) struct Node {
    /// The entry.
    pub entry: EntryId,
    /// What it received, shared with the calls and executions that read it.
    pub input: Arc<Value>,
    /// Where it stands.
    pub phase: Phase,
    /// Its kind's own state.
    pub kind: NodeKind,
    /// `input` is already what the entry's `input:` expression made (S119): a re-run starts
    /// the entry with its stored input (S99), which is not made again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub made: bool,
}

impl Node {
    /// An execution of `entry` with `input`, not started.
    pub(crate) fn new(entry: EntryId, input: impl Into<Arc<Value>>) -> Self {
        Node {
            entry,
            input: input.into(),
            phase: Phase::New,
            kind: NodeKind::Plain,
            made: false,
        }
    }
}

/// The kind-specific state of an execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum NodeKind {
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
    /// An agent's conversation and the sub-steps under way.
    Agent(Box<AgentNode>),
}

/// An agent's own state (S123): the conversation so far and what it waits for. Its model and
/// tool calls are step executions of their own, each with its own path and record, so a
/// recovery repeats none that has ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct AgentNode {
    /// The conversation: provider-neutral messages, the model's replies and tool results
    /// included.
    pub messages: Vec<Value>,
    /// Model calls started so far; the next one's path ends in `model-{turns + 1}`.
    pub turns: u32,
    /// Tokens used by the model calls that ended, summed.
    pub usage: AgentUsage,
    /// One summary per model call that ended: its text, tool calls and their results.
    pub steps: Vec<Value>,
    /// A repair of the structured output was asked for (S126).
    pub repaired: bool,
    /// The paths of the tool calls made so far: a provider that gives the same call id again
    /// (some local servers number calls per reply) gets a path of its own each time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_paths: Vec<String>,
    /// What runs now.
    pub now: AgentNow,
}

/// Tokens an agent's model calls used, as the provider counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AgentUsage {
    /// Tokens of the requests.
    pub input_tokens: u64,
    /// Tokens of the replies.
    pub output_tokens: u64,
}

/// What an agent waits for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum AgentNow {
    /// A model call.
    Model(Box<Node>),
    /// The tool calls of the last reply, in the order the model made them.
    Tools(Vec<ToolRun>),
    /// Nothing: the agent has ended.
    Nothing,
}

/// One tool call of a model reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ToolRun {
    /// The provider's id of the call.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments the model gave.
    pub arguments: Value,
    /// The path of its record: the agent's path, `.tool-`, and the id made path-safe.
    pub path: String,
    /// Where it stands.
    pub state: ToolState,
}

/// Where a tool call stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum ToolState {
    /// Not started.
    Pending,
    /// Suspended until a person approves or refuses it (S124).
    Approval,
    /// Its execution.
    Running(Box<Node>),
    /// Ended: what the model is told.
    Done(Value),
    /// Ended by a guardrail (S82): the agent ends `tripwire` once no call runs.
    Tripped(TripwireInfo),
}

impl AgentNode {
    /// The executions under way: the model call or the running tool calls.
    pub(crate) fn running(&self) -> Vec<&Node> {
        match &self.now {
            AgentNow::Model(node) => vec![&**node],
            AgentNow::Tools(runs) => runs
                .iter()
                .filter_map(|r| match &r.state {
                    ToolState::Running(node) => Some(&**node),
                    _ => None,
                })
                .collect(),
            AgentNow::Nothing => Vec::new(),
        }
    }
}

/// A plugin step's own state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StepNode {
    /// The current attempt (0-based).
    pub attempt: u32,
    /// Given to the invocations of a resumed execution (S72).
    pub resume: Option<Resumption>,
    /// What it waits for.
    pub wait: StepWait,
}

/// What a step waits for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum StepWait {
    /// An invocation's end; `state` is the state it was given (re-issued as is, S102).
    Invocation {
        /// The invocation's token.
        token: u64,
        /// The state at the invocation's start, shared with the invocation's call.
        state: Arc<Value>,
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
pub(crate) struct ForeachNode {
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
pub(crate) enum Item {
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
