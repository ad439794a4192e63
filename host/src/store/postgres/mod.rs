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

mod schema;
mod url;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use tokio::sync::broadcast;
use tokio_postgres::NoTls;

use super::{
    Claim, NewRun, Notice, RecordKey, Request, RunSummary, SharedStore, Store, StoreError,
};
use crate::engine::RunStatus;

use url::PgUrl;
pub use url::is_postgres;

/// Connections in each process's pool.
const POOL_SIZE: usize = 8;
/// How long a call keeps trying to reach the server before it fails.
const RECONNECT_FOR: Duration = Duration::from_secs(60);
/// The first pause before trying again; each next one doubles, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The longest pause between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Notices kept for a follower that falls behind.
const NOTICES: usize = 4096;

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
}

impl Sql {
    fn new(schema: &str) -> Sql {
        Sql {
            schema: format!("\"{schema}\""),
            events: format!("{schema}_events"),
            requests: format!("{schema}_requests"),
            answers: format!("{schema}_answers"),
            work: format!("{schema}_work"),
        }
    }

    /// `text` with `{s}` replaced by the quoted schema.
    fn q(&self, text: &str) -> String {
        text.replace("{s}", &self.schema)
    }
}

/// Why a call failed: worth another try on a new connection, or not.
enum Fail {
    Lost(String),
    Final(StoreError),
}

impl From<tokio_postgres::Error> for Fail {
    fn from(e: tokio_postgres::Error) -> Fail {
        // No SQLSTATE: the connection, not the statement, failed. Class 08 (connection
        // exception) and 57 (operator intervention: the server shutting down or starting up)
        // end the session, not the statement's meaning: worth a new connection too.
        let session_ended = e
            .code()
            .is_some_and(|c| c.code().starts_with("08") || c.code().starts_with("57"));
        if e.code().is_none() || e.is_closed() || session_ended {
            Fail::Lost(e.to_string())
        } else {
            Fail::Final(StoreError::Backend(format!("postgres: {}", error_text(&e))))
        }
    }
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Fail {
        Fail::Final(e)
    }
}

/// The server's message, with its detail, rather than tokio-postgres's "db error".
fn error_text(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(d) => format!("{} ({d})", db.message()),
            None => db.message().to_owned(),
        },
        None => e.to_string(),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn status_text(status: RunStatus) -> String {
    match serde_json::to_value(status) {
        Ok(serde_json::Value::String(s)) => s,
        _ => format!("{status:?}").to_lowercase(),
    }
}

fn status_of(run_id: &str, text: &str) -> Result<RunStatus, StoreError> {
    serde_json::from_value(serde_json::Value::String(text.to_owned())).map_err(|e| {
        StoreError::Corrupt {
            key: format!("runs/{run_id}/status"),
            message: e.to_string(),
        }
    })
}

fn key_of(seq: i64, sub: i32) -> RecordKey {
    (
        u64::try_from(seq).unwrap_or(0),
        u32::try_from(sub).unwrap_or(0),
    )
}

fn seq_of(key: RecordKey) -> (i64, i32) {
    (
        i64::try_from(key.0).unwrap_or(i64::MAX),
        i32::try_from(key.1).unwrap_or(i32::MAX),
    )
}

