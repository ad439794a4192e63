//! The tracing spans of a run's drive and of its step attempts, as the actor opens and closes
//! them.

use super::{Actor, settled};
use crate::engine::{Invoke, RunState, RunStatus};

impl Actor {
    /// Closes the run's span once the run has ended or suspended, with its outcome, and opens
    /// a new one when a resume set it running again.
    pub(super) fn follow_span(&mut self) {
        let status = self.state.status;
        let settled = settled(status);
        if settled && !self.span.is_none() {
            self.span.record("weft.outcome", status.to_string());
            if matches!(status, RunStatus::Failed | RunStatus::Tripwire) {
                self.span.record("otel.status_code", "ERROR");
            }
            self.span = tracing::Span::none();
        } else if !settled && self.span.is_none() {
            self.span = run_span(&self.state);
        }
    }
}

/// The span of one drive of a run (see [`Actor::follow_span`]).
pub(super) fn run_span(state: &RunState) -> tracing::Span {
    tracing::info_span!(
        "weft.run",
        otel.name = %format!("run {}", state.workflow_id),
        weft.run_id = %state.run_id,
        weft.workflow_id = %state.workflow_id,
        weft.outcome = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// The span of one step attempt, inside its run's span.
pub(super) fn step_span(run: &tracing::Span, run_id: &str, cmd: &Invoke) -> tracing::Span {
    let call = &cmd.call;
    tracing::info_span!(
        parent: run,
        "weft.step",
        otel.name = %format!("step {}", call.step_path),
        weft.run_id = %run_id,
        weft.step.path = %call.step_path,
        weft.step.attempt = call.attempt,
        weft.step.foreach_index = call.foreach_index.map(i64::from),
        weft.step.iteration = call.iteration.map(i64::from),
        weft.outcome = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}
