//! What readers see: the run record (WORKFLOW-FORMAT.md §3) and stored events (§4).

use std::sync::Arc;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::new_events::Written;
use crate::engine::{
    self, ErrorInfo, Event, EventKind, Graph, RestartedFrom, RunState, RunStatus, StepRecord,
    SuspendedEntry, TripwireInfo,
};
use crate::store::RecordKey;

/// Reads a member that is present as `Some`, even when it is `null` (a `null` result, S4).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// A run as `weft show --json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct RunRecord {
    /// The run's id.
    pub run_id: String,
    /// The top-level workflow id.
    pub workflow_id: String,
    /// Where it stands.
    pub status: RunStatus,
    /// The input, defaults filled.
    pub input: Value,
    /// Present only on success.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub result: Option<Value>,
    /// Present only on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// Present only on tripwire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tripwire: Option<TripwireInfo>,
    /// The current (or final) state.
    pub state: Value,
    /// Present only while suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended: Option<Vec<SuspendedEntry>>,
    /// One record per entry that started, by path.
    pub steps: IndexMap<String, StepRecord, engine::KeyHasher>,
    /// Set for a re-run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarted_from: Option<RestartedFrom>,
    /// When the run was created (RFC 3339).
    pub created_at: String,
    /// When it last changed (RFC 3339).
    pub updated_at: String,
}

impl RunRecord {
    /// The record of `state`.
    pub fn new(state: &RunState, graph: &Graph) -> Self {
        let parts = Parts {
            suspended: suspended(state, graph),
            input: state.input.clone(),
            result: state.result.clone(),
            error: state.error.clone(),
            tripwire: state.tripwire.clone(),
            state: state.files.get("").map(|f| Value::clone(&f.state)),
            records: state.records.clone(),
            restarted_from: state.restarted_from.clone(),
        };
        Self::assemble(state, parts)
    }

    /// The record of `state`, its values moved rather than copied: for a state that is not
    /// needed any more (a retiring actor's, one read from the store to show).
    pub fn from_state(mut state: RunState, graph: &Graph) -> Self {
        let parts = Parts {
            // Before anything is moved out of the state it reads.
            suspended: suspended(&state, graph),
            input: std::mem::take(&mut state.input),
            result: state.result.take(),
            error: state.error.take(),
            tripwire: state.tripwire.take(),
            state: state
                .files
                .remove("")
                .map(|f| Arc::unwrap_or_clone(f.state)),
            records: std::mem::take(&mut state.records),
            restarted_from: state.restarted_from.take(),
        };
        Self::assemble(&state, parts)
    }

    /// The record of the run in `state`, with its values in `parts`.
    fn assemble(state: &RunState, parts: Parts) -> Self {
        let status = state.status;
        RunRecord {
            run_id: state.run_id.clone(),
            workflow_id: state.workflow_id.clone(),
            status,
            input: parts.input,
            result: parts.result.filter(|_| status == RunStatus::Success),
            error: parts.error.filter(|_| status == RunStatus::Failed),
            tripwire: parts.tripwire.filter(|_| status == RunStatus::Tripwire),
            state: parts.state.unwrap_or_default(),
            suspended: parts.suspended,
            steps: parts.records,
            restarted_from: parts.restarted_from,
            created_at: engine::rfc3339(state.created_at),
            updated_at: engine::rfc3339(state.updated_at),
        }
    }
}

/// The entries a run in `state` is suspended at, when it is suspended.
fn suspended(state: &RunState, graph: &Graph) -> Option<Vec<SuspendedEntry>> {
    (state.status == RunStatus::Suspended).then(|| engine::suspended(state, graph))
}

/// The values of a run record that come from its state, copied or moved out of it.
struct Parts {
    suspended: Option<Vec<SuspendedEntry>>,
    input: Value,
    result: Option<Value>,
    error: Option<ErrorInfo>,
    tripwire: Option<TripwireInfo>,
    state: Option<Value>,
    records: IndexMap<String, StepRecord, engine::KeyHasher>,
    restarted_from: Option<RestartedFrom>,
}

/// One stored tracking event (WORKFLOW-FORMAT.md §4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct StoredEvent {
    /// Strictly increasing per run, from 1.
    pub seq: u64,
    /// The run.
    pub run_id: String,
    /// When it was stored (RFC 3339).
    pub at: String,
    /// The event's type.
    #[serde(rename = "type")]
    pub kind: EventKind,
    /// The entry it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The foreach item it comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreach_index: Option<u32>,
    /// The loop iteration it comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iteration: Option<u32>,
    /// Its data.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub data: Value,
}

/// A stored record is MessagePack (since store format 7; JSON before, still read): a map of the
/// transition's event under `log`, when there is one, and the tracking events it emitted under
/// `events`, or only a batch of events a step wrote. Its map keys are the members' names, so
/// that it reads back as [`RecordIn`] does JSON, and a member added later is read as missing.
///
/// Starts a record in `out`: the map's head and, with `log`, the event, encoded before the core
/// takes it (so that a step's output is not copied to be kept for the record); [`end_record`]
/// adds the events.
pub(crate) fn begin_record(out: &mut Vec<u8>, log: Option<&Event>) -> Result<(), RecordError> {
    match log {
        Some(event) => {
            rmp::encode::write_map_len(out, 2)?;
            rmp::encode::write_str(out, "log")?;
            rmp_serde::encode::write_named(out, event)
        }
        None => {
            rmp::encode::write_map_len(out, 1)?;
            Ok(())
        }
    }
}

