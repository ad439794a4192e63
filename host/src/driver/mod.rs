//! The local driver: runs the pure core on tokio, carries out its commands, and keeps every
//! transition durable in the store before its effects happen (S100).
//!
//! Each live run has one actor task that owns its [`RunState`](crate::engine::RunState).
//! Invocations, timers and guest events reach the actor as messages; the actor feeds them to
//! [`advance`](fn@crate::engine::advance), commits the transition and then carries out the
//! commands.
//!
//! The [`Runtime`] is spread over files of one job each: `runtime` (the runtime, its parts and
//! how it is opened), `starting` (new runs and re-runs), `asking` (wait, show, resume, cancel), `bulk`
//! (cancel and resume every run a filter matches),
//! `watch` (a run's events, stored then live), `recovery` (runs no process drives), `prune`
//! (deleting ended runs: retention), `load` (a
//! run read back from the store), `live_run` (the runs with an actor here), `shared` (a store
//! many processes share) and `error` ([`RuntimeError`]). The actor is `actor`; `record` is what
//! readers see of a run, `codec` how the store holds it.

mod actor;
mod asking;
mod bulk;
mod checked;
mod clock;
mod codec;
mod config;
mod error;
mod executors;
mod graphs;
mod limits;
mod live_events;
mod live_run;
mod load;
pub(crate) mod metrics;
mod new_events;
mod prune;
mod record;
mod recovery;
mod runtime;
mod shared;
mod starting;
mod sync;
mod unpublished;
mod unrecoverable;
mod watch;
mod workflow_tools;

pub use bulk::{BulkReport, RunFilter};
pub use clock::{Clock, ManualClock, SystemClock};
pub(crate) use config::redacted;
pub use config::{RuntimeConfig, StoreUrl};
pub use error::RuntimeError;
pub use prune::{PruneFilter, PruneReport};
pub use record::{RunRecord, StoredEvent};
pub use runtime::Runtime;
pub use starting::StartOptions;
pub use unrecoverable::{Recovery, Unrecovered};