impl PgStore {
    /// Connects to the database `url` names (see the module's doc for its forms), makes or
    /// migrates weft's schema, and registers this process as a worker with a heartbeat.
    pub fn open(url: &str) -> Result<PgStore, StoreError> {
        let url = PgUrl::parse(url)?;
        let config: tokio_postgres::Config = url.client.parse().map_err(|e| {
            StoreError::Backend(format!(
                "store URL: {e}; write postgres://USER@HOST/DATABASE or host=/run/postgresql \
                 dbname=DATABASE"
            ))
        })?;
        let io = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("weft-postgres")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Backend(format!("cannot start the postgres client: {e}")))?;
        let handle = io.handle().clone();
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::Backend(format!("postgres: {e}")))?;
        let (notices, _) = broadcast::channel(NOTICES);
        let mut store = PgStore {
            io: Some(io),
            handle,
            pool,
            sql: Arc::new(Sql::new(&url.schema)),
            url,
            worker: ulid::Ulid::new().to_string(),
            held: Mutex::new(HashMap::new()),
            unreleased: Arc::default(),
            registered: false,
            notices,
        };
        store.migrate()?;
        store.register()?;
        store.registered = true;
        store.handle.spawn(heartbeat(
            store.pool.clone(),
            store.sql.clone(),
            store.worker.clone(),
            store.url.lease,
            store.unreleased.clone(),
        ));
        store.handle.spawn(listen(
            config,
            store.sql.clone(),
            store.worker.clone(),
            store.notices.clone(),
        ));
        Ok(store)
    }

    /// Runs `op` on a pooled connection, on a new one again while connections are lost, for up
    /// to [`RECONNECT_FOR`].
    fn call<T, F, Fut>(&self, what: &str, op: F) -> Result<T, StoreError>
    where
        F: FnMut(Object) -> Fut,
        Fut: Future<Output = Result<T, Fail>>,
    {
        self.call_for(what, RECONNECT_FOR, op)
    }

    /// [`PgStore::call`], trying for `patience` at most.
    fn call_for<T, F, Fut>(&self, what: &str, patience: Duration, op: F) -> Result<T, StoreError>
    where
        F: FnMut(Object) -> Fut,
        Fut: Future<Output = Result<T, Fail>>,
    {
        // On a multi-thread runtime, the thread hands its other tasks on while it waits.
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if multi_thread {
            tokio::task::block_in_place(|| self.wait_for(what, patience, op))
        } else {
            self.wait_for(what, patience, op)
        }
    }

    /// Blocks this thread until `op` succeeds, fails for good, or `patience` runs out.
    fn wait_for<T, F, Fut>(
        &self,
        what: &str,
        patience: Duration,
        mut op: F,
    ) -> Result<T, StoreError>
    where
        F: FnMut(Object) -> Fut,
        Fut: Future<Output = Result<T, Fail>>,
    {
        let _entered = self.handle.enter();
        // Unconstrained: tokio's cooperative budget is that of the task this thread was
        // running, and nothing here would ever give it back (the futures would spin).
        futures::executor::block_on(tokio::task::unconstrained(async {
            let started = tokio::time::Instant::now();
            let mut pause = FIRST_BACKOFF;
            loop {
                let attempt = match self.pool.get().await {
                    Ok(client) => op(client).await,
                    Err(deadpool_postgres::PoolError::Backend(e)) => Err(Fail::from(e)),
                    Err(e) => Err(Fail::Lost(e.to_string())),
                };
                match attempt {
                    Ok(v) => return Ok(v),
                    Err(Fail::Final(e)) => return Err(e),
                    Err(Fail::Lost(e)) if started.elapsed() < patience => {
                        tracing::warn!("postgres: {what}: {e}; trying again in {pause:?}");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(MAX_BACKOFF);
                    }
                    Err(Fail::Lost(e)) => {
                        return Err(StoreError::Backend(format!(
                            "postgres: {what}: {e} (tried for {patience:?}); check that the \
                             database server is up and reachable"
                        )));
                    }
                }
            }
        }))
    }

    /// Creates the schema when missing and applies the migrations it lacks. A schema at this
    /// weft's version is used as it is, so a role that may not create schemas (`CREATE` on the
    /// database) can use one made for it.
    fn migrate(&self) -> Result<(), StoreError> {
        let sql = self.sql.clone();
        let name = self.url.schema.clone();
        let current = self.call("read the schema's version", |c| {
            let sql = &sql;
            async move {
                let read = c
                    .query_opt(
                        &sql.q("SELECT value FROM {s}.meta WHERE key = 'version'"),
                        &[],
                    )
                    .await;
                match read {
                    Ok(row) => Ok(row.and_then(|r| r.get::<_, String>(0).parse::<i32>().ok())),
                    // No schema or no table yet: made below.
                    Err(e)
                        if e.code().is_some_and(|c| {
                            *c == tokio_postgres::error::SqlState::UNDEFINED_TABLE
                                || *c == tokio_postgres::error::SqlState::INVALID_SCHEMA_NAME
                        }) =>
                    {
                        Ok(None)
                    }
                    Err(e) => Err(e.into()),
                }
            }
        })?;
        if current == Some(schema::VERSION) {
            return Ok(());
        }
        self.call("create the schema", |mut c| {
            let sql = sql.clone();
            let name = name.clone();
            async move {
                let tx = c.transaction().await?;
                // One migrating process at a time, per schema.
                tx.execute(
                    "SELECT pg_advisory_xact_lock(hashtext('weft schema ' || $1))",
                    &[&name],
                )
                .await?;
                tx.batch_execute(&sql.q(
                    "CREATE SCHEMA IF NOT EXISTS {s}; \
                     CREATE TABLE IF NOT EXISTS {s}.meta (key text PRIMARY KEY, value text NOT NULL)",
                ))
                .await?;
                let found: i32 = tx
                    .query_opt(&sql.q("SELECT value FROM {s}.meta WHERE key = 'version'"), &[])
                    .await?
                    .map(|row| row.get::<_, String>(0).parse().unwrap_or(i32::MAX))
                    .unwrap_or(0);
                if found > schema::VERSION {
                    return Err(Fail::Final(StoreError::Format {
                        dir: format!("PostgreSQL schema {name}"),
                        found: u32::try_from(found).unwrap_or(u32::MAX),
                        expected: schema::VERSION as u32,
                    }));
                }
                for step in schema::migrations_from(found, &sql.schema) {
                    tx.batch_execute(&step).await?;
                }
                tx.execute(
                    &sql.q(
                        "INSERT INTO {s}.meta (key, value) VALUES ('version', $1) \
                         ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                    ),
                    &[&schema::VERSION.to_string()],
                )
                .await?;
                tx.commit().await?;
                Ok(())
            }
        })
    }

    /// Adds this process to `workers`, and removes workers that stopped a day ago.
    fn register(&self) -> Result<(), StoreError> {
        let host = std::env::var("HOSTNAME").unwrap_or_default();
        let pid = i32::try_from(std::process::id()).unwrap_or(0);
        let lease_ms = lease_ms(self.url.lease);
        self.call("register this process", |c| {
            let sql = &self.sql;
            let (worker, host) = (&self.worker, &host);
            async move {
                c.execute(
                    &sql.q("INSERT INTO {s}.workers (id, host, pid, alive_until) \
                         VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond')"),
                    &[worker, host, &pid, &lease_ms],
                )
                .await?;
                // Workers gone for a day, and requests nobody read back within one.
                c.batch_execute(&sql.q(
                    "DELETE FROM {s}.workers WHERE alive_until < now() - interval '1 day'; \
                     DELETE FROM {s}.requests WHERE created_at < now() - interval '1 day'",
                ))
                .await?;
                Ok(())
            }
        })
    }

    /// The epoch this process holds `run_id` at, or the refusal of a write to it.
    fn epoch(&self, run_id: &str) -> Result<i64, StoreError> {
        lock(&self.held)
            .get(run_id)
            .copied()
            .ok_or_else(|| StoreError::Fenced(run_id.to_owned()))
    }

    /// Forgets `run_id` after a write was refused: another process holds it now.
    fn fenced(&self, run_id: &str) -> StoreError {
        lock(&self.held).remove(run_id);
        StoreError::Fenced(run_id.to_owned())
    }
}

