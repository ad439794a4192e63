//! Replay: folding an orchestration log back into a run state.

#[cfg(test)]
use serde_json::Value;

use super::advance::advance;
use super::events::Event;
use super::model::Graph;
#[cfg(test)]
use super::start::new_run;
use super::state::RunState;
#[cfg(test)]
use super::time::Millis;

/// Folds stored orchestration events into `run`, in order: the one way a state is rebuilt, by
/// the driver from a snapshot and the records after it, and by `replay` (in tests) from a fresh run.
/// A refused event was stored only if it changed nothing; it changes nothing now.
pub(crate) fn fold(run: &mut RunState, graph: &Graph, events: impl IntoIterator<Item = Event>) {
    for event in events {
        let _ = advance(run, graph, event);
    }
}

/// Replays a stored event log from a fresh run: the state it rebuilds must equal the live one
/// (the property and recovery tests' check of [`fold`]).
#[cfg(test)]
pub(crate) fn replay(
    graph: &Graph,
    run_id: String,
    input: Value,
    created_at: Millis,
    events: impl IntoIterator<Item = Event>,
) -> RunState {
    let mut run = new_run(graph, run_id, input, created_at);
    fold(&mut run, graph, events);
    run
}

/// The scenarios of this file: its tests, and a part of the corpus the machines' transition
/// tables are checked against (`engine::transitions`).
#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::super::sim::{
        Sim, done, fail, file, foreach, map, parallel, sleep_ms, step, suspend,
    };
    use super::super::transitions::scenarios;
    use super::super::{RunState, RunStatus};
    use super::*;

    #[test]
    fn s100_a_snapshot_anywhere_with_the_records_after_it_folds_to_the_live_state() {
        let mut sim = Sim::new(
            file(
                "w",
                vec![
                    parallel(
                        "p",
                        vec![step("a").retry(2, 50, 1.0, None), sleep_ms("z", 20)],
                    ),
                    map("m", ".input.a"),
                    foreach("f", 2, vec![step("s")]),
                ],
            ),
            json!([1, 2, 3]),
        )
        .on(
            "p.a",
            [fail("x"), suspend(json!({}), &[]), done(json!([4, 5]))],
        )
        .started();
        sim.resume(None, None, None, json!({})).expect("resumed");
        assert_eq!(sim.status(), RunStatus::Success);
        for cut in 0..=sim.log.len() {
            let snapshot = replay(
                &sim.graph,
                "run".into(),
                json!([1, 2, 3]),
                1_000,
                sim.log[..cut].to_vec(),
            );
            let bytes = serde_json::to_vec(&snapshot).expect("serializes");
            let mut state: RunState = serde_json::from_slice(&bytes).expect("reads back");
            fold(&mut state, &sim.graph, sim.log[cut..].to_vec());
            assert_eq!(state, sim.run, "snapshot after {cut} events");
        }
    }

    /// Every test above, by name.
    pub(crate) const SCENARIOS: &[(&str, fn())] =
        scenarios![s100_a_snapshot_anywhere_with_the_records_after_it_folds_to_the_live_state,];
}
