//! Claims and fencing: a process takes a run (raising its epoch) unless a live process holds
//! it, lets it go, finds the runs nobody drives, and refuses its own writes to a run another
//! process has taken over since.

use super::{Claim, PgStore, StoreError, lock};

/// Lets a run go (`$1` run, `$2` worker, `$3` epoch), announcing it on `$4` when it still has
/// to run.
pub(super) const RELEASE: &str = "WITH r AS (UPDATE {s}.runs SET owner = NULL \
      WHERE run_id = $1 AND owner = $2 AND epoch = $3 RETURNING status) \
    SELECT pg_notify($4, $1) FROM r WHERE status IN ('pending', 'running')";

impl PgStore {
    /// The epoch this process holds `run_id` at, or the refusal of a write to it.
    pub(super) fn epoch(&self, run_id: &str) -> Result<i64, StoreError> {
        lock(&self.held)
            .get(run_id)
            .copied()
            .ok_or_else(|| StoreError::Fenced(run_id.to_owned()))
    }

    /// Forgets `run_id` after a write was refused: another process holds it now.
    pub(super) fn fenced(&self, run_id: &str) -> StoreError {
        lock(&self.held).remove(run_id);
        StoreError::Fenced(run_id.to_owned())
    }

    /// Takes `run_id` unless a live process holds it, raising its epoch (`Store::claim`).
    pub(super) fn claim_run(&self, run_id: &str) -> Result<Claim, StoreError> {
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

    /// Lets `run_id` go for another process to claim (`Store::release`); left to the
    /// heartbeat when the server cannot be reached.
    pub(super) fn release_run(&self, run_id: &str) -> Result<(), StoreError> {
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

    /// Up to `limit` pending or running runs no live process drives
    /// (`SharedStore::claimable`).
    pub(super) fn unclaimed_runs(&self, limit: usize) -> Result<Vec<String>, StoreError> {
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
}
