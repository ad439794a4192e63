//! The foreach machine: items in index order, at most `concurrency` in progress (S25–S31).
//!
//! ## Transitions of `foreach`
//!
//! | Row | From | Event or condition | To | Issues |
//! |-----|------|--------------------|----|--------|
//! | `start` | new | its input is an array with items | running | record, `step-started` |
//! | `empty` | new | its input is an empty array (S25) | succeeded | record, `step-started`, `step-succeeded` with `[]` |
//! | `not-an-array` | new | its input is not an array (S25) | failed | record, `step-started`, `step-failed` (`not-an-array`) |
//! | `item-start` | running | a slot is free, an item waits, and no failure, bail or cancel stops more (S26, S28) | running | the item's body starts with its element |
//! | `item-suspended` | running | an item's body suspended, not reported yet | running | `step-progress` `suspended` |
//! | `item-ended` | running | an item's body ended (S27) | running | `step-progress` with its output, error or tripwire (none when cancelled); a failure, tripwire or bail stops further items (S28) |
//! | `wait` | running, suspended | after a pass, an item still runs | running | — |
//! | `suspend` | running | no item runs, one is suspended and none ended otherwise | suspended | nothing (S90) |
//! | `succeed` | running, suspended | every item succeeded (S27) | succeeded | record, `step-succeeded` with the outputs in index order, `.steps` |
//! | `end` | running, suspended | no item runs and one ended otherwise, or a cancel: tripwire, then failure, then bail, the lowest index first (S19, S28) | as that item | the items' scopes dropped, suspended items `step-cancelled`; record, the closing event |
//!
//! Each row is marked where the code takes it (`transition!`, see `engine::transitions`).

use serde_json::{Map, Value, json};

use crate::engine::cancel::cancel_suspended_in;
use crate::engine::commands::EventKind;
use crate::engine::context::{Cx, Frame};
use crate::engine::drive::drive_seq;
use crate::engine::lifecycle::{end_node, start_block};
use crate::engine::model::{EntryDef, EntryKind};
use crate::engine::nodes::{End, ForeachNode, Item, ListRef, Node, NodeKind, Phase, Seq};
use crate::engine::settle::{Settled, settle_ends};
use crate::engine::transitions::transition;

