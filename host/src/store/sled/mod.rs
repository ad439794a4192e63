//! The embedded default backend: one sled database in the home directory (`<home>/db`), a
//! write-ahead log in front of it (`<home>/wal`), and components and definitions as
//! content-addressed files beside them (`<home>/blobs`).
//!
//! A write goes to the log and to a table of pending writes (`pending`), which reads consult
//! before sled; [`Store::sync`] writes the log and fdatasyncs it, so a transition costs an
//! append, not a B-tree insert and a flush of sled's log. A background thread checkpoints: it
//! freezes the pending table, finishes the log segment and starts the next, inserts the frozen
//! writes into sled (the records a run wrote meanwhile as one chunk, `chunk`), flushes sled and
//! then retires the old segment (kept as the spare the next one is made from, or removed).
//! Opening replays whatever segments a process left.
//!
//! [`SledStore`] and the [`Store`] methods are here; the rest by concern: `open` (opening and
//! closing, the database's lock and format marker, replaying the log), `write` (what a write
//! puts in the log and the pending table, the disk's room), `checkpoint` (moving pending
//! writes into sled), `read` (reads), `listing` (the runs' indexes, read a page at a time),
//! `prune` (deleting ended runs, collecting blobs, compacting values files) and `error`
//! (sled's errors as the store's);
//! beneath them the log (`wal`), the pending table (`pending`), chunks of records (`chunk`),
//! the values files (`values`), the keys of sled's tree (`keys`), the blob files (`blobs`)
//! and `quiet_panic`.

mod blobs;
mod checkpoint;
mod chunk;
mod error;
mod keys;
mod listing;
mod open;
mod pending;
mod prune;
mod quiet_panic;
mod read;
mod values;
mod wal;
mod write;

use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};

use sled::{Db, Tree};

use crate::store::json::from_stored;
use crate::store::{
    NewRun, PluginsOf, Reclaimed, RecordKey, RunSummary, RunsPage, Store, StoreError,
};
use blobs::Blobs;
use keys::{BASE, DEFINITION, FIRST_AT, SNAPSHOT, SUMMARY, key, record_key, uses_key};
use open::DbFile;
pub use open::STORE_FORMAT;
use pending::Pending;
use values::Values;
use wal::Segment;

/// Runs in a sled database behind a write-ahead log, their components and definitions in blob
/// files. One process may open it at a time.
pub struct SledStore {
    shared: Arc<Shared>,
    /// The checkpoint thread, joined on drop.
    checkpointer: Option<std::thread::JoinHandle<()>>,
}

/// What the store's callers and its checkpoint thread share.
struct Shared {
    db: Db,
    data: Tree,
    blobs: Blobs,
    /// The chunks of records checkpoints moved out of the log, which sled holds refs to.
    values: Values,
    /// The database directory, for messages.
    dir: PathBuf,
    /// The log's directory.
    wal_dir: PathBuf,
    /// Writes sled does not hold yet.
    pending: Pending,
    /// The log segment being written.
    segment: Mutex<Segment>,
    /// Segments whose writes are frozen, removed once a checkpoint has them in sled.
    retired: Mutex<Vec<Segment>>,
    /// Wakes the checkpoint thread.
    wake: Wake,
    /// Held through a checkpoint: two at once could write a frozen table into sled after the
    /// newer one that followed it. It holds the buffer a checkpoint gathers its chunks in, kept
    /// for the next one (up to `checkpoint::KEPT_CHUNK_BUFFER` bytes), so that each
    /// checkpoint does not fault in megabytes of fresh pages again.
    checkpointing: Mutex<Vec<u8>>,
    /// Held by each run's creation (shared), which stores blobs before the run that names
    /// them, and by the collection of blobs no run names (exclusive).
    blob_guard: RwLock<()>,
    /// Bytes that may still be written before [`Shared::room`] looks at the disk again.
    unchecked: AtomicU64,
    /// The database file; declared last, so it is dropped after the database handles.
    db_file: DbFile,
}

/// Tells the checkpoint thread that a checkpoint is due or that it should stop.
#[derive(Default)]
struct Wake {
    state: Mutex<WakeState>,
    signal: Condvar,
}

#[derive(Default)]
struct WakeState {
    due: bool,
    stop: bool,
}

/// Locks `m`, taking over a lock whose holder panicked.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The definition digest and first state in run `id`'s first value `v`.
fn split_first<'v>(id: &str, v: &'v [u8]) -> Result<(&'v str, &'v [u8]), StoreError> {
    keys::split_first(v).ok_or_else(|| StoreError::Corrupt {
        key: format!("first state of {id}"),
        message: "its value does not start with a definition digest".into(),
    })
}

