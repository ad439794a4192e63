//! The embedded default backend: one sled database in the home directory (`<home>/db`), with
//! components and definitions as content-addressed files beside it (`<home>/blobs`).
//!
//! Every write is a single-key insert: sled's multi-key batches cost several thread wake-ups
//! each, so a transition is one record holding all it needs.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sled::{Db, Tree};

use super::blobs::{Blobs, sha256_hex};
use super::json::from_stored;
use super::keys::{BASE, DEFINITION, RECORD, SNAPSHOT, SUMMARY, key, parse_record_key, record_key};
use super::quiet_panic::quietly;
use super::{NewRun, RecordKey, RunSummary, Store, StoreError};

/// Runs in a sled database, their components and definitions in blob files. One process may
/// open it at a time.
pub struct SledStore {
    db: Db,
    data: Tree,
    blobs: Blobs,
    /// The database directory, for messages.
    dir: PathBuf,
    /// Bytes that may still be written before [`SledStore::room`] looks at the disk again.
    unchecked: AtomicU64,
    /// The database file; declared last, so it is dropped after the database handles.
    db_file: DbFile,
}

/// The database file sled writes its log to and locks (`<home>/db/db`), on a descriptor of
/// its own: [`Store::sync`] fdatasyncs it, and dropping it waits until sled has let go of the
/// file's lock.
///
/// sled's background threads (a log write, the snapshot it writes on opening) hold the
/// database for a moment after its last handle is dropped; a store opened on the same home in
/// that moment would find it held. With this wait, a dropped store's home can be opened again
/// at once, by this process or another.
struct DbFile(std::fs::File);

/// How long a dropped store waits for sled's threads to let go of its database.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl Drop for DbFile {
    fn drop(&mut self) {
        let deadline = std::time::Instant::now() + RELEASE_WAIT;
        // sled's threads end on their own; nothing signals it, so look every millisecond.
        while self.0.try_lock().is_err() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Closing the descriptor releases the lock it may have taken.
    }
}

/// The home of the database directory `dir`, as messages name it.
fn home_of(dir: &Path) -> String {
    dir.parent().unwrap_or(dir).display().to_string()
}

/// Free space a write leaves to sled beyond its own bytes: a log segment (sled's default
/// segment size, which weft keeps) that sled may start writing at any time.
const HEADROOM: u64 = 512 << 10;

/// The most a store writes between two looks at the free space of its disk.
const RECHECK_BYTES: u64 = 16 << 20;

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

/// The error of a sled operation on the database in `dir`.
fn sled_error(dir: &Path, e: sled::Error) -> StoreError {
    match e {
        sled::Error::Io(io) if is_lock_held(&io) => StoreError::Held(dir.display().to_string()),
        sled::Error::Corruption { at, .. } => StoreError::Damaged {
            home: home_of(dir),
            dir: dir.display().to_string(),
            detail: match at {
                Some(at) => format!("sled read corrupted data at {at}"),
                None => "sled read corrupted data".into(),
            },
        },
        other => backend(other),
    }
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

/// The key, in sled's default tree, of the store's format version.
const FORMAT_KEY: &[u8] = b"weft-store-format";

/// The format of the record tree this build reads and writes. Format 1 (no marker) put the id
/// unprefixed in keys; format 2 length-prefixes it (`store::keys`).
pub const STORE_FORMAT: u32 = 2;

/// The name of the tree that holds runs.
const TREE: &str = "weft";

/// The store format of `db`: its marker, `1` for a store written before markers existed, or
/// `None` for an empty database (which then gets the current marker).
fn format_of(db: &Db, dir: &Path) -> Result<Option<u32>, StoreError> {
    let failed = |e| sled_error(dir, e);
    if let Some(v) = db.get(FORMAT_KEY).map_err(failed)? {
        let text = String::from_utf8_lossy(&v).into_owned();
        return text
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| StoreError::Corrupt {
                key: "the store format marker".into(),
                message: format!("{text:?} is not a format number"),
            });
    }
    let has_runs = db
        .tree_names()
        .iter()
        .any(|n| n.as_ref() == TREE.as_bytes())
        && !db.open_tree(TREE).map_err(failed)?.is_empty();
    Ok(has_runs.then_some(1))
}

