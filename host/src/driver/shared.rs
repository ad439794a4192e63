//! A runtime on a store that many processes share (PostgreSQL, `RuntimeConfig::store`).
//!
//! Each run is driven by one process at a time, the one holding it in the store
//! ([`Store::claim`]): the process that started it, or one that took it up because nobody drove
//! it. A resume or cancel asked of another process's run is handed to that process through the
//! store and answered by it, so it reaches the step running there (its abort, S77). Watchers
//! follow a run driven elsewhere from the store's notices, reading what was appended. A run
//! whose process ended (or stopped beating for a lease) is taken up by `weft worker`
//! ([`Runtime::work`]) and recovered like any interrupted run (S101–S103); a write of a process
//! presumed gone is refused by the store, so two processes never both advance a run.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{broadcast, oneshot};

use super::actor::Msg;
use super::error::encode_failed;
use super::runtime::{Inner, lock};
use super::{Recovery, Runtime, RuntimeError};
use crate::engine::{Refusal, ResumeRequest, RunStatus, schema::Violation};
use crate::store::{Notice, SharedStore, Store, StoreError};

/// What one process asks of a run another drives.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum Ask {
    /// Resume it (S67).
    Resume(ResumeRequest),
    /// Cancel it (S75).
    Cancel,
}

impl Ask {
    /// The message to the run's actor.
    pub(super) fn msg(&self, tx: oneshot::Sender<Result<(), RuntimeError>>) -> Msg {
        match self {
            Ask::Resume(request) => Msg::Resume(request.clone(), tx),
            Ask::Cancel => Msg::Cancel(tx),
        }
    }
}

/// The longest pause between two looks at an answer or for work, whatever the notices say.
const POLL: Duration = Duration::from_millis(500);

/// Opens the store `config` names: PostgreSQL for a `postgres://` URL.
pub(super) fn open(url: &str) -> Result<Arc<dyn Store>, RuntimeError> {
    #[cfg(feature = "postgres")]
    if crate::store::is_postgres(url) {
        return Ok(Arc::new(crate::store::PgStore::open(url)?));
    }
    Err(StoreError::Backend(format!(
        "unknown store {}: give a PostgreSQL URL (postgres://USER@HOST/DATABASE or \
         host=/run/postgresql dbname=DATABASE), or no store for the embedded one in the home",
        super::redacted(url)
    ))
    .into())
}

/// A request's answer as it travels through the store.
fn encode(answer: &Result<(), RuntimeError>) -> String {
    let value = match answer {
        Ok(()) => json!({"ok": true}),
        Err(RuntimeError::Refused(Refusal::NotSuspended { run, status })) => {
            json!({"refused": "not-suspended", "run": run, "status": status})
        }
        Err(RuntimeError::Refused(Refusal::AlreadyEnded { run, status })) => {
            json!({"refused": "already-ended", "run": run, "status": status})
        }
        Err(RuntimeError::Refused(Refusal::InvalidData {
            message,
            violations,
        })) => json!({"refused": "invalid-data", "message": message, "violations": violations}),
        Err(RuntimeError::Refused(Refusal::Other(message))) => {
            json!({"refused": "other", "message": message})
        }
        Err(RuntimeError::Elsewhere { .. }) => json!({"moved": true}),
        Err(e) => json!({"failed": e.to_string()}),
    };
    value.to_string()
}

/// What a request's answer says: `None` when the run moved on to another process meanwhile
/// (ask again).
fn decode(run_id: &str, text: &str) -> Option<Result<(), RuntimeError>> {
    let v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    let field = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let status = || -> RunStatus {
        serde_json::from_value(v.get("status").cloned().unwrap_or(Value::Null))
            .unwrap_or(RunStatus::Running)
    };
    let refusal = match v.get("refused").and_then(Value::as_str) {
        _ if v.get("ok").is_some() => return Some(Ok(())),
        _ if v.get("moved").is_some() => return None,
        Some("not-suspended") => Refusal::NotSuspended {
            run: field("run"),
            status: status(),
        },
        Some("already-ended") => Refusal::AlreadyEnded {
            run: field("run"),
            status: status(),
        },
        Some("invalid-data") => Refusal::InvalidData {
            message: field("message"),
            violations: serde_json::from_value::<Vec<Violation>>(
                v.get("violations").cloned().unwrap_or(Value::Null),
            )
            .unwrap_or_default(),
        },
        Some(_) => Refusal::Other(field("message")),
        None => {
            return Some(Err(RuntimeError::Remote {
                run: run_id.to_owned(),
                message: field("failed"),
            }));
        }
    };
    Some(Err(RuntimeError::Refused(refusal)))
}

