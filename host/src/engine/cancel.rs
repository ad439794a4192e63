//! Cancel: what a cancel stops at once, and how suspended executions end `cancelled`
//! (S74, S76–S78).

use super::context::{Cx, Frame};
use super::lifecycle::mark_cancelled;
use super::machines::agent::cancel_approvals;
use super::nodes::{End, Item, Node, NodeKind, Phase, Seq, StepNode, StepWait};
use super::visit::visit_seq;

/// The tokens of the invocations under way in `root`: a cancel aborts them (S76).
pub(crate) fn in_flight(root: &Seq) -> Vec<u64> {
    let mut tokens = Vec::new();
    visit_seq(root, None, &mut |node, _| {
        if let NodeKind::Step(StepNode {
            wait: StepWait::Invocation { token, .. },
            ..
        }) = &node.kind
        {
            tokens.push(*token);
        }
    });
    tokens
}

/// Marks every suspended execution under `node`, which sits at `frame`, `cancelled` (S74).
pub(crate) fn cancel_suspended_in(node: &mut Node, frame: &Frame, cx: &mut Cx) {
    let now = cx.ts();
    cancel_children(node, frame, &now, cx);
}

/// Cancels the suspended executions directly under `node` (and, through them, below), each at
/// its own item and iteration.
fn cancel_children(node: &mut Node, frame: &Frame, now: &str, cx: &mut Cx) {
    match &mut node.kind {
        NodeKind::Step(s) => s.wait = StepWait::Nothing,
        NodeKind::Parallel(arms) => arms.iter_mut().for_each(|a| cancel_node(a, frame, now, cx)),
        NodeKind::Branch(arms) => arms
            .iter_mut()
            .flatten()
            .for_each(|a| cancel_node(a, frame, now, cx)),
        NodeKind::Foreach(fe) => {
            for (i, item) in fe.items.iter_mut().enumerate() {
                if let Item::Active { body, .. } = item {
                    let mut f = frame.clone();
                    f.foreach_index = Some(i as u32);
                    f.in_item = true;
                    cancel_seq(body, &f, now, cx);
                    *item = Item::Done(End::Cancelled);
                }
            }
        }
        NodeKind::Loop { iteration, body } => {
            let mut f = frame.clone();
            f.iteration = Some(*iteration);
            cancel_seq(body, &f, now, cx);
        }
        NodeKind::Nested(body) => cancel_seq(body, frame, now, cx),
        NodeKind::Agent(_) => cancel_approvals(node, frame, cx),
        NodeKind::Plain | NodeKind::Sleep { .. } => {}
    }
}

fn cancel_seq(seq: &mut Seq, frame: &Frame, now: &str, cx: &mut Cx) {
    if seq.phase == Phase::Suspended {
        cancel_node(&mut seq.current, frame, now, cx);
        seq.phase = Phase::Done(End::Cancelled);
    }
}

/// Ends a suspended execution `cancelled`, with everything suspended inside it first.
fn cancel_node(node: &mut Node, frame: &Frame, now: &str, cx: &mut Cx) {
    if node.phase != Phase::Suspended {
        return;
    }
    cancel_children(node, frame, now, cx);
    node.phase = Phase::Done(End::Cancelled);
    let entry = cx.graph.entry(node.entry);
    mark_cancelled(frame, entry, cx, now.to_owned());
}

