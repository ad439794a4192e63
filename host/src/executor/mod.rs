//! The seam between the driver and what runs a step: [`StepExecutor`].
//!
//! The core's [`Invoke`](crate::engine::Invoke) command says which step to run and with what;
//! the driver finds the step's executor (a plugin's from the plugin host, a native one from the
//! runtime's registry) and hands it a [`StepRequest`]. What comes back is the
//! [`InvocationResult`] the driver feeds to the core as the step's end, whatever ran it.
//!
//! Implementations: `PluginStep` (a WebAssembly component's step in its sandbox, in `plugin`)
//! and `NativeStep` (a Rust closure, in `native`); any other executor registered by name with
//! `Runtime::register_executor` is used like a native step.
//!
//! This module holds everything an executor talks to, and depends on the engine alone: the
//! events an invocation writes and where they go (`events`), what it may read of its run
//! (`run_access`), how it is told to stop (`abort`), all of them handed over as one
//! [`Invocation`] (`invocation`), and what a step declares about itself ([`StepInfo`],
//! `step_info`). The plugin host, native steps and model calls build on it; the driver on all
//! of them.

mod abort;
mod events;
mod invocation;
mod run_access;
mod step_info;

use std::sync::{Mutex, MutexGuard};

use futures::future::BoxFuture;

use crate::engine::invocation::{InvocationResult, StepCall};
use crate::engine::model::StepKind;

pub use abort::AbortHandle;
pub(crate) use abort::until_aborted;
pub use events::{DiscardEvents, EventLog, EventSink, GuestEvent, LogLevel};
pub use invocation::Invocation;
pub use run_access::{NoRun, RunAccess};
pub use step_info::StepInfo;

/// Runs invocations of steps: one attempt per call.
///
/// An executor must end every invocation with a result: every way the step can fail is a
/// [`StepFailure`](crate::engine::invocation::StepFailure) in it, with the codes of S14 and S83.
/// It watches `request.io.abort` (a cancel, S77) and stops at `request.io.deadline` when it can
/// (S15). Patches (S16) go in the result, with its outcome.
pub trait StepExecutor: Send + Sync {
    /// Runs one invocation to its end.
    fn execute(&self, request: StepRequest) -> BoxFuture<'_, InvocationResult>;
}

/// One invocation, as the driver hands it to a [`StepExecutor`].
#[derive(Debug)]
pub struct StepRequest {
    /// The step's name within its executor: the plugin's step, or the name a native step is
    /// registered under.
    pub step: String,
    /// Whether `step` names a step or a tool (S120); native steps are always steps.
    pub kind: StepKind,
    /// The call: run, path, attempt, input, config, state and resumption (S12).
    pub call: StepCall,
    /// Where its events go, what it may read of its run (S8), how it is told to stop, and its
    /// deadline: the step's own `timeout-ms` (`None`: the executor's default, S15).
    pub io: Invocation,
}

/// Locks a mutex, ignoring poisoning (the data are plain values that stay consistent).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
