//! `advance`: one event in, the new state and the commands out.
//!
//! Every event ends in one *drive pass* over the executions that are under way: each execution
//! takes what the event brought (an invocation's result, a timer, a resume, a cancel) and starts
//! whatever may start next. The pass is deterministic and performs no I/O.

// Step failures travel by value through a few internal helpers; boxing them buys nothing here.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, HashMap, HashSet};

use indexmap::IndexMap;
use serde_json::{Map, Value, json};

use super::invocation::{InvocationResult, Resumption, StepCall, StepFailure, StepOutcome};
use super::model::{EntryDef, EntryId, EntryKind, FileId, Graph, StepDef};
use super::run::*;
use super::schema::{self, Violation};

/// A new, `pending` run of `graph` (S114). `input` must already have passed
/// [`check_run_input`]; `at` is the creation time.
pub fn new_run(graph: &Graph, run_id: String, input: Value, at: Millis) -> RunState {
    let root = graph.root();
    let mut files = BTreeMap::new();
    files.insert(
        String::new(),
        FileState {
            input: input.clone(),
            state: root.initial_state.clone(),
            written: Vec::new(),
            bailed: None,
        },
    );
    let mut results = BTreeMap::new();
    results.insert(String::new(), IndexMap::new());
    RunState {
        format: STATE_FORMAT,
        run_id,
        workflow_id: root.id.clone(),
        status: RunStatus::Pending,
        input: input.clone(),
        created_at: at,
        updated_at: at,
        root: Seq::new(ListRef::File(0), root.body[0], input),
        files,
        results,
        records: IndexMap::new(),
        next_token: 1,
        cancelling: false,
        result: None,
        error: None,
        tripwire: None,
        restarted_from: None,
    }
}

/// Fills the run input's defaults and checks it against the top-level `input-schema` (S57, S58).
pub fn check_run_input(graph: &Graph, input: &mut Value) -> Result<(), Vec<Violation>> {
    match &graph.root().input_schema {
        Some(schema) => schema.fill_and_check(input),
        None => Ok(()),
    }
}

impl Seq {
    /// A sequence over `list`, starting with its first entry `first`.
    pub fn new(list: ListRef, first: EntryId, input: Value) -> Self {
        Seq {
            list,
            phase: Phase::Running,
            pos: 0,
            current: Box::new(Node::new(first, input)),
        }
    }
}

impl Node {
    /// An execution of `entry` with `input`, not started.
    pub fn new(entry: EntryId, input: Value) -> Self {
        Node {
            entry,
            input,
            phase: Phase::New,
            kind: NodeKind::Plain,
        }
    }
}

/// Applies one event to the run: the state changes in place and the commands to carry out are
/// returned, in order. On a refusal nothing changed.
pub fn advance(run: &mut RunState, graph: &Graph, event: Event) -> Result<Vec<Command>, Refusal> {
    let at = event.at();
    let mut inbox = HashMap::new();
    let mut fired = HashSet::new();
    let mut resume = None;
    let mut reissue = false;
    let mut pre = Vec::new();
    match event {
        Event::Start { .. } => {
            if run.status != RunStatus::Pending {
                return Ok(Vec::new());
            }
            run.status = RunStatus::Running;
            pre.push(run_started(run));
        }
        Event::StepEnded { token, result, .. } => {
            if run.status.is_ended() {
                return Ok(Vec::new());
            }
            inbox.insert(token, result);
        }
        Event::TimerFired { token, .. } => {
            if run.status.is_ended() {
                return Ok(Vec::new());
            }
            fired.insert(token);
        }
        Event::Resume { request, .. } => {
            let selection = select_resume(run, graph, request)?;
            run.status = RunStatus::Running;
            pre.push(Command::Emit(Tracking {
                kind: EventKind::RunResumed,
                path: None,
                foreach_index: None,
                iteration: None,
                data: json!({
                    "path": selection.path,
                    "foreach_indexes": selection.indexes,
                    "data": selection.data,
                }),
            }));
            resume = Some(selection);
        }
        Event::Cancel { .. } => {
            if run.status.is_ended() {
                return Err(Refusal::AlreadyEnded {
                    run: run.run_id.clone(),
                    status: run.status,
                });
            }
            if run.cancelling {
                return Ok(Vec::new());
            }
            run.cancelling = true;
            if run.status == RunStatus::Suspended {
                // Nothing runs: the drive pass below ends every suspended step (S76).
                run.status = RunStatus::Running;
            }
            let mut tokens = Vec::new();
            visit_seq(&run.root, None, &mut |node, _| {
                if let NodeKind::Step(StepNode {
                    wait: StepWait::Invocation { token, .. },
                    ..
                }) = &node.kind
                {
                    tokens.push(*token);
                }
            });
            if run.status == RunStatus::Pending {
                run.status = RunStatus::Running;
                pre.push(run_started(run));
            }
            if !tokens.is_empty() {
                pre.push(Command::Abort { tokens });
            }
        }
        Event::Recover { .. } => match run.status {
            RunStatus::Pending => {
                run.status = RunStatus::Running;
                pre.push(run_started(run));
            }
            RunStatus::Running => reissue = true,
            _ => return Ok(Vec::new()),
        },
    }
    let RunState {
        run_id,
        workflow_id: _,
        status,
        root,
        files,
        results,
        records,
        next_token,
        cancelling,
        ..
    } = run;
    let mut cx = Cx {
        graph,
        now: at,
        run_id,
        files,
        results,
        records,
        next_token,
        cancelling: *cancelling,
        inbox,
        fired,
        resume,
        reissue,
        reissued: Vec::new(),
        cmds: pre,
    };
    if *status == RunStatus::Running {
        drive_seq(root, &Frame::root(), &mut cx);
    }
    let Cx {
        mut cmds, reissued, ..
    } = cx;
    if !reissued.is_empty() {
        cmds.push(Command::Emit(Tracking {
            kind: EventKind::Log,
            path: None,
            foreach_index: None,
            iteration: None,
            data: json!({
                "level": "warn",
                "message": format!("recovered after the host stopped; issued again: {}", reissued.join(", ")),
            }),
        }));
    }
    settle_run(run, graph, &mut cmds);
    run.updated_at = at;
    Ok(cmds)
}

fn run_started(run: &RunState) -> Command {
    let mut data = json!({
        "workflow_id": run.workflow_id,
        "input": run.input,
        "state": run.files.get("").map(|f| f.state.clone()).unwrap_or(Value::Null),
    });
    if let Some(from) = &run.restarted_from {
        data["restarted_from"] = json!(from);
    }
    Command::Emit(Tracking {
        kind: EventKind::RunStarted,
        path: None,
        foreach_index: None,
        iteration: None,
        data,
    })
}

