//! The on-disk codec of a run's history, which only the store sees: how a transition's record
//! (its event and the tracking events it emitted) is written and read back, of every store
//! format, and the snapshots of a run's state. What readers get is [`RunRecord`] and
//! [`StoredEvent`] (`record`), in JSON.
//!
//! [`RunRecord`]: super::RunRecord

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::StoredEvent;
use super::new_events::Written;
use crate::engine::invocation::{InvocationResult, StepOutcome};
use crate::engine::{Event, EventKind, Millis, RunState};
use crate::store::RecordKey;

/// A stored record is MessagePack (since store format 7; JSON before, still read): a map of the
/// transition's event under `log`, when there is one (since store format 8, the end of a step
/// that returned an output and patched no state, most transitions, under `end` as
/// `[token, at, output]` instead), then the instant its tracking events were
/// stored at under `at` and the events under `ev`, or only a batch of events a step wrote. Its
/// map keys are the members' names, so that a member added later is read as missing. Since
/// store format 8 (PostgreSQL schema version 3) each event is an array of its members
/// ([`Written`]), without the run's id, which the record's key gives, or the instant, which the
/// record holds once: a step's two events had taken about 220 bytes, the names of their
/// members and those two strings most of it. Records of format 7 keep their events under
/// `events`, each a map of [`StoredEvent`]'s members, and are read as they are.
///
/// Starts a record in `out`: the map's head and, with `log`, the event, encoded before the core
/// takes it (so that a step's output is not copied to be kept for the record); [`end_record`]
/// adds the events.
pub(crate) fn begin_record(out: &mut Vec<u8>, log: Option<&Event>) -> Result<(), RecordError> {
    let Some(event) = log else {
        rmp::encode::write_map_len(out, 2)?;
        return Ok(());
    };
    rmp::encode::write_map_len(out, 3)?;
    if let Event::StepEnded { token, result, at } = event
        && let Ok(StepOutcome::Done(output)) = &result.outcome
        && result.patches.is_empty()
    {
        // Most transitions: a step that returned an output and patched no state.
        rmp::encode::write_str(out, "end")?;
        rmp::encode::write_array_len(out, 3)?;
        rmp::encode::write_uint(out, *token)?;
        rmp::encode::write_sint(out, *at)?;
        return rmp_serde::encode::write_named(out, output);
    }
    rmp::encode::write_str(out, "log")?;
    rmp_serde::encode::write_named(out, event)
}

/// Ends a record begun with [`begin_record`]: its tracking events and their instant.
pub(crate) fn end_record(out: &mut Vec<u8>, events: &Written<'_>) -> Result<(), RecordError> {
    rmp::encode::write_str(out, "at")?;
    if events.is_empty() {
        // Nothing is stamped with it (a foreach item's end, say).
        out.push(rmp::Marker::Null.to_u8());
    } else {
        rmp::encode::write_str(out, events.at())?;
    }
    rmp::encode::write_str(out, "ev")?;
    rmp_serde::encode::write_named(out, events)
}

/// Why a record could not be encoded.
pub(crate) type RecordError = rmp_serde::encode::Error;

/// Reads a stored record of run `run_id` back: MessagePack, or JSON as records were before
/// store format 7 (a JSON record starts with `{`, which no MessagePack map does). Bytes left
/// after the record are refused, as JSON's reader refuses them.
pub(crate) fn read_record(bytes: &[u8], run_id: &str) -> Result<RecordIn, String> {
    let read: RecordRead = if bytes.first() == Some(&b'{') {
        crate::store::from_stored(bytes).map_err(|e| e.to_string())?
    } else {
        let mut de = rmp_serde::Deserializer::new(std::io::Cursor::new(bytes));
        let record = RecordRead::deserialize(&mut de).map_err(|e| e.to_string())?;
        let end = de.position();
        if end != bytes.len() as u64 {
            return Err(format!("the record ends at byte {end} of {}", bytes.len()));
        }
        record
    };
    let log = match (read.log, read.end) {
        (log, None) => log,
        (None, Some(EndIn(token, at, output))) => Some(Event::StepEnded {
            token,
            result: Box::new(InvocationResult {
                outcome: Ok(StepOutcome::Done(output)),
                patches: Vec::new(),
            }),
            at,
        }),
        (Some(_), Some(_)) => return Err("the record holds two transitions".into()),
    };
    let mut events = read.events;
    if !read.ev.is_empty() {
        let at = read
            .at
            .ok_or("the record has events but not the instant they were stored at")?;
        events.extend(read.ev.into_iter().map(|e| StoredEvent {
            seq: e.0,
            run_id: run_id.to_owned(),
            at: at.clone(),
            kind: e.1,
            path: e.2,
            foreach_index: e.3,
            iteration: e.4,
            data: e.5,
        }));
    }
    Ok(RecordIn { log, events })
}