impl Runtime {
    /// The store's sharing side, when many processes share it.
    pub(super) fn shared(&self) -> Option<&dyn SharedStore> {
        self.inner.store.shared()
    }

    /// Whether runs are stored where other processes drive runs too (PostgreSQL).
    pub fn is_shared(&self) -> bool {
        self.shared().is_some()
    }

    /// This process's worker id on a shared store.
    pub fn shared_worker_id(&self) -> Option<String> {
        self.shared().map(|s| s.worker_id().to_owned())
    }

    /// Hands `ask` to `worker`, the process driving `run_id`, and waits for its answer; `None`
    /// when the run is not there any more (the worker went away or let it go): ask again.
    pub(super) async fn ask_elsewhere(
        &self,
        run_id: &str,
        worker: &str,
        ask: &Ask,
    ) -> Result<Option<Result<(), RuntimeError>>, RuntimeError> {
        let Some(shared) = self.shared() else {
            return Ok(None);
        };
        let body = serde_json::to_string(ask).map_err(|e| encode_failed(run_id, e))?;
        // Subscribed first: the answer's notice cannot come before.
        let mut notices = shared.notices();
        let id = shared.send_request(run_id, worker, &body)?;
        let mut tick = tokio::time::interval(POLL.min(shared.lease() / 4));
        loop {
            if let Some(answer) = shared.answer_of(id)? {
                return Ok(decode(run_id, &answer));
            }
            loop {
                tokio::select! {
                    notice = notices.recv() => match notice {
                        Ok(Notice::Answer(n)) if n == id => break,
                        Ok(Notice::Reconnected) | Err(broadcast::error::RecvError::Lagged(_)) => break,
                        Ok(_) => {}
                        Err(broadcast::error::RecvError::Closed) => return Ok(None),
                    },
                    _ = tick.tick() => break,
                }
            }
            // A worker that took the request and then died never answers: take the run up,
            // unless it answered after all.
            if !shared.is_alive(worker)? {
                let _ = shared.withdraw(id);
                return Ok(shared
                    .answer_of(id)?
                    .and_then(|answer| decode(run_id, &answer)));
            }
        }
    }

    /// Answers the requests other processes hand this one, for as long as the runtime lives.
    pub(super) fn serve_requests(inner: Weak<Inner>, mut notices: broadcast::Receiver<Notice>) {
        tokio::spawn(async move {
            loop {
                let Some(rt) = inner.upgrade().map(|inner| Runtime { inner }) else {
                    return;
                };
                let Some(shared) = rt.shared() else {
                    return;
                };
                let lease = shared.lease();
                match shared.take_requests() {
                    Ok(requests) => {
                        for request in requests {
                            let rt = rt.clone();
                            let answering = rt.inner.answering.clone().read_owned().await;
                            tokio::spawn(async move {
                                let answer = match serde_json::from_str::<Ask>(&request.body) {
                                    Ok(ask) => rt.ask(&request.run_id, &ask, false).await,
                                    Err(e) => Err(RuntimeError::Refused(Refusal::Other(format!(
                                        "a request this weft cannot read: {e}"
                                    )))),
                                };
                                if let Some(shared) = rt.shared()
                                    && let Err(e) = shared.answer(request.id, &encode(&answer))
                                {
                                    tracing::warn!(run = %request.run_id, "cannot answer: {e}");
                                }
                                drop(answering);
                            });
                        }
                    }
                    Err(e) => tracing::warn!("cannot read requests: {e}"),
                }
                drop(rt);
                let wait = tokio::time::sleep(POLL.max(lease / 3));
                tokio::pin!(wait);
                loop {
                    tokio::select! {
                        notice = notices.recv() => match notice {
                            Ok(Notice::Request | Notice::Reconnected)
                            | Err(broadcast::error::RecvError::Lagged(_)) => break,
                            Ok(_) => {}
                            Err(broadcast::error::RecvError::Closed) => return,
                        },
                        () = &mut wait => break,
                    }
                }
            }
        });
    }