/// Maps the top-level sequence's phase onto the run's status and closing events (S65, S88).
fn settle_run(run: &mut RunState, graph: &Graph, cmds: &mut Vec<Command>) {
    if run.status != RunStatus::Running {
        return;
    }
    let emit = |kind, data| {
        Command::Emit(Tracking {
            kind,
            path: None,
            foreach_index: None,
            iteration: None,
            data,
        })
    };
    match &run.root.phase {
        Phase::New | Phase::Running => {}
        Phase::Suspended => {
            run.status = RunStatus::Suspended;
            cmds.push(emit(
                EventKind::RunSuspended,
                json!({ "suspended": suspended(run, graph) }),
            ));
        }
        Phase::Done(end) => {
            let end = if run.cancelling {
                End::Cancelled
            } else {
                end.clone()
            };
            match end {
                End::Success(v) | End::Bail(v) => {
                    run.status = RunStatus::Success;
                    cmds.push(emit(EventKind::RunSucceeded, json!({ "result": v })));
                    run.result = Some(v);
                }
                End::Failed(e) => {
                    run.status = RunStatus::Failed;
                    cmds.push(emit(EventKind::RunFailed, json!({ "error": e })));
                    run.error = Some(e);
                }
                End::Tripwire(t) => {
                    run.status = RunStatus::Tripwire;
                    cmds.push(emit(EventKind::RunTripwire, json!({ "tripwire": t })));
                    run.tripwire = Some(t);
                }
                End::Cancelled => {
                    run.status = RunStatus::Cancelled;
                    cmds.push(emit(EventKind::RunCancelled, json!({})));
                }
            }
        }
    }
}

/// Calls `f` on every execution under way (not ended), with its innermost foreach index.
fn visit_seq(seq: &Seq, index: Option<u32>, f: &mut impl FnMut(&Node, Option<u32>)) {
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
    }
}

/// The suspended steps a resume selects, with its checked data (S67–S69, S62).
struct Selection {
    path: String,
    indexes: Vec<u32>,
    data: Value,
}

fn select_resume(run: &RunState, graph: &Graph, req: ResumeRequest) -> Result<Selection, Refusal> {
    if run.status != RunStatus::Suspended {
        return Err(Refusal::NotSuspended {
            run: run.run_id.clone(),
            status: run.status,
        });
    }
    if req.step.is_some() && req.label.is_some() {
        return Err(Refusal::Other(
            "--step and --label cannot be used together; pick one".into(),
        ));
    }
    let all = suspended_list(run, graph);
    let list_paths = |entries: &[&(EntryId, String, SuspendedEntry)]| {
        let mut paths: Vec<&str> = Vec::new();
        for (_, p, _) in entries {
            if !paths.contains(&p.as_str()) {
                paths.push(p);
            }
        }
        paths.join(", ")
    };
    let everything: Vec<&(EntryId, String, SuspendedEntry)> = all.iter().collect();
    let mut chosen: Vec<&(EntryId, String, SuspendedEntry)> = if let Some(step) = &req.step {
        let prefix = format!("{step}.");
        let c: Vec<_> = all
            .iter()
            .filter(|(_, p, _)| p == step || p.starts_with(&prefix))
            .collect();
        if c.is_empty() {
            return Err(Refusal::Other(format!(
                "step {step} is not suspended; suspended steps: {}",
                list_paths(&everything)
            )));
        }
        c
    } else if let Some(label) = &req.label {
        let c: Vec<_> = all
            .iter()
            .filter(|(_, _, e)| e.labels.contains(label))
            .collect();
        if c.is_empty() {
            return Err(Refusal::Other(format!(
                "no suspended step has label {label}; suspended steps: {}",
                list_paths(&everything)
            )));
        }
        c
    } else {
        everything.clone()
    };
    if let Some(n) = req.foreach_index {
        if chosen.iter().all(|(_, _, e)| e.foreach_index.is_none()) {
            return Err(Refusal::Other(format!(
                "step {} is not inside a foreach",
                list_paths(&chosen)
            )));
        }
        let kept: Vec<_> = chosen
            .iter()
            .copied()
            .filter(|(_, _, e)| e.foreach_index == Some(n))
            .collect();
        if kept.is_empty() {
            let items: Vec<String> = chosen
                .iter()
                .filter_map(|(_, _, e)| e.foreach_index.map(|i| i.to_string()))
                .collect();
            return Err(Refusal::Other(format!(
                "item {n} of {} is not suspended; suspended items: {}",
                list_paths(&chosen),
                items.join(", ")
            )));
        }
        chosen = kept;
    }
    let first_path = &chosen[0].1;
    if chosen.iter().any(|(_, p, _)| p != first_path) {
        return Err(Refusal::Other(format!(
            "ambiguous resume: suspended steps {}; pick one with --step or --label",
            list_paths(&chosen)
        )));
    }
    let entry = graph.entry(chosen[0].0);
    let mut data = req.data;
    if let EntryKind::Step(def) = &entry.kind
        && let Some(schema) = &def.schemas.resume
        && let Err(violations) = schema.fill_and_check(&mut data)
    {
        return Err(Refusal::InvalidData {
            message: format!(
                "step {}: resume data: {}",
                entry.path,
                schema::summarize(&violations)
            ),
            violations,
        });
    }
    Ok(Selection {
        path: first_path.clone(),
        indexes: chosen
            .iter()
            .filter_map(|(_, _, e)| e.foreach_index)
            .collect(),
        data,
    })
}

fn suspended_list(run: &RunState, graph: &Graph) -> Vec<(EntryId, String, SuspendedEntry)> {
    let mut found = Vec::new();
    visit_seq(&run.root, None, &mut |node, index| {
        if let NodeKind::Step(StepNode {
            wait: StepWait::Resume { payload, labels },
            ..
        }) = &node.kind
        {
            let path = graph.entry(node.entry).path.clone();
            found.push((
                node.entry,
                path.clone(),
                SuspendedEntry {
                    path,
                    labels: labels.clone(),
                    payload: payload.clone(),
                    foreach_index: index,
                },
            ));
        }
    });
    found.sort_by_key(|(entry, _, e)| (*entry, e.foreach_index));
    found
}

/// The run's suspended list with paths, for records and events (S66).
pub fn suspended(run: &RunState, graph: &Graph) -> Vec<SuspendedEntry> {
    suspended_list(run, graph)
        .into_iter()
        .map(|(_, _, e)| e)
        .collect()
}

/// Where an execution sits: its file instance, visible scopes, item and iteration.
#[derive(Clone)]
struct Frame {
    file: FileId,
    file_key: String,
    /// Result scopes, innermost first.
    scopes: Vec<String>,
    foreach_index: Option<u32>,
    iteration: Option<u32>,
    in_item: bool,
}