/// `lease` in milliseconds, as SQL takes it.
fn lease_ms(lease: Duration) -> f64 {
    lease.as_secs_f64() * 1000.0
}

/// Lets a run go (`$1` run, `$2` worker, `$3` epoch), announcing it on `$4` when it still has
/// to run.
const RELEASE: &str = "WITH r AS (UPDATE {s}.runs SET owner = NULL \
      WHERE run_id = $1 AND owner = $2 AND epoch = $3 RETURNING status) \
    SELECT pg_notify($4, $1) FROM r WHERE status IN ('pending', 'running')";

/// Keeps this process's `alive_until` ahead of now, three beats per lease, and lets go the
/// runs whose release failed (the server away), so that nobody waits on a process that no
/// longer drives them.
async fn heartbeat(
    pool: Pool,
    sql: Arc<Sql>,
    worker: String,
    lease: Duration,
    unreleased: Arc<Mutex<Vec<(String, i64)>>>,
) {
    let statement = sql.q(
        "UPDATE {s}.workers SET alive_until = now() + $2 * interval '1 millisecond' WHERE id = $1",
    );
    let release = sql.q(RELEASE);
    let mut tick = tokio::time::interval(lease / 3);
    loop {
        tick.tick().await;
        let beat = async {
            let c = pool.get().await.map_err(|e| e.to_string())?;
            c.execute(&statement, &[&worker, &lease_ms(lease)])
                .await
                .map_err(|e| e.to_string())?;
            let runs = std::mem::take(&mut *lock(&unreleased));
            for (i, (run, epoch)) in runs.iter().enumerate() {
                if let Err(e) = c.query(&release, &[run, &worker, epoch, &sql.work]).await {
                    lock(&unreleased).extend(runs[i..].iter().cloned());
                    return Err(e.to_string());
                }
            }
            Ok(())
        };
        if let Err(e) = beat.await {
            tracing::warn!("postgres: heartbeat of worker {worker} failed: {e}");
        }
    }
}