/// Opens the database in `dir`, checks its format (marking a new one) and opens its tree.
/// `had_runs` says the home holds blobs, so it held runs: its database cannot be new.
fn open_db(dir: &Path, cache_mib: u64, had_runs: bool) -> Result<(Db, Tree), StoreError> {
    let failed = |e| sled_error(dir, e);
    let db = sled::Config::new()
        .path(dir)
        .mode(sled::Mode::HighThroughput)
        .cache_capacity(cache_mib.saturating_mul(1 << 20))
        .open()
        .map_err(failed)?;
    match format_of(&db, dir)? {
        Some(STORE_FORMAT) => {}
        None if had_runs => {
            // sled reads some truncated files as an empty database.
            return Err(StoreError::Damaged {
                home: home_of(dir),
                dir: dir.display().to_string(),
                detail: "it reads as empty, yet the home holds the components and definitions \
                         of earlier runs"
                    .into(),
            });
        }
        None => {
            db.insert(FORMAT_KEY, STORE_FORMAT.to_string().as_bytes())
                .map_err(failed)?;
            db.flush().map_err(failed)?;
        }
        Some(found) => {
            return Err(StoreError::Format {
                dir: dir.display().to_string(),
                found,
                expected: STORE_FORMAT,
            });
        }
    }
    let data = db.open_tree(TREE).map_err(failed)?;
    Ok((db, data))
}

impl SledStore {
    /// Opens (or creates) the store of the home directory `home`, with at most `cache_mib` of
    /// page cache.
    pub fn open(home: &Path, cache_mib: u64) -> Result<Self, StoreError> {
        let dir = home.join("db");
        let dir = dir.as_path();
        let private = |e: std::io::Error| {
            StoreError::Backend(format!("cannot make {} private: {e}", dir.display()))
        };
        crate::home::create_dir(dir).map_err(private)?;
        let blobs = Blobs::open(&home.join("blobs"))?;
        let had_runs = blobs.any()?;
        remove_unfinished_snapshots(dir)?;
        // sled panics on some damaged files (an index out of bounds in its segment table): that
        // is a damaged database too, not a crash.
        let (db, data) = quietly(|| open_db(dir, cache_mib, had_runs)).unwrap_or_else(|panic| {
            Err(StoreError::Damaged {
                home: home_of(dir),
                dir: dir.display().to_string(),
                detail: format!("sled gave up reading it: {panic}"),
            })
        })?;
        // sled creates its files with the umask's mode.
        crate::home::restrict_tree(dir).map_err(private)?;
        let file = std::fs::File::open(dir.join("db")).map_err(|e| {
            StoreError::Backend(format!("cannot open {}: {e}", dir.join("db").display()))
        })?;
        Ok(SledStore {
            db,
            data,
            blobs,
            dir: dir.to_path_buf(),
            unchecked: AtomicU64::new(0),
            db_file: DbFile(file),
        })
    }

    /// Refuses a write of `bytes` unless the disk holding the database has room for it and
    /// [`HEADROOM`]: sled stops for good (and may hang flushing) once one of its own writes
    /// fails for want of space, while a write refused here leaves it working, so the home
    /// works again as soon as there is space.
    ///
    /// The disk is asked (`statvfs`) only when the writes since it was last asked may have
    /// used an eighth of what was free then beyond the headroom (and at least every
    /// [`RECHECK_BYTES`]): sled writes more than the values it is given (keys, headers, tree
    /// nodes), so the margin is wide, and a full disk is still seen in time while most writes
    /// ask nothing.
    fn room(&self, bytes: usize) -> Result<(), StoreError> {
        let need = (bytes as u64).saturating_add(HEADROOM);
        // A write's own overhead in sled's log (key, header), beyond the value.
        let bytes = (bytes as u64).saturating_add(256);
        // Take `bytes` from the budget left by the last look at the disk, if it covers them.
        let covered = self
            .unchecked
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                left.checked_sub(bytes)
            })
            .is_ok();
        if covered {
            return Ok(());
        }
        let Ok(fs) = rustix::fs::statvfs(&self.dir) else {
            return Ok(()); // cannot tell: sled reports what happens
        };
        let free = fs.f_bavail.saturating_mul(fs.f_frsize);
        if free < need {
            self.unchecked.store(0, Ordering::Release);
            return Err(StoreError::DiskFull(format!(
                "{} KiB free, and writing needs {} KiB",
                free >> 10,
                need.div_ceil(1 << 10)
            )));
        }
        let budget = ((free - need) / 8).min(RECHECK_BYTES);
        self.unchecked.store(budget, Ordering::Release);
        Ok(())
    }

    /// The error of a sled operation on this store.
    fn failed(&self, e: sled::Error) -> StoreError {
        sled_error(&self.dir, e)
    }

    fn summary_bytes(s: &RunSummary) -> Result<Vec<u8>, StoreError> {
        serde_json::to_vec(s).map_err(|e| StoreError::Backend(e.to_string()))
    }

    fn get(&self, kind: u8, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .data
            .get(key(kind, id))
            .map_err(|e| self.failed(e))?
            .map(|v| v.to_vec()))
    }
}