impl Frame {
    fn root() -> Self {
        Frame {
            file: 0,
            file_key: String::new(),
            scopes: vec![String::new()],
            foreach_index: None,
            iteration: None,
            in_item: false,
        }
    }
}

struct Cx<'a> {
    graph: &'a Graph,
    now: Millis,
    run_id: &'a str,
    files: &'a mut BTreeMap<String, FileState>,
    results: &'a mut BTreeMap<String, IndexMap<String, Value>>,
    records: &'a mut IndexMap<String, StepRecord>,
    next_token: &'a mut u64,
    cancelling: bool,
    inbox: HashMap<u64, InvocationResult>,
    fired: HashSet<u64>,
    resume: Option<Selection>,
    reissue: bool,
    reissued: Vec<String>,
    cmds: Vec<Command>,
}

impl Cx<'_> {
    fn token(&mut self) -> u64 {
        let t = *self.next_token;
        *self.next_token += 1;
        t
    }

    fn emit(&mut self, frame: &Frame, kind: EventKind, path: &str, data: Value) {
        self.cmds.push(Command::Emit(Tracking {
            kind,
            path: Some(path.to_owned()),
            foreach_index: frame.foreach_index,
            iteration: frame.iteration,
            data,
        }));
    }

    fn ts(&self) -> String {
        rfc3339(self.now)
    }

    fn file_state(&self, frame: &Frame) -> &FileState {
        // A frame's file state exists for as long as the frame's executions do.
        &self.files[&frame.file_key]
    }

    fn bailed(&self, frame: &Frame) -> Option<Value> {
        self.files
            .get(&frame.file_key)
            .and_then(|f| f.bailed.clone())
    }

    /// Outputs visible from `frame`, outer scopes first so inner ones win.
    fn visible_steps(&self, frame: &Frame) -> IndexMap<String, Value> {
        let mut steps = IndexMap::new();
        for scope in frame.scopes.iter().rev() {
            if let Some(map) = self.results.get(scope) {
                for (k, v) in map {
                    steps.insert(k.clone(), v.clone());
                }
            }
        }
        steps
    }

    /// The object expressions see (WORKFLOW-FORMAT.md §1).
    fn expr_input(&self, frame: &Frame, input: &Value) -> Value {
        let file = self.file_state(frame);
        let steps: Map<String, Value> = self.visible_steps(frame).into_iter().collect();
        json!({
            "input": input,
            "state": file.state,
            "init": file.input,
            "steps": steps,
        })
    }

    fn register(&mut self, frame: &Frame, entry: &EntryDef, value: &Value) {
        let scope = self.results.entry(frame.scopes[0].clone()).or_default();
        scope.insert(entry.id.clone(), value.clone());
        if entry.path != entry.id {
            scope.insert(entry.path.clone(), value.clone());
        }
    }

    /// Opens the record of an execution that starts (S7, S31, S36).
    fn record_start(&mut self, frame: &Frame, entry: &EntryDef, input: &Value) {
        let now = self.ts();
        if let (true, Some(index)) = (frame.in_item, frame.foreach_index) {
            let rec = self.put_item(entry, index, StepStatus::Running, input.clone());
            rec.status = StepStatus::Running;
            rec.started_at.get_or_insert(now);
            rec.iteration = frame.iteration;
        } else {
            let mut rec = StepRecord::new(StepStatus::Running);
            rec.input = Some(input.clone());
            rec.started_at = Some(now);
            rec.iteration = frame.iteration;
            self.records.insert(entry.path.clone(), rec);
        }
    }

    /// Records a branch arm that was not taken (S22); inside a foreach item, as that item's
    /// entry, so other items' entries stay.
    fn record_skipped(&mut self, frame: &Frame, entry: &EntryDef) {
        if let (true, Some(index)) = (frame.in_item, frame.foreach_index) {
            self.put_item(entry, index, StepStatus::Skipped, Value::Null);
        } else {
            let mut rec = StepRecord::new(StepStatus::Skipped);
            rec.iteration = frame.iteration;
            self.records.insert(entry.path.clone(), rec);
        }
    }

    /// Sets item `index` of the entry's record (made when missing) to a fresh item record.
    fn put_item(
        &mut self,
        entry: &EntryDef,
        index: u32,
        status: StepStatus,
        input: Value,
    ) -> &mut StepRecord {
        let rec = self
            .records
            .entry(entry.path.clone())
            .or_insert_with(|| StepRecord::new(status));
        let items = rec.items.get_or_insert_with(Vec::new);
        let item = ItemRecord {
            index,
            status,
            input,
            output: None,
            error: None,
            attempts: 0,
        };
        match items.binary_search_by_key(&index, |i| i.index) {
            Ok(pos) => items[pos] = item,
            Err(pos) => items.insert(pos, item),
        }
        rec
    }

    /// Changes an execution's record: `f` sees the record and, inside an item, its item.
    fn record(
        &mut self,
        frame: &Frame,
        entry: &EntryDef,
        f: impl FnOnce(&mut StepRecord, Option<&mut ItemRecord>),
    ) {
        let Some(rec) = self.records.get_mut(&entry.path) else {
            return;
        };
        if let (true, Some(index)) = (frame.in_item, frame.foreach_index) {
            let mut items = rec.items.take().unwrap_or_default();
            let item = items.iter_mut().find(|i| i.index == index);
            f(rec, item);
            rec.items = Some(items);
        } else {
            f(rec, None);
        }
    }

    fn error(&self, frame: &Frame, path: &str, code: &str, message: String) -> ErrorInfo {
        ErrorInfo {
            message,
            code: code.into(),
            step: path.into(),
            details: None,
            foreach_index: frame.foreach_index,
            iteration: frame.iteration,
        }
    }
}

/// RFC 3339 in UTC with milliseconds (S109).
pub fn rfc3339(ms: Millis) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

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

