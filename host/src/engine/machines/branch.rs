//! The branch machine: every arm whose test holds, tested once before any starts; arms not
//! taken are `skipped` (S21, S22). Also a branch arm's `do:` list, a group (S107).
//!
//! ## Transitions of `branch`
//!
//! | Row | From | Event or condition | To | Issues |
//! |-----|------|--------------------|----|--------|
//! | `start` | new | every arm's test, tested once, holds or not (S21) | running | record, `step-started`; arms not taken recorded `skipped` (S22), those taken start |
//! | `test-error` | new | an arm's test errs | failed | record, `step-started`, `step-failed` (`expression-error`) |
//! | `wait` | running, suspended | after a pass, an arm taken still runs | running | — |
//! | `suspend` | running | no arm runs, one is suspended and none ended otherwise | suspended | nothing (S90) |
//! | `succeed` | running, suspended | every arm taken succeeded, or none was taken | succeeded | record, `step-succeeded` with each taken arm's output by id (`{}` for none), `.steps` |
//! | `end` | running, suspended | no arm runs and one ended otherwise, or a cancel: tripwire, then failure, then bail (S19) | as that arm | suspended arms `step-cancelled`; record, the closing event |
//!
//! ## Transitions of `group`
//!
//! | Row | From | Event or condition | To | Issues |
//! |-----|------|--------------------|----|--------|
//! | `start` | new | the pass reaches it | running | record, `step-started`; its list starts with the group's input |
//! | `wait` | running, suspended | after a pass, its list still runs | running | — |
//! | `suspend` | running | its list suspended | suspended | nothing (S90) |
//! | `succeed` | running, suspended | its list succeeded (S107) | succeeded | record, `step-succeeded` with its last entry's output, `.steps` |
//! | `end` | running, suspended | its list ended otherwise (failure, tripwire, bail, cancel) | as its list | record, the closing event |
//!
//! Each row is marked where the code takes it (`transition!`, see `engine::transitions`).

use crate::engine::context::{Cx, Frame};
use crate::engine::drive::{drive_node, drive_seq, follow_seq};
use crate::engine::expr::Reads;
use crate::engine::lifecycle::{end_node, start_block};
use crate::engine::model::{EntryDef, EntryKind};
use crate::engine::nodes::{End, ListRef, Node, NodeKind, Phase, Seq};
use crate::engine::settle::finish_arms;
use crate::engine::transitions::transition;

/// Tests the arms when the branch starts, drives those taken, and settles once none runs.
pub(crate) fn drive(node: &mut Node, entry: &EntryDef, frame: &Frame, cx: &mut Cx) {
    let EntryKind::Branch { arms } = &entry.kind else {
        return;
    };
    let graph = cx.graph;
    if node.phase == Phase::New {
        start_block(node, entry, frame, cx);
        let mut reads = Reads::default();
        arms.iter().for_each(|arm| reads.add(&arm.when.reads()));
        let input = cx.expr_input(frame, &node.input, &reads);
        let mut taken = Vec::with_capacity(arms.len());
        for arm in arms {
            let arm_entry = graph.entry(arm.entry);
            match arm.when.holds(&input, cx.value_limit) {
                Ok(true) => taken.push(Some(Node::new(arm.entry, node.input.clone()))),
                Ok(false) => taken.push(None),
                Err(e) => {
                    transition!("branch", "test-error");
                    let err = cx.error(
                        frame,
                        &entry.path,
                        "expression-error",
                        format!(
                            "branch {}: arm {}: `{}`: {e}",
                            entry.path, arm_entry.id, arm.when.source
                        ),
                    );
                    end_node(node, entry, frame, cx, End::Failed(err));
                    return;
                }
            }
        }
        transition!("branch", "start");
        for (arm, t) in arms.iter().zip(&taken) {
            if t.is_none() {
                cx.record_skipped(frame, graph.entry(arm.entry));
            }
        }
        node.kind = NodeKind::Branch(taken);
    }
    let NodeKind::Branch(arms) = &mut node.kind else {
        return;
    };
    for arm in arms.iter_mut().flatten() {
        drive_node(arm, frame, cx);
    }
    finish_arms(node, entry, frame, cx);
    // The row this pass took, by where it left the execution.
    #[cfg(test)]
    match &node.phase {
        Phase::New | Phase::Running => transition!("branch", "wait"),
        Phase::Suspended => transition!("branch", "suspend"),
        Phase::Done(crate::engine::nodes::End::Success(_)) => transition!("branch", "succeed"),
        Phase::Done(_) => transition!("branch", "end"),
    }
}

