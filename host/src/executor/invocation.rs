//! Everything an invocation is handed besides its call: [`Invocation`] (its event sink, run
//! access, abort handle and deadline).

use std::sync::Arc;
use std::time::Duration;

use super::{AbortHandle, EventSink, RunAccess};

/// Everything an invocation needs besides its call: event sink, run access, cancellation and
/// deadline.
#[derive(Clone)]
pub struct Invocation {
    /// Where writer chunks, custom events, logs and captured stdout/stderr go, in call order.
    pub sink: Arc<dyn EventSink>,
    /// Read access to the run.
    pub run: Arc<dyn RunAccess>,
    /// Cancellation of the run (or of just this invocation).
    pub abort: AbortHandle,
    /// The attempt's timeout (S15), counted from the start of the call: the step's
    /// `timeout-ms`. `None`: the sandbox's `limits.timeout-ms`, else no deadline.
    pub deadline: Option<Duration>,
}

impl Invocation {
    /// An invocation with this sink and run access, not cancelled, without deadline.
    pub fn new(sink: Arc<dyn EventSink>, run: Arc<dyn RunAccess>) -> Self {
        Self {
            sink,
            run,
            abort: AbortHandle::new(),
            deadline: None,
        }
    }

    /// The same invocation with this abort handle.
    pub fn with_abort(mut self, abort: AbortHandle) -> Self {
        self.abort = abort;
        self
    }

    /// The same invocation with this deadline.
    pub fn with_deadline(mut self, deadline: Option<Duration>) -> Self {
        self.deadline = deadline;
        self
    }
}

impl std::fmt::Debug for Invocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Invocation")
            .field("abort", &self.abort)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}