/// Follows the store's notification channels on a connection of its own, again after every
/// loss of it, telling [`Notice::Reconnected`] each time (notifications may have been missed).
async fn listen(
    config: tokio_postgres::Config,
    sql: Arc<Sql>,
    worker: String,
    notices: broadcast::Sender<Notice>,
) {
    use futures::StreamExt;
    let mut pause = FIRST_BACKOFF;
    loop {
        let (client, mut connection) = match config.connect(NoTls).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("postgres: cannot listen for notifications: {e}; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        let (tx, mut messages) = futures::channel::mpsc::unbounded();
        let driver = tokio::spawn(async move {
            let mut stream = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = stream.next().await {
                if tx.unbounded_send(message).is_err() {
                    break;
                }
            }
        });
        let listened = client
            .batch_execute(&format!(
                "LISTEN \"{}\"; LISTEN \"{}\"; LISTEN \"{}\"; LISTEN \"{}\"",
                sql.events, sql.requests, sql.answers, sql.work
            ))
            .await;
        if let Err(e) = listened {
            tracing::warn!("postgres: LISTEN failed: {e}; trying again");
            driver.abort();
            tokio::time::sleep(pause).await;
            continue;
        }
        pause = FIRST_BACKOFF;
        let _ = notices.send(Notice::Reconnected);
        while let Some(message) = messages.next().await {
            let Ok(tokio_postgres::AsyncMessage::Notification(n)) = message else {
                if message.is_err() {
                    break;
                }
                continue;
            };
            let notice = if n.channel() == sql.events {
                Notice::Records(n.payload().to_owned())
            } else if n.channel() == sql.requests {
                if n.payload() != worker {
                    continue;
                }
                Notice::Request
            } else if n.channel() == sql.answers {
                match n.payload().parse() {
                    Ok(id) => Notice::Answer(id),
                    Err(_) => continue,
                }
            } else {
                Notice::Work
            };
            let _ = notices.send(notice);
        }
        driver.abort();
        drop(client);
        tracing::warn!("postgres: the notification connection was lost; reconnecting");
    }
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
        let s = run.summary;
        let id = &s.run_id;
        let definition = run.definition.digest();
        let status = status_text(s.status);
        let mut blobs: Vec<(&str, &[u8])> = run.plugins.to_vec();
        blobs.push((definition, run.definition.bytes()));
        let created = self.call("create a run", |mut c| {
            let sql = &self.sql;
            let (blobs, definition, status) = (&blobs, &definition, &status);
            async move {
                let tx = c.transaction().await?;
                let digests: Vec<&str> = blobs.iter().map(|(d, _)| *d).collect();
                let present: Vec<String> = tx
                    .query(
                        &sql.q("SELECT digest FROM {s}.blobs WHERE digest = ANY($1)"),
                        &[&digests],
                    )
                    .await?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                for (digest, bytes) in blobs.iter() {
                    if !present.iter().any(|p| p == digest) {
                        tx.execute(
                            &sql.q("INSERT INTO {s}.blobs (digest, bytes) VALUES ($1, $2) \
                                 ON CONFLICT DO NOTHING"),
                            &[digest, bytes],
                        )
                        .await?;
                    }
                }
                let row = tx
                    .query_opt(
                        &sql.q(
                            "INSERT INTO {s}.runs (run_id, workflow_id, status, created_at, \
                             updated_at, definition, base, owner, epoch) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 1) \
                             ON CONFLICT (run_id) DO NOTHING RETURNING epoch",
                        ),
                        &[
                            id,
                            &s.workflow_id,
                            status,
                            &s.created_at,
                            &s.updated_at,
                            definition,
                            &run.base,
                            &self.worker,
                        ],
                    )
                    .await?;
                if row.is_none() {
                    // Ours already when an earlier attempt committed and lost its answer.
                    let ours = tx
                        .query_opt(
                            &sql.q("SELECT 1 FROM {s}.runs WHERE run_id = $1 AND owner = $2 \
                                 AND epoch = 1 AND base = $3"),
                            &[id, &self.worker, &run.base],
                        )
                        .await?;
                    return Ok(ours.is_some());
                }
                tx.commit().await?;
                Ok(true)
            }
        })?;
        if !created {
            return Err(StoreError::RunExists(id.clone()));
        }
        lock(&self.held).insert(id.clone(), 1);
        Ok(())
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
        let epoch = self.epoch(run_id)?;
        let (seq, sub) = seq_of(at);
        let status = summary.map(|s| status_text(s.status));
        let workflow = summary.map(|s| s.workflow_id.as_str());
        let updated = summary.map(|s| s.updated_at);
        let written = self.call("store a transition", |c| {
            let sql = &self.sql;
            let status = &status;
            async move {
                let rows = c
                    .query(
                        &sql.q(
                            "WITH f AS (SELECT run_id FROM {s}.runs \
                               WHERE run_id = $1 AND owner = $2 AND epoch = $3 FOR UPDATE), \
                             i AS (INSERT INTO {s}.records (run_id, seq, sub, record) \
                               SELECT run_id, $4, $5, $6 FROM f \
                               ON CONFLICT (run_id, seq, sub) DO UPDATE SET record = EXCLUDED.record \
                               WHERE {s}.records.record = EXCLUDED.record RETURNING run_id), \
                             u AS (UPDATE {s}.runs r SET \
                               snapshot = COALESCE($8::bytea, r.snapshot), \
                               status = COALESCE($9::text, r.status), \
                               workflow_id = COALESCE($10::text, r.workflow_id), \
                               updated_at = COALESCE($11::bigint, r.updated_at) \
                               FROM i WHERE r.run_id = i.run_id \
                                 AND ($8::bytea IS NOT NULL OR $9::text IS NOT NULL) RETURNING 1) \
                             SELECT pg_notify($7, $1) FROM i",
                        ),
                        &[
                            &run_id,
                            &self.worker,
                            &epoch,
                            &seq,
                            &sub,
                            &record,
                            &sql.events,
                            &snapshot,
                            status,
                            &workflow,
                            &updated,
                        ],
                    )
                    .await?;
                Ok(rows.len() == 1)
            }
        })?;
        if written {
            Ok(())
        } else {
            Err(self.fenced(run_id))
        }
    }

    fn put_snapshot(&self, run_id: &str, snapshot: &[u8]) -> Result<(), StoreError> {
        let epoch = self.epoch(run_id)?;
        let n = self.call("store a snapshot", |c| {
            let sql = &self.sql;
            async move {
                Ok(c.execute(
                    &sql.q("UPDATE {s}.runs SET snapshot = $4 \
                         WHERE run_id = $1 AND owner = $2 AND epoch = $3"),
                    &[&run_id, &self.worker, &epoch, &snapshot],
                )
                .await?)
            }
        })?;
        if n == 1 {
            Ok(())
        } else {
            Err(self.fenced(run_id))
        }
    }

    fn put_summary(&self, summary: &RunSummary) -> Result<(), StoreError> {
        let run_id = &summary.run_id;
        let epoch = self.epoch(run_id)?;
        let status = status_text(summary.status);
        let n = self.call("store a summary", |c| {
            let sql = &self.sql;
            let status = &status;
            async move {
                Ok(c.execute(
                    &sql.q(
                        "UPDATE {s}.runs SET workflow_id = $4, status = $5, updated_at = $6 \
                         WHERE run_id = $1 AND owner = $2 AND epoch = $3",
                    ),
                    &[
                        run_id,
                        &self.worker,
                        &epoch,
                        &summary.workflow_id,
                        status,
                        &summary.updated_at,
                    ],
                )
                .await?)
            }
        })?;
        if n == 1 {
            Ok(())
        } else {
            Err(self.fenced(run_id))
        }
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
        let (seq, sub) = seq_of(from);
        self.call("read records", |c| {
            let sql = &self.sql;
            async move {
                let rows = c
                    .query(
                        &sql.q("SELECT seq, sub, record FROM {s}.records \
                             WHERE run_id = $1 AND (seq, sub) >= ($2, $3) ORDER BY seq, sub"),
                        &[&run_id, &seq, &sub],
                    )
                    .await?;
                Ok(rows
                    .iter()
                    .map(|r| (key_of(r.get(0), r.get(1)), r.get::<_, Vec<u8>>(2)))
                    .collect())
            }
        })
    }

    fn last_record(&self, run_id: &str) -> Result<Option<RecordKey>, StoreError> {
        self.call("read the last record", |c| {
            let sql = &self.sql;
            async move {
                let row = c
                    .query_opt(
                        &sql.q("SELECT seq, sub FROM {s}.records WHERE run_id = $1 \
                             ORDER BY seq DESC, sub DESC LIMIT 1"),
                        &[&run_id],
                    )
                    .await?;
                Ok(row.map(|r| key_of(r.get(0), r.get(1))))
            }
        })
    }

    fn summary(&self, run_id: &str) -> Result<Option<RunSummary>, StoreError> {
        Ok(self.summaries(Some(run_id))?.pop())
    }

    fn runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        self.summaries(None)
    }

    fn claim(&self, run_id: &str) -> Result<Claim, StoreError> {
        let claimed = self.call("claim a run", |c| {
            let sql = &self.sql;
            async move {
                let row = c
                    .query_opt(
                        &sql.q("UPDATE {s}.runs r SET owner = $2, epoch = epoch + 1 \
                             WHERE run_id = $1 AND (owner IS NULL OR owner = $2 OR NOT EXISTS \
                               (SELECT 1 FROM {s}.workers w \
                                WHERE w.id = r.owner AND w.alive_until > now())) \
                             RETURNING epoch"),
                        &[&run_id, &self.worker],
                    )
                    .await?;
                if let Some(row) = row {
                    return Ok(Ok(row.get::<_, i64>(0)));
                }
                let owner = c
                    .query_opt(
                        &sql.q("SELECT owner FROM {s}.runs WHERE run_id = $1"),
                        &[&run_id],
                    )
                    .await?;
                Ok(Err(owner.and_then(|r| r.get::<_, Option<String>>(0))))
            }
        })?;
        match claimed {
            Ok(epoch) => {
                lock(&self.held).insert(run_id.to_owned(), epoch);
                Ok(Claim::Ours)
            }
            Err(Some(owner)) => Ok(Claim::Elsewhere(owner)),
            // No such run (its owner cannot be gone: a claim is what removes owners).
            Err(None) => Ok(Claim::Ours),
        }
    }

    fn release(&self, run_id: &str) -> Result<(), StoreError> {
        let Some(epoch) = lock(&self.held).remove(run_id) else {
            return Ok(());
        };
        let released = self.call("let a run go", |c| {
            let sql = &self.sql;
            async move {
                c.query(&sql.q(RELEASE), &[&run_id, &self.worker, &epoch, &sql.work])
                    .await?;
                Ok(())
            }
        });
        if released.is_err() {
            // Let go by the heartbeat once the server answers again, so workers can take it up.
            lock(&self.unreleased).push((run_id.to_owned(), epoch));
        }
        released
    }

    fn shared(&self) -> Option<&dyn SharedStore> {
        Some(self)
    }
}

