//! Reading a run back from the store: its stored records, parsed and checked, and its latest
//! state (the snapshot, with the records after it folded in again).

use std::sync::Arc;

use super::actor::Position;
use super::{Runtime, RuntimeError, checked};
use crate::engine::{self, Graph, RunState};
use crate::store::{RecordKey, Store};

use super::codec::RecordIn;

impl Runtime {
    /// The run's latest state: its snapshot, with the log events after it folded in again.
    pub(super) fn load(&self, run_id: &str) -> Result<(RunState, Arc<Graph>), RuntimeError> {
        self.load_counted(run_id)
            .map(|(state, graph, _)| (state, graph))
    }

    /// [`Runtime::load`], with where its stored records stand for an actor taking it up.
    pub(super) fn load_counted(
        &self,
        run_id: &str,
    ) -> Result<(RunState, Arc<Graph>, Position), RuntimeError> {
        let store = &self.inner.store;
        let definition = store
            .definition(run_id)?
            .ok_or_else(|| RuntimeError::UnknownRun(run_id.into()))?;
        let graph = self.inner.graphs.of(run_id, definition)?;
        let (mut state, mut last, from, snapshot_len, written) = match store.snapshot(run_id)? {
            Some(bytes) => {
                let snap = checked::snapshot(run_id, &bytes, &graph)?;
                let (seq, sub) = snap.covers;
                let covers = Some(snap.covers);
                (
                    snap.state,
                    covers,
                    (seq, sub + 1),
                    bytes.len(),
                    snap.written,
                )
            }
            None => {
                let base = store
                    .base(run_id)?
                    .ok_or_else(|| RuntimeError::UnknownRun(run_id.into()))?;
                (checked::base(run_id, &base, &graph)?, None, (0, 0), 0, 0)
            }
        };
        let stored = store.records(run_id, from)?;
        // A new actor counts these toward its next snapshot: a run taken up again and again (a
        // resume in another process each time) still folds at most a snapshot's worth.
        let since_snapshot: usize = stored.iter().map(|(_, bytes)| bytes.len()).sum();
        let records = parse_records(run_id, stored)?;
        if let Some((at, _)) = records.last() {
            last = Some(*at);
        }
        engine::fold(
            &mut state,
            &graph,
            records.into_iter().filter_map(|(_, record)| record.log),
        );
        let (next_seq, next_sub) = last.map_or((1, 0), |(seq, sub)| (seq + 1, sub + 1));
        let at = Position {
            next_seq,
            next_sub,
            since_snapshot,
            snapshot_len,
            written: written.saturating_add(since_snapshot as u64),
            // The run's last change is when its last stored events were stamped, or later.
            last_event_at: state.updated_at,
        };
        Ok((state, graph, at))
    }
}

/// The run's records from `from` on, parsed.
pub(super) fn read_records(
    store: &dyn Store,
    run_id: &str,
    from: RecordKey,
) -> Result<Vec<(RecordKey, RecordIn)>, RuntimeError> {
    parse_records(run_id, store.records(run_id, from)?)
}

/// The run's stored records, parsed.
fn parse_records(
    run_id: &str,
    stored: Vec<(RecordKey, Vec<u8>)>,
) -> Result<Vec<(RecordKey, RecordIn)>, RuntimeError> {
    stored
        .into_iter()
        .map(|(at, bytes)| checked::record(run_id, &bytes).map(|r| (at, r)))
        .collect()
}
