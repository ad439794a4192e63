//! A transition's tracking events between the core and the store: numbered, written into the
//! run's record as stored events, and made into [`StoredEvent`]s only for a watcher.
//!
//! Most events are only written and dropped (nobody watches the run), so they carry no copy
//! of the run's id or of their instant, and a step's input or output stays shared with the
//! run's state (the core's `EventData::Keyed`) until a watcher needs an event of its own.

use serde::Serialize;
use serde::ser::{SerializeSeq, SerializeTuple};

use super::StoredEvent;
use crate::engine::Tracking;

/// A tracking event numbered by its run's `seq`.
pub(crate) struct NewEvent {
    pub seq: u64,
    pub tracking: Tracking,
}

/// The events a record stores, all stamped with one instant.
pub(crate) struct NewEvents {
    /// RFC 3339.
    pub at: String,
    pub events: Vec<NewEvent>,
}

impl NewEvents {
    /// The first and last `seq`, unless there is no event.
    pub(super) fn seqs(&self) -> Option<(u64, u64)> {
        Some((self.events.first()?.seq, self.events.last()?.seq))
    }

    /// The events as watchers and readers get them.
    pub(super) fn into_stored(self, run_id: &str) -> Vec<StoredEvent> {
        let at = self.at;
        self.events
            .into_iter()
            .map(|e| StoredEvent {
                seq: e.seq,
                run_id: run_id.to_owned(),
                at: at.clone(),
                kind: e.tracking.kind,
                path: e.tracking.path,
                foreach_index: e.tracking.foreach_index,
                iteration: e.tracking.iteration,
                data: e.tracking.data.into_value(),
            })
            .collect()
    }

    /// The events as their record holds them ([`super::codec::end_record`]).
    pub(super) fn written(&self) -> Written<'_> {
        Written { batch: self }
    }
}

/// [`NewEvents`] serialized as their record holds them: each event an array of its members
/// `[seq, type, path, foreach_index, iteration, data]`, `nil` for one it lacks, in the order of
/// [`StoredEvent`]'s. The run's id and the batch's instant are not repeated in every event:
/// the record's key names the run, and the record holds the instant once.
pub(crate) struct Written<'a> {
    batch: &'a NewEvents,
}

/// One event as written: [`Written`]'s array.
struct EventOut<'a>(&'a NewEvent);

impl Serialize for EventOut<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (e, t) = (self.0, &self.0.tracking);
        let mut tuple = s.serialize_tuple(6)?;
        tuple.serialize_element(&e.seq)?;
        tuple.serialize_element(&t.kind)?;
        tuple.serialize_element(&t.path)?;
        tuple.serialize_element(&t.foreach_index)?;
        tuple.serialize_element(&t.iteration)?;
        tuple.serialize_element(&t.data)?;
        tuple.end()
    }
}

impl Written<'_> {
    /// The instant every event of the batch was stored at (RFC 3339).
    pub(super) fn at(&self) -> &str {
        &self.batch.at
    }

    /// Whether the batch holds no event.
    pub(super) fn is_empty(&self) -> bool {
        self.batch.events.is_empty()
    }
}

impl Serialize for Written<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.batch.events.len()))?;
        for e in &self.batch.events {
            seq.serialize_element(&EventOut(e))?;
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::*;
    use crate::engine::{EventData, EventKind};

    fn batch() -> NewEvents {
        let tracking = |kind, path: Option<&str>, data| Tracking {
            kind,
            path: path.map(str::to_owned),
            foreach_index: None,
            iteration: Some(2),
            data,
        };
        NewEvents {
            at: "2026-11-30T08:00:00.000Z".into(),
            events: vec![
                NewEvent {
                    seq: 7,
                    tracking: tracking(
                        EventKind::StepSucceeded,
                        Some("a"),
                        EventData::Keyed("output", Arc::new(json!({"n": 1}))),
                    ),
                },
                NewEvent {
                    seq: 8,
                    tracking: tracking(EventKind::RunCancelled, None, Value::Null.into()),
                },
            ],
        }
    }

    #[test]
    fn s87_events_are_written_as_arrays_of_their_members_without_the_run_or_the_instant() {
        let events = batch();
        assert_eq!(events.seqs(), Some((7, 8)));
        assert_eq!(events.written().at(), "2026-11-30T08:00:00.000Z");
        let written = serde_json::to_value(events.written()).expect("serializes");
        assert_eq!(
            written,
            json!([
                [7, "step-succeeded", "a", null, 2, {"output": {"n": 1}}],
                [8, "run-cancelled", null, null, 2, null],
            ])
        );
        let stored = events.into_stored("r1");
        assert_eq!(stored[0].data, json!({"output": {"n": 1}}));
        assert_eq!(stored[1].data, Value::Null);
    }
}