impl PgStore {
    /// One `bytea` (or nullable) column of the row `query` selects by `key`.
    fn bytes(&self, what: &str, query: &str, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let query = self.sql.q(query);
        self.call(what, |c| {
            let query = &query;
            async move {
                let row = c.query_opt(query, &[&key]).await?;
                Ok(row.and_then(|r| r.get::<_, Option<Vec<u8>>>(0)))
            }
        })
    }

    /// The summaries of one run or of all, newest first.
    fn summaries(&self, run_id: Option<&str>) -> Result<Vec<RunSummary>, StoreError> {
        let rows = self.call("read run summaries", |c| {
            let sql = &self.sql;
            async move {
                Ok(c.query(
                    &sql.q(
                        "SELECT run_id, workflow_id, status, created_at, updated_at FROM {s}.runs \
                         WHERE $1::text IS NULL OR run_id = $1 \
                         ORDER BY created_at DESC, run_id COLLATE \"C\" DESC",
                    ),
                    &[&run_id],
                )
                .await?)
            }
        })?;
        rows.iter()
            .map(|r| {
                let run_id: String = r.get(0);
                let status = status_of(&run_id, r.get(2))?;
                Ok(RunSummary {
                    workflow_id: r.get(1),
                    status,
                    created_at: r.get(3),
                    updated_at: r.get(4),
                    run_id,
                })
            })
            .collect()
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
        self.call("hand a request over", |c| {
            let sql = &self.sql;
            async move {
                let row = c
                    .query_one(
                        &sql.q(
                            "WITH r AS (INSERT INTO {s}.requests (run_id, worker, body) \
                               VALUES ($1, $2, $3) RETURNING id) \
                             SELECT id, pg_notify($4, $2) FROM r",
                        ),
                        &[&run_id, &worker, &body, &sql.requests],
                    )
                    .await?;
                Ok(row.get::<_, i64>(0))
            }
        })
    }