/// Ends a record begun with [`begin_record`]: its tracking events.
pub(crate) fn end_record(out: &mut Vec<u8>, events: &Written<'_>) -> Result<(), RecordError> {
    rmp::encode::write_str(out, "events")?;
    rmp_serde::encode::write_named(out, events)
}

/// Why a record could not be encoded.
pub(crate) type RecordError = rmp_serde::encode::Error;

/// Reads a stored record back: MessagePack, or JSON as records were before store format 7 (a
/// JSON record starts with `{`, which no MessagePack map does). Bytes left after the record are
/// refused, as JSON's reader refuses them.
pub(crate) fn read_record(bytes: &[u8]) -> Result<RecordIn, String> {
    if bytes.first() == Some(&b'{') {
        return crate::store::from_stored(bytes).map_err(|e| e.to_string());
    }
    let mut de = rmp_serde::Deserializer::new(std::io::Cursor::new(bytes));
    let record = RecordIn::deserialize(&mut de).map_err(|e| e.to_string())?;
    let end = de.position();
    if end != bytes.len() as u64 {
        return Err(format!("the record ends at byte {end} of {}", bytes.len()));
    }
    Ok(record)
}

/// One stored record as read back.
#[derive(Deserialize)]
pub(crate) struct RecordIn {
    #[serde(default)]
    pub log: Option<Event>,
    #[serde(default)]
    pub events: Vec<StoredEvent>,
}

/// A snapshot as written: the state after the record at `covers`.
#[derive(Serialize)]
pub(crate) struct SnapshotOut<'a> {
    pub covers: RecordKey,
    pub state: &'a RunState,
}

/// A snapshot as read back.
#[derive(Deserialize)]
pub(crate) struct SnapshotIn {
    pub covers: RecordKey,
    pub state: RunState,
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::driver::new_events::{NewEvent, NewEvents};
    use crate::engine::invocation::{InvocationResult, StepOutcome};
    use crate::engine::{EventData, Tracking};

    /// A step's end whose output has what an encoding could get wrong: a float, a negative
    /// number, a null, an escaped string, a nested object in member order.
    fn step_ended() -> Event {
        Event::StepEnded {
            token: 3,
            result: Box::new(InvocationResult {
                outcome: Ok(StepOutcome::Done(
                    json!({"z": [1.5, -2, null, "é\"q"], "a": {"n": 1}}),
                )),
                patches: vec![json!({"op": "add", "path": "/k", "value": 18446744073709551615u64})],
            }),
            at: 1_796_034_034_683,
        }
    }

    fn events() -> NewEvents {
        let tracking = |kind, data| Tracking {
            kind,
            path: Some("s0".into()),
            foreach_index: None,
            iteration: Some(2),
            data,
        };
        NewEvents {
            at: "2026-11-30T10:20:34.683Z".into(),
            events: vec![
                NewEvent {
                    seq: 3,
                    tracking: tracking(
                        EventKind::StepSucceeded,
                        EventData::Keyed("output", Arc::new(json!({"n": 1}))),
                    ),
                },
                NewEvent {
                    seq: 4,
                    tracking: tracking(EventKind::StepStarted, json!({"input": {"n": 1}}).into()),
                },
            ],
        }
    }

    fn written(log: Option<&Event>) -> Vec<u8> {
        let mut bytes = Vec::new();
        begin_record(&mut bytes, log).expect("begins");
        end_record(&mut bytes, &events().written("r1")).expect("ends");
        bytes
    }

    #[test]
    fn s87_a_record_reads_back_as_the_event_and_the_stored_events_it_was_written_with() {
        let bytes = written(Some(&step_ended()));
        let read = read_record(&bytes).expect("reads");
        assert_eq!(read.log, Some(step_ended()));
        assert_eq!(read.events, events().into_stored("r1"));
        // Neither a JSON record nor a chunk (`store::chunk`, its first byte 1) starts so.
        assert!(bytes[0] != b'{' && bytes[0] != 1, "{}", bytes[0]);

        let bytes = written(None);
        let read = read_record(&bytes).expect("reads");
        assert_eq!(read.log, None);
        assert_eq!(read.events, events().into_stored("r1"));
    }

    #[test]
    fn s87_a_json_record_of_an_older_store_format_reads_back_as_its_twin_does() {
        // As store format 6 wrote the record above.
        let json = format!(
            r#"{{"log":{},"events":{}}}"#,
            serde_json::to_string(&step_ended()).expect("encodes"),
            serde_json::to_string(&events().into_stored("r1")).expect("encodes"),
        );
        let old = read_record(json.as_bytes()).expect("reads");
        let new = read_record(&written(Some(&step_ended()))).expect("reads");
        assert_eq!(old.log, new.log);
        assert_eq!(old.events, new.events);
        assert!(read_record(b"{\"events\":[").is_err());
        assert!(read_record(&[0x82, 0xa3]).is_err());
        let mut trailing = written(None);
        trailing.push(0xc0);
        let err = read_record(&trailing).err().expect("refused");
        assert!(err.contains("ends at byte"), "{err}");
    }
}
