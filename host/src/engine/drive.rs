//! The drive pass: sequences move on entry by entry, nodes dispatch to their construct's
//! machine, and the shared start and end of every execution (records, events, `.steps`).

use std::sync::Arc;

use serde_json::{Value, json};

use super::commands::EventKind;
use super::context::{Cx, Frame, object_of};
use super::event_data::EventData;
use super::machines;
use super::model::{EntryDef, EntryId, EntryKind, Graph};
use super::nodes::{End, ListRef, Node, NodeKind, Phase, Seq};
use super::records::StepStatus;

/// The entries of a list of the graph.
fn list_entries(graph: &Graph, list: ListRef) -> &[EntryId] {
    match list {
        ListRef::File(f) => &graph.file(f).body,
        ListRef::Body(e) => match &graph.entry(e).kind {
            EntryKind::Foreach { body, .. }
            | EntryKind::Loop { body, .. }
            | EntryKind::Group { body } => body,
            _ => &[],
        },
    }
}

/// Drives a sequence: its current entry, then the next ones while each succeeds (S1).
pub(crate) fn drive_seq(seq: &mut Seq, frame: &Frame, cx: &mut Cx) {
    if matches!(seq.phase, Phase::Done(_)) {
        return;
    }
    loop {
        drive_node(&mut seq.current, frame, cx);
        match &mut seq.current.phase {
            Phase::New | Phase::Running => {
                seq.phase = Phase::Running;
                return;
            }
            Phase::Suspended => {
                seq.phase = Phase::Suspended;
                return;
            }
            Phase::Done(End::Success(v)) => {
                let list = list_entries(cx.graph, seq.list);
                let next = seq.pos as usize + 1;
                if next < list.len() {
                    if cx.cancelling {
                        seq.phase = Phase::Done(End::Cancelled);
                        return;
                    }
                    if let Some(b) = cx.bailed(frame) {
                        seq.phase = Phase::Done(End::Bail(b.into()));
                        return;
                    }
                    // The ended node is replaced: its output moves on as the next one's input.
                    let input = Arc::clone(v);
                    seq.pos = next as u32;
                    *seq.current = Node::new(list[next], input);
                    continue;
                }
                seq.phase = Phase::Done(End::Success(v.clone()));
                return;
            }
            Phase::Done(end) => {
                seq.phase = Phase::Done(end.clone());
                return;
            }
        }
    }
}

/// Drives one execution by its entry's kind.
pub(crate) fn drive_node(node: &mut Node, frame: &Frame, cx: &mut Cx) {
    if matches!(node.phase, Phase::Done(_)) {
        return;
    }
    let entry = cx.graph.entry(node.entry);
    match &entry.kind {
        EntryKind::Step(def) => machines::step::drive_step(node, entry, def, frame, cx),
        EntryKind::Map { expr } => machines::map::drive_map(node, entry, expr, frame, cx),
        EntryKind::Sleep { ms, until } => {
            machines::sleep::drive_sleep(node, entry, *ms, until.as_ref(), frame, cx)
        }
        EntryKind::Parallel { arms } => {
            machines::parallel::drive_parallel(node, entry, arms, frame, cx)
        }
        EntryKind::Branch { arms } => machines::branch::drive_branch(node, entry, arms, frame, cx),
        EntryKind::Foreach { concurrency, .. } => {
            machines::foreach::drive_foreach(node, entry, *concurrency, frame, cx)
        }
        EntryKind::Loop {
            test,
            until,
            max_iterations,
            ..
        } => machines::loops::drive_loop(node, entry, test, *until, *max_iterations, frame, cx),
        EntryKind::Workflow { file } => {
            machines::nested::drive_nested(node, entry, *file, frame, cx)
        }
        EntryKind::Group { body } => machines::branch::drive_group(node, entry, body, frame, cx),
        EntryKind::Agent(def) => machines::agent::drive_agent(node, entry, def, frame, cx),
    }
}

/// Moves a node that holds one sequence (a group, a nested file) along with it.
pub(crate) fn follow_seq(node: &mut Node, entry: &EntryDef, frame: &Frame, cx: &mut Cx) {
    let phase = match &node.kind {
        NodeKind::Nested(seq) | NodeKind::Loop { body: seq, .. } => seq.phase.clone(),
        _ => return,
    };
    match phase {
        Phase::New | Phase::Running => node.phase = Phase::Running,
        Phase::Suspended => node.phase = Phase::Suspended,
        Phase::Done(end) => end_node(node, entry, frame, cx, end),
    }
}

