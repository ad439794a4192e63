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
//!   at, so a process presumed dead cannot write after another took the run over).
//! - `records`: a run's records by `(seq, sub)` (the store's `RecordKey`): its history.
//! - `blobs`: components and definitions by sha256, shared by every run that uses them.
//! - `workers`: every process on the store, with the time its heartbeat runs out
//!   (`alive_until`); a run whose owner's heartbeat ran out may be claimed by another.
//! - `requests`: a resume or cancel that one process hands to the process driving the run, with
//!   its answer.

/// The schema version this weft writes and reads: 2 since records are MessagePack (JSON
/// before, still read), which a weft that knows only version 1 could not read; 3 since a
/// record's tracking events are arrays of their members and a plain step end a short array
/// (`driver::record`), which a weft that knows only version 2 would misread as a record with
/// neither.
pub const VERSION: i32 = 3;

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
];

/// The SQL that brings schema `schema` (quoted) from version `from` to [`VERSION`].
pub fn migrations_from(from: i32, schema: &str) -> Vec<String> {
    MIGRATIONS
        .iter()
        .skip(usize::try_from(from).unwrap_or(0))
        .map(|m| m.replace("{s}", schema))
        .collect()
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