/// One stored record as read back.
pub(crate) struct RecordIn {
    /// The transition's event, unless the record holds only events a step wrote.
    pub log: Option<Event>,
    /// The tracking events it stored.
    pub events: Vec<StoredEvent>,
}

/// A stored record as it is encoded, of any store format.
#[derive(Deserialize)]
struct RecordRead {
    #[serde(default)]
    log: Option<Event>,
    /// Format 8: the end of a step that returned an output and patched no state, in place of
    /// `log`.
    #[serde(default)]
    end: Option<EndIn>,
    /// Format 7 and before: each event a map of its members.
    #[serde(default)]
    events: Vec<StoredEvent>,
    /// Format 8: the instant of every event in `ev`.
    #[serde(default)]
    at: Option<String>,
    /// Format 8: each event `[seq, type, path, foreach_index, iteration, data]`.
    #[serde(default)]
    ev: Vec<EventIn>,
}

/// A step's end as a format 8 record holds it when the step returned an output and patched no
/// state: `[token, at, output]`.
#[derive(Deserialize)]
struct EndIn(u64, Millis, Value);

/// One event of a format 8 record ([`Written`]).
#[derive(Deserialize)]
struct EventIn(
    u64,
    EventKind,
    Option<String>,
    Option<u32>,
    Option<u32>,
    Value,
);

/// A snapshot as written: the state after the record at `covers`.
#[derive(Serialize)]
pub(crate) struct SnapshotOut<'a> {
    /// The key of the last record the state includes.
    pub covers: RecordKey,
    /// The state.
    pub state: &'a RunState,
    /// The bytes of the run's records up to `covers`, all of them ([`crate::driver::RuntimeConfig::max_run_bytes`]).
    pub written: u64,
}

