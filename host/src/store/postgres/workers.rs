//! Workers: every process on the store registers in `workers`, keeps its heartbeat current
//! (letting go the runs whose release failed meanwhile), and leaves on closing; other processes
//! look its heartbeat up.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::Pool;

use super::claims::RELEASE;
use super::{PgStore, Sql, lock};
use crate::store::StoreError;

impl PgStore {
    /// Adds this process to `workers`, and removes workers that stopped a day ago.
    pub(super) fn register(&self) -> Result<(), StoreError> {
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

    /// Whether `worker`'s heartbeat is current (`SharedStore::is_alive`).
    pub(super) fn worker_alive(&self, worker: &str) -> Result<bool, StoreError> {
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

    /// Until when `worker`'s last heartbeat keeps it alive (`SharedStore::alive_until`).
    pub(super) fn worker_alive_until(&self, worker: &str) -> Result<Option<i64>, StoreError> {
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

    /// Lets every run of this process go and removes it from `workers`
    /// (`SharedStore::close`): tried once, a process ending while the server is away leaves
    /// its runs to the lease.
    pub(super) fn leave(&self) -> Result<(), StoreError> {
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

/// `lease` in milliseconds, as SQL takes it.
fn lease_ms(lease: Duration) -> f64 {
    lease.as_secs_f64() * 1000.0
}

/// Keeps this process's `alive_until` ahead of now, three beats per lease, and lets go the
/// runs whose release failed (the server away), so that nobody waits on a process that no
/// longer drives them.
pub(super) async fn heartbeat(
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
