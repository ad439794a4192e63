//! How any execution starts and ends: its record, its opening and closing events, and what
//! `.steps` sees of its output. Every machine (and a cancel, and the settling of siblings)
//! opens and closes executions only through these, so records and events stay alike for every
//! construct (S79, S89, S90).

use std::sync::Arc;

use serde_json::{Value, json};

use super::commands::EventKind;
use super::context::{Cx, Frame};
use super::event_data::{EventData, object_of};
use super::model::{EntryDef, EntryKind};
use super::nodes::{End, Node, Phase};
use super::records::StepStatus;

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