    fn take_requests(&self) -> Result<Vec<Request>, StoreError> {
        self.call("take requests", |c| {
            let sql = &self.sql;
            async move {
                let rows = c
                    .query(
                        &sql.q("UPDATE {s}.requests SET taken = true \
                             WHERE worker = $1 AND NOT taken RETURNING id, run_id, body"),
                        &[&self.worker],
                    )
                    .await?;
                Ok(rows
                    .iter()
                    .map(|r| Request {
                        id: r.get(0),
                        run_id: r.get(1),
                        body: r.get(2),
                    })
                    .collect())
            }
        })
    }

    fn answer(&self, id: i64, answer: &str) -> Result<(), StoreError> {
        self.call("answer a request", |c| {
            let sql = &self.sql;
            async move {
                c.query(
                    &sql.q(
                        "WITH r AS (UPDATE {s}.requests SET answer = $2 WHERE id = $1 RETURNING id) \
                         SELECT pg_notify($3, id::text) FROM r",
                    ),
                    &[&id, &answer, &sql.answers],
                )
                .await?;
                Ok(())
            }
        })
    }

    fn answer_of(&self, id: i64) -> Result<Option<String>, StoreError> {
        self.call("read an answer", |c| {
            let sql = &self.sql;
            async move {
                let row = c
                    .query_opt(
                        &sql.q(
                            "DELETE FROM {s}.requests WHERE id = $1 AND answer IS NOT NULL \
                             RETURNING answer",
                        ),
                        &[&id],
                    )
                    .await?;
                Ok(row.map(|r| r.get(0)))
            }
        })
    }

