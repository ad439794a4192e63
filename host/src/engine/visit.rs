//! Walks over the executions under way.

use super::nodes::{Item, Node, NodeKind, Phase, Seq};

/// Calls `f` on every execution under way (not ended), with its innermost foreach index; an
/// agent's running model or tool calls are visited after the agent.
pub(crate) fn visit_seq(seq: &Seq, index: Option<u32>, f: &mut impl FnMut(&Node, Option<u32>)) {
    if matches!(seq.phase, Phase::Done(_)) {
        return;
    }
    visit_node(&seq.current, index, f);
}

fn visit_node(node: &Node, index: Option<u32>, f: &mut impl FnMut(&Node, Option<u32>)) {
    if matches!(node.phase, Phase::Done(_)) {
        return;
    }
    f(node, index);
    match &node.kind {
        NodeKind::Plain | NodeKind::Step(_) | NodeKind::Sleep { .. } => {}
        NodeKind::Parallel(arms) => arms.iter().for_each(|a| visit_node(a, index, f)),
        NodeKind::Branch(arms) => arms.iter().flatten().for_each(|a| visit_node(a, index, f)),
        NodeKind::Foreach(fe) => {
            for (i, item) in fe.items.iter().enumerate() {
                if let Item::Active { body, .. } = item {
                    visit_seq(body, Some(i as u32), f);
                }
            }
        }
        NodeKind::Loop { body, .. } | NodeKind::Nested(body) => visit_seq(body, index, f),
        NodeKind::Agent(agent) => agent
            .running()
            .into_iter()
            .for_each(|n| visit_node(n, index, f)),
    }
}
