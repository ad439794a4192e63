//! The PostgreSQL backend: runs in one database shared by any number of weft processes
//! (`--store postgres://...`).
//!
//! Every process that opens the store is a worker with an id and a heartbeat (`workers`). A run
//! is driven by one process at a time, its `owner`: the process that created it, or one that
//! claimed it because nobody drove it (a suspended run being resumed, a run its process left, or
//! one whose process stopped beating). A claim raises the run's `epoch`, and every write of the
//! run's history names the epoch its writer claimed it at, in the same statement that writes
//! (`SELECT ... FOR SHARE` of the run row, which a claim's `UPDATE` waits for): once another
//! process has taken a run over, a late write of the old owner changes nothing and is refused
//! with [`StoreError::Fenced`]. Each write is its own committed transaction, durable when it
//! returns, so [`Store::sync`] has nothing left to do.
//!
//! Writes of records notify `<schema>_events` with the run id, so a process following a run it
//! does not drive reads what was appended (LISTEN/NOTIFY, read back from the table: a missed
//! notification costs latency, never an event). Requests for another process's run go through
//! `requests`, notified on `<schema>_requests`, answered on `<schema>_answers`; runs left to
//! anyone are announced on `<schema>_work`.
//!
//! The [`Store`] trait is synchronous: calls block their thread on a client future while the
//! connections' I/O runs on this store's own small tokio runtime. A call that loses its
//! connection (the server restarting, a network cut) is retried on a new one with backoff for
//! up to a minute; every write is safe to repeat (a record whose identical bytes are stored
//! already is accepted again).
//!
//! [`PgStore`], its statements and the [`Store`] and [`SharedStore`] methods are here, each
//! method handing over to the file of its concern: `connect` (the store URL's client, the pool,
//! calls retried on a new connection), `schema` (the tables and their migrations), `history`
//! (writes of a run's history), `reads` (reads and listing), `claims` (claims, releases and the
//! fencing of writes), `requests` (requests between processes and LISTEN/NOTIFY), `workers`
//! (registration, heartbeats and leaving) and `prune` (deleting ended runs and the blobs no run
//! names); `url` reads the store URL.

mod claims;
mod connect;
mod history;
mod prune;
mod reads;
mod requests;
mod schema;
mod url;
mod workers;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio::sync::broadcast;

use super::{
    Claim, NewRun, Notice, PluginsOf, Reclaimed, RecordKey, Request, RunSummary, RunsPage,
    SharedStore, Store, StoreError,
};
use crate::engine::RunStatus;

use url::PgUrl;
pub(crate) use url::is_postgres;

/// A weft store in a PostgreSQL database, shared by every process that opens it.
pub struct PgStore {
    io: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
    pool: Pool,
    sql: Arc<Sql>,
    url: PgUrl,
    /// This process's id in `workers`.
    worker: String,
    /// The runs this process holds, with the epoch it claimed each at.
    held: Mutex<HashMap<String, i64>>,
    /// Runs let go while the server was away: the heartbeat lets them go when it answers.
    unreleased: Arc<Mutex<Vec<(String, i64)>>>,
    /// Whether this process is in `workers` (and so has something to close).
    registered: bool,
    notices: broadcast::Sender<Notice>,
}

/// The statements, with the schema's name in them.
struct Sql {
    schema: String,
    events: String,
    requests: String,
    answers: String,
    work: String,
    /// The key of the transaction-level advisory lock on the schema's blobs: a run's creation
    /// takes it shared, a collection of unnamed blobs exclusive (`prune`). The first 8 bytes
    /// of the sha256 of `weft blobs <schema>`: every weft version on a schema must derive the
    /// same key.
    blobs_lock: i64,
}

impl Sql {
    fn new(schema: &str) -> Sql {
        Sql {
            schema: format!("\"{schema}\""),
            events: format!("{schema}_events"),
            requests: format!("{schema}_requests"),
            answers: format!("{schema}_answers"),
            work: format!("{schema}_work"),
            blobs_lock: blobs_lock(schema),
        }
    }

    /// `text` with `{s}` replaced by the quoted schema.
    fn q(&self, text: &str) -> String {
        text.replace("{s}", &self.schema)
    }
}