    fn withdraw(&self, id: i64) -> Result<bool, StoreError> {
        self.call("withdraw a request", |c| {
            let sql = &self.sql;
            async move {
                let n = c
                    .execute(
                        &sql.q("DELETE FROM {s}.requests WHERE id = $1 AND NOT taken"),
                        &[&id],
                    )
                    .await?;
                Ok(n == 1)
            }
        })
    }

    fn is_alive(&self, worker: &str) -> Result<bool, StoreError> {
        self.call("look a worker up", |c| {
            let sql = &self.sql;
            async move {
                let row = c
                    .query_opt(
                        &sql.q("SELECT alive_until > now() FROM {s}.workers WHERE id = $1"),
                        &[&worker],
                    )
                    .await?;
                Ok(row.is_some_and(|r| r.get::<_, bool>(0)))
            }
        })
    }

    fn alive_until(&self, worker: &str) -> Result<Option<i64>, StoreError> {
        self.call("look a worker up", |c| {
            let sql = &self.sql;
            async move {
                let row = c
                    .query_opt(
                        &sql.q("SELECT (extract(epoch FROM alive_until - \
                               timestamptz '2000-01-01 00:00:00+00') * 1000000)::bigint \
                             FROM {s}.workers WHERE id = $1"),
                        &[&worker],
                    )
                    .await?;
                Ok(row.map(|r| r.get::<_, i64>(0)))
            }
        })
    }

