//! The branch machine: every arm whose test holds, tested once before any starts; arms not
//! taken are `skipped` (S21, S22). Also a branch arm's `do:` list, a group (S107).

use crate::engine::context::{Cx, Frame};
use crate::engine::drive::{drive_node, drive_seq, end_node, follow_seq, start_block};
use crate::engine::model::{BranchArm, EntryDef, EntryId};
use crate::engine::nodes::{End, ListRef, Node, NodeKind, Phase, Seq};
use crate::engine::settle::finish_arms;

/// Tests the arms when the branch starts, drives those taken, and settles once none runs.
pub(crate) fn drive_branch(
    node: &mut Node,
    entry: &EntryDef,
    arms: &[BranchArm],
    frame: &Frame,
    cx: &mut Cx,
) {
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
pub(crate) fn drive_group(
    node: &mut Node,
    entry: &EntryDef,
    body: &[EntryId],
    frame: &Frame,
    cx: &mut Cx,
) {
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
