//! The embedded default backend: one sled database in the home directory.
//!
//! Every write is a single-key insert: sled's multi-key batches cost several thread wake-ups
//! each, so a transition is one record holding all it needs.

use std::path::{Path, PathBuf};

use sled::{Db, Tree};

use super::{NewRun, RecordKey, RunSummary, Store, StoreError};

/// Runs in a sled database. One process may open it at a time.
pub struct SledStore {
    db: Db,
    data: Tree,
    dir: PathBuf,
}

/// Free space a write leaves to sled beyond its own bytes: a log segment (sled's default
/// segment size, which weft keeps) that sled may start writing at any time.
const HEADROOM: u64 = 512 << 10;

/// sled's error as a sentence (its own text ends in a debug dump such as `backtrace ()`).
fn backend(e: sled::Error) -> StoreError {
    use sled::Error;
    match e {
        Error::Io(io)
            if matches!(
                io.kind(),
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
            ) =>
        {
            StoreError::DiskFull(io.to_string())
        }
        Error::Io(io) => StoreError::Backend(format!("cannot read or write the database: {io}")),
        Error::Corruption { at: Some(at), .. } => StoreError::Backend(format!(
            "the database is damaged: sled read corrupted data at {at}"
        )),
        Error::Corruption { at: None, .. } => {
            StoreError::Backend("the database is damaged: sled read corrupted data".into())
        }
        Error::ReportableBug(what) => {
            StoreError::Backend(format!("the database failed (a bug in sled): {what}"))
        }
        Error::Unsupported(what) => {
            StoreError::Backend(format!("the database refused an operation: {what}"))
        }
        Error::CollectionNotFound(name) => StoreError::Backend(format!(
            "the database has no collection {}",
            String::from_utf8_lossy(&name)
        )),
    }
}

/// Removes the snapshot files sled left unfinished (`snap.*.generating`, written when it opens
/// a database): sled would take such a file for the newest snapshot and refuse to open the
/// database as corrupt (as a full disk leaves it: empty). sled renames a finished snapshot
/// before it removes older ones, and it writes snapshots only while opening, so such a file
/// never holds the only copy of anything: sled makes it again from the log.
///
/// Only while no process has the database open (sled's lock on its `db` file is free): one
/// that is opening it may be writing such a file right now.
fn remove_unfinished_snapshots(dir: &Path) -> Result<(), StoreError> {
    let Ok(db) = std::fs::File::open(dir.join("db")) else {
        return Ok(()); // a new database
    };
    if db.try_lock().is_err() {
        return Ok(()); // held: opening reports it
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("snap.") && name.ends_with(".generating") {
            let path = entry.path();
            std::fs::remove_file(&path).map_err(|e| {
                StoreError::Backend(format!(
                    "cannot remove the unfinished snapshot {}: {e}",
                    path.display()
                ))
            })?;
        }
    }
    Ok(())
}

fn key(kind: u8, run: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(run.len() + 2 + 12);
    k.push(kind);
    k.extend_from_slice(run.as_bytes());
    k.push(0);
    k
}

fn record_key(run: &str, (seq, sub): RecordKey) -> Vec<u8> {
    let mut k = key(RECORD, run);
    k.extend_from_slice(&seq.to_be_bytes());
    k.extend_from_slice(&sub.to_be_bytes());
    k
}

fn parse_record_key(prefix: &[u8], k: &[u8]) -> Option<RecordKey> {
    let rest = k.get(prefix.len()..)?;
    let seq = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
    let sub = u32::from_be_bytes(rest.get(8..12)?.try_into().ok()?);
    Some((seq, sub))
}

/// Whether opening failed because another process holds the database's file lock. sled wraps
/// the `WouldBlock` of the lock in an error of its own.
fn is_lock_held(io: &std::io::Error) -> bool {
    io.kind() == std::io::ErrorKind::WouldBlock
        || io
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<std::io::Error>())
            .is_some_and(|inner| inner.kind() == std::io::ErrorKind::WouldBlock)
        || io.to_string().contains("could not acquire lock")
}

const SNAPSHOT: u8 = b's';
const BASE: u8 = b'b';
const DEFINITION: u8 = b'd';
const SUMMARY: u8 = b'r';
const RECORD: u8 = b't';
const PLUGIN: u8 = b'p';

impl SledStore {
    /// Opens (or creates) the database in `dir`, with at most `cache_mib` of page cache.
    pub fn open(dir: &Path, cache_mib: u64) -> Result<Self, StoreError> {
        remove_unfinished_snapshots(dir)?;
        let db = sled::Config::new()
            .path(dir)
            .mode(sled::Mode::HighThroughput)
            .cache_capacity(cache_mib.saturating_mul(1 << 20))
            .open()
            .map_err(|e| match e {
                sled::Error::Io(io) if is_lock_held(&io) => {
                    StoreError::Held(dir.display().to_string())
                }
                other => backend(other),
            })?;
        let data = db.open_tree("weft").map_err(backend)?;
        Ok(SledStore {
            db,
            data,
            dir: dir.to_path_buf(),
        })
    }