    fn claimable(&self, limit: usize) -> Result<Vec<String>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.call("look for runs to drive", |c| {
            let sql = &self.sql;
            async move {
                let rows = c
                    .query(
                        &sql.q("SELECT r.run_id FROM {s}.runs r \
                             LEFT JOIN {s}.workers w ON w.id = r.owner \
                             WHERE r.status IN ('pending', 'running') \
                               AND (r.owner IS NULL OR w.id IS NULL OR w.alive_until <= now()) \
                             ORDER BY r.created_at LIMIT $1"),
                        &[&limit],
                    )
                    .await?;
                Ok(rows.iter().map(|r| r.get(0)).collect())
            }
        })
    }

    fn close(&self) -> Result<(), StoreError> {
        lock(&self.held).clear();
        // Once: a process ending while the server is away leaves its runs to the lease.
        self.call_for("let this process's runs go", Duration::ZERO, |c| {
            let sql = &self.sql;
            async move {
                c.query(
                    &sql.q(
                        "WITH r AS (UPDATE {s}.runs SET owner = NULL WHERE owner = $1 \
                           RETURNING run_id, status) \
                         SELECT pg_notify($2, run_id) FROM r \
                         WHERE status IN ('pending', 'running')",
                    ),
                    &[&self.worker, &sql.work],
                )
                .await?;
                c.execute(
                    &sql.q("DELETE FROM {s}.workers WHERE id = $1"),
                    &[&self.worker],
                )
                .await?;
                Ok(())
            }
        })
    }
}
