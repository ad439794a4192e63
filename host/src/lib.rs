//! weft: a durable workflow host whose steps and tools are sandboxed WebAssembly components.
//!
//! A workflow is a graph of entries — steps, parallel arms, branches, foreach, loops, sleeps,
//! maps and nested workflows — written as a YAML file or built in Rust with
//! [`WorkflowBuilder`]. Steps are WebAssembly components run in wasmtime under the limits and
//! grants the workflow gives them, or [`NativeStep`]s: async Rust closures registered by name.
//! Every transition of a run is stored before its effects happen, so a run survives its process:
//! it can suspend for days waiting for a resume, and a run whose process died is recovered where
//! it stood.
//!
//! # Embedding
//!
//! A [`Runtime`] owns one home directory (its database and compiled-plugin cache). Open it,
//! register native steps, load or build a workflow, start runs:
//!
//! ```
//! use serde_json::json;
//! use weft::{Entry, NativeStep, RunStatus, Runtime, RuntimeConfig, StepOutcome, WorkflowBuilder};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let home = tempfile::tempdir()?;
//! let rt = Runtime::open(home.path(), RuntimeConfig::default())?;
//!
//! // A native step: plain Rust, invoked like a plugin step, with the same retries and schemas.
//! rt.register(
//!     "greet",
//!     NativeStep::new(|call| async move {
//!         let name = call.call.input["name"].as_str().unwrap_or("world").to_owned();
//!         Ok(StepOutcome::Done(json!({ "greeting": format!("hello, {name}") })))
//!     }),
//! );
//!
//! let workflow = WorkflowBuilder::new("hello")
//!     .then(Entry::native("greet", "greet"))
//!     .build(&rt)
//!     .await?;
//! let run_id = rt.start(&workflow, json!({ "name": "ana" }), None).await?;
//! let record = rt.wait(&run_id).await?;
//! assert_eq!(record.status, RunStatus::Success);
//! assert_eq!(record.result, Some(json!({ "greeting": "hello, ana" })));
//! # Ok(())
//! # }
//! ```
//!
//! What a runtime does with a run:
//!
//! - [`Runtime::start`] stores a new run and drives it in the background; [`Runtime::wait`]
//!   waits until it ends or suspends and returns its [`RunRecord`]; [`Runtime::show`] reads
//!   the record at any time, [`Runtime::runs`] lists runs. [`Runtime::start_and_wait`] and
//!   [`Runtime::resume_and_wait`] do a start or a resume and that wait in one call.
//! - [`Runtime::watch`] streams a run's [`StoredEvent`]s, stored then live, until its closing
//!   event; [`Runtime::watch_settled`] also ends at the suspension the run stands at.
//! - [`Runtime::resume`] answers suspended steps with a [`ResumeRequest`];
//!   [`Runtime::cancel`] cancels; [`Runtime::recover`] takes over a running run whose process
//!   died; [`Runtime::rerun`] starts a new run from a step of an ended one.
//!
//! Workflow files are loaded with [`Runtime::load_workflow`]; besides closures,
//! [`Runtime::register_executor`] takes any [`StepExecutor`]. Every limit, size and wait is a
//! [`RuntimeConfig`] field with a default (start from `Default`, chain the `with_*` setters),
//! including the [`Clock`] the driver reads: a [`ManualClock`] lets tests pass hour-long sleeps
//! at once.
//!
//! # What is here
//!
//! Everything an embedder uses is at the crate root: the [`Runtime`] and its
//! [`RuntimeConfig`]; what it hands back ([`RunRecord`], [`StepRecord`], [`StoredEvent`],
//! [`RunStatus`], [`RunSummary`]) and takes ([`ResumeRequest`]); the Rust-side ways to write
//! workflows and steps ([`WorkflowBuilder`], [`NativeStep`]); the seam every kind of step runs
//! through ([`StepExecutor`], [`StepRequest`] and what an executor talks to: [`EventSink`],
//! [`RunAccess`], [`AbortHandle`]); the plugin host's settings ([`HostConfig`]); and the
//! errors of each. With the default features, [`server`] is the HTTP API of `weft serve`, to
//! mount in a service of one's own, and [`dev_model`] the scripted model double of
//! `weft dev model`; an embedder that needs neither turns them off (`default-features =
//! false`) and compiles neither clap nor axum.
//!
//! Inside, the crate is layered (`docs/ARCHITECTURE.md`): a pure core (the graph, run state,
//! events and `advance`; no I/O, no clock) at the bottom, the executor seam, the plugin host and
//! the stores above it, the driver tying them together on tokio, and the command line and the
//! server on top. None of those layers is public API.
//!
//! # The contract
//!
//! The behaviour is specified in the repository's `docs/`: `docs/SEMANTICS.md` (the numbered
//! rules S1–S129 that tests are named after), `docs/WORKFLOW-FORMAT.md` (workflow files, run
//! records, events, the command line) and `docs/ARCHITECTURE.md` (the layers and how a
//! transition is made durable).
#![warn(unreachable_pub, unnameable_types)]

mod age;
mod builder;
#[cfg(feature = "cli")]
#[doc(hidden)]
pub mod cli;
#[cfg(feature = "server")]
pub mod dev_model;
mod driver;
mod engine;
mod executor;
mod home;
#[doc(hidden)]
pub mod internal;
mod limits;
mod models;
mod native;
mod plugin;
mod run_id;
#[cfg(feature = "server")]
pub mod server;
mod store;
mod tags;
mod workflow;

pub use limits::memory::MeteredAlloc;

/// The library's own tests run with the allocator the `weft` binary installs, so that
/// expressions are held to their memory budget there too.
#[cfg(test)]
#[global_allocator]
static TEST_ALLOC: MeteredAlloc<std::alloc::System> = MeteredAlloc(std::alloc::System);
pub use builder::{Arm, Body, Entry, PluginSpec, WorkflowBuilder};
pub use driver::metrics::METRICS_CONTENT_TYPE;
pub use driver::{
    BulkReport, Clock, ManualClock, PruneFilter, PruneReport, Recovery, RunFilter, RunRecord,
    Runtime, RuntimeConfig, RuntimeError, StartOptions, StoreUrl, StoredEvent, SystemClock,
    Unrecovered,
};
pub use engine::draw::DrawingFormat;
pub use engine::invocation::{
    InvocationResult, Resumption, StepCall, StepFailure, StepOutcome, Tripwire,
};
pub use engine::model::StepKind;
pub use engine::schema::Violation;
pub use engine::{
    ErrorInfo, EventKind, Graph, ItemRecord, Refusal, RestartedFrom, ResumeRequest, RunStatus,
    StepRecord, StepStatus, SuspendedEntry, TripwireInfo,
};
pub use executor::{
    AbortHandle, EventSink, GuestEvent, Invocation, LogLevel, RunAccess, StepExecutor, StepInfo,
    StepRequest,
};
pub use limits::LimitError;
pub use models::ModelConfig;
pub use native::{NativeCall, NativeStep};
pub use plugin::{CompileNotice, HostConfig, PluginError, PluginHost, PoolConfig, PoolUsage};
pub use run_id::InvalidRunId;
pub use store::{RunSummary, StoreError};
pub use tags::InvalidTag;
pub use workflow::{LoadedWorkflow, WorkflowError, load_workflow};
