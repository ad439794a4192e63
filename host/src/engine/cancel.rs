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
