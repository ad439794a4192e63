//! What the driver reads back from the store, checked before it is trusted: the format version
//! first (an entry a newer weft wrote is refused, not misread), then the shape (every entry and
//! file a graph or state names exists), so a bad entry ends in an error naming its run and
//! never in a panic of the code that would follow it.

use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::RuntimeError;
use super::codec::{RecordIn, SnapshotIn};
use crate::engine::model::{EntryId, EntryKind, FileId};
use crate::engine::{
    GRAPH_FORMAT, Graph, Item, ListRef, Node, NodeKind, RunState, STATE_FORMAT, Seq, ToolCallOf,
};
use crate::store::from_stored;

/// The run's stored graph.
pub(super) fn graph(run: &str, bytes: &[u8]) -> Result<Graph, RuntimeError> {
    let graph: Graph = parse(run, "graph", bytes, GRAPH_FORMAT, |p: Probe| p.format)?;
    check_format(run, "graph", graph.format, GRAPH_FORMAT)?;
    check_graph(&graph).map_err(|message| corrupt(run, "graph", message))?;
    Ok(graph)
}

/// The run's stored first state, of `graph`.
pub(super) fn base(run: &str, bytes: &[u8], graph: &Graph) -> Result<RunState, RuntimeError> {
    let state: RunState = parse(run, "state", bytes, STATE_FORMAT, |p: Probe| p.format)?;
    check_state(run, &state, graph)?;
    Ok(state)
}

/// The workflow-tool call that started the run, as its stored first state says (S125);
/// `None` for a run that no call started.
pub(super) fn tool_call_of(run: &str, bytes: &[u8]) -> Result<Option<ToolCallOf>, RuntimeError> {
    /// The one member read.
    #[derive(Deserialize)]
    struct Started {
        #[serde(default)]
        tool_call_of: Option<ToolCallOf>,
    }
    let started: Started = parse(run, "state", bytes, STATE_FORMAT, |p: Probe| p.format)?;
    Ok(started.tool_call_of)
}

/// The run's stored snapshot, of `graph`.
pub(super) fn snapshot(run: &str, bytes: &[u8], graph: &Graph) -> Result<SnapshotIn, RuntimeError> {
    let snap: SnapshotIn = parse(run, "state", bytes, STATE_FORMAT, |p: SnapshotProbe| {
        p.state.and_then(|s| s.format)
    })?;
    check_state(run, &snap.state, graph)?;
    Ok(snap)
}

/// One stored record of the run.
pub(super) fn record(run: &str, bytes: &[u8]) -> Result<RecordIn, RuntimeError> {
    super::codec::read_record(bytes, run).map_err(|e| corrupt(run, "record", e))
}

/// The format member of a stored graph or state, read on its own.
#[derive(Deserialize)]
struct Probe {
    format: Option<u64>,
}

/// The format member of a stored snapshot's state.
#[derive(Deserialize)]
struct SnapshotProbe {
    state: Option<Probe>,
}

/// Parses `bytes`; when they do not parse, a newer format (as `probe` finds it) is named
/// rather than what the newer shape broke.
fn parse<T: DeserializeOwned, P: DeserializeOwned>(
    run: &str,
    what: &'static str,
    bytes: &[u8],
    reads: u32,
    probe: impl FnOnce(P) -> Option<u64>,
) -> Result<T, RuntimeError> {
    from_stored(bytes).map_err(|e| match from_stored::<P>(bytes).ok().and_then(probe) {
        Some(found) if found > u64::from(reads) => newer(run, what, found, reads),
        _ => corrupt(run, what, e.to_string()),
    })
}

fn check_state(run: &str, state: &RunState, graph: &Graph) -> Result<(), RuntimeError> {
    check_format(run, "state", state.format, STATE_FORMAT)?;
    if state.run_id != run {
        return Err(corrupt(
            run,
            "state",
            format!("it belongs to run {}", state.run_id),
        ));
    }
    if !state.files.contains_key("") {
        return Err(corrupt(
            run,
            "state",
            "it has no top-level file state".into(),
        ));
    }
    check_seq(&state.root, graph).map_err(|message| corrupt(run, "state", message))
}

fn check_format(run: &str, what: &'static str, found: u32, reads: u32) -> Result<(), RuntimeError> {
    if found == reads {
        Ok(())
    } else if found > reads {
        Err(newer(run, what, found.into(), reads))
    } else {
        Err(corrupt(
            run,
            what,
            format!("it has format {found}, which no weft writes (this one reads format {reads})"),
        ))
    }
}

fn newer(run: &str, what: &'static str, found: u64, reads: u32) -> RuntimeError {
    RuntimeError::NewerFormat {
        run: run.into(),
        what,
        found,
        reads,
    }
}

fn corrupt(run: &str, what: &'static str, message: String) -> RuntimeError {
    RuntimeError::Corrupt {
        run: run.into(),
        what,
        message,
    }
}