/// Starts a block (any entry but a step): its record and, outside items, `step-started` (S90).
pub(crate) fn start_block(node: &mut Node, entry: &EntryDef, frame: &Frame, cx: &mut Cx) {
    if node.phase != Phase::New {
        return;
    }
    node.phase = Phase::Running;
    cx.record_start(frame, entry, &node.input);
    if !frame.in_item {
        cx.emit(
            frame,
            EventKind::StepStarted,
            &entry.path,
            EventData::Keyed("input", Arc::clone(&node.input)),
        );
    }
}

/// Ends an execution: its record, its closing event, and what `.steps` sees (S79, S89, S90).
pub(crate) fn end_node(node: &mut Node, entry: &EntryDef, frame: &Frame, cx: &mut Cx, end: End) {
    let now = cx.ts();
    let is_step = matches!(entry.kind, EntryKind::Step(_));
    match &end {
        End::Success(v) | End::Bail(v) => {
            let bailed = is_step && matches!(end, End::Bail(_));
            cx.record(frame, entry, |rec, item| {
                rec.status = StepStatus::Success;
                rec.ended_at = Some(now);
                if let Some(item) = item {
                    item.status = StepStatus::Success;
                    item.output = Some(Arc::clone(v));
                } else {
                    rec.output = Some(Arc::clone(v));
                }
                if bailed {
                    rec.bail = Some(true);
                }
            });
            cx.register(frame, entry, v);
            if !frame.in_item {
                let data = if bailed {
                    let mut data = object_of("output", Value::clone(v));
                    data["bail"] = Value::Bool(true);
                    EventData::Value(data)
                } else {
                    EventData::Keyed("output", Arc::clone(v))
                };
                cx.emit(frame, EventKind::StepSucceeded, &entry.path, data);
            }
        }
        End::Failed(e) => {
            cx.record(frame, entry, |rec, item| {
                rec.status = StepStatus::Failed;
                rec.ended_at = Some(now);
                if let Some(item) = item {
                    item.status = StepStatus::Failed;
                    item.error = Some(e.clone());
                } else {
                    rec.error = Some(e.clone());
                }
            });
            if !frame.in_item {
                cx.emit(
                    frame,
                    EventKind::StepFailed,
                    &entry.path,
                    json!({ "error": e }),
                );
            }
        }
        End::Tripwire(t) => {
            cx.record(frame, entry, |rec, item| {
                rec.status = StepStatus::Failed;
                rec.ended_at = Some(now);
                rec.tripwire = Some(t.clone());
                if let Some(item) = item {
                    item.status = StepStatus::Failed;
                }
            });
            if !frame.in_item {
                let error = cx.records.get(&entry.path).and_then(|r| r.error.clone());
                let mut data = json!({ "tripwire": t });
                if let Some(error) = error {
                    data["error"] = json!(error);
                }
                cx.emit(frame, EventKind::StepFailed, &entry.path, data);
            }
        }
        End::Cancelled => mark_cancelled(frame, entry, cx, now),
    }
    node.phase = Phase::Done(end);
}

/// The first entry of a block's `do:` body.
pub(crate) fn first_body(graph: &Graph, entry: EntryId) -> EntryId {
    list_entries(graph, ListRef::Body(entry))[0]
}

/// Marks an execution's record (inside an item, its item) `cancelled` and emits
/// `step-cancelled`, inside items too, with the item and iteration like every step event: the
/// one closing event of an execution a cancel or the end of the run around it ends (S74, S76).
pub(crate) fn mark_cancelled(frame: &Frame, entry: &EntryDef, cx: &mut Cx, now: String) {
    cx.record(frame, entry, |rec, item| {
        rec.status = StepStatus::Cancelled;
        rec.ended_at = Some(now);
        if let Some(item) = item {
            item.status = StepStatus::Cancelled;
        }
    });
    cx.emit(frame, EventKind::StepCancelled, &entry.path, json!({}));
}

/// Marks an execution's record (inside an item, its item) `suspended` with `payload` and
/// `labels`, and emits `step-suspended` (S63, S65).
pub(crate) fn mark_suspended(
    frame: &Frame,
    entry: &EntryDef,
    cx: &mut Cx,
    payload: &Value,
    labels: &[String],
) {
    let now = cx.ts();
    cx.record(frame, entry, |rec, item| {
        rec.status = StepStatus::Suspended;
        rec.suspend_payload = Some(payload.clone());
        rec.labels = Some(labels.to_vec());
        rec.suspended_at = Some(now);
        if let Some(item) = item {
            item.status = StepStatus::Suspended;
        }
    });
    cx.emit(
        frame,
        EventKind::StepSuspended,
        &entry.path,
        json!({ "payload": payload, "labels": labels }),
    );
}