    /// Waits until `worker`, which holds `run_id`, either beats (it is alive and drives the run:
    /// nothing to do) or its lease runs out (it is gone: the run is taken up here).
    pub(super) async fn take_up_when_gone(
        &self,
        run_id: &str,
        worker: &str,
    ) -> Result<(), RuntimeError> {
        let Some(shared) = self.shared() else {
            return Ok(());
        };
        let lease = shared.lease();
        let first = shared.alive_until(worker)?;
        let deadline = tokio::time::Instant::now() + lease * 3 / 2;
        loop {
            tokio::time::sleep(lease / 10).await;
            match self.ensure_live(run_id) {
                Ok(_) => return Ok(()),
                Err(RuntimeError::Elsewhere { worker: now, .. }) if now == worker => {}
                // Taken up by another process meanwhile.
                Err(RuntimeError::Elsewhere { .. }) => return Ok(()),
                Err(e) => return Err(e),
            }
            let beat = shared.alive_until(worker)?;
            if (beat.is_some() && beat != first) || tokio::time::Instant::now() > deadline {
                return Ok(());
            }
        }
    }

    /// Drives runs that no live process drives, up to `concurrency` running at once here, until
    /// `stop` completes; then lets this process's runs go, for other workers to take up. What
    /// `weft worker` runs. Each run taken up is recovered (S101); one whose stored data does not
    /// load is marked failed, as [`Runtime::recover_all`] does.
    /// `report` is told of each round that took runs up.
    pub async fn work(
        &self,
        concurrency: usize,
        stop: impl Future<Output = ()>,
        mut report: impl FnMut(Recovery),
    ) -> Result<(), RuntimeError> {
        let Some(shared) = self.shared() else {
            return Err(RuntimeError::NotShared);
        };
        let lease = shared.lease();
        let mut notices = shared.notices();
        tokio::pin!(stop);
        loop {
            let driving = self.driving();
            if driving < concurrency {
                match shared.claimable(concurrency - driving) {
                    Ok(runs) => {
                        let mut round = Recovery::default();
                        for run in runs {
                            self.recover_one(&run, &mut round).await;
                        }
                        if !round.recovered.is_empty() || !round.failed.is_empty() {
                            report(round);
                        }
                    }
                    Err(e) => tracing::warn!("cannot look for runs: {e}"),
                }
            }
            let wait = tokio::time::sleep(POLL.min(lease / 2));
            tokio::pin!(wait);
            loop {
                tokio::select! {
                    // A run ended here: room for another.
                    () = self.inner.freed.notified() => break,
                    () = &mut stop => {
                        self.close().await;
                        return Ok(());
                    }
                    notice = notices.recv() => match notice {
                        Ok(Notice::Work | Notice::Reconnected)
                        | Err(broadcast::error::RecvError::Lagged(_)) => break,
                        Ok(_) => {}
                        Err(broadcast::error::RecvError::Closed) => return Ok(()),
                    },
                    () = &mut wait => break,
                }
            }
        }
    }

    /// How many runs this process drives that are pending or running.
    fn driving(&self) -> usize {
        lock(&self.inner.live)
            .values()
            .filter(|l| {
                matches!(
                    l.status.borrow().status,
                    RunStatus::Running | RunStatus::Pending
                )
            })
            .count()
    }

    /// Lets every run this process drives go, for other processes to take up (those still
    /// running are then recovered by a `weft worker`); on the embedded store, nothing. A
    /// process should call it before it ends.
    pub async fn close(&self) {
        // Requests being answered here are answered first (a cancel that ended the run this
        // process waited for, say).
        let answered = self.inner.answering.write();
        let _ = tokio::time::timeout(Duration::from_secs(10), answered).await;
        if let Some(shared) = self.shared()
            && let Err(e) = shared.close()
        {
            tracing::warn!("{e}; other processes take this one's runs up once its lease runs out");
        }
    }
}