/// Every entry and file the graph names exists, and no list the core starts is empty.
fn check_graph(graph: &Graph) -> Result<(), String> {
    let entry = |id: EntryId, at: &str| {
        if (id as usize) < graph.entries.len() {
            Ok(())
        } else {
            Err(format!(
                "{at} names entry {id}, but the graph has {}",
                graph.entries.len()
            ))
        }
    };
    let file = |id: FileId, at: &str| {
        if (id as usize) < graph.files.len() {
            Ok(())
        } else {
            Err(format!(
                "{at} names file {id}, but the graph has {}",
                graph.files.len()
            ))
        }
    };
    let list = |ids: &[EntryId], at: &str| {
        if ids.is_empty() {
            return Err(format!("{at} has no entries"));
        }
        ids.iter().try_for_each(|&id| entry(id, at))
    };
    if graph.files.is_empty() {
        return Err("it has no files".into());
    }
    for (i, f) in graph.files.iter().enumerate() {
        list(&f.body, &format!("file {i}"))?;
    }
    for e in &graph.entries {
        let at = format!("entry {}", e.path);
        file(e.file, &at)?;
        match &e.kind {
            EntryKind::Parallel { arms } => arms.iter().try_for_each(|&a| entry(a, &at))?,
            EntryKind::Branch { arms } => arms.iter().try_for_each(|a| entry(a.entry, &at))?,
            EntryKind::Foreach { body, .. }
            | EntryKind::Loop { body, .. }
            | EntryKind::Group { body } => list(body, &at)?,
            EntryKind::Workflow { file: f } => file(*f, &at)?,
            EntryKind::Step(_)
            | EntryKind::Sleep { .. }
            | EntryKind::Map { .. }
            | EntryKind::Agent(_) => {}
        }
    }
    Ok(())
}

/// The entries of the list a sequence walks, when the graph has it.
fn list_of(graph: &Graph, list: ListRef) -> Option<&[EntryId]> {
    match list {
        ListRef::File(f) => graph.files.get(f as usize).map(|f| f.body.as_slice()),
        ListRef::Body(e) => match &graph.entries.get(e as usize)?.kind {
            EntryKind::Foreach { body, .. }
            | EntryKind::Loop { body, .. }
            | EntryKind::Group { body } => Some(body),
            _ => None,
        },
    }
}

/// The sequence walks a list of the graph, and stands at an entry of it.
fn check_seq(seq: &Seq, graph: &Graph) -> Result<(), String> {
    let list = list_of(graph, seq.list).ok_or_else(|| {
        format!(
            "a sequence walks {:?}, which the graph does not have",
            seq.list
        )
    })?;
    match list.get(seq.pos as usize) {
        Some(&id) if id == seq.current.entry => check_node(&seq.current, graph),
        _ => Err(format!(
            "a sequence of {:?} stands at position {} on entry {}, which is not there",
            seq.list, seq.pos, seq.current.entry
        )),
    }
}

/// The execution is of an entry of the graph, of that entry's kind, with one child per arm.
fn check_node(node: &Node, graph: &Graph) -> Result<(), String> {
    let entry = graph.entries.get(node.entry as usize).ok_or_else(|| {
        format!(
            "an execution names entry {}, but the graph has {}",
            node.entry,
            graph.entries.len()
        )
    })?;
    let child = |n: &Node, arm: EntryId| {
        if n.entry == arm {
            check_node(n, graph)
        } else {
            Err(format!("an arm of {} is not that arm's entry", entry.path))
        }
    };
    let arms = |found: usize, declared: usize| {
        if found == declared {
            Ok(())
        } else {
            Err(format!(
                "{} has {found} arms in the state but {declared} in the graph",
                entry.path
            ))
        }
    };
    match (&node.kind, &entry.kind) {
        (NodeKind::Plain, _)
        | (NodeKind::Step(_), EntryKind::Step(_))
        | (NodeKind::Sleep { .. }, EntryKind::Sleep { .. })
        | (NodeKind::Agent(_), EntryKind::Agent(_)) => Ok(()),
        (NodeKind::Parallel(nodes), EntryKind::Parallel { arms: declared }) => {
            arms(nodes.len(), declared.len())?;
            nodes
                .iter()
                .zip(declared)
                .try_for_each(|(n, &arm)| child(n, arm))
        }
        (NodeKind::Branch(nodes), EntryKind::Branch { arms: declared }) => {
            arms(nodes.len(), declared.len())?;
            nodes
                .iter()
                .zip(declared)
                .try_for_each(|(n, arm)| n.as_ref().map_or(Ok(()), |n| child(n, arm.entry)))
        }
        (NodeKind::Foreach(fe), EntryKind::Foreach { .. }) => {
            if let Some(i) = fe.active.iter().find(|&&i| i as usize >= fe.items.len()) {
                return Err(format!(
                    "{} has item {i} in progress of {}",
                    entry.path,
                    fe.items.len()
                ));
            }
            fe.items.iter().try_for_each(|item| match item {
                Item::Active { body, .. } => check_seq(body, graph),
                _ => Ok(()),
            })
        }
        (NodeKind::Loop { body, .. }, EntryKind::Loop { .. })
        | (NodeKind::Nested(body), EntryKind::Workflow { .. } | EntryKind::Group { .. }) => {
            check_seq(body, graph)
        }
        _ => Err(format!(
            "the execution of {} is not of that entry's kind",
            entry.path
        )),
    }
}