/// The advisory lock key of schema `schema`'s blobs ([`Sql`]'s `blobs_lock`).
fn blobs_lock(schema: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("weft blobs {schema}").as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// Locks `m`, taking over a lock whose holder panicked.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `status` as the `runs.status` column holds it.
fn status_text(status: RunStatus) -> String {
    match serde_json::to_value(status) {
        Ok(serde_json::Value::String(s)) => s,
        _ => format!("{status:?}").to_lowercase(),
    }
}

/// The status `text` read from run `run_id`'s row.
fn status_of(run_id: &str, text: &str) -> Result<RunStatus, StoreError> {
    serde_json::from_value(serde_json::Value::String(text.to_owned())).map_err(|e| {
        StoreError::Corrupt {
            key: format!("runs/{run_id}/status"),
            message: e.to_string(),
        }
    })
}

/// The [`RecordKey`] of a row's `seq` and `sub`.
fn key_of(seq: i64, sub: i32) -> RecordKey {
    (
        u64::try_from(seq).unwrap_or(0),
        u32::try_from(sub).unwrap_or(0),
    )
}

/// The `seq` and `sub` columns of `key`.
fn seq_of(key: RecordKey) -> (i64, i32) {
    (
        i64::try_from(key.0).unwrap_or(i64::MAX),
        i32::try_from(key.1).unwrap_or(i32::MAX),
    )
}

impl Drop for PgStore {
    fn drop(&mut self) {
        if self.registered
            && let Err(e) = SharedStore::close(self)
        {
            tracing::warn!("{e}");
        }
        if let Some(io) = self.io.take() {
            io.shutdown_background();
        }
    }
}

impl Store for PgStore {
    fn create_run(&self, run: NewRun<'_>) -> Result<(), StoreError> {
        self.insert_run(run)
    }

    fn append(&self, run_id: &str, at: RecordKey, record: &[u8]) -> Result<(), StoreError> {
        self.append_all(run_id, at, record, None, None)
    }

    /// One statement: the record, the snapshot and the summary commit together, with one
    /// flush of the server's log; the run's row is rewritten only when one of them is given.
    fn append_all(
        &self,
        run_id: &str,
        at: RecordKey,
        record: &[u8],
        snapshot: Option<&[u8]>,
        summary: Option<&RunSummary>,
    ) -> Result<(), StoreError> {
        self.write_transition(run_id, at, record, snapshot, summary)
    }

    fn put_snapshot(&self, run_id: &str, snapshot: &[u8]) -> Result<(), StoreError> {
        self.write_snapshot(run_id, snapshot)
    }

    fn put_summary(&self, summary: &RunSummary) -> Result<(), StoreError> {
        self.write_summary(summary)
    }

    /// Every write commits on its own: nothing waits for a sync.
    fn sync(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn snapshot(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.bytes(
            "read a snapshot",
            "SELECT snapshot FROM {s}.runs WHERE run_id = $1",
            run_id,
        )
    }

    fn base(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.bytes(
            "read a run's first state",
            "SELECT base FROM {s}.runs WHERE run_id = $1",
            run_id,
        )
    }

    fn definition(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.bytes(
            "read a definition",
            "SELECT b.bytes FROM {s}.runs r JOIN {s}.blobs b ON b.digest = r.definition \
             WHERE r.run_id = $1",
            run_id,
        )
    }

    fn plugin(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.bytes(
            "read a component",
            "SELECT bytes FROM {s}.blobs WHERE digest = $1",
            digest,
        )
    }

    fn records(
        &self,
        run_id: &str,
        from: RecordKey,
    ) -> Result<Vec<(RecordKey, Vec<u8>)>, StoreError> {
        self.read_records(run_id, from)
    }

    fn last_record(&self, run_id: &str) -> Result<Option<RecordKey>, StoreError> {
        self.read_last_record(run_id)
    }

    fn summary(&self, run_id: &str) -> Result<Option<RunSummary>, StoreError> {
        Ok(self.summaries(Some(run_id))?.pop())
    }

    fn runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        self.summaries(None)
    }

    fn runs_page(&self, page: &RunsPage<'_>) -> Result<Vec<RunSummary>, StoreError> {
        self.page_of_runs(page)
    }

    /// One transaction per call: the batch's rows, their records and requests go together.
    fn delete_ended(&self, run_ids: &[&str]) -> Result<Vec<String>, StoreError> {
        self.delete_ended_runs(run_ids)
    }

    /// Deleted rows' room is reused by the server after vacuum: only the blobs' bytes count.
    fn collect_garbage(&self, plugins_of: &PluginsOf) -> Result<Reclaimed, StoreError> {
        self.collect_unnamed_blobs(plugins_of)
    }

    fn claim(&self, run_id: &str) -> Result<Claim, StoreError> {
        self.claim_run(run_id)
    }

    fn release(&self, run_id: &str) -> Result<(), StoreError> {
        self.release_run(run_id)
    }

    fn shared(&self) -> Option<&dyn SharedStore> {
        Some(self)
    }
}

impl SharedStore for PgStore {
    fn worker_id(&self) -> &str {
        &self.worker
    }

    fn lease(&self) -> Duration {
        self.url.lease
    }

    fn notices(&self) -> broadcast::Receiver<Notice> {
        self.notices.subscribe()
    }

    fn send_request(&self, run_id: &str, worker: &str, body: &str) -> Result<i64, StoreError> {
        self.insert_request(run_id, worker, body)
    }

    fn take_requests(&self) -> Result<Vec<Request>, StoreError> {
        self.take_our_requests()
    }

    fn answer(&self, id: i64, answer: &str) -> Result<(), StoreError> {
        self.answer_request(id, answer)
    }

    fn answer_of(&self, id: i64) -> Result<Option<String>, StoreError> {
        self.take_answer(id)
    }

    fn withdraw(&self, id: i64) -> Result<bool, StoreError> {
        self.withdraw_request(id)
    }

    fn is_alive(&self, worker: &str) -> Result<bool, StoreError> {
        self.worker_alive(worker)
    }

    fn alive_until(&self, worker: &str) -> Result<Option<i64>, StoreError> {
        self.worker_alive_until(worker)
    }

    fn claimable(&self, limit: usize) -> Result<Vec<String>, StoreError> {
        self.unclaimed_runs(limit)
    }

    fn close(&self) -> Result<(), StoreError> {
        self.leave()
    }
}
