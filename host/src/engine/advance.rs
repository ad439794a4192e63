//! `advance`: one event in, the new state and the commands out.
//!
//! Every event ends in one *drive pass* over the executions that are under way: each execution
//! takes what the event brought (an invocation's result, a timer, a resume, a cancel) and starts
//! whatever may start next. The pass is deterministic and performs no I/O.

use std::cell::OnceCell;

use serde_json::json;

use super::cancel::in_flight;
use super::commands::{Command, EventKind, Tracking};
use super::context::{Cx, Frame};
use super::drive::drive_seq;
use super::event_data::EventData;
use super::events::{Event, Refusal};
use super::model::Graph;
use super::resume::select_resume;
use super::settle::settle_run;
use super::start::run_started;
use super::state::{RunState, RunStatus};

/// Applies one event to the run: the state changes in place and the commands to carry out are
/// returned, in order. On a refusal nothing changed.
pub(crate) fn advance(
    run: &mut RunState,
    graph: &Graph,
    event: Event,
) -> Result<Vec<Command>, Refusal> {
    let at = event.at();
    let mut inbox = None;
    let mut fired = None;
    let mut resume = None;
    let mut reissue = false;
    let mut pre = Vec::new();
    match event {
        Event::Start { .. } => {
            if run.status != RunStatus::Pending {
                return Ok(Vec::new());
            }
            run.status = RunStatus::Running;
            pre.push(run_started(run));
        }
        Event::StepEnded { token, result, .. } => {
            if run.status.is_ended() {
                return Ok(Vec::new());
            }
            inbox = Some((token, *result));
        }
        Event::TimerFired { token, .. } => {
            if run.status.is_ended() {
                return Ok(Vec::new());
            }
            fired = Some(token);
        }
        Event::Resume { request, .. } => {
            let selection = select_resume(run, graph, request)?;
            run.status = RunStatus::Running;
            pre.push(Command::Emit(Tracking {
                kind: EventKind::RunResumed,
                path: None,
                foreach_index: None,
                iteration: None,
                data: EventData::Value(json!({
                    "path": selection.path,
                    "foreach_indexes": selection.indexes,
                    "data": selection.data,
                })),
            }));
            resume = Some(selection);
        }
        Event::Cancel { failure, .. } => {
            if run.status.is_ended() {
                return Err(Refusal::AlreadyEnded {
                    run: run.run_id.clone(),
                    status: run.status,
                });
            }
            if run.cancelling {
                return Ok(Vec::new());
            }
            run.cancelling = true;
            run.stopped = failure;
            if run.status == RunStatus::Suspended {
                // Nothing runs: the drive pass below ends every suspended step (S76).
                run.status = RunStatus::Running;
            }
            let tokens = in_flight(&run.root);
            if run.status == RunStatus::Pending {
                run.status = RunStatus::Running;
                pre.push(run_started(run));
            }
            if !tokens.is_empty() {
                pre.push(Command::Abort { tokens });
            }
        }
        Event::Recover { .. } => match run.status {
            RunStatus::Pending => {
                run.status = RunStatus::Running;
                pre.push(run_started(run));
            }
            RunStatus::Running => reissue = true,
            _ => return Ok(Vec::new()),
        },
    }
    let RunState {
        run_id,
        workflow_id: _,
        status,
        root,
        files,
        results,
        records,
        next_token,
        cancelling,
        value_limit,
        ..
    } = run;
    let mut cx = Cx {
        graph,
        now: at,
        stamp: OnceCell::new(),
        run_id,
        files,
        results,
        records,
        next_token,
        cancelling: *cancelling,
        value_limit: *value_limit,
        inbox,
        fired,
        resume,
        reissue,
        reissued: Vec::new(),
        cmds: pre,
    };
    if *status == RunStatus::Running {
        drive_seq(root, &Frame::root(), &mut cx);
    }
    let Cx {
        mut cmds, reissued, ..
    } = cx;
    if !reissued.is_empty() {
        cmds.push(Command::Emit(Tracking {
            kind: EventKind::Log,
            path: None,
            foreach_index: None,
            iteration: None,
            data: EventData::Value(json!({
                "level": "warn",
                "message": format!("recovered after the host stopped; issued again: {}", reissued.join(", ")),
            })),
        }));
    }
    settle_run(run, graph, &mut cmds);
    run.updated_at = at;
    Ok(cmds)
}
