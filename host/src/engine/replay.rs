//! Replay: folding an orchestration log back into a run state.

use serde_json::Value;

use super::advance::advance;
use super::events::Event;
use super::model::Graph;
use super::start::new_run;
use super::state::RunState;
use super::time::Millis;

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