/// Runs a branch arm's `do:` list as one sequence with the group's own record.
pub(crate) fn drive_group(node: &mut Node, entry: &EntryDef, frame: &Frame, cx: &mut Cx) {
    let EntryKind::Group { body } = &entry.kind else {
        return;
    };
    if node.phase == Phase::New {
        transition!("group", "start");
        start_block(node, entry, frame, cx);
        node.kind = NodeKind::Nested(Seq::new(
            ListRef::Body(node.entry),
            body[0],
            node.input.clone(),
        ));
    }
    let NodeKind::Nested(seq) = &mut node.kind else {
        return;
    };
    drive_seq(seq, frame, cx);
    follow_seq(node, entry, frame, cx);
    // The row this pass took, by where it left the execution.
    #[cfg(test)]
    match &node.phase {
        Phase::New | Phase::Running => transition!("group", "wait"),
        Phase::Suspended => transition!("group", "suspend"),
        Phase::Done(crate::engine::nodes::End::Success(_)) => transition!("group", "succeed"),
        Phase::Done(_) => transition!("group", "end"),
    }
}

/// The scenarios of this file: its tests, and a part of the corpus the machines' transition
/// tables are checked against (`engine::transitions`).
#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use crate::engine::sim::{Sim, branch, file, group, step};
    use crate::engine::transitions::scenarios;
    use crate::engine::{EventKind, RunStatus, StepStatus};

    #[test]
    fn s21_every_arm_whose_test_holds_runs_with_the_branch_input() {
        let sim = Sim::new(
            file(
                "w",
                vec![branch(
                    "b",
                    vec![
                        (".input.n > 1", step("big")),
                        (".input.n > 5", step("huge")),
                        ("null", step("never")),
                        ("0", step("zero")),
                    ],
                )],
            ),
            json!({"n": 3}),
        )
        .started();
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(*sim.calls_to("b.big")[0].input, json!({"n": 3}));
        assert_eq!(
            sim.calls_to("b.zero").len(),
            1,
            "0 is neither false nor null"
        );
        assert_eq!(
            sim.record("b").output.as_deref(),
            Some(&json!({"big": {"n": 3}, "zero": {"n": 3}}))
        );
    }

    #[test]
    fn s22_arms_not_taken_are_skipped_without_events_and_no_arm_taken_gives_an_empty_object() {
        let sim = Sim::new(
            file(
                "w",
                vec![
                    branch(
                        "b",
                        vec![("false", step("x")), ("false", group("g", vec![step("y")]))],
                    ),
                    step("after"),
                ],
            ),
            json!({}),
        )
        .started();
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(sim.record("b.x").status, StepStatus::Skipped);
        assert_eq!(sim.record("b.g").status, StepStatus::Skipped);
        assert!(sim.kinds_of("b.x").is_empty());
        assert!(sim.kinds_of("b.g").is_empty());
        assert_eq!(sim.record("b").output.as_deref(), Some(&json!({})));
        assert_eq!(*sim.calls_to("after")[0].input, json!({}));
    }

    #[test]
    fn s107_a_group_arm_runs_its_list_in_order_and_outputs_its_last_entry() {
        let sim = Sim::new(
            file(
                "w",
                vec![branch(
                    "b",
                    vec![("true", group("g", vec![step("one"), step("two")]))],
                )],
            ),
            json!({"v": 1}),
        )
        .started();
        assert_eq!(*sim.calls_to("b.g.two")[0].input, json!({"v": 1}));
        assert_eq!(
            sim.record("b").output.as_deref(),
            Some(&json!({"g": {"v": 1}}))
        );
        assert_eq!(
            sim.kinds_of("b.g"),
            [EventKind::StepStarted, EventKind::StepSucceeded]
        );
    }

    #[test]
    fn s21_a_test_that_errs_fails_the_branch_with_expression_error() {
        let sim = Sim::new(
            file("w", vec![branch("b", vec![(".input | error", step("x"))])]),
            json!({}),
        )
        .started();
        assert_eq!(sim.status(), RunStatus::Failed);
        assert_eq!(
            sim.run.error.as_ref().map(|e| e.code.as_str()),
            Some("expression-error")
        );
        assert!(sim.calls_to("b.x").is_empty());
    }

    /// Every test above, by name.
    pub(crate) const SCENARIOS: &[(&str, fn())] = scenarios![
        s21_every_arm_whose_test_holds_runs_with_the_branch_input,
        s22_arms_not_taken_are_skipped_without_events_and_no_arm_taken_gives_an_empty_object,
        s107_a_group_arm_runs_its_list_in_order_and_outputs_its_last_entry,
        s21_a_test_that_errs_fails_the_branch_with_expression_error,
    ];
}
