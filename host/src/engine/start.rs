//! Creating a run: its first state, its checked input, and the `run-started` event.

use std::collections::BTreeMap;

use indexmap::IndexMap;
use serde_json::{Map, Value, json};

use super::commands::{Command, EventKind, Tracking};
use super::model::Graph;
use super::nodes::{ListRef, Seq};
use super::schema::Violation;
use super::state::{FileState, RunState, RunStatus, STATE_FORMAT};
use super::time::Millis;

/// The most records a new run makes room for before its first step starts.
const RECORDS_UP_FRONT: usize = 32;

/// A new, `pending` run of `graph` (S114). `input` must already have passed
/// [`check_run_input`]; `at` is the creation time.
pub(crate) fn new_run(graph: &Graph, run_id: String, input: Value, at: Millis) -> RunState {
    let root = graph.root();
    let mut files = BTreeMap::new();
    files.insert(
        String::new(),
        FileState {
            input: std::sync::Arc::new(input.clone()),
            state: std::sync::Arc::new(root.initial_state.clone()),
            written: Vec::new(),
            bailed: None,
        },
    );
    let mut results = BTreeMap::new();
    results.insert(String::new(), Default::default());
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
        // A record per entry that runs (items share their entry's): room for every entry of
        // a small graph up front, rather than growing the map three or four times per run.
        records: IndexMap::with_capacity_and_hasher(
            graph.entries.len().min(RECORDS_UP_FRONT),
            super::KeyHasher::default(),
        ),
        next_token: 1,
        cancelling: false,
        result: None,
        error: None,
        tripwire: None,
        restarted_from: None,
        tool_call_of: None,
        value_limit: crate::limits::DEFAULT_MAX_VALUE_BYTES,
        stopped: None,
        tags: BTreeMap::new(),
    }
}

/// Fills the run input's defaults and checks it against the top-level `input-schema` (S57, S58).
pub(crate) fn check_run_input(graph: &Graph, input: &mut Value) -> Result<(), Vec<Violation>> {
    match &graph.root().input_schema {
        Some(schema) => schema.fill_and_check(input),
        None => Ok(()),
    }
}

/// The `run-started` event of `run` (S88).
pub(crate) fn run_started(run: &RunState) -> Command {
    // Built member by member: `json!` would copy each value through serde, a copy of a copy.
    let mut data = Map::with_capacity(4);
    data.insert("workflow_id".into(), Value::String(run.workflow_id.clone()));
    data.insert("input".into(), Value::clone(&run.input));
    let state = run.files.get("").map(|f| Value::clone(&f.state));
    data.insert("state".into(), state.unwrap_or(Value::Null));
    if let Some(from) = &run.restarted_from {
        data.insert("restarted_from".into(), json!(from));
    }
    let data = Value::Object(data);
    Command::Emit(Tracking {
        kind: EventKind::RunStarted,
        path: None,
        foreach_index: None,
        iteration: None,
        data: data.into(),
    })
}
