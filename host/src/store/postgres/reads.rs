//! Reads: a run's records, one column of a row, and the summaries that listing shows.

use super::{PgStore, RecordKey, RunSummary, StoreError, key_of, seq_of, status_of};

impl PgStore {
    /// The run's records from `from` on, in order (`Store::records`).
    pub(super) fn read_records(
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

    /// The key of the run's last record (`Store::last_record`).
    pub(super) fn read_last_record(&self, run_id: &str) -> Result<Option<RecordKey>, StoreError> {
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

    /// One `bytea` (or nullable) column of the row `query` selects by `key`.
    pub(super) fn bytes(
        &self,
        what: &str,
        query: &str,
        key: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
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
    pub(super) fn summaries(&self, run_id: Option<&str>) -> Result<Vec<RunSummary>, StoreError> {
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
