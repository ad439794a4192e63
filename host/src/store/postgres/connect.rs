//! Connecting: the client's configuration from the store URL, the pool of connections, the
//! opening of a store, and the calls that block a thread on a client future, tried again on a
//! new connection while connections are lost.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use tokio::sync::broadcast;
use tokio_postgres::NoTls;

use super::requests::listen;
use super::url::PgUrl;
use super::workers::heartbeat;
use super::{PgStore, Sql};
use crate::store::StoreError;

/// Connections in each process's pool.
const POOL_SIZE: usize = 8;
/// How long a call keeps trying to reach the server before it fails.
const RECONNECT_FOR: Duration = Duration::from_secs(60);
/// The first pause before trying again; each next one doubles, up to [`MAX_BACKOFF`].
pub(super) const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The longest pause between attempts.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Notices kept for a follower that falls behind.
const NOTICES: usize = 4096;

/// Why a call failed: worth another try on a new connection, or not.
pub(super) enum Fail {
    /// The connection was lost (or never made): worth another try on a new one.
    Lost(String),
    /// The call failed for good, with this error.
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
    pub(super) fn call<T, F, Fut>(&self, what: &str, op: F) -> Result<T, StoreError>
    where
        F: FnMut(Object) -> Fut,
        Fut: Future<Output = Result<T, Fail>>,
    {
        self.call_for(what, RECONNECT_FOR, op)
    }

    /// [`PgStore::call`], trying for `patience` at most.
    pub(super) fn call_for<T, F, Fut>(
        &self,
        what: &str,
        patience: Duration,
        op: F,
    ) -> Result<T, StoreError>
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
}
