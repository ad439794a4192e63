//! Writes of a run's history: a new run with its blobs, and its records, snapshots and
//! summaries, each write fenced by the epoch this process holds the run at.

use super::{NewRun, PgStore, RecordKey, RunSummary, StoreError, lock, seq_of, status_text};

impl PgStore {
    /// Stores a new run with its blobs, this process its owner at epoch 1 (`Store::create_run`).
    pub(super) fn insert_run(&self, run: NewRun<'_>) -> Result<(), StoreError> {
        let s = run.summary;
        let id = &s.run_id;
        let definition = run.definition.digest();
        let status = status_text(s.status);
        let tags =
            serde_json::to_string(&s.tags).map_err(|e| StoreError::Backend(e.to_string()))?;
        let tags = &tags;
        let mut blobs: Vec<(&str, &[u8])> = run.plugins.to_vec();
        blobs.push((definition, run.definition.bytes()));
        let created = self.call("create a run", |mut c| {
            let sql = &self.sql;
            let (blobs, definition, status) = (&blobs, &definition, &status);
            async move {
                let tx = c.transaction().await?;
                // First: no collection of unnamed blobs removes those looked up below before
                // this run, which names them, commits (`prune`). Simple protocol, one round
                // trip.
                tx.batch_execute(&format!(
                    "SELECT pg_advisory_xact_lock_shared({})",
                    sql.blobs_lock
                ))
                .await?;
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
                             updated_at, definition, base, owner, epoch, tags) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 1, $9::text::jsonb) \
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
                            tags,
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

    /// Writes a transition (`Store::append_all`), fenced by the epoch this process holds the
    /// run at.
    pub(super) fn write_transition(
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

    /// Replaces the run's snapshot (`Store::put_snapshot`), fenced by the epoch.
    pub(super) fn write_snapshot(&self, run_id: &str, snapshot: &[u8]) -> Result<(), StoreError> {
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

    /// Replaces the run's summary (`Store::put_summary`), fenced by the epoch.
    pub(super) fn write_summary(&self, summary: &RunSummary) -> Result<(), StoreError> {
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
}
