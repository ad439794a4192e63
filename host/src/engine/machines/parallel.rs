//! The parallel machine: every arm at once, settled by the precedence of S19 (S18–S20).

use crate::engine::context::{Cx, Frame};
use crate::engine::drive::{drive_node, start_block};
use crate::engine::model::{EntryDef, EntryId};
use crate::engine::nodes::{Node, NodeKind, Phase};
use crate::engine::settle::finish_arms;

/// Starts every arm with the parallel's input, drives them, and settles once none runs.
pub(crate) fn drive_parallel(
    node: &mut Node,
    entry: &EntryDef,
    arms: &[EntryId],
    frame: &Frame,
    cx: &mut Cx,
) {
    if node.phase == Phase::New {
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
}