/// A snapshot as read back.
#[derive(Deserialize)]
pub(crate) struct SnapshotIn {
    /// The key of the last record the state includes.
    pub covers: RecordKey,
    /// The state.
    pub state: RunState,
    /// The bytes of the run's records up to `covers`; 0 in a snapshot written before it was
    /// kept (the count then starts from that snapshot) and in the last one of a run weft
    /// could not read (it has ended).
    #[serde(default)]
    pub written: u64,
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::driver::new_events::{NewEvent, NewEvents};
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
        end_record(&mut bytes, &events().written()).expect("ends");
        bytes
    }

    #[test]
    fn s87_a_record_reads_back_as_the_event_and_the_stored_events_it_was_written_with() {
        let bytes = written(Some(&step_ended()));
        let read = read_record(&bytes, "r1").expect("reads");
        assert_eq!(read.log, Some(step_ended()));
        assert_eq!(read.events, events().into_stored("r1"));
        // Neither a JSON record nor a chunk (`store::chunk`, its first byte 1) starts so.
        assert!(bytes[0] != b'{' && bytes[0] != 1, "{}", bytes[0]);

        let bytes = written(None);
        let read = read_record(&bytes, "r1").expect("reads");
        assert_eq!(read.log, None);
        assert_eq!(read.events, events().into_stored("r1"));
    }

    #[test]
    fn s87_records_of_older_store_formats_read_back_as_their_twins_do() {
        let new = read_record(&written(Some(&step_ended())), "r1").expect("reads");
        // As store format 6 wrote the record above: JSON, each event a map of its members.
        let json = format!(
            r#"{{"log":{},"events":{}}}"#,
            serde_json::to_string(&step_ended()).expect("encodes"),
            serde_json::to_string(&events().into_stored("r1")).expect("encodes"),
        );
        // As store format 7 wrote it: the same maps in MessagePack.
        let mut format7 = Vec::new();
        rmp::encode::write_map_len(&mut format7, 2).expect("encodes");
        rmp::encode::write_str(&mut format7, "log").expect("encodes");
        rmp_serde::encode::write_named(&mut format7, &step_ended()).expect("encodes");
        rmp::encode::write_str(&mut format7, "events").expect("encodes");
        rmp_serde::encode::write_named(&mut format7, &events().into_stored("r1")).expect("encodes");
        for old in [json.as_bytes(), &format7] {
            // Another run's id: an old record's events keep the one they were stored with.
            let old = read_record(old, "r2").expect("reads");
            assert_eq!(old.log, new.log);
            assert_eq!(old.events, new.events);
        }
        assert!(format7.len() > written(Some(&step_ended())).len() + 100);
        assert!(read_record(b"{\"events\":[", "r1").is_err());
        assert!(read_record(&[0x82, 0xa3], "r1").is_err());
        let mut trailing = written(None);
        trailing.push(0xc0);
        let err = read_record(&trailing, "r1").err().expect("refused");
        assert!(err.contains("ends at byte"), "{err}");
    }

    #[test]
    fn s87_a_step_end_with_an_output_and_no_patches_reads_back_from_its_short_form() {
        let done = |patches: Vec<Value>| Event::StepEnded {
            token: 9,
            result: Box::new(InvocationResult {
                outcome: Ok(StepOutcome::Done(json!({"n": 4, "s": "x"}))),
                patches,
            }),
            at: 1_796_034_034_683,
        };
        let failed = Event::StepEnded {
            token: 9,
            result: Box::new(InvocationResult {
                outcome: Err(crate::engine::invocation::StepFailure::new("trap", "boom")),
                patches: Vec::new(),
            }),
            at: 1_796_034_034_683,
        };
        let short = written(Some(&done(Vec::new())));
        let as_map: Value = rmp_serde::from_slice(&short).expect("a map");
        assert_eq!(
            as_map["end"],
            json!([9, 1_796_034_034_683i64, {"n": 4, "s": "x"}])
        );
        assert!(as_map.get("log").is_none(), "{as_map}");
        for event in [done(Vec::new()), done(vec![json!({"op": "add"})]), failed] {
            let read = read_record(&written(Some(&event)), "r1").expect("reads");
            assert_eq!(read.log, Some(event));
            assert_eq!(read.events, events().into_stored("r1"));
        }
        let long = written(Some(&done(vec![json!({"op": "add"})])));
        assert!(
            short.len() + 40 < long.len(),
            "{} and {}",
            short.len(),
            long.len()
        );

        // Both forms in one record is not a record weft writes.
        let mut both = Vec::new();
        rmp::encode::write_map_len(&mut both, 2).expect("encodes");
        rmp::encode::write_str(&mut both, "log").expect("encodes");
        rmp_serde::encode::write_named(&mut both, &done(Vec::new())).expect("encodes");
        rmp::encode::write_str(&mut both, "end").expect("encodes");
        rmp_serde::encode::write_named(&mut both, &json!([1, 2, null])).expect("encodes");
        let err = read_record(&both, "r1").err().expect("refused");
        assert!(err.contains("two transitions"), "{err}");
    }

    #[test]
    fn s87_a_record_whose_events_lack_their_instant_is_refused() {
        let mut bytes = Vec::new();
        rmp::encode::write_map_len(&mut bytes, 1).expect("encodes");
        rmp::encode::write_str(&mut bytes, "ev").expect("encodes");
        rmp_serde::encode::write_named(&mut bytes, &events().written()).expect("encodes");
        let err = read_record(&bytes, "r1").err().expect("refused");
        assert!(err.contains("instant"), "{err}");
    }
}
