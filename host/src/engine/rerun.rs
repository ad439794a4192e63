//! Re-running an ended run from one of its steps (S94–S99).
//!
//! The source run's log is folded again up to the moment the step started; that state holds
//! the input the step received, the state at its start, every entry that preceded it and the
//! branch arms taken around it (S94, S98). The step and everything still in flight at that
//! moment are reset to start afresh, and the result becomes a new, `pending` run.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::model::{EntryId, EntryKind, Graph};
use super::schema;
use super::{
    Event, Item, Millis, Node, NodeKind, Phase, Refusal, RestartedFrom, RunState, RunStatus, Seq,
    StepNode, StepWait, advance,
};

/// What a re-run starts from.
pub(crate) struct RerunRequest<'a> {
    /// The ended source run.
    pub source: &'a RunState,
    /// The graph the source ran.
    pub source_graph: &'a Graph,
    /// The source's first state, from which its log folds.
    pub base: RunState,
    /// The source's orchestration log, in order.
    pub log: &'a [Event],
    /// The step to start from.
    pub path: &'a str,
    /// `--input`: replaces the step's stored input.
    pub input: Option<Value>,
    /// The new run's id.
    pub run_id: String,
    /// Now.
    pub at: Millis,
}

/// Builds the new run of `graph` (the source's own, or a file with the same entries, S96).
pub(crate) fn rerun(graph: &Graph, req: RerunRequest<'_>) -> Result<RunState, Refusal> {
    let source = req.source;
    let path = req.path;
    if !source.status.is_ended() {
        return Err(Refusal::Other(format!(
            "run {} has not ended (status: {})",
            source.run_id, source.status
        )));
    }
    let same_shape = graph.entries.len() == req.source_graph.entries.len()
        && graph
            .entries
            .iter()
            .zip(&req.source_graph.entries)
            .all(|(a, b)| a.path == b.path);
    if !same_shape || graph.workflow_id() != req.source_graph.workflow_id() {
        return Err(Refusal::Other(format!(
            "the workflow file does not have the entries of run {}'s workflow {}; re-run without FILE or fix the file",
            source.run_id,
            req.source_graph.workflow_id()
        )));
    }
    let Some(entry) = graph.entry_by_path(path) else {
        return Err(Refusal::Other(format!(
            "step {path} did not run in run {}",
            source.run_id
        )));
    };
    if let Some(block) = enclosing_repeat(graph, entry_id(graph, path)) {
        return Err(Refusal::Other(format!(
            "step {path} is inside {block}; re-run from {block} instead"
        )));
    }
    if !source.records.contains_key(path) {
        return Err(Refusal::Other(format!(
            "step {path} did not run in run {}",
            source.run_id
        )));
    }
    let mut state = req.base;
    for event in req.log {
        let _ = advance(&mut state, req.source_graph, event.clone());
        if state.records.contains_key(path) {
            break;
        }
    }
    let target = entry_id(graph, path);
    let mut found = None;
    walk_seq(&mut state.root, &mut |node| {
        if node.entry == target && found.is_none() {
            found = Some(Value::clone(&node.input));
        }
    });
    let Some(stored_input) = found else {
        return Err(Refusal::Other(format!(
            "step {path} did not run in run {}",
            source.run_id
        )));
    };
    let mut input = req.input.unwrap_or(stored_input);
    if let EntryKind::Step(def) = &entry.kind
        && let Some(schema) = &def.schemas.input
        && let Err(v) = schema.fill_and_check(&mut input)
    {
        return Err(Refusal::InvalidData {
            message: format!("step {path}: input: {}", schema::summarize(&v)),
            violations: v,
        });
    }
    let input = Arc::new(input);
    // Start the step afresh, and everything still in flight at that moment with it.
    let prefix = format!("{path}.");
    let mut restarted = vec![path.to_owned()];
    walk_seq(&mut state.root, &mut |node| {
        let in_flight = !matches!(node.phase, Phase::Done(_))
            && matches!(
                node.kind,
                NodeKind::Step(StepNode {
                    wait: StepWait::Invocation { .. } | StepWait::Retry { .. },
                    ..
                }) | NodeKind::Sleep { .. }
                    | NodeKind::Agent(_)
            );
        if node.entry == target {
            node.input = Arc::clone(&input);
        }
        if node.entry == target || in_flight {
            restarted.push(graph.entry(node.entry).path.clone());
            node.phase = Phase::New;
            node.kind = NodeKind::Plain;
            // Started before: its input is made already (S119).
            node.made = true;
        }
    });
    reopen(&mut state.root, target);
    // An agent's model and tool calls are recorded under its path: they go with it.
    let under: Vec<String> = restarted.iter().map(|p| format!("{p}.")).collect();
    state.records.retain(|p, _| {
        !restarted.contains(p) && !p.starts_with(&prefix) && !under.iter().any(|u| p.starts_with(u))
    });
    state.run_id = req.run_id;
    state.status = RunStatus::Pending;
    state.created_at = req.at;
    state.updated_at = req.at;
    state.cancelling = false;
    state.stopped = None;
    state.result = None;
    state.error = None;
    state.tripwire = None;
    state.restarted_from = Some(RestartedFrom {
        run_id: source.run_id.clone(),
        path: path.to_owned(),
    });
    Ok(state)
}