impl Store for SledStore {
    fn create_run(&self, run: NewRun<'_>) -> Result<(), StoreError> {
        let s = &self.shared;
        let id = &run.summary.run_id;
        if !run.fresh_id && s.get(SUMMARY, id)?.is_some() {
            return Err(StoreError::RunExists(id.clone()));
        }
        let plugins: usize = run.plugins.iter().map(|(_, bytes)| bytes.len()).sum();
        s.room(plugins + run.definition.bytes().len())?;
        let _creating = s
            .blob_guard
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Blobs first: they are synced before anything names them.
        for (digest, bytes) in run.plugins {
            s.blobs.put(digest, bytes)?;
        }
        let definition = run.definition.digest();
        s.blobs.put(definition, run.definition.bytes())?;
        let summary = Shared::summary_bytes(run.summary)?;
        // The summary is what makes the run exist: logged with the rest, after it, and with
        // the entry that lists it.
        let first = keys::first(definition, run.base);
        let mut writes = vec![
            (record_key(id, FIRST_AT), &first[..]),
            listing::index_entry(run.summary),
            (uses_key(definition, id), &[]),
        ];
        writes.extend(listing::tag_entries(run.summary));
        writes.push((key(SUMMARY, id), &summary));
        s.put(writes)
    }

    fn append(&self, run_id: &str, at: RecordKey, record: &[u8]) -> Result<(), StoreError> {
        self.shared
            .put(vec![(Shared::record_key(run_id, at)?, record)])
    }

    /// The record, the snapshot and the summary go into the log as one write.
    fn append_all(
        &self,
        run_id: &str,
        at: RecordKey,
        record: &[u8],
        snapshot: Option<&[u8]>,
        summary: Option<&RunSummary>,
    ) -> Result<(), StoreError> {
        let summary = summary.map(Shared::summary_bytes).transpose()?;
        let mut writes = Vec::with_capacity(3);
        writes.push((Shared::record_key(run_id, at)?, record));
        if let Some(snapshot) = snapshot {
            writes.push((key(SNAPSHOT, run_id), snapshot));
        }
        if let Some(summary) = &summary {
            writes.push((key(SUMMARY, run_id), summary.as_slice()));
        }
        self.shared.put(writes)
    }

    fn put_snapshot(&self, run_id: &str, snapshot: &[u8]) -> Result<(), StoreError> {
        self.shared.put(vec![(key(SNAPSHOT, run_id), snapshot)])
    }

    fn put_summary(&self, summary: &RunSummary) -> Result<(), StoreError> {
        let bytes = Shared::summary_bytes(summary)?;
        self.shared
            .put(vec![(key(SUMMARY, &summary.run_id), &bytes)])
    }

    /// Writes the log entries made since the last sync and fdatasyncs the segment; the
    /// fdatasync runs outside the segment's lock, so the next sync's write need not wait for it.
    fn sync(&self) -> Result<(), StoreError> {
        let s = &self.shared;
        let point = {
            let mut segment = lock(&s.segment);
            s.write_unwritten(&mut segment, s.pending.take_unwritten())?;
            segment.sync_point()
        };
        point.sync()
    }

    /// Checkpoints until nothing is pending: a frozen table left by a failed checkpoint
    /// first, then the writes since.
    fn checkpoint(&self) -> Result<(), StoreError> {
        for _ in 0..2 {
            if self.shared.pending.is_empty() {
                break;
            }
            self.shared.checkpoint()?;
        }
        Ok(())
    }

    fn snapshot(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.shared.get(SNAPSHOT, run_id)
    }

    fn base(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        // A run written before format 4 has its first state alone.
        let Some(mut v) = self.shared.first(run_id)? else {
            return self.shared.get(BASE, run_id);
        };
        let start = v.len() - split_first(run_id, &v)?.1.len();
        v.drain(..start);
        Ok(Some(v))
    }

    fn definition(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let digest = match self.shared.first(run_id)? {
            Some(v) => split_first(run_id, &v)?.0.to_owned(),
            // A run written before format 4 has its digest alone.
            None => match self.shared.get(DEFINITION, run_id)? {
                Some(digest) => String::from_utf8_lossy(&digest).into_owned(),
                None => return Ok(None),
            },
        };
        match self.shared.blobs.get(&digest)? {
            Some(bytes) => Ok(Some(bytes)),
            None => Err(StoreError::Corrupt {
                key: format!("definition of {run_id}"),
                message: format!("its blob {digest} is missing from the home's blobs/sha256"),
            }),
        }
    }

    fn plugin(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.shared.blobs.get(digest)
    }

    fn records(
        &self,
        run_id: &str,
        from: RecordKey,
    ) -> Result<Vec<(RecordKey, Vec<u8>)>, StoreError> {
        self.shared.records(run_id, from)
    }

    fn last_record(&self, run_id: &str) -> Result<Option<RecordKey>, StoreError> {
        self.shared.last_record(run_id)
    }

