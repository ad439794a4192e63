//! Reads: a run's records, one column of a row, and the summaries that listing shows, all of
//! them or a page at a time.

use super::{PgStore, RecordKey, RunSummary, RunsPage, StoreError, key_of, seq_of, status_of};

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

    /// A page of the listing (`Store::runs_page`): a keyset query that reads the index in the
    /// listing's order (`runs_page`, or `runs_page_by_workflow`) from the cursor on, as far as
    /// the page goes.
    pub(super) fn page_of_runs(&self, page: &RunsPage<'_>) -> Result<Vec<RunSummary>, StoreError> {
        // One statement per shape, so each is planned for its index, not for any parameter.
        let mut sql = String::from(
            "SELECT run_id, workflow_id, status, created_at, updated_at, tags::text FROM {s}.runs \
             WHERE true",
        );
        let limit = i64::try_from(page.limit).unwrap_or(i64::MAX);
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&limit];
        if let Some(workflow) = &page.workflow {
            params.push(workflow);
            sql.push_str(&format!(" AND workflow_id = ${}", params.len()));
        }
        let tags = (!page.tags.is_empty()).then(|| {
            serde_json::Value::Object(
                page.tags
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                    .collect(),
            )
            .to_string()
        });
        if let Some(tags) = &tags {
            params.push(tags);
            sql.push_str(&format!(" AND tags @> ${}::text::jsonb", params.len()));
        }
        if let Some((at, id)) = &page.after {
            params.push(at);
            params.push(id);
            sql.push_str(&format!(
                " AND (created_at, run_id COLLATE \"C\") < (${}::bigint, ${}::text)",
                params.len() - 1,
                params.len()
            ));
        }
        sql.push_str(" ORDER BY created_at DESC, run_id COLLATE \"C\" DESC LIMIT $1");
        let sql = self.sql.q(&sql);
        let rows = self.call("read a page of runs", |c| {
            let (sql, params) = (&sql, &params);
            async move { Ok(c.query(sql, params).await?) }
        })?;
        rows.iter().map(summary_of).collect()
    }

    /// The summaries of one run or of all, newest first.
    pub(super) fn summaries(&self, run_id: Option<&str>) -> Result<Vec<RunSummary>, StoreError> {
        let rows = self.call("read run summaries", |c| {
            let sql = &self.sql;
            async move {
                Ok(c.query(
                    &sql.q(
                        "SELECT run_id, workflow_id, status, created_at, updated_at, tags::text \
                         FROM {s}.runs WHERE $1::text IS NULL OR run_id = $1 \
                         ORDER BY created_at DESC, run_id COLLATE \"C\" DESC",
                    ),
                    &[&run_id],
                )
                .await?)
            }
        })?;
        rows.iter().map(summary_of).collect()
    }
}

/// The summary in a row of `run_id, workflow_id, status, created_at, updated_at, tags::text`.
fn summary_of(r: &tokio_postgres::Row) -> Result<RunSummary, StoreError> {
    let run_id: String = r.get(0);
    let status = status_of(&run_id, r.get(2))?;
    let tags: String = r.get(5);
    let tags = serde_json::from_str(&tags).map_err(|e| StoreError::Corrupt {
        key: format!("runs/{run_id}/tags"),
        message: e.to_string(),
    })?;
    Ok(RunSummary {
        workflow_id: r.get(1),
        status,
        created_at: r.get(3),
        updated_at: r.get(4),
        run_id,
        tags,
    })
}
