//! The parallel machine: every arm at once, settled by the precedence of S19 (S18–S20).
//!
//! ## Transitions of `parallel`
//!
//! | Row | From | Event or condition | To | Issues |
//! |-----|------|--------------------|----|--------|
//! | `start` | new | the pass reaches it | running | record, `step-started`; every arm starts with its input |
//! | `wait` | running, suspended | after a pass, an arm still runs | running | — |
//! | `suspend` | running | no arm runs, one is suspended and none ended otherwise (S20) | suspended | nothing (S90) |
//! | `succeed` | running, suspended | every arm succeeded (S18) | succeeded | record, `step-succeeded` with each arm's output by id, `.steps` |
//! | `end` | running, suspended | no arm runs and one ended otherwise, or a cancel: tripwire, then failure, then bail (S19) | as that arm | suspended arms `step-cancelled` (S74); record, the closing event |
//!
//! Each row is marked where the code takes it (`transition!`, see `engine::transitions`).

use crate::engine::context::{Cx, Frame};
use crate::engine::drive::drive_node;
use crate::engine::lifecycle::start_block;
use crate::engine::model::{EntryDef, EntryKind};
use crate::engine::nodes::{Node, NodeKind, Phase};
use crate::engine::settle::finish_arms;
use crate::engine::transitions::transition;

/// Starts every arm with the parallel's input, drives them, and settles once none runs.
pub(crate) fn drive(node: &mut Node, entry: &EntryDef, frame: &Frame, cx: &mut Cx) {
    let EntryKind::Parallel { arms } = &entry.kind else {
        return;
    };
    if node.phase == Phase::New {
        transition!("parallel", "start");
        start_block(node, entry, frame, cx);
        node.kind = NodeKind::Parallel(
            arms.iter()
                .map(|a| Node::new(*a, node.input.clone()))
                .collect(),
        );
    }
    let NodeKind::Parallel(arms) = &mut node.kind else {
        return;
    };
    for arm in arms.iter_mut() {
        drive_node(arm, frame, cx);
    }
    finish_arms(node, entry, frame, cx);
    // The row this pass took, by where it left the execution.
    #[cfg(test)]
    match &node.phase {
        Phase::New | Phase::Running => transition!("parallel", "wait"),
        Phase::Suspended => transition!("parallel", "suspend"),
        Phase::Done(crate::engine::nodes::End::Success(_)) => transition!("parallel", "succeed"),
        Phase::Done(_) => transition!("parallel", "end"),
    }
}

