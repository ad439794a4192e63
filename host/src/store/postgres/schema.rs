//! weft's tables in PostgreSQL, made and migrated by weft itself on first use.
//!
//! `<schema>.meta` holds the schema's version. Opening a store takes an advisory lock (so two
//! processes starting at once do not both migrate), applies every migration past the stored
//! version in one transaction, and refuses a schema newer than this weft knows.
//!
//! The tables (`{s}` is the schema):
//! - `runs`: one row per run: its summary (id, workflow, status, times), the digest of its
//!   definition, its first state (`base`), its latest snapshot, and who drives it (`owner`, a
//!   worker id, with `epoch`, raised by every claim: a write carries the epoch it was claimed
//!   at, so a process presumed dead cannot write after another took the run over); indexed
//!   by definition too, for the collection of blobs no run names.
//! - `records`: a run's records by `(seq, sub)` (the store's `RecordKey`): its history.
//! - `blobs`: components and definitions by sha256, shared by every run that uses them.
//! - `workers`: every process on the store, with the time its heartbeat runs out
//!   (`alive_until`); a run whose owner's heartbeat ran out may be claimed by another.
//! - `requests`: a resume or cancel that one process hands to the process driving the run, with
//!   its answer.

use super::PgStore;
use super::connect::Fail;
use crate::store::StoreError;

/// The schema version this weft writes and reads: 2 since records are MessagePack (JSON
/// before, still read), which a weft that knows only version 1 could not read; 3 since a
/// record's tracking events are arrays of their members and a plain step end a short array
/// (`driver::record`), which a weft that knows only version 2 would misread as a record with
/// neither; 4 since the listing reads a page at a time through indexes in its own order
/// (`runs_page`, `runs_page_by_workflow`), run ids compared byte by byte as sled does; 5 since
/// runs are indexed by definition (`runs_by_definition`), so that a collection of unnamed
/// blobs (`prune`) looks each stored definition up in an index instead of reading every run,
/// and since a run's creation takes the blobs lock that such a collection waits for, which a
/// weft that knows only version 4 would not take; and since a run carries its tags (`tags`,
/// a JSON object, GIN-indexed for `tags @> ...`), which such a weft would not store.
pub(super) const VERSION: i32 = 5;

/// The statements of each migration, in order: migration `i` takes the schema from version `i`
/// to `i + 1`. `{s}` stands for the quoted schema name.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE {s}.runs (
    run_id text PRIMARY KEY,
    workflow_id text NOT NULL,
    status text NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    definition text NOT NULL,
    base bytea NOT NULL,
    snapshot bytea,
    owner text,
    epoch bigint NOT NULL DEFAULT 0
);
CREATE INDEX runs_by_created ON {s}.runs (created_at DESC, run_id DESC);
CREATE INDEX runs_unfinished ON {s}.runs (run_id) WHERE status IN ('pending', 'running');
CREATE TABLE {s}.records (
    run_id text NOT NULL,
    seq bigint NOT NULL,
    sub integer NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (run_id, seq, sub)
);
CREATE TABLE {s}.blobs (
    digest text PRIMARY KEY,
    bytes bytea NOT NULL
);
CREATE TABLE {s}.workers (
    id text PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    alive_until timestamptz NOT NULL
);
CREATE TABLE {s}.requests (
    id bigserial PRIMARY KEY,
    run_id text NOT NULL,
    worker text NOT NULL,
    body text NOT NULL,
    taken boolean NOT NULL DEFAULT false,
    answer text,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX requests_by_worker ON {s}.requests (worker) WHERE NOT taken;
-- A run's row is updated by every transition that snapshots or changes its status: room on
-- its page for the new version (a HOT update, no index touched) and a prompt vacuum.
ALTER TABLE {s}.runs SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0,
    toast.autovacuum_vacuum_scale_factor = 0.01, toast.autovacuum_vacuum_threshold = 1000);
ALTER TABLE {s}.requests SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
ALTER TABLE {s}.workers SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
"#,
    r#"
COMMENT ON COLUMN {s}.records.record IS 'MessagePack since schema version 2, JSON before';
"#,
    r#"
COMMENT ON COLUMN {s}.records.record IS 'MessagePack since schema version 2, JSON before; tracking events and plain step ends as arrays since version 3';
"#,
    r#"
CREATE INDEX runs_page ON {s}.runs (created_at DESC, run_id COLLATE "C" DESC);
CREATE INDEX runs_page_by_workflow ON {s}.runs (workflow_id, created_at DESC, run_id COLLATE "C" DESC);
DROP INDEX {s}.runs_by_created;
"#,
    r#"
CREATE INDEX runs_by_definition ON {s}.runs (definition);
ALTER TABLE {s}.runs ADD COLUMN tags jsonb NOT NULL DEFAULT '{}';
CREATE INDEX runs_by_tags ON {s}.runs USING gin (tags jsonb_path_ops);
"#,
];

/// The SQL that brings schema `schema` (quoted) from version `from` to [`VERSION`].
pub(super) fn migrations_from(from: i32, schema: &str) -> Vec<String> {
    MIGRATIONS
        .iter()
        .skip(usize::try_from(from).unwrap_or(0))
        .map(|m| m.replace("{s}", schema))
        .collect()
}

impl PgStore {
    /// Creates the schema when missing and applies the migrations it lacks. A schema at this
    /// weft's version is used as it is, so a role that may not create schemas (`CREATE` on the
    /// database) can use one made for it.
    pub(super) fn migrate(&self) -> Result<(), StoreError> {
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
        if current == Some(VERSION) {
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
                if found > VERSION {
                    return Err(Fail::Final(StoreError::Format {
                        dir: format!("PostgreSQL schema {name}"),
                        found: u32::try_from(found).unwrap_or(u32::MAX),
                        expected: VERSION as u32,
                    }));
                }
                for step in migrations_from(found, &sql.schema) {
                    tx.batch_execute(&step).await?;
                }
                tx.execute(
                    &sql.q(
                        "INSERT INTO {s}.meta (key, value) VALUES ('version', $1) \
                         ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                    ),
                    &[&VERSION.to_string()],
                )
                .await?;
                tx.commit().await?;
                Ok(())
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn there_is_one_migration_per_version() {
        assert_eq!(MIGRATIONS.len(), VERSION as usize);
        assert!(migrations_from(VERSION, "\"w\"").is_empty());
        assert!(migrations_from(0, "\"w\"")[0].contains("\"w\".runs"));
    }
}
