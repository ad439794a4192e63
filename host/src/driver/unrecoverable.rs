//! Runs weft cannot drive: stored data that does not load, or a core that fails on them. Such a
//! run is ended (failed, or cancelled when a cancel asked for it) so that it stops blocking
//! recovery and commands, and the others go on (S101).

use serde_json::json;

use super::codec::{self, SnapshotOut};
use super::error::encode_failed;
use super::new_events::{NewEvent, NewEvents};
use super::runtime::summary;
use super::{Runtime, RuntimeError};
use crate::engine::{self, ErrorInfo, EventKind, RunState, RunStatus, Tracking};
use crate::store::{RecordKey, StoreError};

/// The error code of a run ended because weft could not drive it.
pub(crate) const HOST_ERROR: &str = "host-error";

/// What [`Runtime::recover_all`] did.
#[derive(Debug, Default)]
pub struct Recovery {
    /// The runs now driven again.
    pub recovered: Vec<String>,
    /// The runs that could not be.
    pub failed: Vec<Unrecovered>,
}

/// A run that recovery could not bring back.
#[derive(Debug)]
pub struct Unrecovered {
    /// The run.
    pub run_id: String,
    /// Why.
    pub error: RuntimeError,
    /// Its stored data does not load, so it was ended `failed` (else it is left as it was, to
    /// be recovered once the cause is fixed).
    pub marked_failed: bool,
}

/// Whether `e` says the run's stored data cannot be loaded (as opposed to a store that cannot
/// be reached right now). An entry in a newer format is not: a newer weft can still drive it,
/// so it is left as it is.
pub(crate) fn is_unloadable(e: &RuntimeError) -> bool {
    matches!(
        e,
        RuntimeError::Corrupt { .. }
            | RuntimeError::UnknownRun(_)
            | RuntimeError::Store(StoreError::Corrupt { .. })
    )
}

/// The text of a caught panic.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

impl Runtime {
    /// Ends `run_id`, which no actor drives, with `status` (failed or cancelled) because of
    /// `cause`, without running anything more of it. When its state loads, the end is stored as
    /// the run's last record (its closing event and a snapshot), so `show` and `watch` read it;
    /// otherwise only its summary changes. Returns the final state and the key of that record
    /// when the state loaded.
    pub(crate) async fn end_undrivable(
        &self,
        run_id: &str,
        status: RunStatus,
        cause: &str,
    ) -> Result<Option<(RunState, RecordKey)>, RuntimeError> {
        let store = &self.inner.store;
        let failed = |e| self.write_failed(e);
        // Only the process holding a run writes it.
        if let crate::store::Claim::Elsewhere(worker) = store.claim(run_id)? {
            return Err(RuntimeError::Elsewhere {
                run: run_id.into(),
                worker,
            });
        }
        let now = self.now();
        let ended = match self.load_counted(run_id) {
            Ok((mut state, _, position)) => {
                if state.status.is_ended() {
                    return Ok(None);
                }
                let at = (position.next_seq, position.next_sub);
                state.status = status;
                state.updated_at = now;
                state.cancelling = status == RunStatus::Cancelled;
                let (kind, data) = if status == RunStatus::Cancelled {
                    (EventKind::RunCancelled, json!({}))
                } else {
                    let error = ErrorInfo {
                        message: format!("weft could not drive this run: {cause}"),
                        code: HOST_ERROR.into(),
                        step: String::new(),
                        details: None,
                        foreach_index: None,
                        iteration: None,
                    };
                    let data = json!({ "error": error });
                    state.error = Some(error);
                    (EventKind::RunFailed, data)
                };
                let events = NewEvents {
                    at: engine::rfc3339(now),
                    events: vec![NewEvent {
                        seq: at.0,
                        tracking: Tracking {
                            kind,
                            path: None,
                            foreach_index: None,
                            iteration: None,
                            data: data.into(),
                        },
                    }],
                };
                let mut record = Vec::new();
                codec::begin_record(&mut record, None)
                    .and_then(|()| codec::end_record(&mut record, &events.written()))
                    .map_err(|e| encode_failed(run_id, e))?;
                let snapshot = serde_json::to_vec(&SnapshotOut {
                    covers: at,
                    state: &state,
                    // Unknown, its records unread; the run has ended and writes no more.
                    written: 0,
                })
                .map_err(|e| encode_failed(run_id, e))?;
                store.append(run_id, at, &record).map_err(failed)?;
                store.put_snapshot(run_id, &snapshot).map_err(failed)?;
                store.put_summary(&summary(&state)).map_err(failed)?;
                self.durable().await?;
                let channel = self.channel(run_id);
                events
                    .into_stored(run_id)
                    .into_iter()
                    .for_each(|e| channel.send(e));
                Some((state, at))
            }
            Err(_) => {
                // Only the summary is readable: mark it, so nothing tries the run again.
                let Some(mut s) = store.summary(run_id)? else {
                    return Err(RuntimeError::UnknownRun(run_id.into()));
                };
                if s.status.is_ended() {
                    return Ok(None);
                }
                s.status = status;
                s.updated_at = now;
                store.put_summary(&s).map_err(failed)?;
                self.durable().await?;
                None
            }
        };
        // Ended: nothing more to drive, so not this process's any more (S127).
        if let Err(e) = store.release(run_id) {
            tracing::warn!(run = %run_id, "cannot let the ended run go: {e}");
        }
        Ok(ended)
    }
}
