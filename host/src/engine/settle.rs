//! Settling: how settled siblings combine (S19), and how the top-level sequence maps onto the
//! run's status and closing event (S65, S88).

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::cancel::cancel_suspended_in;
use super::commands::{Command, EventKind, Tracking};
use super::context::{Cx, Frame};
use super::event_data::object_of;
use super::lifecycle::end_node;
use super::model::{EntryDef, Graph};
use super::nodes::{End, Node, NodeKind, Phase};
use super::resume::suspended;
use super::state::{RunState, RunStatus};

/// Maps the top-level sequence's phase onto the run's status and closing events (S65, S88).
pub(crate) fn settle_run(run: &mut RunState, graph: &Graph, cmds: &mut Vec<Command>) {
    if run.status != RunStatus::Running {
        return;
    }
    let emit = |kind, data: Value| {
        Command::Emit(Tracking {
            kind,
            path: None,
            foreach_index: None,
            iteration: None,
            data: data.into(),
        })
    };
    match &run.root.phase {
        Phase::New | Phase::Running => {}
        Phase::Suspended => {
            run.status = RunStatus::Suspended;
            cmds.push(emit(
                EventKind::RunSuspended,
                json!({ "suspended": suspended(run, graph) }),
            ));
        }
        Phase::Done(end) => {
            let end = if run.cancelling {
                // Stopped by the host: failed with its reason; else cancelled.
                run.stopped.clone().map_or(End::Cancelled, End::Failed)
            } else {
                end.clone()
            };
            match end {
                End::Success(v) | End::Bail(v) => {
                    run.status = RunStatus::Success;
                    cmds.push(emit(
                        EventKind::RunSucceeded,
                        object_of("result", Value::clone(&v)),
                    ));
                    run.result = Some(Arc::unwrap_or_clone(v));
                }
                End::Failed(e) => {
                    run.status = RunStatus::Failed;
                    cmds.push(emit(EventKind::RunFailed, json!({ "error": e })));
                    run.error = Some(e);
                }
                End::Tripwire(t) => {
                    run.status = RunStatus::Tripwire;
                    cmds.push(emit(EventKind::RunTripwire, json!({ "tripwire": t })));
                    run.tripwire = Some(t);
                }
                End::Cancelled => {
                    run.status = RunStatus::Cancelled;
                    cmds.push(emit(EventKind::RunCancelled, json!({})));
                }
            }
        }
    }
}

/// Settles a parallel or branch once no arm runs (S19, S20, S22).
pub(crate) fn finish_arms(node: &mut Node, entry: &EntryDef, frame: &Frame, cx: &mut Cx) {
    let arms: Vec<&Node> = match &node.kind {
        NodeKind::Parallel(arms) => arms.iter().collect(),
        NodeKind::Branch(arms) => arms.iter().flatten().collect(),
        _ => return,
    };
    if arms
        .iter()
        .any(|a| matches!(a.phase, Phase::New | Phase::Running))
    {
        node.phase = Phase::Running;
        return;
    }
    let end = settle_ends(arms.iter().map(|a| &a.phase), frame, cx);
    let end = match end {
        Settled::Suspended => {
            node.phase = Phase::Suspended;
            return;
        }
        Settled::End(end) => end,
        Settled::AllSucceeded => {
            let mut out = Map::new();
            for arm in &arms {
                if let Phase::Done(End::Success(v)) = &arm.phase {
                    out.insert(cx.graph.entry(arm.entry).id.clone(), Value::clone(v));
                }
            }
            End::Success(Value::Object(out).into())
        }
    };
    cancel_suspended_in(node, frame, cx);
    end_node(node, entry, frame, cx, end);
}

/// How settled siblings (arms, items) combine.
pub(crate) enum Settled {
    /// None ended otherwise, and one is suspended.
    Suspended,
    /// The block ends so.
    End(End),
    /// Every one succeeded.
    AllSucceeded,
}

/// The precedence of S19 over settled siblings: tripwire, failed, bail, suspended, success.
pub(crate) fn settle_ends<'p>(
    phases: impl Iterator<Item = &'p Phase> + Clone,
    frame: &Frame,
    cx: &Cx,
) -> Settled {
    if cx.cancelling {
        return Settled::End(End::Cancelled);
    }
    for p in phases.clone() {
        if let Phase::Done(End::Tripwire(t)) = p {
            return Settled::End(End::Tripwire(t.clone()));
        }
    }
    for p in phases.clone() {
        if let Phase::Done(End::Failed(e)) = p {
            return Settled::End(End::Failed(e.clone()));
        }
    }
    if phases
        .clone()
        .any(|p| matches!(p, Phase::Done(End::Bail(_))))
        || cx.bailed(frame).is_some()
    {
        let v = cx.bailed(frame).unwrap_or(Value::Null);
        return Settled::End(End::Bail(v.into()));
    }
    if phases.clone().any(|p| matches!(p, Phase::Suspended)) {
        return Settled::Suspended;
    }
    if phases
        .clone()
        .any(|p| matches!(p, Phase::Done(End::Cancelled)))
    {
        return Settled::End(End::Cancelled);
    }
    Settled::AllSucceeded
}