    fn summary(&self, run_id: &str) -> Result<Option<RunSummary>, StoreError> {
        match self.shared.get(SUMMARY, run_id)? {
            None => Ok(None),
            Some(v) => from_stored(&v).map(Some).map_err(|e| StoreError::Corrupt {
                key: format!("summary of {run_id}"),
                message: e.to_string(),
            }),
        }
    }

    fn runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        self.shared.runs()
    }

    fn runs_page(&self, page: &RunsPage<'_>) -> Result<Vec<RunSummary>, StoreError> {
        self.shared.runs_page(page)
    }

    fn delete_ended(&self, run_ids: &[&str]) -> Result<Vec<String>, StoreError> {
        self.shared.delete_ended(run_ids)
    }

    fn collect_garbage(&self, plugins_of: &PluginsOf) -> Result<Reclaimed, StoreError> {
        self.shared.collect_garbage(plugins_of)
    }
}

#[cfg(test)]
mod tests {
    use super::keys::{FIRST, RECORD};
    use super::*;

    /// The summary of a running run of workflow `w`, made at 1.
    pub(super) fn summary(id: &str) -> RunSummary {
        RunSummary {
            run_id: id.into(),
            workflow_id: "w".into(),
            status: crate::engine::RunStatus::Running,
            created_at: 1,
            updated_at: 1,
            tags: Default::default(),
        }
    }

    /// A record of `{"i": i}`.
    pub(super) fn record(i: u64) -> Vec<u8> {
        format!("{{\"i\":{i}}}").into_bytes()
    }

    /// The seqs of `records`' keys.
    pub(super) fn keys(records: &[(RecordKey, Vec<u8>)]) -> Vec<u64> {
        records.iter().map(|((seq, _), _)| *seq).collect()
    }

    #[test]
    fn a_runs_first_value_goes_into_sled_in_its_first_chunk_and_reads_back() {
        let dir = tempfile::tempdir().expect("temp dir");
        let home = dir.path().join("home");
        let store = SledStore::open(&home, 8).expect("open");
        let definition = super::super::Definition::new(b"{\"graph\":1}".to_vec());
        for (id, base) in [("r", &b"{\"s\":1}"[..]), ("empty", &b"{\"s\":2}"[..])] {
            let summary = summary(id);
            let run = NewRun {
                summary: &summary,
                definition: &definition,
                plugins: &[],
                base,
                fresh_id: true,
            };
            store.create_run(run).expect("create");
        }
        store.append("r", (1, 0), &record(1)).expect("append");
        store.append("r", (2, 1), &record(2)).expect("append");
        // A record where the first value is would overwrite it: refused, nothing written.
        let refused = store.append("r", FIRST_AT, &record(0));
        assert!(
            matches!(refused, Err(StoreError::Backend(_))),
            "{refused:?}"
        );
        let reads_back = |store: &SledStore| {
            assert_eq!(store.base("r").expect("base"), Some(b"{\"s\":1}".to_vec()));
            assert_eq!(
                store.base("empty").expect("base"),
                Some(b"{\"s\":2}".to_vec())
            );
            let graph = store.definition("r").expect("definition");
            assert_eq!(graph.as_deref(), Some(definition.bytes()));
            assert_eq!(
                keys(&store.records("r", (0, 0)).expect("records")),
                vec![1, 2]
            );
            assert!(store.records("empty", (0, 0)).expect("records").is_empty());
            assert_eq!(store.last_record("r").expect("last"), Some((2, 1)));
            assert_eq!(store.last_record("empty").expect("last"), None);
        };
        reads_back(&store);
        Store::checkpoint(&store).expect("checkpoint");
        // In sled: one chunk for the first value and the records, no entry of its own.
        let data = &store.shared.data;
        assert_eq!(data.scan_prefix(key(RECORD, "r")).count(), 1);
        assert_eq!(data.scan_prefix([FIRST]).count(), 0);
        // The chunk itself in the values files, sled holding only its ref.
        let held = data.get(record_key("r", FIRST_AT)).expect("get");
        assert_eq!(held.map(|v| v.len()), Some(17));
        reads_back(&store);
        drop(store);
        let store = SledStore::open(&home, 8).expect("open again");
        reads_back(&store);
        // A run written in format 4 keeps its first value under a key of its own.
        let old = keys::first(definition.digest(), b"{\"s\":3}");
        store
            .shared
            .data
            .insert(key(FIRST, "old"), old)
            .expect("insert");
        assert_eq!(
            store.base("old").expect("base"),
            Some(b"{\"s\":3}".to_vec())
        );
        let graph = store.definition("old").expect("definition");
        assert_eq!(graph.as_deref(), Some(definition.bytes()));
    }
}
