//! A transition's tracking events between the core and the store: numbered, written into the
//! run's record as stored events, and made into [`StoredEvent`]s only for a watcher.
//!
//! Most events are only written and dropped (nobody watches the run), so they carry no copy
//! of the run's id or of their instant, and a step's input or output stays shared with the
//! run's state ([`EventData::Keyed`]) until a watcher needs an event of its own.

use serde::Serialize;
use serde::ser::SerializeSeq;

use super::StoredEvent;
use crate::engine::{EventData, EventKind, Tracking};

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
    pub fn seqs(&self) -> Option<(u64, u64)> {
        Some((self.events.first()?.seq, self.events.last()?.seq))
    }

    /// The events as watchers and readers get them.
    pub fn into_stored(self, run_id: &str) -> Vec<StoredEvent> {
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

    /// The events as their record holds them: the members of [`StoredEvent`], in its order.
    pub fn written<'a>(&'a self, run_id: &'a str) -> Written<'a> {
        Written {
            run_id,
            batch: self,
        }
    }
}

/// [`NewEvents`] serialized as the stored events they become.
pub(crate) struct Written<'a> {
    run_id: &'a str,
    batch: &'a NewEvents,
}

/// One event as written; its members are [`StoredEvent`]'s, which reads it back.
#[derive(Serialize)]
struct EventOut<'a> {
    seq: u64,
    run_id: &'a str,
    at: &'a str,
    #[serde(rename = "type")]
    kind: EventKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    foreach_index: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    iteration: Option<u32>,
    #[serde(skip_serializing_if = "EventData::is_null")]
    data: &'a EventData,
}

impl Serialize for Written<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.batch.events.len()))?;
        for e in &self.batch.events {
            let t = &e.tracking;
            seq.serialize_element(&EventOut {
                seq: e.seq,
                run_id: self.run_id,
                at: &self.batch.at,
                kind: t.kind,
                path: t.path.as_deref(),
                foreach_index: t.foreach_index,
                iteration: t.iteration,
                data: &t.data,
            })?;
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::*;

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
    fn s87_events_are_written_as_the_stored_events_they_become() {
        let events = batch();
        assert_eq!(events.seqs(), Some((7, 8)));
        let written = serde_json::to_value(events.written("r1")).expect("serializes");
        let read: Vec<StoredEvent> = serde_json::from_value(written.clone()).expect("reads");
        let stored = events.into_stored("r1");
        assert_eq!(read, stored);
        assert_eq!(written, serde_json::to_value(&stored).expect("serializes"));
        assert_eq!(stored[0].data, json!({"output": {"n": 1}}));
        assert_eq!(stored[1].data, Value::Null);
    }
}
