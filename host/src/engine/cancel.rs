//! Cancel: what a cancel stops at once, and how suspended executions end `cancelled`
//! (S74, S76–S78).

use super::context::Cx;
use super::nodes::{End, Item, Node, NodeKind, Phase, Seq, StepNode, StepWait};
use super::records::StepStatus;
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

/// Marks every suspended execution under `node` `cancelled` (S74).
pub(crate) fn cancel_suspended_in(node: &mut Node, cx: &mut Cx) {
    let now = cx.ts();
    cancel_children(node, &now, cx);
}

/// Cancels the suspended executions directly under `node` (and, through them, below).
fn cancel_children(node: &mut Node, now: &str, cx: &mut Cx) {
    match &mut node.kind {
        NodeKind::Step(s) => s.wait = StepWait::Nothing,
        NodeKind::Parallel(arms) => arms.iter_mut().for_each(|a| cancel_node(a, now, cx)),
        NodeKind::Branch(arms) => arms
            .iter_mut()
            .flatten()
            .for_each(|a| cancel_node(a, now, cx)),
        NodeKind::Foreach(fe) => {
            for item in fe.items.iter_mut() {
                if let Item::Active { body, .. } = item {
                    cancel_seq(body, now, cx);
                    *item = Item::Done(End::Cancelled);
                }
            }
        }
        NodeKind::Loop { body, .. } | NodeKind::Nested(body) => cancel_seq(body, now, cx),
        NodeKind::Plain | NodeKind::Sleep { .. } => {}
    }
}

fn cancel_seq(seq: &mut Seq, now: &str, cx: &mut Cx) {
    if seq.phase == Phase::Suspended {
        cancel_node(&mut seq.current, now, cx);
        seq.phase = Phase::Done(End::Cancelled);
    }
}

/// Ends a suspended execution `cancelled`, with everything suspended inside it.
fn cancel_node(node: &mut Node, now: &str, cx: &mut Cx) {
    if node.phase != Phase::Suspended {
        return;
    }
    cancel_children(node, now, cx);
    node.phase = Phase::Done(End::Cancelled);
    let path = &cx.graph.entry(node.entry).path;
    if let Some(rec) = cx.records.get_mut(path) {
        if let Some(items) = &mut rec.items {
            for item in items
                .iter_mut()
                .filter(|i| i.status == StepStatus::Suspended)
            {
                item.status = StepStatus::Cancelled;
            }
        }
        rec.status = StepStatus::Cancelled;
        rec.ended_at = Some(now.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::sim::{
        Answer, Sim, done, fail, file, foreach, parallel, sleep_ms, step, suspend,
    };
    use super::super::{Event, EventKind, RunStatus, StepStatus};

    #[test]
    fn s76_s77_a_cancel_aborts_running_invocations_and_discards_what_they_return() {
        let mut sim = Sim::new(file("w", vec![step("a"), step("b")]), json!({}))
            .on("a", [Answer::Hold])
            .started();
        let token = *sim.in_flight_tokens().iter().next().expect("a runs");
        sim.feed(Event::Cancel { at: sim.now }).expect("accepted");
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
        assert_eq!(sim.run.files[""].state, json!({}), "S77: patches discarded");
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
        sim.feed(Event::Cancel { at: sim.now }).expect("accepted");
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
}
