//! Pruning: ended runs deleted a batch per transaction, and the blobs no remaining run names
//! removed under the advisory lock that a run's creation takes shared.
//!
//! A run's creation (`history::insert_run`) looks up which of its blobs are stored, stores the
//! others, then its row, in one transaction whose first statement takes the blobs lock
//! ([`Sql::blobs_lock`](super::Sql)) shared; [`PgStore::collect_unnamed_blobs`] takes it
//! exclusive in the transaction that finds the named blobs and deletes the others. So a
//! collection either sees the new run (and keeps its blobs) or ends before the creation looks
//! its blobs up (and the creation stores them again).

use std::collections::{HashMap, HashSet};

use futures::{StreamExt, pin_mut};
use tokio_postgres::Row;
use tokio_postgres::types::FromSql;

use super::connect::Fail;
use super::{PgStore, StoreError, lock, status_text};
use crate::store::{ENDED, PluginsOf, Reclaimed};

/// The stored blobs that a run names as its definition: `digest`, and `bytes` where selected.
const DEFINITIONS: &str = "FROM {s}.blobs b \
     WHERE EXISTS (SELECT 1 FROM {s}.runs r WHERE r.definition = b.digest)";

impl PgStore {
    /// Deletes the runs of `ids` that are ended and that no live process other than this one
    /// holds, with their records and requests, in one transaction (`Store::delete_ended`).
    ///
    /// The run rows are locked in id order (so two prunes never wait on each other in a
    /// cycle) and only for the transaction, which touches the rows of this batch alone. A write
    /// of a deleted run by a process still thinking it holds the run finds no row and is
    /// refused as fenced. A batch whose commit's answer was lost with the connection is tried
    /// again, and answers only the runs left to delete then.
    pub(super) fn delete_ended_runs(&self, ids: &[&str]) -> Result<Vec<String>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ended: Vec<String> = ENDED.iter().map(|&s| status_text(s)).collect();
        let deleted = self.call("delete ended runs", |mut c| {
            let sql = &self.sql;
            let ended = &ended;
            async move {
                let tx = c.transaction().await?;
                let rows = tx
                    .query(
                        &sql.q("WITH l AS (SELECT r.run_id FROM {s}.runs r \
                               WHERE r.run_id = ANY($1) AND r.status = ANY($2) \
                                 AND (r.owner IS NULL OR r.owner = $3 OR NOT EXISTS \
                                   (SELECT 1 FROM {s}.workers w \
                                    WHERE w.id = r.owner AND w.alive_until > now())) \
                               ORDER BY r.run_id FOR UPDATE OF r) \
                             DELETE FROM {s}.runs r USING l WHERE r.run_id = l.run_id \
                             RETURNING r.run_id"),
                        &[&ids, ended, &self.worker],
                    )
                    .await?;
                let deleted: Vec<String> = rows
                    .iter()
                    .map(|r| column(r, 0))
                    .collect::<Result<_, _>>()?;
                if !deleted.is_empty() {
                    tx.execute(
                        &sql.q("DELETE FROM {s}.records WHERE run_id = ANY($1)"),
                        &[&deleted],
                    )
                    .await?;
                    tx.execute(
                        &sql.q("DELETE FROM {s}.requests WHERE run_id = ANY($1)"),
                        &[&deleted],
                    )
                    .await?;
                }
                tx.commit().await?;
                Ok(deleted)
            }
        })?;
        let mut held = lock(&self.held);
        for id in &deleted {
            held.remove(id);
        }
        Ok(deleted)
    }

    /// Deletes the blobs that no run names: a definition no run has, and a component that no
    /// remaining definition names (`plugins_of` reads them from its bytes)
    /// (`Store::collect_garbage`).
    ///
    /// The definitions are read and `plugins_of` called first without the lock; then, holding
    /// the blobs lock exclusive, the definitions named now are looked up again, only those not
    /// read yet are read (a run created since), and the unnamed blobs are deleted: run
    /// creations wait for that short transaction alone. The bytes reported are the deleted
    /// blobs'; the server reuses their room itself.
    pub(super) fn collect_unnamed_blobs(
        &self,
        plugins_of: &PluginsOf,
    ) -> Result<Reclaimed, StoreError> {
        // Streamed: one definition's bytes at a time in memory.
        let components = self.call("read the stored definitions", |c| {
            let sql = &self.sql;
            async move {
                let mut components: HashMap<String, Vec<String>> = HashMap::new();
                let query = sql.q(&format!("SELECT b.digest, b.bytes {DEFINITIONS}"));
                let rows = c.query_raw(&query, std::iter::empty::<&str>()).await?;
                pin_mut!(rows);
                while let Some(row) = rows.next().await {
                    let row = row?;
                    let digest: String = column(&row, 0)?;
                    let bytes: &[u8] = column(&row, 1)?;
                    components.insert(digest, plugins_of(bytes).map_err(Fail::Final)?);
                }
                Ok(components)
            }
        })?;
        let (blobs, bytes) = self.call("remove unnamed blobs", |mut c| {
            let sql = &self.sql;
            let components = &components;
            async move {
                let tx = c.transaction().await?;
                tx.batch_execute(&format!("SELECT pg_advisory_xact_lock({})", sql.blobs_lock))
                    .await?;
                let named: Vec<String> = tx
                    .query(&sql.q(&format!("SELECT b.digest {DEFINITIONS}")), &[])
                    .await?
                    .iter()
                    .map(|r| column(r, 0))
                    .collect::<Result<_, _>>()?;
                let unread: Vec<&str> = named
                    .iter()
                    .filter(|d| !components.contains_key(*d))
                    .map(String::as_str)
                    .collect();
                let mut kept: HashSet<String> = HashSet::new();
                if !unread.is_empty() {
                    let rows = tx
                        .query(
                            &sql.q("SELECT bytes FROM {s}.blobs WHERE digest = ANY($1)"),
                            &[&unread],
                        )
                        .await?;
                    for row in &rows {
                        kept.extend(plugins_of(column(row, 0)?).map_err(Fail::Final)?);
                    }
                }
                for digest in &named {
                    if let Some(names) = components.get(digest) {
                        kept.extend(names.iter().cloned());
                    }
                    kept.insert(digest.clone());
                }
                let kept: Vec<String> = kept.into_iter().collect();
                let row = tx
                    .query_one(
                        &sql.q("WITH d AS (DELETE FROM {s}.blobs WHERE digest <> ALL($1) \
                               RETURNING octet_length(bytes) AS n) \
                             SELECT count(*), COALESCE(sum(n), 0)::bigint FROM d"),
                        &[&kept],
                    )
                    .await?;
                let counted: (i64, i64) = (column(&row, 0)?, column(&row, 1)?);
                tx.commit().await?;
                Ok(counted)
            }
        })?;
        Ok(Reclaimed {
            blobs: u64::try_from(blobs).unwrap_or(0),
            bytes: u64::try_from(bytes).unwrap_or(0),
        })
    }
}

/// Column `i` of `row`, or the failure of a row that is not what the statement selects (for
/// good: another connection would read the same).
fn column<'a, T: FromSql<'a>>(row: &'a Row, i: usize) -> Result<T, Fail> {
    row.try_get(i).map_err(|e| {
        Fail::Final(StoreError::Backend(format!(
            "postgres: an unexpected column {i} in a row of weft's tables: {e}"
        )))
    })
}