fn entry_id(graph: &Graph, path: &str) -> EntryId {
    graph
        .entries
        .iter()
        .position(|e| e.path == path)
        .map_or(0, |i| i as EntryId)
}

/// The path of the innermost foreach or loop around `id`, if any (S97).
fn enclosing_repeat(graph: &Graph, id: EntryId) -> Option<String> {
    let mut parent: HashMap<EntryId, EntryId> = HashMap::new();
    for (i, e) in graph.entries.iter().enumerate() {
        let i = i as EntryId;
        let children: Vec<EntryId> = match &e.kind {
            EntryKind::Parallel { arms } => arms.clone(),
            EntryKind::Branch { arms } => arms.iter().map(|a| a.entry).collect(),
            EntryKind::Foreach { body, .. }
            | EntryKind::Loop { body, .. }
            | EntryKind::Group { body } => body.clone(),
            EntryKind::Workflow { file } => graph.file(*file).body.clone(),
            _ => Vec::new(),
        };
        for c in children {
            parent.insert(c, i);
        }
    }
    let mut at = id;
    while let Some(&p) = parent.get(&at) {
        let e = graph.entry(p);
        if matches!(e.kind, EntryKind::Foreach { .. } | EntryKind::Loop { .. }) {
            return Some(e.path.clone());
        }
        at = p;
    }
    None
}

fn walk_seq(seq: &mut Seq, f: &mut impl FnMut(&mut Node)) {
    walk(&mut seq.current, f);
}

fn walk(node: &mut Node, f: &mut impl FnMut(&mut Node)) {
    match &mut node.kind {
        NodeKind::Parallel(arms) => arms.iter_mut().for_each(|a| walk(a, f)),
        NodeKind::Branch(arms) => arms.iter_mut().flatten().for_each(|a| walk(a, f)),
        NodeKind::Foreach(fe) => {
            for item in fe.items.iter_mut() {
                if let Item::Active { body, .. } = item {
                    walk_seq(body, f);
                }
            }
        }
        NodeKind::Loop { body, .. } | NodeKind::Nested(body) => walk_seq(body, f),
        NodeKind::Plain | NodeKind::Step(_) | NodeKind::Sleep { .. } | NodeKind::Agent(_) => {}
    }
    f(node);
}

/// Marks every sequence and block on the way to `target` as running again, so the drive pass
/// reaches it.
fn reopen(seq: &mut Seq, target: EntryId) -> bool {
    let hit = reopen_node(&mut seq.current, target);
    if hit {
        seq.phase = Phase::Running;
    }
    hit
}

fn reopen_node(node: &mut Node, target: EntryId) -> bool {
    if node.entry == target {
        return true;
    }
    let hit = match &mut node.kind {
        NodeKind::Parallel(arms) => arms.iter_mut().any(|a| reopen_node(a, target)),
        NodeKind::Branch(arms) => arms.iter_mut().flatten().any(|a| reopen_node(a, target)),
        NodeKind::Foreach(fe) => fe.items.iter_mut().any(|it| match it {
            Item::Active { body, .. } => reopen(body, target),
            _ => false,
        }),
        NodeKind::Loop { body, .. } | NodeKind::Nested(body) => reopen(body, target),
        NodeKind::Plain | NodeKind::Step(_) | NodeKind::Sleep { .. } | NodeKind::Agent(_) => false,
    };
    if hit {
        node.phase = Phase::Running;
    }
    hit
}
