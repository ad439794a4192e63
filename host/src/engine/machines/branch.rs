//! The branch machine: every arm whose test holds, tested once before any starts; arms not
//! taken are `skipped` (S21, S22). Also a branch arm's `do:` list, a group (S107).

use crate::engine::context::{Cx, Frame};
use crate::engine::drive::{drive_node, drive_seq, follow_seq};
use crate::engine::lifecycle::{end_node, start_block};
use crate::engine::model::{EntryDef, EntryKind};
use crate::engine::nodes::{End, ListRef, Node, NodeKind, Phase, Seq};
use crate::engine::settle::finish_arms;

/// Tests the arms when the branch starts, drives those taken, and settles once none runs.
pub(crate) fn drive(node: &mut Node, entry: &EntryDef, frame: &Frame, cx: &mut Cx) {
    let EntryKind::Branch { arms } = &entry.kind else {
        return;
    };
    let graph = cx.graph;
    if node.phase == Phase::New {
        start_block(node, entry, frame, cx);
        let input = cx.expr_input(frame, &node.input);
        let mut taken = Vec::with_capacity(arms.len());
        for arm in arms {
            let arm_entry = graph.entry(arm.entry);
            match arm.when.holds(&input) {
                Ok(true) => taken.push(Some(Node::new(arm.entry, node.input.clone()))),
                Ok(false) => taken.push(None),
                Err(e) => {
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
}

/// Runs a branch arm's `do:` list as one sequence with the group's own record.
pub(crate) fn drive_group(node: &mut Node, entry: &EntryDef, frame: &Frame, cx: &mut Cx) {
    let EntryKind::Group { body } = &entry.kind else {
        return;
    };
    if node.phase == Phase::New {
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
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::engine::sim::{Sim, branch, file, group, step};
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
}
