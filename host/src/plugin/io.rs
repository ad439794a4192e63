//! What an invocation talks to: where its events go, what it may read of the run, and how it is
//! told to stop.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Notify;

/// Level of a guest log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Finest detail.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal information; captured guest stdout.
    Info,
    /// Something odd; captured guest stderr.
    Warn,
    /// Something failed.
    Error,
}

/// One event of a running invocation, delivered in the order the guest made the calls (S111).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "type", content = "event")]
pub enum GuestEvent {
    /// `writer.write(chunk)`: the chunk, parsed; text that is not JSON arrives as a JSON string.
    Output(Value),
    /// `writer.custom(kind, data)`.
    Custom {
        /// The event kind, e.g. `progress`.
        kind: String,
        /// Its data, parsed like a writer chunk.
        data: Value,
    },
    /// `log.log`, or a line the guest wrote to stdout (info) or stderr (warn).
    Log {
        /// The level.
        level: LogLevel,
        /// The message, one line for captured output.
        message: String,
    },
}

/// Receives the events of invocations. Called synchronously, in call order, from the task that
/// runs the guest: keep it quick (push to a channel or a buffer).
pub trait EventSink: Send + Sync {
    /// Takes one event.
    fn emit(&self, event: GuestEvent);
}

/// Read access to the run, for the `run` host interface.
pub trait RunAccess: Send + Sync {
    /// The workflow's input (`run.init-data`).
    fn init_data(&self) -> Value;
    /// The output of a step of this run that succeeded, by id or path (`run.step-result`).
    fn step_result(&self, step: &str) -> Option<Value>;
}

/// A sink that drops every event.
#[derive(Debug, Clone, Copy, Default)]
pub struct DiscardEvents;

impl EventSink for DiscardEvents {
    fn emit(&self, _event: GuestEvent) {}
}

/// A sink that keeps every event in memory, for tests and small tools.
#[derive(Debug, Default)]
pub struct EventLog {
    events: Mutex<Vec<GuestEvent>>,
}

impl EventLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of the events so far.
    pub fn events(&self) -> Vec<GuestEvent> {
        lock(&self.events).clone()
    }

    /// Takes the events so far, leaving the log empty.
    pub fn take(&self) -> Vec<GuestEvent> {
        std::mem::take(&mut *lock(&self.events))
    }
}

impl EventSink for EventLog {
    fn emit(&self, event: GuestEvent) {
        lock(&self.events).push(event);
    }
}

/// A run with no input and no step results.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoRun;

impl RunAccess for NoRun {
    fn init_data(&self) -> Value {
        Value::Null
    }
    fn step_result(&self, _step: &str) -> Option<Value> {
        None
    }
}

/// Cooperative cancellation of invocations, shared by cheap clones.
///
/// [`cancel`](Self::cancel) sets it aborted with reason `cancelled`: running invocations see
/// `abort.is-aborted` true, and are stopped after the host's abort grace (S77). A
/// [`child`](Self::child) is aborted when its parent is, and can also be aborted on its own.
/// The host never writes to the handle it is given: an invocation whose deadline passed sees
/// reason `timeout` through its own view.
#[derive(Debug, Clone, Default)]
pub struct AbortHandle {
    inner: Arc<AbortInner>,
}

#[derive(Debug, Default)]
struct AbortInner {
    state: Mutex<Option<(String, Instant)>>,
    notify: Notify,
    parent: Option<AbortHandle>,
}

impl AbortHandle {
    /// A handle that is not aborted.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new handle that is aborted when `self` is, or when aborted itself.
    pub fn child(&self) -> Self {
        Self {
            inner: Arc::new(AbortInner {
                state: Mutex::new(None),
                notify: Notify::new(),
                parent: Some(self.clone()),
            }),
        }
    }

    /// Aborts with reason `cancelled`.
    pub fn cancel(&self) {
        self.abort("cancelled");
    }

    /// Aborts with `reason`; the first reason given stays.
    pub fn abort(&self, reason: impl Into<String>) {
        let mut state = lock(&self.inner.state);
        if state.is_none() {
            *state = Some((reason.into(), Instant::now()));
            drop(state);
            self.inner.notify.notify_waiters();
        }
    }

    /// True once aborted (or the parent is).
    pub fn is_aborted(&self) -> bool {
        self.state().is_some()
    }

    /// Why it was aborted: the earliest reason of this handle and its ancestors.
    pub fn reason(&self) -> Option<String> {
        self.state().map(|(reason, _)| reason)
    }

    /// When it was aborted.
    pub fn aborted_at(&self) -> Option<Instant> {
        self.state().map(|(_, at)| at)
    }

    fn state(&self) -> Option<(String, Instant)> {
        let own = lock(&self.inner.state).clone();
        let parent = self.inner.parent.as_ref().and_then(AbortHandle::state);
        match (own, parent) {
            (Some(a), Some(b)) => Some(if b.1 < a.1 { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    /// Resolves once aborted.
    pub async fn aborted(&self) {
        self.wait().await;
    }

    fn wait(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            loop {
                let notified = self.inner.notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if lock(&self.inner.state).is_some() {
                    return;
                }
                match &self.inner.parent {
                    Some(parent) => {
                        tokio::select! {
                            _ = &mut notified => {}
                            _ = parent.wait() => return,
                        }
                    }
                    None => notified.await,
                }
            }
        })
    }
}

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

/// Locks a mutex, ignoring poisoning (the data are plain values that stay consistent).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn abort_reasons_and_children() {
        let run = AbortHandle::new();
        let step = run.child();
        assert!(!step.is_aborted());
        step.abort("timeout");
        assert_eq!(step.reason().as_deref(), Some("timeout"));
        assert!(!run.is_aborted(), "a child never aborts its parent");
        run.cancel();
        assert_eq!(
            step.reason().as_deref(),
            Some("timeout"),
            "earliest reason stays"
        );
        let other = run.child();
        assert_eq!(other.reason().as_deref(), Some("cancelled"));
        other.aborted().await;
    }

    #[tokio::test]
    async fn aborted_wakes_waiters_of_children() {
        let run = AbortHandle::new();
        let step = run.child();
        let waiter = tokio::spawn({
            let step = step.clone();
            async move { step.aborted().await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        run.cancel();
        tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .expect("woken")
            .expect("task ok");
    }
}
