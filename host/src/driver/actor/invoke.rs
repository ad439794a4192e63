//! How the actor carries out a transition's commands: timers, aborts, and invocations of steps
//! through their executors, on a task of their own or on the actor's; what an invocation is
//! given to talk to its run ([`Sink`], [`View`]), and how a panicking executor fails its step.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;
use serde_json::Value;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::spans::step_span;
use super::{Actor, Msg};
use crate::driver::metrics;
use crate::driver::unrecoverable::panic_message;
use crate::engine::invocation::{InvocationResult, StepFailure};
use crate::engine::{Command, Event, Invoke, StepsView};
use crate::executor::{AbortHandle, EventSink, GuestEvent, Invocation, RunAccess, StepRequest};

/// Where an invocation's guest events belong.
pub(super) struct InFlight {
    /// Cancels the invocation.
    pub(super) abort: AbortHandle,
    /// Its step's path.
    pub(super) path: String,
    /// The foreach item it runs for.
    pub(super) foreach_index: Option<u32>,
    /// The loop iteration it runs in.
    pub(super) iteration: Option<u32>,
}

/// An invocation the actor's own task runs, to its `StepEnded`.
pub(super) type Local = Pin<Box<dyn Future<Output = Event> + Send>>;

impl Actor {
    /// Carries out `cmd`; an invocation runs on this task when `local`.
    pub(super) fn carry_out(&mut self, cmd: Command, local: bool) {
        match cmd {
            Command::Invoke(invoke) => self.invoke(*invoke, local),
            Command::Timer { token, at } => {
                let tx = self.tx.clone();
                let clock = self.rt.clock();
                let wait = clock.sleep_until(at);
                tokio::spawn(async move {
                    wait.await;
                    let _ = tx.send(Msg::Event(Event::TimerFired {
                        token,
                        at: clock.now_ms(),
                    }));
                });
            }
            Command::Abort { tokens } => {
                for t in tokens {
                    if let Some(f) = self.in_flight.get(&t) {
                        f.abort.cancel();
                    }
                }
            }
            Command::Emit(_) => {}
        }
    }

    /// Starts an invocation: on a task of its own, or with `local` on this actor's task, which
    /// polls it while it waits for messages ([`Actor::next_msg`]). Either way its guest events
    /// reach the actor through its channel before its end.
    pub(super) fn invoke(&mut self, cmd: Invoke, local: bool) {
        let token = cmd.token;
        let abort = AbortHandle::new();
        if self.state.cancelling {
            abort.cancel();
        }
        self.in_flight.insert(
            token,
            InFlight {
                abort: abort.clone(),
                path: cmd.call.step_path.clone(),
                foreach_index: cmd.call.foreach_index,
                iteration: cmd.call.iteration,
            },
        );
        let tx = self.tx.clone();
        let clock = self.rt.clock();
        let executors = self.executors.clone();
        let rt = self.rt.clone();
        let span = step_span(&self.span, &self.state.run_id, &cmd);
        rt.inner.metrics.invocation_started();
        let started = std::time::Instant::now();
        let task = async move {
            let resolved = match executors.ready(&cmd.plugin) {
                Some(executor) => Ok(executor),
                // Boxed: the future of loading a plugin is large, and held inline it would
                // make every invocation's future as large, copied at each move.
                None => Box::pin(executors.resolve(&cmd.plugin, &cmd.step)).await,
            };
            let result = match resolved {
                Ok(executor) => {
                    let sink = Arc::new(Sink {
                        tx: tx.clone(),
                        token,
                    });
                    let io = Invocation::new(sink, Arc::new(View(cmd.view)))
                        .with_abort(abort)
                        .with_deadline(cmd.timeout_ms.map(Duration::from_millis));
                    let request = StepRequest {
                        step: cmd.step,
                        kind: cmd.kind,
                        call: cmd.call,
                        io,
                    };
                    // A panicking executor fails its step instead of leaving the run waiting
                    // for an end that never comes (S84 for what is not a plugin).
                    AssertUnwindSafe(async { executor.execute(request).await })
                        .catch_unwind()
                        .await
                        .unwrap_or_else(|panic| panicked(&*panic))
                }
                Err(e) => unavailable(e.to_string()),
            };
            rt.inner
                .metrics
                .invocation_ended(&result, started.elapsed());
            let span = tracing::Span::current();
            let outcome = metrics::outcome(&result);
            span.record("weft.outcome", outcome);
            if matches!(outcome, "failed" | "tripwire") {
                span.record("otel.status_code", "ERROR");
            }
            Event::StepEnded {
                token,
                result: Box::new(result),
                at: clock.now_ms(),
            }
        };
        if local {
            self.rt.inner.metrics.on_run_task();
            self.local.push(Box::pin(task.instrument(span)));
        } else {
            let tx = self.tx.clone();
            // Boxed, so that spawning moves a pointer rather than the whole invocation's
            // future (a few kilobytes, copied into the task and again on its first poll).
            let task = Box::pin(task);
            tokio::spawn(
                async move {
                    let _ = tx.send(Msg::Event(task.await));
                }
                .instrument(span),
            );
        }
    }
}

/// Counts a run in [`super::Runtime::busy`]'s number of runs with an invocation in flight
/// while it has one, and no longer once the actor is gone.
pub(super) struct Working {
    runs: Arc<AtomicUsize>,
    counted: bool,
}

impl Working {
    pub(super) fn new(runs: Arc<AtomicUsize>) -> Self {
        Working {
            runs,
            counted: false,
        }
    }

    /// Counts the run when `working`, else not.
    pub(super) fn set(&mut self, working: bool) {
        if working != self.counted {
            self.counted = working;
            if working {
                self.runs.fetch_add(1, Ordering::Relaxed);
            } else {
                self.runs.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

impl Drop for Working {
    fn drop(&mut self) {
        self.set(false);
    }
}

/// The failure of a step whose executor panicked: a `trap` with the panic's first line.
fn panicked(panic: &(dyn std::any::Any + Send)) -> InvocationResult {
    let reason = panic_message(panic);
    let reason = reason.lines().next().unwrap_or_default();
    tracing::error!(%reason, "a step executor panicked");
    InvocationResult {
        outcome: Err(StepFailure::new("trap", format!("step panicked: {reason}"))),
        patches: Vec::new(),
    }
}

fn unavailable(message: String) -> InvocationResult {
    InvocationResult {
        outcome: Err(StepFailure::new("plugin-unavailable", message).not_retryable()),
        patches: Vec::new(),
    }
}

/// Sends an invocation's guest events to its run's actor, in call order.
struct Sink {
    tx: mpsc::UnboundedSender<Msg>,
    token: u64,
}

impl EventSink for Sink {
    fn emit(&self, event: GuestEvent) {
        let _ = self.tx.send(Msg::Guest(self.token, event));
    }
}

/// What an invocation may read of its run (S8).
struct View(StepsView);

impl RunAccess for View {
    fn init_data(&self) -> Value {
        Value::clone(&self.0.init)
    }

    fn step_result(&self, step: &str) -> Option<Value> {
        self.0.get(step).map(|v| Value::clone(v))
    }
}