    /// Refuses a write of `bytes` unless the disk holding the database has room for it and
    /// [`HEADROOM`]: sled stops for good (and may hang flushing) once one of its own writes
    /// fails for want of space, while a write refused here leaves it working, so the home
    /// works again as soon as there is space.
    fn room(&self, bytes: usize) -> Result<(), StoreError> {
        let Ok(fs) = rustix::fs::statvfs(&self.dir) else {
            return Ok(()); // cannot tell: sled reports what happens
        };
        let free = fs.f_bavail.saturating_mul(fs.f_frsize);
        let need = (bytes as u64).saturating_add(HEADROOM);
        if free < need {
            return Err(StoreError::DiskFull(format!(
                "{} KiB free, and writing needs {} KiB",
                free >> 10,
                need.div_ceil(1 << 10)
            )));
        }
        Ok(())
    }

    fn summary_bytes(s: &RunSummary) -> Result<Vec<u8>, StoreError> {
        serde_json::to_vec(s).map_err(|e| StoreError::Backend(e.to_string()))
    }

    fn get(&self, kind: u8, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .data
            .get(key(kind, id))
            .map_err(backend)?
            .map(|v| v.to_vec()))
    }
}

impl Store for SledStore {
    fn create_run(&self, run: NewRun<'_>) -> Result<(), StoreError> {
        let id = &run.summary.run_id;
        if self.data.contains_key(key(SUMMARY, id)).map_err(backend)? {
            return Err(StoreError::RunExists(id.clone()));
        }
        let plugins: usize = run.plugins.iter().map(|(_, bytes)| bytes.len()).sum();
        self.room(plugins + run.definition.len() + run.base.len())?;
        for (digest, bytes) in run.plugins {
            let k = key(PLUGIN, digest);
            if !self.data.contains_key(&k).map_err(backend)? {
                self.data.insert(k, *bytes).map_err(backend)?;
            }
        }
        self.data
            .insert(key(DEFINITION, id), run.definition)
            .map_err(backend)?;
        self.data.insert(key(BASE, id), run.base).map_err(backend)?;
        // Last: the summary is what makes the run exist.
        self.data
            .insert(key(SUMMARY, id), Self::summary_bytes(run.summary)?)
            .map_err(backend)?;
        Ok(())
    }

    fn append(&self, run_id: &str, at: RecordKey, record: &[u8]) -> Result<(), StoreError> {
        self.room(record.len())?;
        self.data
            .insert(record_key(run_id, at), record)
            .map_err(backend)?;
        Ok(())
    }

    fn put_snapshot(&self, run_id: &str, snapshot: &[u8]) -> Result<(), StoreError> {
        self.room(snapshot.len())?;
        self.data
            .insert(key(SNAPSHOT, run_id), snapshot)
            .map_err(backend)?;
        Ok(())
    }

    fn put_summary(&self, summary: &RunSummary) -> Result<(), StoreError> {
        let bytes = Self::summary_bytes(summary)?;
        self.room(bytes.len())?;
        self.data
            .insert(key(SUMMARY, &summary.run_id), bytes)
            .map_err(backend)?;
        Ok(())
    }

    fn sync(&self) -> Result<(), StoreError> {
        self.db.flush().map(|_| ()).map_err(backend)
    }

    fn snapshot(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.get(SNAPSHOT, run_id)
    }

    fn base(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.get(BASE, run_id)
    }

    fn definition(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.get(DEFINITION, run_id)
    }

    fn plugin(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.get(PLUGIN, digest)
    }

    fn records(
        &self,
        run_id: &str,
        from: RecordKey,
    ) -> Result<Vec<(RecordKey, Vec<u8>)>, StoreError> {
        let prefix = key(RECORD, run_id);
        let mut out = Vec::new();
        for kv in self.data.range(record_key(run_id, from)..) {
            let (k, v) = kv.map_err(backend)?;
            if !k.starts_with(&prefix) {
                break;
            }
            if let Some(at) = parse_record_key(&prefix, &k) {
                out.push((at, v.to_vec()));
            }
        }
        Ok(out)
    }

    fn last_record(&self, run_id: &str) -> Result<Option<RecordKey>, StoreError> {
        let prefix = key(RECORD, run_id);
        match self.data.scan_prefix(&prefix).next_back() {
            None => Ok(None),
            Some(kv) => {
                let (k, _) = kv.map_err(backend)?;
                Ok(parse_record_key(&prefix, &k))
            }
        }
    }

    fn summary(&self, run_id: &str) -> Result<Option<RunSummary>, StoreError> {
        match self.get(SUMMARY, run_id)? {
            None => Ok(None),
            Some(v) => serde_json::from_slice(&v)
                .map(Some)
                .map_err(|e| StoreError::Corrupt {
                    key: format!("summary of {run_id}"),
                    message: e.to_string(),
                }),
        }
    }

    fn runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        let mut out = Vec::new();
        for kv in self.data.scan_prefix([SUMMARY]) {
            let (k, v) = kv.map_err(backend)?;
            let s: RunSummary = serde_json::from_slice(&v).map_err(|e| StoreError::Corrupt {
                key: String::from_utf8_lossy(&k).into_owned(),
                message: e.to_string(),
            })?;
            out.push(s);
        }
        out.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then(b.run_id.cmp(&a.run_id))
        });
        Ok(out)
    }
}