fn drive_seq(seq: &mut Seq, frame: &Frame, cx: &mut Cx) {
    if matches!(seq.phase, Phase::Done(_)) {
        return;
    }
    loop {
        drive_node(&mut seq.current, frame, cx);
        match &seq.current.phase {
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
                        seq.phase = Phase::Done(End::Bail(b));
                        return;
                    }
                    let input = v.clone();
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

fn drive_node(node: &mut Node, frame: &Frame, cx: &mut Cx) {
    if matches!(node.phase, Phase::Done(_)) {
        return;
    }
    let graph = cx.graph;
    let entry = graph.entry(node.entry);
    match &entry.kind {
        EntryKind::Step(def) => drive_step(node, entry, def, frame, cx),
        EntryKind::Map { expr } => {
            start_block(node, entry, frame, cx);
            let input = cx.expr_input(frame, &node.input);
            let end = match expr.eval_one(&input) {
                Ok(v) => End::Success(v),
                Err(e) => End::Failed(cx.error(
                    frame,
                    &entry.path,
                    "expression-error",
                    format!("map {}: {e}", entry.path),
                )),
            };
            end_node(node, entry, frame, cx, end);
        }
        EntryKind::Sleep { ms, until } => drive_sleep(node, entry, *ms, until.as_ref(), frame, cx),
        EntryKind::Parallel { arms } => {
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
        EntryKind::Branch { arms } => {
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
        EntryKind::Foreach { concurrency, .. } => {
            drive_foreach(node, entry, *concurrency, frame, cx)
        }
        EntryKind::Loop {
            test,
            until,
            max_iterations,
            ..
        } => drive_loop(node, entry, test, *until, *max_iterations, frame, cx),
        EntryKind::Workflow { file } => drive_nested(node, entry, *file, frame, cx),
        EntryKind::Group { body } => {
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
    }
}

/// Settles a parallel or branch once no arm runs (S19, S20, S22).
fn finish_arms(node: &mut Node, entry: &EntryDef, frame: &Frame, cx: &mut Cx) {
    let arms: Vec<&Node> = match &node.kind {
        NodeKind::Parallel(arms) => arms.iter().collect(),
        NodeKind::Branch(arms) => arms.iter().flatten().collect(),
        _ => return,
    };
    if arms
        .iter()
        .any(|a| matches!(a.phase, Phase::New | Phase::Running))
    {
        node.phase = Phase::Running;
        return;
    }
    let end = settle_ends(arms.iter().map(|a| &a.phase), frame, cx);
    let end = match end {
        Settled::Suspended => {
            node.phase = Phase::Suspended;
            return;
        }
        Settled::End(end) => end,
        Settled::AllSucceeded => {
            let mut out = Map::new();
            for arm in &arms {
                if let Phase::Done(End::Success(v)) = &arm.phase {
                    out.insert(cx.graph.entry(arm.entry).id.clone(), v.clone());
                }
            }
            End::Success(Value::Object(out))
        }
    };
    cancel_suspended_in(node, cx);
    end_node(node, entry, frame, cx, end);
}

enum Settled {
    Suspended,
    End(End),
    AllSucceeded,
}

/// The precedence of S19 over settled siblings: tripwire, failed, bail, suspended, success.
fn settle_ends<'p>(
    phases: impl Iterator<Item = &'p Phase> + Clone,
    frame: &Frame,
    cx: &Cx,
) -> Settled {
    if cx.cancelling {
        return Settled::End(End::Cancelled);
    }
    for p in phases.clone() {
        if let Phase::Done(End::Tripwire(t)) = p {
            return Settled::End(End::Tripwire(t.clone()));
        }
    }
    for p in phases.clone() {
        if let Phase::Done(End::Failed(e)) = p {
            return Settled::End(End::Failed(e.clone()));
        }
    }
    if phases
        .clone()
        .any(|p| matches!(p, Phase::Done(End::Bail(_))))
        || cx.bailed(frame).is_some()
    {
        let v = cx.bailed(frame).unwrap_or(Value::Null);
        return Settled::End(End::Bail(v));
    }
    if phases.clone().any(|p| matches!(p, Phase::Suspended)) {
        return Settled::Suspended;
    }
    if phases
        .clone()
        .any(|p| matches!(p, Phase::Done(End::Cancelled)))
    {
        return Settled::End(End::Cancelled);
    }
    Settled::AllSucceeded
}

/// Moves a node that holds one sequence (a group, a nested file) along with it.
fn follow_seq(node: &mut Node, entry: &EntryDef, frame: &Frame, cx: &mut Cx) {
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

fn start_block(node: &mut Node, entry: &EntryDef, frame: &Frame, cx: &mut Cx) {
    if node.phase != Phase::New {
        return;
    }
    node.phase = Phase::Running;
    cx.record_start(frame, entry, &node.input);
    if !frame.in_item {
        cx.emit(
            frame,
            EventKind::StepStarted,
            &entry.path,
            json!({ "input": node.input }),
        );
    }
}

/// Ends an execution: its record, its closing event, and what `.steps` sees (S79, S89, S90).
fn end_node(node: &mut Node, entry: &EntryDef, frame: &Frame, cx: &mut Cx, end: End) {
    let now = cx.ts();
    let is_step = matches!(entry.kind, EntryKind::Step(_));
    match &end {
        End::Success(v) | End::Bail(v) => {
            let bailed = is_step && matches!(end, End::Bail(_));
            cx.record(frame, entry, |rec, item| {
                rec.status = StepStatus::Success;
                rec.ended_at = Some(now);
                if let Some(item) = item {
                    item.status = StepStatus::Success;
                    item.output = Some(v.clone());
                } else {
                    rec.output = Some(v.clone());
                }
                if bailed {
                    rec.bail = Some(true);
                }
            });
            cx.register(frame, entry, v);
            if !frame.in_item {
                let mut data = json!({ "output": v });
                if bailed {
                    data["bail"] = Value::Bool(true);
                }
                cx.emit(frame, EventKind::StepSucceeded, &entry.path, data);
            }
        }
        End::Failed(e) => {
            cx.record(frame, entry, |rec, item| {
                rec.status = StepStatus::Failed;
                rec.ended_at = Some(now);
                if let Some(item) = item {
                    item.status = StepStatus::Failed;
                    item.error = Some(e.clone());
                } else {
                    rec.error = Some(e.clone());
                }
            });
            if !frame.in_item {
                cx.emit(
                    frame,
                    EventKind::StepFailed,
                    &entry.path,
                    json!({ "error": e }),
                );
            }
        }
        End::Tripwire(t) => {
            cx.record(frame, entry, |rec, item| {
                rec.status = StepStatus::Failed;
                rec.ended_at = Some(now);
                rec.tripwire = Some(t.clone());
                if let Some(item) = item {
                    item.status = StepStatus::Failed;
                }
            });
            if !frame.in_item {
                let error = cx.records.get(&entry.path).and_then(|r| r.error.clone());
                let mut data = json!({ "tripwire": t });
                if let Some(error) = error {
                    data["error"] = json!(error);
                }
                cx.emit(frame, EventKind::StepFailed, &entry.path, data);
            }
        }
        End::Cancelled => {
            cx.record(frame, entry, |rec, item| {
                rec.status = StepStatus::Cancelled;
                rec.ended_at = Some(now);
                if let Some(item) = item {
                    item.status = StepStatus::Cancelled;
                }
            });
        }
    }
    node.phase = Phase::Done(end);
}

/// Marks every suspended execution under `node` `cancelled` (S74).
fn cancel_suspended_in(node: &mut Node, cx: &mut Cx) {
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

fn drive_step(node: &mut Node, entry: &EntryDef, def: &StepDef, frame: &Frame, cx: &mut Cx) {
    if node.phase == Phase::New {
        node.phase = Phase::Running;
        let mut input = std::mem::take(&mut node.input);
        let invalid = def
            .schemas
            .input
            .as_ref()
            .and_then(|s| s.fill_and_check(&mut input).err());
        node.input = input;
        cx.record_start(frame, entry, &node.input);
        cx.record(frame, entry, |rec, _| rec.attempts = Some(0));
        if !frame.in_item {
            cx.emit(
                frame,
                EventKind::StepStarted,
                &entry.path,
                json!({ "input": node.input }),
            );
        }
        node.kind = NodeKind::Step(StepNode {
            attempt: 0,
            resume: None,
            wait: StepWait::Nothing,
        });
        if cx.cancelling {
            end_node(node, entry, frame, cx, End::Cancelled);
            return;
        }
        if let Some(violations) = invalid {
            let mut err = cx.error(
                frame,
                &entry.path,
                "invalid-input",
                format!(
                    "step {}: input: {}",
                    entry.path,
                    schema::summarize(&violations)
                ),
            );
            err.details = Some(schema::details(&violations));
            end_node(node, entry, frame, cx, End::Failed(err));
            return;
        }
        invoke(node, entry, def, frame, cx);
        return;
    }
    let NodeKind::Step(step) = &mut node.kind else {
        return;
    };
    match &step.wait {
        StepWait::Invocation { token, state } => {
            let token = *token;
            if cx.reissue {
                if cx.cancelling {
                    end_node(node, entry, frame, cx, End::Cancelled);
                    return;
                }
                let state = state.clone();
                let attempt = step.attempt;
                cx.reissued
                    .push(format!("{} (attempt {})", entry.path, attempt));
                issue(node, entry, def, frame, cx, token, state);
                return;
            }
            if let Some(result) = cx.inbox.remove(&token) {
                handle_result(node, entry, def, frame, cx, result);
            }
        }
        StepWait::Retry { token, until } => {
            let (token, until) = (*token, *until);
            if cx.cancelling {
                end_node(node, entry, frame, cx, End::Cancelled);
            } else if cx.reissue {
                cx.cmds.push(Command::Timer { token, at: until });
            } else if cx.fired.remove(&token) {
                invoke(node, entry, def, frame, cx);
            }
        }
        StepWait::Resume { payload, .. } => {
            if cx.cancelling {
                step.wait = StepWait::Nothing;
                end_node(node, entry, frame, cx, End::Cancelled);
                return;
            }
            let selected = cx.resume.as_ref().is_some_and(|sel| {
                sel.path == entry.path
                    && (sel.indexes.is_empty()
                        || frame
                            .foreach_index
                            .is_some_and(|i| sel.indexes.contains(&i)))
            });
            if !selected {
                return;
            }
            let Some(sel) = cx.resume.as_ref() else {
                return;
            };
            let data = sel.data.clone();
            step.resume = Some(Resumption {
                data: data.clone(),
                suspend_payload: payload.clone(),
            });
            step.attempt = 0;
            step.wait = StepWait::Nothing;
            node.phase = Phase::Running;
            let now = cx.ts();
            cx.record(frame, entry, |rec, item| {
                rec.status = StepStatus::Running;
                rec.resumed_at = Some(now);
                rec.resume_data = Some(data);
                rec.ended_at = None;
                if let Some(item) = item {
                    item.status = StepStatus::Running;
                }
            });
            if !frame.in_item {
                cx.emit(
                    frame,
                    EventKind::StepStarted,
                    &entry.path,
                    json!({ "input": node.input, "resume": true }),
                );
            }
            invoke(node, entry, def, frame, cx);
        }
        StepWait::Nothing => {}
    }
}

/// Issues a new invocation of the step at its current attempt.
fn invoke(node: &mut Node, entry: &EntryDef, def: &StepDef, frame: &Frame, cx: &mut Cx) {
    let token = cx.token();
    let state = cx.file_state(frame).state.clone();
    issue(node, entry, def, frame, cx, token, state);
}

fn issue(
    node: &mut Node,
    entry: &EntryDef,
    def: &StepDef,
    frame: &Frame,
    cx: &mut Cx,
    token: u64,
    state: Value,
) {
    let NodeKind::Step(step) = &mut node.kind else {
        return;
    };
    let attempt = step.attempt;
    let call = StepCall {
        run_id: cx.run_id.to_owned(),
        workflow_id: cx.graph.file(entry.file).id.clone(),
        step_path: entry.path.clone(),
        attempt,
        input: node.input.clone(),
        config: def.config.clone(),
        state: state.clone(),
        resume: step.resume.clone(),
        foreach_index: frame.foreach_index,
        iteration: frame.iteration,
    };
    step.wait = StepWait::Invocation { token, state };
    let view = StepsView {
        init: cx.file_state(frame).input.clone(),
        steps: cx.visible_steps(frame),
    };
    cx.record(frame, entry, |rec, item| {
        rec.attempts = Some(attempt + 1);
        rec.status = StepStatus::Running;
        if let Some(item) = item {
            item.attempts = attempt + 1;
            item.status = StepStatus::Running;
        }
    });
    cx.cmds.push(Command::Invoke(Box::new(Invoke {
        token,
        plugin: def.plugin.clone(),
        step: def.step.clone(),
        call,
        timeout_ms: def.timeout_ms,
        view,
    })));
}

fn handle_result(
    node: &mut Node,
    entry: &EntryDef,
    def: &StepDef,
    frame: &Frame,
    cx: &mut Cx,
    result: InvocationResult,
) {
    if cx.cancelling {
        // S77: whatever returns after a cancel is discarded.
        if let NodeKind::Step(s) = &mut node.kind {
            s.wait = StepWait::Nothing;
        }
        end_node(node, entry, frame, cx, End::Cancelled);
        return;
    }
    let failure = match result.outcome {
        Ok(StepOutcome::Done(output)) => {
            let checked = match &def.schemas.output {
                Some(schema) => schema.check(&output).map_err(|v| {
                    StepFailure::new(
                        "invalid-output",
                        format!("step {}: output: {}", entry.path, schema::summarize(&v)),
                    )
                    .with_details(schema::details(&v))
                }),
                None => Ok(()),
            };
            match checked.and_then(|()| apply_patches(cx, frame, entry, &result.patches)) {
                Ok(()) => {
                    set_wait(node, StepWait::Nothing);
                    end_node(node, entry, frame, cx, End::Success(output));
                    return;
                }
                Err(f) => f,
            }
        }
        Ok(StepOutcome::Suspend { payload, labels }) => {
            let checked = match &def.schemas.suspend {
                Some(schema) => schema.check(&payload).map_err(|v| {
                    StepFailure::new(
                        "invalid-suspend-payload",
                        format!(
                            "step {}: suspend payload: {}",
                            entry.path,
                            schema::summarize(&v)
                        ),
                    )
                    .with_details(schema::details(&v))
                }),
                None => Ok(()),
            };
            match checked.and_then(|()| apply_patches(cx, frame, entry, &result.patches)) {
                Ok(()) => {
                    suspend(node, entry, frame, cx, payload, labels);
                    return;
                }
                Err(f) => f,
            }
        }
        Ok(StepOutcome::Bail(value)) => match apply_patches(cx, frame, entry, &result.patches) {
            Ok(()) => {
                if let Some(file) = cx.files.get_mut(&frame.file_key) {
                    file.bailed.get_or_insert_with(|| value.clone());
                }
                set_wait(node, StepWait::Nothing);
                end_node(node, entry, frame, cx, End::Bail(value));
                return;
            }
            Err(f) => f,
        },
        Err(f) => f,
    };
    fail_attempt(node, entry, def, frame, cx, failure);
}

fn set_wait(node: &mut Node, wait: StepWait) {
    if let NodeKind::Step(s) = &mut node.kind {
        s.wait = wait;
    }
}

fn suspend(
    node: &mut Node,
    entry: &EntryDef,
    frame: &Frame,
    cx: &mut Cx,
    payload: Value,
    labels: Vec<String>,
) {
    let now = cx.ts();
    cx.record(frame, entry, |rec, item| {
        rec.status = StepStatus::Suspended;
        rec.suspend_payload = Some(payload.clone());
        rec.labels = Some(labels.clone());
        rec.suspended_at = Some(now);
        if let Some(item) = item {
            item.status = StepStatus::Suspended;
        }
    });
    cx.emit(
        frame,
        EventKind::StepSuspended,
        &entry.path,
        json!({ "payload": payload, "labels": labels }),
    );
    set_wait(node, StepWait::Resume { payload, labels });
    node.phase = Phase::Suspended;
}

/// A failed attempt: retry when allowed (S51–S56), else end the step `failed` (or tripwire).
fn fail_attempt(
    node: &mut Node,
    entry: &EntryDef,
    def: &StepDef,
    frame: &Frame,
    cx: &mut Cx,
    failure: StepFailure,
) {
    let mut error = cx.error(frame, &entry.path, &failure.code, failure.message.clone());
    error.details = failure.details.clone().map(|d| match d {
        Value::Object(_) => d,
        other => json!({ "value": other }),
    });
    if let Some(t) = &failure.tripwire {
        let info = TripwireInfo {
            reason: t.reason.clone(),
            retry: t.retry,
            metadata: t.metadata.clone().unwrap_or(Value::Null),
            processor_id: t.processor_id.clone(),
        };
        cx.record(frame, entry, |rec, _| rec.error = Some(error.clone()));
        set_wait(node, StepWait::Nothing);
        end_node(node, entry, frame, cx, End::Tripwire(info));
        return;
    }
    let NodeKind::Step(step) = &mut node.kind else {
        return;
    };
    let retryable =
        failure.retryable && failure.code != "invalid-input" && failure.code != "cancelled";
    let next = step.attempt + 1;
    if retryable && next < def.retry.attempts {
        let delay = def.retry.delay_before(next);
        step.attempt = next;
        cx.emit(
            frame,
            EventKind::StepRetrying,
            &entry.path,
            json!({ "attempt": next, "delay_ms": delay, "error": error }),
        );
        if delay == 0 {
            invoke(node, entry, def, frame, cx);
        } else {
            let token = cx.token();
            let until = cx
                .now
                .saturating_add(i64::try_from(delay).unwrap_or(i64::MAX));
            step.wait = StepWait::Retry { token, until };
            cx.cmds.push(Command::Timer { token, at: until });
        }
        return;
    }
    step.wait = StepWait::Nothing;
    end_node(node, entry, frame, cx, End::Failed(error));
}

/// Applies an invocation's patches to its file's state, all or none (S16, S47–S49).
fn apply_patches(
    cx: &mut Cx,
    frame: &Frame,
    entry: &EntryDef,
    patches: &[Value],
) -> Result<(), StepFailure> {
    if patches.is_empty() {
        return Ok(());
    }
    let schema = cx.graph.file(frame.file).state_schema.as_ref();
    let Some(file) = cx.files.get_mut(&frame.file_key) else {
        return Ok(());
    };
    let mut state = file.state.clone();
    let mut written = Vec::new();
    for patch in patches {
        let Value::Object(members) = patch else {
            return Err(StepFailure::new(
                "invalid-state-patch",
                format!("step {}: a state patch must be a JSON object", entry.path),
            ));
        };
        if !state.is_object() {
            state = Value::Object(Map::new());
        }
        for (k, v) in members {
            state[k.as_str()] = v.clone();
            written.push(k.clone());
        }
        if let Some(schema) = schema
            && let Err(v) = schema.check(&state)
        {
            return Err(StepFailure::new(
                "invalid-state",
                format!("step {}: state: {}", entry.path, schema::summarize(&v)),
            )
            .with_details(schema::details(&v)));
        }
    }
    file.state = state;
    for key in written {
        if !file.written.contains(&key) {
            file.written.push(key);
        }
    }
    Ok(())
}

fn drive_sleep(
    node: &mut Node,
    entry: &EntryDef,
    ms: Option<u64>,
    until: Option<&super::expr::Expr>,
    frame: &Frame,
    cx: &mut Cx,
) {
    if node.phase == Phase::New {
        start_block(node, entry, frame, cx);
        let wake = match (ms, until) {
            (Some(ms), _) => Ok(cx.now.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX))),
            (None, Some(expr)) => {
                let input = cx.expr_input(frame, &node.input);
                expr.eval_one(&input).and_then(|v| match v {
                    Value::String(s) => chrono::DateTime::parse_from_rfc3339(&s)
                        .map(|d| d.timestamp_millis())
                        .map_err(|e| format!("`{s}` is not an RFC 3339 instant: {e}")),
                    other => Err(format!("expected an RFC 3339 string, got {other}")),
                })
            }
            (None, None) => Ok(cx.now),
        };
        match wake {
            Err(e) => {
                let err = cx.error(
                    frame,
                    &entry.path,
                    "expression-error",
                    format!("sleep {}: until: {e}", entry.path),
                );
                end_node(node, entry, frame, cx, End::Failed(err));
            }
            Ok(at) if at <= cx.now || cx.cancelling => {
                let end = if cx.cancelling {
                    End::Cancelled
                } else {
                    End::Success(node.input.clone())
                };
                end_node(node, entry, frame, cx, end);
            }
            Ok(at) => {
                let token = cx.token();
                node.kind = NodeKind::Sleep { token, until: at };
                cx.record(frame, entry, |rec, item| {
                    rec.status = StepStatus::Waiting;
                    if let Some(item) = item {
                        item.status = StepStatus::Waiting;
                    }
                });
                cx.emit(
                    frame,
                    EventKind::StepWaiting,
                    &entry.path,
                    json!({ "until": rfc3339(at) }),
                );
                cx.cmds.push(Command::Timer { token, at });
            }
        }
        return;
    }
    let NodeKind::Sleep { token, until } = node.kind else {
        return;
    };
    if cx.cancelling {
        end_node(node, entry, frame, cx, End::Cancelled);
    } else if cx.fired.remove(&token) {
        let out = node.input.clone();
        end_node(node, entry, frame, cx, End::Success(out));
    } else if cx.reissue {
        cx.cmds.push(Command::Timer { token, at: until });
    }
}

fn drive_foreach(node: &mut Node, entry: &EntryDef, concurrency: u32, frame: &Frame, cx: &mut Cx) {
    if node.phase == Phase::New {
        start_block(node, entry, frame, cx);
        let len = match &node.input {
            Value::Array(a) => a.len(),
            other => {
                let err = cx.error(
                    frame,
                    &entry.path,
                    "not-an-array",
                    format!(
                        "foreach {}: input must be an array, got {}",
                        entry.path,
                        json_type(other)
                    ),
                );
                end_node(node, entry, frame, cx, End::Failed(err));
                return;
            }
        };
        if len == 0 {
            end_node(node, entry, frame, cx, End::Success(json!([])));
            return;
        }
        node.kind = NodeKind::Foreach(ForeachNode {
            items: vec![Item::Pending; len],
            done: 0,
            started: 0,
            active: Vec::new(),
            stopped: false,
        });
    }
    let EntryKind::Foreach { body, .. } = &entry.kind else {
        return;
    };
    let NodeKind::Foreach(fe) = &mut node.kind else {
        return;
    };
    let total = fe.items.len();
    let item_frame = |i: usize| {
        let mut f = frame.clone();
        f.scopes
            .insert(0, format!("{}/{}#{i}", frame.scopes[0], entry.path));
        f.foreach_index = Some(i as u32);
        f.in_item = true;
        f
    };
    loop {
        let mut at = 0;
        while at < fe.active.len() {
            let i = fe.active[at] as usize;
            let Item::Active {
                body: seq,
                reported_suspended,
            } = &mut fe.items[i]
            else {
                fe.active.remove(at);
                continue;
            };
            let f = item_frame(i);
            drive_seq(seq, &f, cx);
            match &seq.phase {
                Phase::New | Phase::Running => *reported_suspended = false,
                Phase::Suspended => {
                    if !*reported_suspended {
                        *reported_suspended = true;
                        let done = fe.done;
                        cx.emit(
                            frame,
                            EventKind::StepProgress,
                            &entry.path,
                            json!({"index": i, "status": "suspended", "done": done, "total": total}),
                        );
                    }
                }
                Phase::Done(end) => {
                    let end = end.clone();
                    let mut data = json!({"index": i, "total": total});
                    match &end {
                        End::Success(v) => {
                            fe.done += 1;
                            data["status"] = json!("success");
                            data["output"] = v.clone();
                        }
                        End::Failed(e) => {
                            data["status"] = json!("failed");
                            data["error"] = json!(e);
                        }
                        End::Bail(v) => {
                            data["status"] = json!("success");
                            data["output"] = v.clone();
                        }
                        End::Tripwire(t) => {
                            data["status"] = json!("failed");
                            data["tripwire"] = json!(t);
                        }
                        End::Cancelled => data["status"] = json!("cancelled"),
                    }
                    data["done"] = json!(fe.done);
                    if !matches!(end, End::Cancelled) {
                        cx.emit(frame, EventKind::StepProgress, &entry.path, data);
                    }
                    fe.stopped |= matches!(end, End::Failed(_) | End::Tripwire(_) | End::Bail(_));
                    fe.items[i] = Item::Done(end);
                    fe.active.remove(at);
                    continue;
                }
            }
            at += 1;
        }
        let blocked = cx.cancelling || cx.bailed(frame).is_some() || fe.stopped;
        let slots = (concurrency.max(1) as usize).saturating_sub(fe.active.len());
        let mut started = 0;
        if !blocked {
            let Value::Array(elements) = &node.input else {
                return;
            };
            while started < slots && (fe.started as usize) < total {
                let i = fe.started as usize;
                fe.items[i] = Item::Active {
                    body: Seq::new(ListRef::Body(node.entry), body[0], elements[i].clone()),
                    reported_suspended: false,
                };
                fe.active.push(fe.started);
                fe.started += 1;
                started += 1;
            }
        }
        if started == 0 {
            break;
        }
    }
    let running = fe.active.iter().any(|&i| {
        matches!(&fe.items[i as usize], Item::Active { body, .. } if matches!(body.phase, Phase::Running | Phase::New))
    });
    if running {
        node.phase = Phase::Running;
        return;
    }
    let phases: Vec<Phase> = fe
        .items
        .iter()
        .map(|it| match it {
            Item::Pending => Phase::New,
            Item::Active { body, .. } => body.phase.clone(),
            Item::Done(end) => Phase::Done(end.clone()),
        })
        .collect();
    let pending = phases.contains(&Phase::New);
    let settled = settle_ends(phases.iter().filter(|p| **p != Phase::New), frame, cx);
    let end = match settled {
        Settled::Suspended => {
            node.phase = Phase::Suspended;
            return;
        }
        Settled::AllSucceeded if pending && cx.cancelling => End::Cancelled,
        Settled::AllSucceeded if pending => {
            // Cannot happen: free slots start pending items. Stay running rather than lose them.
            node.phase = Phase::Running;
            return;
        }
        Settled::AllSucceeded => End::Success(Value::Array(
            fe.items
                .iter()
                .map(|it| match it {
                    Item::Done(End::Success(v)) => v.clone(),
                    _ => Value::Null,
                })
                .collect(),
        )),
        Settled::End(end) => end,
    };
    let prefix = format!("{}/{}#", frame.scopes[0], entry.path);
    cx.results.retain(|k, _| !k.starts_with(&prefix));
    cancel_suspended_in(node, cx);
    end_node(node, entry, frame, cx, end);
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Iterations a loop may run in one drive pass before the rest waits for an immediate timer.
const LOOP_ITERATIONS_PER_PASS: u32 = 10_000;

#[allow(clippy::too_many_arguments)]
fn drive_loop(
    node: &mut Node,
    entry: &EntryDef,
    test: &super::expr::Expr,
    until: bool,
    max_iterations: Option<u32>,
    frame: &Frame,
    cx: &mut Cx,
) {
    if node.phase == Phase::New {
        start_block(node, entry, frame, cx);
        node.kind = NodeKind::Loop {
            iteration: 1,
            body: Seq::new(
                ListRef::Body(node.entry),
                first_body(cx.graph, node.entry),
                node.input.clone(),
            ),
        };
    }
    let mut passes = 0;
    loop {
        let NodeKind::Loop { iteration, body } = &mut node.kind else {
            return;
        };
        let mut f = frame.clone();
        f.iteration = Some(*iteration);
        drive_seq(body, &f, cx);
        let Phase::Done(End::Success(out)) = &body.phase else {
            follow_seq(node, entry, frame, cx);
            return;
        };
        let out = out.clone();
        if cx.cancelling {
            end_node(node, entry, frame, cx, End::Cancelled);
            return;
        }
        if let Some(b) = cx.bailed(frame) {
            end_node(node, entry, frame, cx, End::Bail(b));
            return;
        }
        let n = *iteration;
        let mut input = cx.expr_input(&f, &node.input);
        input["output"] = out.clone();
        input["iteration"] = json!(n);
        let holds = match test.holds(&input) {
            Ok(h) => h,
            Err(e) => {
                let err = cx.error(
                    &f,
                    &entry.path,
                    "expression-error",
                    format!("loop {}: `{}`: {e}", entry.path, test.source),
                );
                end_node(node, entry, frame, cx, End::Failed(err));
                return;
            }
        };
        if holds == until {
            end_node(node, entry, frame, cx, End::Success(out));
            return;
        }
        if let Some(max) = max_iterations
            && n >= max
        {
            let err = cx.error(
                &f,
                &entry.path,
                "max-iterations",
                format!(
                    "loop {} wanted iteration {} but max-iterations is {max}",
                    entry.path,
                    n + 1
                ),
            );
            end_node(node, entry, frame, cx, End::Failed(err));
            return;
        }
        passes += 1;
        let NodeKind::Loop { iteration, body } = &mut node.kind else {
            return;
        };
        *iteration = n + 1;
        *body = Seq::new(
            ListRef::Body(node.entry),
            first_body(cx.graph, node.entry),
            out,
        );
        if passes >= LOOP_ITERATIONS_PER_PASS {
            // Keep one pass bounded: the next iterations continue on an immediate timer.
            node.phase = Phase::Running;
            let token = cx.token();
            cx.cmds.push(Command::Timer { token, at: cx.now });
            return;
        }
    }
}

fn first_body(graph: &Graph, entry: EntryId) -> EntryId {
    list_entries(graph, ListRef::Body(entry))[0]
}

fn drive_nested(node: &mut Node, entry: &EntryDef, file_id: FileId, frame: &Frame, cx: &mut Cx) {
    let key = format!("{}/{}", frame.scopes[0], entry.path);
    if node.phase == Phase::New {
        start_block(node, entry, frame, cx);
        let file = cx.graph.file(file_id);
        let mut input = node.input.clone();
        if let Some(schema) = &file.input_schema
            && let Err(v) = schema.fill_and_check(&mut input)
        {
            let mut err = cx.error(
                frame,
                &entry.path,
                "invalid-input",
                format!("workflow {}: input: {}", entry.path, schema::summarize(&v)),
            );
            err.details = Some(schema::details(&v));
            end_node(node, entry, frame, cx, End::Failed(err));
            return;
        }
        let mut state = file.initial_state.clone();
        if let (Value::Object(nested), Value::Object(parent)) =
            (&mut state, &cx.file_state(frame).state)
        {
            for (k, v) in parent {
                nested.insert(k.clone(), v.clone());
            }
        }
        if let Some(schema) = &file.state_schema
            && let Err(v) = schema.check(&state)
        {
            let mut err = cx.error(
                frame,
                &entry.path,
                "invalid-state",
                format!("workflow {}: state: {}", entry.path, schema::summarize(&v)),
            );
            err.details = Some(schema::details(&v));
            end_node(node, entry, frame, cx, End::Failed(err));
            return;
        }
        cx.files.insert(
            key.clone(),
            FileState {
                input: input.clone(),
                state,
                written: Vec::new(),
                bailed: None,
            },
        );
        cx.results.insert(key.clone(), IndexMap::new());
        node.kind = NodeKind::Nested(Seq::new(ListRef::File(file_id), file.body[0], input));
    }
    let inner = Frame {
        file: file_id,
        file_key: key.clone(),
        scopes: vec![key.clone()],
        foreach_index: frame.foreach_index,
        iteration: frame.iteration,
        in_item: frame.in_item,
    };
    let NodeKind::Nested(seq) = &mut node.kind else {
        return;
    };
    drive_seq(seq, &inner, cx);
    match seq.phase.clone() {
        Phase::New | Phase::Running => node.phase = Phase::Running,
        Phase::Suspended => node.phase = Phase::Suspended,
        Phase::Done(end) => {
            let nested = cx.files.remove(&key);
            cx.results.remove(&key);
            let end = match end {
                End::Success(v) | End::Bail(v) => {
                    let patch: Map<String, Value> = nested
                        .map(|n| {
                            n.written
                                .iter()
                                .filter_map(|k| n.state.get(k).map(|v| (k.clone(), v.clone())))
                                .collect()
                        })
                        .unwrap_or_default();
                    if patch.is_empty() {
                        End::Success(v)
                    } else {
                        match apply_patches(cx, frame, entry, &[Value::Object(patch)]) {
                            Ok(()) => End::Success(v),
                            Err(f) => {
                                let mut err = cx.error(frame, &entry.path, &f.code, f.message);
                                err.details = f.details;
                                End::Failed(err)
                            }
                        }
                    }
                }
                other => other,
            };
            end_node(node, entry, frame, cx, end);
        }
    }
}

/// Replays a stored event log from a fresh run: the state it rebuilds must equal the live one.
pub fn replay(
    graph: &Graph,
    run_id: String,
    input: Value,
    created_at: Millis,
    events: impl IntoIterator<Item = Event>,
) -> RunState {
    let mut run = new_run(graph, run_id, input, created_at);
    for event in events {
        let _ = advance(&mut run, graph, event);
    }
    run
}