/// Starts items in index order while slots are free, drives those in progress, and settles
/// the foreach once none runs (S26–S28).
pub(crate) fn drive(node: &mut Node, entry: &EntryDef, frame: &Frame, cx: &mut Cx) {
    let EntryKind::Foreach { concurrency, body } = &entry.kind else {
        return;
    };
    if node.phase == Phase::New {
        start_block(node, entry, frame, cx);
        let len = match &*node.input {
            Value::Array(a) => a.len(),
            other => {
                transition!("foreach", "not-an-array");
                let err = cx.error(
                    frame,
                    &entry.path,
                    "not-an-array",
                    format!(
                        "foreach {}: input must be an array, got {}",
                        entry.path,
                        json_type(other)
                    ),
                );
                end_node(node, entry, frame, cx, End::Failed(err));
                return;
            }
        };
        if len == 0 {
            transition!("foreach", "empty");
            end_node(node, entry, frame, cx, End::Success(json!([]).into()));
            return;
        }
        transition!("foreach", "start");
        node.kind = NodeKind::Foreach(ForeachNode {
            items: vec![Item::Pending; len],
            done: 0,
            started: 0,
            active: Vec::new(),
            stopped: false,
        });
    }
    let NodeKind::Foreach(fe) = &mut node.kind else {
        return;
    };
    let total = fe.items.len();
    let item_frame = |i: usize| {
        let mut f = frame.clone();
        f.scopes
            .insert(0, format!("{}/{}#{i}", frame.scopes[0], entry.path));
        f.foreach_index = Some(i as u32);
        f.in_item = true;
        f
    };
    loop {
        let mut at = 0;
        while at < fe.active.len() {
            let i = fe.active[at] as usize;
            let Item::Active {
                body: seq,
                reported_suspended,
            } = &mut fe.items[i]
            else {
                fe.active.remove(at);
                continue;
            };
            let waiting = seq.current.phase != Phase::New
                && (seq.phase == Phase::Running || *reported_suspended);
            if waiting && !cx.touches(seq) {
                at += 1;
                continue;
            }
            let f = item_frame(i);
            drive_seq(seq, &f, cx);
            match &seq.phase {
                Phase::New | Phase::Running => *reported_suspended = false,
                Phase::Suspended => {
                    if !*reported_suspended {
                        transition!("foreach", "item-suspended");
                        *reported_suspended = true;
                        let done = fe.done;
                        cx.emit(
                            frame,
                            EventKind::StepProgress,
                            &entry.path,
                            json!({"index": i, "status": "suspended", "done": done, "total": total}),
                        );
                    }
                }
                Phase::Done(_) => {
                    // The item's body is done with: take its end rather than copy it.
                    let end = match std::mem::replace(&mut fe.items[i], Item::Pending) {
                        Item::Active {
                            body:
                                Seq {
                                    phase: Phase::Done(end),
                                    ..
                                },
                            ..
                        } => end,
                        // Not reached: matched as an active item whose body is done just above.
                        other => {
                            fe.items[i] = other;
                            at += 1;
                            continue;
                        }
                    };
                    transition!("foreach", "item-ended");
                    if matches!(end, End::Success(_)) {
                        fe.done += 1;
                    }
                    let progress = match &end {
                        End::Success(v) | End::Bail(v) => {
                            Some(("success", "output", Value::clone(v)))
                        }
                        End::Failed(e) => Some(("failed", "error", json!(e))),
                        End::Tripwire(t) => Some(("failed", "tripwire", json!(t))),
                        End::Cancelled => None,
                    };
                    if let Some((status, key, value)) = progress {
                        // One map of the final size, keys in the order they are written.
                        let mut data = Map::with_capacity(5);
                        data.insert("index".into(), i.into());
                        data.insert("total".into(), total.into());
                        data.insert("status".into(), status.into());
                        data.insert(key.into(), value);
                        data.insert("done".into(), fe.done.into());
                        cx.emit(
                            frame,
                            EventKind::StepProgress,
                            &entry.path,
                            Value::Object(data),
                        );
                    }
                    fe.stopped |= matches!(end, End::Failed(_) | End::Tripwire(_) | End::Bail(_));
                    fe.items[i] = Item::Done(end);
                    fe.active.remove(at);
                    continue;
                }
            }
            at += 1;
        }
        let blocked = cx.cancelling || cx.bailed(frame).is_some() || fe.stopped;
        let slots = ((*concurrency).max(1) as usize).saturating_sub(fe.active.len());
        let mut started = 0;
        if !blocked {
            let Value::Array(elements) = &*node.input else {
                return;
            };
            while started < slots && (fe.started as usize) < total {
                transition!("foreach", "item-start");
                let i = fe.started as usize;
                fe.items[i] = Item::Active {
                    body: Seq::new(ListRef::Body(node.entry), body[0], elements[i].clone()),
                    reported_suspended: false,
                };
                fe.active.push(fe.started);
                fe.started += 1;
                started += 1;
            }
        }
        if started == 0 {
            break;
        }
    }
    let running = fe.active.iter().any(|&i| {
        matches!(&fe.items[i as usize], Item::Active { body, .. } if matches!(body.phase, Phase::Running | Phase::New))
    });
    if running {
        transition!("foreach", "wait");
        node.phase = Phase::Running;
        return;
    }
    let phases: Vec<Phase> = fe
        .items
        .iter()
        .map(|it| match it {
            Item::Pending => Phase::New,
            Item::Active { body, .. } => body.phase.clone(),
            Item::Done(end) => Phase::Done(end.clone()),
        })
        .collect();
    let pending = phases.contains(&Phase::New);
    let settled = settle_ends(phases.iter().filter(|p| **p != Phase::New), frame, cx);
    let end = match settled {
        Settled::Suspended => {
            transition!("foreach", "suspend");
            node.phase = Phase::Suspended;
            return;
        }
        Settled::AllSucceeded if pending && cx.cancelling => End::Cancelled,
        Settled::AllSucceeded if pending => {
            // Cannot happen: free slots start pending items. Stay running rather than lose them.
            node.phase = Phase::Running;
            return;
        }
        Settled::AllSucceeded => {
            transition!("foreach", "succeed");
            End::Success(
                Value::Array(
                    fe.items
                        .iter()
                        .map(|it| match it {
                            Item::Done(End::Success(v)) => Value::clone(v),
                            _ => Value::Null,
                        })
                        .collect(),
                )
                .into(),
            )
        }
        Settled::End(end) => {
            transition!("foreach", "end");
            end
        }
    };
    let prefix = format!("{}/{}#", frame.scopes[0], entry.path);
    cx.results.retain(|k, _| !k.starts_with(&prefix));
    cancel_suspended_in(node, frame, cx);
    end_node(node, entry, frame, cx, end);
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The scenarios of this file: its tests, and a part of the corpus the machines' transition
/// tables are checked against (`engine::transitions`).
#[cfg(test)]
pub(crate) mod tests {
    use serde_json::{Value, json};

    use crate::engine::sim::{Answer, Sim, done, fail, file, foreach, sleep_ms, step, suspend};
    use crate::engine::transitions::scenarios;
    use crate::engine::{EventKind, RunStatus, StepStatus};

    fn items(concurrency: u32) -> crate::engine::sim::FileSpec {
        file("w", vec![foreach("f", concurrency, vec![step("s")])])
    }

    fn indexes(sim: &Sim) -> Vec<Option<u32>> {
        sim.calls_to("f.s")
            .iter()
            .map(|c| c.foreach_index)
            .collect()
    }

    #[test]
    fn s26_items_start_in_index_order_and_concurrency_bounds_those_in_progress() {
        let sim = Sim::new(items(2), json!([10, 11, 12, 13, 14])).started();
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(sim.max_in_flight, 2);
        assert_eq!(indexes(&sim), [Some(0), Some(1), Some(2), Some(3), Some(4)]);
        let inputs: Vec<_> = sim
            .calls_to("f.s")
            .iter()
            .map(|c| Value::clone(&c.input))
            .collect();
        assert_eq!(
            inputs,
            [json!(10), json!(11), json!(12), json!(13), json!(14)]
        );
    }

    #[test]
    fn s26_a_suspended_item_holds_its_slot_so_concurrency_one_runs_items_strictly_in_turn() {
        let mut sim = Sim::new(items(1), json!(["a", "b"]))
            .on_call("f.s", |call| match (call.foreach_index, &call.resume) {
                (Some(0), None) => suspend(json!({}), &[]),
                _ => done(Value::clone(&call.input)),
            })
            .started();
        assert_eq!(sim.status(), RunStatus::Suspended);
        assert_eq!(indexes(&sim), [Some(0)], "item 1 waits for item 0's slot");
        sim.resume(Some("f.s"), None, Some(0), json!({}))
            .expect("resumed");
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(indexes(&sim), [Some(0), Some(0), Some(1)]);
    }

    #[test]
    fn s27_element_i_of_the_output_is_item_is_output_whatever_order_items_finish_in() {
        let mut sim = Sim::new(items(3), json!([1, 2, 3]))
            .on_call("f.s", |call| match call.foreach_index {
                Some(0) => Answer::Hold,
                _ => done(json!(call.input.as_i64().unwrap_or_default() * 10)),
            })
            .started();
        assert_eq!(sim.in_flight(), ["f.s"]);
        sim.answer("f.s", Some(0), done(json!(10)));
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(
            sim.record("f").output.as_deref(),
            Some(&json!([10, 20, 30]))
        );
        let progress: Vec<_> = sim
            .events
            .iter()
            .filter(|t| t.kind == EventKind::StepProgress)
            .map(|t| t.data["index"].clone())
            .collect();
        assert_eq!(progress, [json!(1), json!(2), json!(0)]);
    }

    #[test]
    fn s28_a_failed_item_stops_further_items_those_in_progress_end_and_the_lowest_index_wins() {
        let mut sim = Sim::new(items(2), json!([0, 1, 2, 3]))
            .on_call("f.s", |call| match call.foreach_index {
                Some(0) => Answer::Hold,
                _ => fail("one"),
            })
            .started();
        assert_eq!(sim.status(), RunStatus::Running, "item 0 runs to its end");
        sim.answer("f.s", Some(0), fail("zero"));
        assert_eq!(sim.status(), RunStatus::Failed);
        assert_eq!(indexes(&sim), [Some(0), Some(1)], "no further item starts");
        let error = sim.run.error.as_ref().expect("an error");
        assert_eq!(
            (error.code.as_str(), error.foreach_index),
            ("zero", Some(0))
        );
        let rec = sim.record("f.s");
        let statuses: Vec<_> = rec
            .items
            .iter()
            .flatten()
            .map(|i| (i.index, i.status))
            .collect();
        assert_eq!(statuses, [(0, StepStatus::Failed), (1, StepStatus::Failed)]);
    }

    #[test]
    fn s26_an_item_moves_on_its_own_timer_or_result_while_the_others_in_progress_wait() {
        // A pass drives only the items its event touches: each item's sleep, retry wait and
        // invocation must still move it, whichever order they end in.
        let body = vec![sleep_ms("z", 100), step("s").retry(2, 50, 1.0, None)];
        let mut sim = Sim::new(file("w", vec![foreach("f", 3, body)]), json!([1, 2, 3, 4]))
            .on_call("f.s", |call| match (call.foreach_index, call.attempt) {
                (Some(1), _) => Answer::Hold,
                (_, 0) => fail("flaky"),
                _ => done(json!(call.input.as_i64().unwrap_or_default() * 10)),
            })
            .started();
        assert_eq!(sim.status(), RunStatus::Running);
        assert_eq!(sim.in_flight(), ["f.s"], "only item 1's invocation is held");
        sim.answer("f.s", Some(1), done(json!(20)));
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(
            sim.record("f").output.as_deref(),
            Some(&json!([10, 20, 30, 40]))
        );
        let attempts = |i: u32| {
            sim.calls_to("f.s")
                .iter()
                .filter(|c| c.foreach_index == Some(i))
                .count()
        };
        assert_eq!(
            [attempts(0), attempts(1), attempts(2), attempts(3)],
            [2, 1, 2, 2]
        );
    }

    #[test]
    fn s25_an_input_that_is_not_an_array_fails_and_an_empty_one_succeeds_with_no_items() {
        let sim = Sim::new(items(1), json!({"not": "array"})).started();
        assert_eq!(
            sim.run.error.as_ref().map(|e| e.code.as_str()),
            Some("not-an-array")
        );
        let sim = Sim::new(items(1), json!([])).started();
        assert_eq!(sim.run.result, Some(json!([])));
        assert!(sim.calls.is_empty());
    }

    /// Every test above, by name.
    pub(crate) const SCENARIOS: &[(&str, fn())] = scenarios![
        s26_items_start_in_index_order_and_concurrency_bounds_those_in_progress,
        s26_a_suspended_item_holds_its_slot_so_concurrency_one_runs_items_strictly_in_turn,
        s27_element_i_of_the_output_is_item_is_output_whatever_order_items_finish_in,
        s28_a_failed_item_stops_further_items_those_in_progress_end_and_the_lowest_index_wins,
        s26_an_item_moves_on_its_own_timer_or_result_while_the_others_in_progress_wait,
        s25_an_input_that_is_not_an_array_fails_and_an_empty_one_succeeds_with_no_items,
    ];
}
