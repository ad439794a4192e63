//! The pure core: the workflow model, run state, events, commands and `advance`.
//!
//! Nothing in here performs I/O, reads a clock or draws random numbers: time arrives inside
//! events, and everything the outside world must do leaves as commands.
//!
//! The data: [`model`] (the graph), `state` (a run), `nodes` (its execution tree), `records`
//! (what the run record shows per entry), `events` (what comes in), `commands` (what goes
//! out); all re-exported here. The machinery: [`advance()`] takes an event; the drive pass
//! (`drive`, `context`, `settle`) moves every execution under way; `lifecycle` starts and ends
//! each execution (its record, its events, what `.steps` sees); one machine per construct
//! (`machines/`) decides what its kind does, each with its transition table, which
//! `transitions` holds to the code and the tests; `resume`, `cancel` and `replay` handle the
//! run-wide requests.

pub(crate) mod expr;
pub(crate) mod invocation;
pub(crate) mod model;
pub(crate) mod rerun;
pub(crate) mod schema;

pub(crate) mod draw;

mod advance;
mod cancel;
mod commands;
mod context;
mod drive;
mod event_data;
mod events;
mod lifecycle;
mod machines;
mod nodes;
mod patches;
mod records;
mod replay;
mod resume;
mod settle;
mod start;
mod state;
mod time;
mod transitions;
mod visit;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod recovery_tests;
#[cfg(test)]
pub(crate) mod sim;

pub(crate) use advance::advance;
pub use commands::EventKind;
pub(crate) use commands::{Command, Invoke, StepsView, Tracking};
/// The driver's tests build tracking events' data as the core does.
#[cfg(test)]
pub(crate) use event_data::EventData;
pub(crate) use events::Event;
pub use events::{Refusal, ResumeRequest};
pub(crate) use model::GRAPH_FORMAT;
pub use model::Graph;
pub(crate) use nodes::{Item, ListRef, Node, NodeKind, Phase, Seq, StepNode, StepWait};
pub use records::{
    ErrorInfo, ItemRecord, RestartedFrom, StepRecord, StepStatus, SuspendedEntry, TripwireInfo,
};
pub(crate) use replay::fold;
#[cfg(test)]
pub(crate) use replay::replay;
pub(crate) use resume::suspended;
pub(crate) use start::{check_run_input, new_run};
pub use state::RunStatus;
pub(crate) use state::{RunState, STATE_FORMAT, ToolCallOf};
pub(crate) use time::Millis;
pub use time::rfc3339;

/// The hasher of the core's maps keyed by entry paths and ids (a run's records, a scope's
/// outputs): foldhash, seeded at random, several times cheaper than the standard library's
/// SipHash on the short keys the core looks up at every step.
pub(crate) type KeyHasher = foldhash::fast::RandomState;