impl Store for SledStore {
    fn create_run(&self, run: NewRun<'_>) -> Result<(), StoreError> {
        let id = &run.summary.run_id;
        if self
            .data
            .contains_key(key(SUMMARY, id))
            .map_err(|e| self.failed(e))?
        {
            return Err(StoreError::RunExists(id.clone()));
        }
        let plugins: usize = run.plugins.iter().map(|(_, bytes)| bytes.len()).sum();
        self.room(plugins + run.definition.len() + run.base.len())?;
        // Blobs first: they are synced before anything names them.
        for (digest, bytes) in run.plugins {
            self.blobs.put(digest, bytes)?;
        }
        let definition = sha256_hex(run.definition);
        self.blobs.put(&definition, run.definition)?;
        self.data
            .insert(key(DEFINITION, id), definition.as_bytes())
            .map_err(|e| self.failed(e))?;
        self.data
            .insert(key(BASE, id), run.base)
            .map_err(|e| self.failed(e))?;
        // Last: the summary is what makes the run exist.
        self.data
            .insert(key(SUMMARY, id), Self::summary_bytes(run.summary)?)
            .map_err(|e| self.failed(e))?;
        Ok(())
    }

    fn append(&self, run_id: &str, at: RecordKey, record: &[u8]) -> Result<(), StoreError> {
        self.room(record.len())?;
        self.data
            .insert(record_key(run_id, at), record)
            .map_err(|e| self.failed(e))?;
        Ok(())
    }

    fn put_snapshot(&self, run_id: &str, snapshot: &[u8]) -> Result<(), StoreError> {
        self.room(snapshot.len())?;
        self.data
            .insert(key(SNAPSHOT, run_id), snapshot)
            .map_err(|e| self.failed(e))?;
        Ok(())
    }

    fn put_summary(&self, summary: &RunSummary) -> Result<(), StoreError> {
        let bytes = Self::summary_bytes(summary)?;
        self.room(bytes.len())?;
        self.data
            .insert(key(SUMMARY, &summary.run_id), Self::summary_bytes(summary)?)
            .map_err(|e| self.failed(e))?;
        Ok(())
    }

    fn sync(&self) -> Result<(), StoreError> {
        self.db.flush().map_err(|e| self.failed(e))?;
        // sled makes its log writes stable with `sync_file_range`, which leaves them in the
        // disk's write cache (its own fsync comes from a background thread, up to half a
        // second later): a power cut could lose what was acknowledged. An fdatasync of the
        // database file, on any descriptor of it, flushes them to the medium.
        self.db_file.0.sync_data().map_err(|e| {
            StoreError::Backend(format!(
                "cannot sync the database file in {}: {e}",
                self.dir.display()
            ))
        })
    }

    fn snapshot(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.get(SNAPSHOT, run_id)
    }

    fn base(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.get(BASE, run_id)
    }

    fn definition(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let Some(digest) = self.get(DEFINITION, run_id)? else {
            return Ok(None);
        };
        let digest = String::from_utf8_lossy(&digest);
        match self.blobs.get(&digest)? {
            Some(bytes) => Ok(Some(bytes)),
            None => Err(StoreError::Corrupt {
                key: format!("definition of {run_id}"),
                message: format!("its blob {digest} is missing from the home's blobs/sha256"),
            }),
        }
    }

    fn plugin(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.blobs.get(digest)
    }

    fn records(
        &self,
        run_id: &str,
        from: RecordKey,
    ) -> Result<Vec<(RecordKey, Vec<u8>)>, StoreError> {
        let prefix = key(RECORD, run_id);
        let mut out = Vec::new();
        for kv in self.data.range(record_key(run_id, from)..) {
            let (k, v) = kv.map_err(|e| self.failed(e))?;
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
                let (k, _) = kv.map_err(|e| self.failed(e))?;
                Ok(parse_record_key(&prefix, &k))
            }
        }
    }

    fn summary(&self, run_id: &str) -> Result<Option<RunSummary>, StoreError> {
        match self.get(SUMMARY, run_id)? {
            None => Ok(None),
            Some(v) => from_stored(&v).map(Some).map_err(|e| StoreError::Corrupt {
                key: format!("summary of {run_id}"),
                message: e.to_string(),
            }),
        }
    }

    fn runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        let mut out = Vec::new();
        for kv in self.data.scan_prefix([SUMMARY]) {
            let (k, v) = kv.map_err(|e| self.failed(e))?;
            let s: RunSummary = from_stored(&v).map_err(|e| StoreError::Corrupt {
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
