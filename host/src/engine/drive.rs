//! The drive pass: sequences move on entry by entry, and nodes dispatch to their construct's
//! machine. How an execution starts and ends is `lifecycle`'s.

use std::sync::Arc;

use super::context::{Cx, Frame};
use super::lifecycle::end_node;
use super::machines;
use super::model::{EntryDef, EntryId, EntryKind, Graph};
use super::nodes::{End, ListRef, Node, NodeKind, Phase, Seq};

/// The entries of a list of the graph.
fn list_entries(graph: &Graph, list: ListRef) -> &[EntryId] {
    match list {
        ListRef::File(f) => &graph.file(f).body,
        ListRef::Body(e) => match &graph.entry(e).kind {
            EntryKind::Foreach { body, .. }
            | EntryKind::Loop { body, .. }
            | EntryKind::Group { body } => body,
            _ => &[],
        },
    }
}

/// Drives a sequence: its current entry, then the next ones while each succeeds (S1).
pub(crate) fn drive_seq(seq: &mut Seq, frame: &Frame, cx: &mut Cx) {
    if matches!(seq.phase, Phase::Done(_)) {
        return;
    }
    loop {
        drive_node(&mut seq.current, frame, cx);
        match &mut seq.current.phase {
            Phase::New | Phase::Running => {
                seq.phase = Phase::Running;
                return;
            }
            Phase::Suspended => {
                seq.phase = Phase::Suspended;
                return;
            }
            Phase::Done(End::Success(v)) => {
                let list = list_entries(cx.graph, seq.list);
                let next = seq.pos as usize + 1;
                if next < list.len() {
                    if cx.cancelling {
                        seq.phase = Phase::Done(End::Cancelled);
                        return;
                    }
                    if let Some(b) = cx.bailed(frame) {
                        seq.phase = Phase::Done(End::Bail(b.into()));
                        return;
                    }
                    // The ended node is replaced: its output moves on as the next one's input.
                    let input = Arc::clone(v);
                    seq.pos = next as u32;
                    *seq.current = Node::new(list[next], input);
                    continue;
                }
                seq.phase = Phase::Done(End::Success(v.clone()));
                return;
            }
            Phase::Done(end) => {
                seq.phase = Phase::Done(end.clone());
                return;
            }
        }
    }
}

/// Drives one execution: a plain dispatch to its construct's machine, which takes what it needs
/// of the entry's kind from `entry` itself.
pub(crate) fn drive_node(node: &mut Node, frame: &Frame, cx: &mut Cx) {
    if matches!(node.phase, Phase::Done(_)) {
        return;
    }
    let entry = cx.graph.entry(node.entry);
    match &entry.kind {
        EntryKind::Step(_) => machines::step::drive(node, entry, frame, cx),
        EntryKind::Map { .. } => machines::map::drive(node, entry, frame, cx),
        EntryKind::Sleep { .. } => machines::sleep::drive(node, entry, frame, cx),
        EntryKind::Parallel { .. } => machines::parallel::drive(node, entry, frame, cx),
        EntryKind::Branch { .. } => machines::branch::drive(node, entry, frame, cx),
        EntryKind::Group { .. } => machines::branch::drive_group(node, entry, frame, cx),
        EntryKind::Foreach { .. } => machines::foreach::drive(node, entry, frame, cx),
        EntryKind::Loop { .. } => machines::loops::drive(node, entry, frame, cx),
        EntryKind::Workflow { .. } => machines::nested::drive(node, entry, frame, cx),
        EntryKind::Agent(_) => machines::agent::drive(node, entry, frame, cx),
    }
}

/// Moves a node that holds one sequence (a group, a nested file) along with it.
pub(crate) fn follow_seq(node: &mut Node, entry: &EntryDef, frame: &Frame, cx: &mut Cx) {
    let phase = match &node.kind {
        NodeKind::Nested(seq) | NodeKind::Loop { body: seq, .. } => seq.phase.clone(),
        _ => return,
    };
    match phase {
        Phase::New | Phase::Running => node.phase = Phase::Running,
        Phase::Suspended => node.phase = Phase::Suspended,
        Phase::Done(end) => end_node(node, entry, frame, cx, end),
    }
}

/// The first entry of a block's `do:` body.
pub(crate) fn first_body(graph: &Graph, entry: EntryId) -> EntryId {
    list_entries(graph, ListRef::Body(entry))[0]
}