/// The scenarios of this file: its tests, and a part of the corpus the machines' transition
/// tables are checked against (`engine::transitions`).
#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use crate::engine::sim::{
        Answer, Sim, bail, done, fail, file, group, parallel, sleep_ms, step, suspend, trip,
    };
    use crate::engine::transitions::scenarios;
    use crate::engine::{EventKind, RunStatus, StepStatus};

    fn two_arms() -> crate::engine::sim::FileSpec {
        file(
            "w",
            vec![parallel("p", vec![step("a"), step("b")]), step("next")],
        )
    }

    #[test]
    fn s18_arms_run_at_once_and_the_output_holds_each_arms_output_by_id() {
        let sim = Sim::new(two_arms(), json!({"n": 1}))
            .on("p.a", [done(json!("A"))])
            .on("p.b", [done(json!("B"))])
            .started();
        assert_eq!(sim.max_in_flight, 2);
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(
            sim.record("p").output.as_deref(),
            Some(&json!({"a": "A", "b": "B"}))
        );
        assert_eq!(*sim.calls_to("next")[0].input, json!({"a": "A", "b": "B"}));
    }

    #[test]
    fn s18_an_arm_moves_on_its_own_timer_or_result_while_the_others_wait() {
        // Each arm's sleep, retry wait and invocation moves that arm alone, whichever order
        // they end in.
        let arms = vec![
            group("slow", vec![sleep_ms("z", 100), step("s")]),
            step("flaky").retry(2, 50, 1.0, None),
            step("held"),
        ];
        let mut sim = Sim::new(file("w", vec![parallel("p", arms), step("next")]), json!(1))
            .on("p.held", [Answer::Hold])
            .on("p.flaky", [fail("flaky"), done(json!("F"))])
            .on("p.slow.s", [done(json!("S"))])
            .started();
        assert_eq!(sim.status(), RunStatus::Running);
        assert_eq!(sim.in_flight(), ["p.held"], "only the held arm still runs");
        assert_eq!(sim.calls_to("p.flaky").len(), 2, "retried after its wait");
        assert_eq!(sim.calls_to("p.slow.s").len(), 1, "went on after its sleep");
        assert!(sim.calls_to("next").is_empty());
        sim.answer("p.held", None, done(json!("H")));
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(
            sim.record("p").output.as_deref(),
            Some(&json!({"slow": "S", "flaky": "F", "held": "H"}))
        );
        assert_eq!(sim.calls_to("next").len(), 1);
    }

    #[test]
    fn s19_the_first_failed_arm_in_declaration_order_wins_whatever_ends_first() {
        let mut sim = Sim::new(two_arms(), json!({}))
            .on("p.a", [Answer::Hold])
            .on("p.b", [fail("second")])
            .started();
        assert_eq!(sim.record("p.b").status, StepStatus::Failed);
        assert_eq!(
            sim.status(),
            RunStatus::Running,
            "arms never stop one another"
        );
        sim.answer("p.a", None, fail("first"));
        assert_eq!(sim.status(), RunStatus::Failed);
        let error = sim.run.error.as_ref().expect("an error");
        assert_eq!((error.step.as_str(), error.code.as_str()), ("p.a", "first"));
        assert!(sim.calls_to("next").is_empty());
    }

    #[test]
    fn s19_a_tripwire_beats_a_failure() {
        let sim = Sim::new(two_arms(), json!({}))
            .on("p.a", [fail("boom")])
            .on("p.b", [trip("guard")])
            .started();
        assert_eq!(sim.status(), RunStatus::Tripwire);
    }

    #[test]
    fn s19_s74_a_failure_beats_a_suspension_and_the_suspended_arm_is_cancelled() {
        let sim = Sim::new(two_arms(), json!({}))
            .on("p.a", [suspend(json!({}), &[])])
            .on("p.b", [fail("boom")])
            .started();
        assert_eq!(sim.status(), RunStatus::Failed);
        assert_eq!(sim.record("p.a").status, StepStatus::Cancelled);
        assert_eq!(sim.record("p").status, StepStatus::Failed);
    }

    #[test]
    fn s19_s79_a_bail_beats_a_suspension_and_ends_the_file_with_its_value() {
        let sim = Sim::new(two_arms(), json!({}))
            .on("p.a", [suspend(json!({}), &[])])
            .on("p.b", [bail(json!("out"))])
            .started();
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(sim.run.result, Some(json!("out")));
        assert_eq!(sim.record("p.a").status, StepStatus::Cancelled);
        assert!(sim.calls_to("next").is_empty());
    }

    #[test]
    fn s20_a_suspended_parallel_keeps_its_succeeded_arms_and_succeeds_once_resumed() {
        let mut sim = Sim::new(two_arms(), json!({}))
            .on("p.a", [done(json!("A"))])
            .on("p.b", [suspend(json!({}), &[]), done(json!("B"))])
            .started();
        assert_eq!(sim.status(), RunStatus::Suspended);
        assert!(
            !sim.kinds_of("p").contains(&EventKind::StepSucceeded),
            "S90: a block emits nothing when it suspends"
        );
        sim.resume(None, None, None, json!({})).expect("resumed");
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(
            sim.calls_to("p.a").len(),
            1,
            "a succeeded arm never runs again"
        );
        assert_eq!(
            sim.record("p").output.as_deref(),
            Some(&json!({"a": "A", "b": "B"}))
        );
    }

    /// Every test above, by name.
    pub(crate) const SCENARIOS: &[(&str, fn())] = scenarios![
        s18_arms_run_at_once_and_the_output_holds_each_arms_output_by_id,
        s18_an_arm_moves_on_its_own_timer_or_result_while_the_others_wait,
        s19_the_first_failed_arm_in_declaration_order_wins_whatever_ends_first,
        s19_a_tripwire_beats_a_failure,
        s19_s74_a_failure_beats_a_suspension_and_the_suspended_arm_is_cancelled,
        s19_s79_a_bail_beats_a_suspension_and_ends_the_file_with_its_value,
        s20_a_suspended_parallel_keeps_its_succeeded_arms_and_succeeds_once_resumed,
    ];
}