/// The scenarios of this file: its tests, and a part of the corpus the machines' transition
/// tables are checked against (`engine::transitions`).
#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::super::sim::{
        Answer, Sim, done, fail, file, foreach, parallel, sleep_ms, step, suspend,
    };
    use super::super::transitions::scenarios;
    use super::super::{Event, EventKind, RunStatus, StepStatus};

    #[test]
    fn s76_s77_a_cancel_aborts_running_invocations_and_discards_what_they_return() {
        let mut sim = Sim::new(file("w", vec![step("a"), step("b")]), json!({}))
            .on("a", [Answer::Hold])
            .started();
        let token = *sim.in_flight_tokens().iter().next().expect("a runs");
        sim.feed(Event::Cancel {
            at: sim.now,
            failure: None,
        })
        .expect("accepted");
        assert_eq!(sim.aborted, [token]);
        assert_eq!(
            sim.status(),
            RunStatus::Running,
            "the invocation has not returned"
        );
        sim.answer("a", None, done(json!("late")).patch(json!({"k": 1})));
        assert_eq!(sim.status(), RunStatus::Cancelled);
        let rec = sim.record("a");
        assert_eq!(rec.status, StepStatus::Cancelled);
        assert_eq!(rec.output, None, "S77: output discarded");
        assert_eq!(
            *sim.run.files[""].state,
            json!({}),
            "S77: patches discarded"
        );
        assert!(sim.calls_to("b").is_empty(), "S76: nothing new starts");
        assert_eq!(sim.kinds().last(), Some(&EventKind::RunCancelled));
    }

    #[test]
    fn s74_s76_cancelling_a_suspended_run_cancels_its_suspended_steps() {
        let mut sim = Sim::new(
            file("w", vec![parallel("p", vec![step("a"), step("b")])]),
            json!({}),
        )
        .on("p.a", [suspend(json!({}), &[])])
        .on("p.b", [suspend(json!({}), &[])])
        .started();
        assert_eq!(sim.status(), RunStatus::Suspended);
        sim.cancel().expect("accepted");
        assert_eq!(sim.status(), RunStatus::Cancelled);
        assert_eq!(sim.record("p.a").status, StepStatus::Cancelled);
        assert_eq!(sim.record("p.b").status, StepStatus::Cancelled);
        assert_eq!(sim.record("p").status, StepStatus::Cancelled);
        assert!(sim.aborted.is_empty(), "nothing ran");
        assert_eq!(sim.kinds().last(), Some(&EventKind::RunCancelled));
    }

    #[test]
    fn s76_sleeps_and_retry_waits_end_at_once() {
        let mut sim = Sim::new(
            file(
                "w",
                vec![parallel(
                    "p",
                    vec![sleep_ms("z", 60_000), step("a").retry(3, 60_000, 1.0, None)],
                )],
            ),
            json!({}),
        )
        .on("p.a", [fail("x")]);
        sim.feed(Event::Start { at: sim.now }).expect("started");
        sim.drain();
        assert_eq!(sim.record("p.z").status, StepStatus::Waiting);
        assert_eq!(
            sim.timer_waits,
            [60_000, 60_000],
            "the sleep and the retry wait"
        );
        sim.feed(Event::Cancel {
            at: sim.now,
            failure: None,
        })
        .expect("accepted");
        assert_eq!(sim.status(), RunStatus::Cancelled, "no timer needed");
        assert_eq!(sim.record("p.z").status, StepStatus::Cancelled);
        assert_eq!(sim.record("p.a").status, StepStatus::Cancelled);
        assert_eq!(sim.calls_to("p.a").len(), 1, "no retry after a cancel");
    }

    #[test]
    fn s76_no_further_item_starts_after_a_cancel() {
        let mut sim = Sim::new(
            file("w", vec![foreach("f", 1, vec![step("s")])]),
            json!([1, 2, 3]),
        )
        .on("f.s", [Answer::Hold])
        .started();
        sim.cancel().expect("accepted");
        assert_eq!(sim.status(), RunStatus::Cancelled);
        assert_eq!(sim.calls_to("f.s").len(), 1);
        let items: Vec<_> = sim
            .record("f.s")
            .items
            .iter()
            .flatten()
            .map(|i| (i.index, i.status))
            .collect();
        assert_eq!(items, [(0, StepStatus::Cancelled)]);
    }

    #[test]
    fn s75_a_pending_run_is_cancelled_at_once_and_an_ended_one_is_refused() {
        let mut sim = Sim::new(file("w", vec![step("a")]), json!({}));
        sim.cancel().expect("accepted");
        assert_eq!(sim.status(), RunStatus::Cancelled);
        assert_eq!(sim.kinds().first(), Some(&EventKind::RunStarted));
        assert_eq!(sim.kinds().last(), Some(&EventKind::RunCancelled));
        assert!(sim.calls.is_empty(), "S76: nothing is invoked");
        let err = sim.cancel().expect_err("refused");
        assert_eq!(
            err.to_string(),
            "run run has already ended (status: cancelled)"
        );
    }

    /// The `step-cancelled` events: path, item and iteration, in order.
    fn step_cancelled(sim: &Sim) -> Vec<(String, Option<u32>, Option<u32>)> {
        sim.events
            .iter()
            .filter(|t| t.kind == EventKind::StepCancelled)
            .map(|t| {
                (
                    t.path.clone().unwrap_or_default(),
                    t.foreach_index,
                    t.iteration,
                )
            })
            .collect()
    }

    /// Every record (and item record) that says `cancelled`.
    fn cancelled_records(sim: &Sim) -> Vec<(String, Option<u32>)> {
        let mut out = Vec::new();
        for (path, rec) in &sim.run.records {
            match &rec.items {
                Some(items) => out.extend(
                    items
                        .iter()
                        .filter(|i| i.status == StepStatus::Cancelled)
                        .map(|i| (path.clone(), Some(i.index))),
                ),
                None if rec.status == StepStatus::Cancelled => out.push((path.clone(), None)),
                None => {}
            }
        }
        out.sort();
        out
    }

    /// Each cancelled record has exactly one `step-cancelled`, and all come before
    /// `run-cancelled`, which is last.
    fn one_event_per_cancelled_record(sim: &Sim) {
        let mut seen: Vec<_> = step_cancelled(sim)
            .into_iter()
            .map(|(p, i, _)| (p, i))
            .collect();
        seen.sort();
        assert_eq!(seen, cancelled_records(sim));
        assert_eq!(sim.kinds().last(), Some(&EventKind::RunCancelled));
    }

    #[test]
    fn s76_a_cancelled_suspended_step_gets_step_cancelled_with_its_item_and_iteration() {
        let mut sim = Sim::new(
            file(
                "w",
                vec![super::super::sim::do_until(
                    "l",
                    "true",
                    None,
                    vec![foreach("f", 2, vec![step("s")])],
                )],
            ),
            json!([1, 2]),
        )
        .on_call("l.f.s", |_| suspend(json!({}), &[]))
        .started();
        assert_eq!(sim.status(), RunStatus::Suspended);
        sim.cancel().expect("accepted");
        let mut events = step_cancelled(&sim);
        events.sort();
        assert_eq!(
            events,
            [
                ("l".to_owned(), None, None),
                ("l.f".to_owned(), None, Some(1)),
                ("l.f.s".to_owned(), Some(0), Some(1)),
                ("l.f.s".to_owned(), Some(1), Some(1)),
            ]
        );
        one_event_per_cancelled_record(&sim);
    }

    #[test]
    fn s76_s77_a_running_step_cancelled_when_its_invocation_returns_gets_step_cancelled() {
        let mut sim = Sim::new(file("w", vec![step("a")]), json!({}))
            .on("a", [Answer::Hold])
            .started();
        sim.cancel().expect("accepted");
        assert_eq!(
            sim.kinds_of("a"),
            [EventKind::StepStarted, EventKind::StepCancelled]
        );
        one_event_per_cancelled_record(&sim);
    }

    #[test]
    fn s74_steps_cancelled_because_a_sibling_failed_get_step_cancelled_before_the_run_ends() {
        let sim = Sim::new(
            file("w", vec![parallel("p", vec![step("a"), step("b")])]),
            json!({}),
        )
        .on("p.a", [suspend(json!({}), &[])])
        .on("p.b", [fail("boom")])
        .started();
        assert_eq!(sim.status(), RunStatus::Failed);
        assert_eq!(
            sim.kinds_of("p.a"),
            [
                EventKind::StepStarted,
                EventKind::StepSuspended,
                EventKind::StepCancelled
            ]
        );
        assert_eq!(sim.kinds().last(), Some(&EventKind::RunFailed));
    }

    #[test]
    fn s76_sleeps_retry_waits_and_their_blocks_get_step_cancelled() {
        let mut sim = Sim::new(
            file(
                "w",
                vec![parallel(
                    "p",
                    vec![sleep_ms("z", 60_000), step("a").retry(3, 60_000, 1.0, None)],
                )],
            ),
            json!({}),
        )
        .on("p.a", [fail("x")]);
        sim.feed(Event::Start { at: sim.now }).expect("started");
        sim.drain();
        sim.feed(Event::Cancel {
            at: sim.now,
            failure: None,
        })
        .expect("accepted");
        let events: Vec<String> = step_cancelled(&sim).into_iter().map(|(p, ..)| p).collect();
        assert_eq!(events, ["p.z", "p.a", "p"]);
        one_event_per_cancelled_record(&sim);
    }

    #[test]
    fn a_run_the_host_stops_ends_failed_with_its_reason_once_its_steps_have_ended() {
        let mut sim = Sim::new(file("w", vec![step("a"), step("b")]), json!({}))
            .on("a", [Answer::Hold])
            .started();
        let token = *sim.in_flight_tokens().iter().next().expect("a runs");
        let failure = super::super::ErrorInfo {
            message: "run wrote too much".into(),
            code: "run-limit".into(),
            step: "a".into(),
            details: None,
            foreach_index: None,
            iteration: None,
        };
        sim.feed(Event::Cancel {
            at: sim.now,
            failure: Some(failure.clone()),
        })
        .expect("accepted");
        assert_eq!(sim.aborted, [token]);
        assert_eq!(sim.status(), RunStatus::Running, "a has not returned");
        sim.answer("a", None, done(json!("late")));
        assert_eq!(sim.status(), RunStatus::Failed);
        assert_eq!(sim.run.error.as_ref(), Some(&failure));
        assert_eq!(sim.record("a").status, StepStatus::Cancelled);
        assert!(sim.calls_to("b").is_empty(), "nothing new starts");
        assert_eq!(sim.kinds().last(), Some(&EventKind::RunFailed));
    }

    /// Every test above, by name.
    pub(crate) const SCENARIOS: &[(&str, fn())] = scenarios![
        s76_s77_a_cancel_aborts_running_invocations_and_discards_what_they_return,
        s74_s76_cancelling_a_suspended_run_cancels_its_suspended_steps,
        s76_sleeps_and_retry_waits_end_at_once,
        s76_no_further_item_starts_after_a_cancel,
        s75_a_pending_run_is_cancelled_at_once_and_an_ended_one_is_refused,
        s76_a_cancelled_suspended_step_gets_step_cancelled_with_its_item_and_iteration,
        s76_s77_a_running_step_cancelled_when_its_invocation_returns_gets_step_cancelled,
        s74_steps_cancelled_because_a_sibling_failed_get_step_cancelled_before_the_run_ends,
        s76_sleeps_retry_waits_and_their_blocks_get_step_cancelled,
        a_run_the_host_stops_ends_failed_with_its_reason_once_its_steps_have_ended,
    ];
}
