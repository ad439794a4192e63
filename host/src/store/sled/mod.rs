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

mod blobs;
mod chunk;
mod keys;
mod pending;
mod quiet_panic;
mod values;
mod wal;

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use sled::{Db, Tree};

use crate::store::json::from_stored;
use crate::store::{NewRun, RecordKey, RunSummary, Store, StoreError};
use blobs::Blobs;
use keys::{
    BASE, DEFINITION, FIRST, FIRST_AT, RECORD, SNAPSHOT, SUMMARY, key, parse_record_key,
    record_key, split_record_key,
};
use pending::{Pending, Table};
use quiet_panic::quietly;
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
    /// for the next one (up to [`KEPT_CHUNK_BUFFER`] bytes), so that each checkpoint does not
    /// fault in megabytes of fresh pages again.
    checkpointing: Mutex<Vec<u8>>,
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

/// Log bytes after which a checkpoint is due.
const CHECKPOINT_BYTES: usize = 4 << 20;

/// The largest buffer of chunks a checkpoint keeps for the next one; a checkpoint that carried
/// very large values does not hold their room for the store's lifetime.
const KEPT_CHUNK_BUFFER: usize = 16 << 20;

/// The free space a disk must have for a checkpoint to keep a finished segment as the spare.
const SPARE_ROOM: u64 = 256 << 20;

/// A checkpoint runs at least this often while anything is pending.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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

/// The format of the record tree this build writes. Format 1 (no marker) put the id
/// unprefixed in keys; format 2 length-prefixes it (`keys`); format 3 may store several
/// records of a run as one chunk (`chunk`); format 4 puts a new run's definition digest
/// and first state in one value (`keys::FIRST`), one write fewer per run; format 5 stores that
/// value as the run's record at `keys::FIRST_AT`, so a checkpoint writes it in the run's first
/// chunk, one write fewer again; format 6 keeps chunks in the home's values files with only
/// their refs in sled (`values`); format 7 writes records as MessagePack rather than
/// JSON (`driver::record`); format 8 writes a record's tracking events as arrays of their
/// members, without the run's id and with their instant once, and a plain step end as a short
/// array (`driver::record`). Runs written before are read where their format put them, and
/// their records as they were written: a format 2 to 7 database reads as format 8 and is
/// marked 8 when opened, so a weft that reads only an older format refuses it from then on.
pub const STORE_FORMAT: u32 = 8;

/// The formats this build reads and upgrades to [`STORE_FORMAT`] when it opens a database.
const UPGRADED_FORMATS: [u32; 6] = [2, 3, 4, 5, 6, 7];

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

/// The definition digest and first state in run `id`'s first value `v`.
fn split_first<'v>(id: &str, v: &'v [u8]) -> Result<(&'v str, &'v [u8]), StoreError> {
    keys::split_first(v).ok_or_else(|| StoreError::Corrupt {
        key: format!("first state of {id}"),
        message: "its value does not start with a definition digest".into(),
    })
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
        Some(older) if UPGRADED_FORMATS.contains(&older) => {
            db.insert(FORMAT_KEY, STORE_FORMAT.to_string().as_bytes())
                .map_err(failed)?;
            db.flush().map_err(failed)?;
        }
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
    /// page cache; replays what the log holds beyond sled.
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
        let db_file = DbFile(file);
        let wal_dir = home.join("wal");
        crate::home::create_dir(&wal_dir).map_err(|e| {
            StoreError::Backend(format!("cannot create {}: {e}", wal_dir.display()))
        })?;
        let values = Values::open(&home.join("values"))?;
        let generation = replay(dir, &wal_dir, &db, &data, &values, &db_file)?;
        let segment = Segment::create(&wal_dir, generation + 1)?;
        let shared = Arc::new(Shared {
            db,
            data,
            blobs,
            values,
            dir: dir.to_path_buf(),
            wal_dir,
            pending: Pending::new(CHECKPOINT_BYTES),
            segment: Mutex::new(segment),
            retired: Mutex::default(),
            wake: Wake::default(),
            checkpointing: Mutex::default(),
            unchecked: AtomicU64::new(0),
            db_file,
        });
        let worker = shared.clone();
        let checkpointer = std::thread::Builder::new()
            .name("weft-checkpoint".into())
            .spawn(move || worker.checkpoints())
            .map_err(|e| StoreError::Backend(format!("cannot start a thread: {e}")))?;
        Ok(SledStore {
            shared,
            checkpointer: Some(checkpointer),
        })
    }
}

impl Drop for SledStore {
    fn drop(&mut self) {
        {
            let mut wake = lock(&self.shared.wake.state);
            wake.stop = true;
            self.shared.wake.signal.notify_all();
        }
        if let Some(thread) = self.checkpointer.take() {
            let _ = thread.join();
        }
        // A store closed cleanly leaves everything in sled and no log to replay.
        match self.checkpoint() {
            Ok(()) => {
                let segment = lock(&self.shared.segment);
                if segment.is_empty() {
                    let _ = std::fs::remove_file(segment.path());
                }
                let _ = wal::remove_spare(&self.shared.wal_dir);
            }
            Err(e) => tracing::warn!(
                "the last checkpoint of {} failed ({e}); its log is replayed when it opens again",
                self.shared.dir.display()
            ),
        }
    }
}

/// Moves what the log segments in `wal_dir` hold into sled, flushes it and removes them;
/// returns the last segment's generation (0 when there was none).
fn replay(
    dir: &Path,
    wal_dir: &Path,
    db: &Db,
    data: &Tree,
    values: &Values,
    db_file: &DbFile,
) -> Result<u64, StoreError> {
    wal::remove_spare(wal_dir)?;
    let segments = wal::segments(wal_dir)?;
    let Some((last, _)) = segments.last() else {
        return Ok(0);
    };
    let last = *last;
    let mut table = Table::new();
    for (generation, path) in &segments {
        let bytes = std::fs::read(path).map_err(|e| wal::io_error("read", path, e))?;
        let decoded = wal::decode(&bytes, *generation);
        // Every segment but the last was finished, and synced whole, before the next began:
        // only the last may end without the mark (in a torn entry, or in what a recycled
        // file held before).
        if !decoded.finished && *generation != last {
            return Err(StoreError::Damaged {
                home: home_of(dir),
                dir: wal_dir.display().to_string(),
                detail: format!(
                    "its log segment {} is damaged after {} entries",
                    path.display(),
                    decoded.entries.len()
                ),
            });
        }
        table.extend(decoded.entries);
    }
    let failed = |e| sled_error(dir, e);
    write_table(data, values, &table, &mut Vec::new(), failed)?;
    db.flush().map_err(failed)?;
    db_file.sync(dir)?;
    for (_, path) in &segments {
        std::fs::remove_file(path).map_err(|e| wal::io_error("remove", path, e))?;
    }
    wal::sync_dir(wal_dir)?;
    Ok(last)
}

/// Writes `table` into sled, each run's consecutive records as one chunk, which goes to the
/// values files (all of the table's chunks in one append and one sync) with only its ref in
/// sled, unless it is smaller than a ref is worth ([`values::INLINE_BELOW`]). One insert at a
/// time, not one batch: a batch holds sled's tree lock for all of its inserts, stalling every
/// read meanwhile, and nothing needs the writes to land together (a checkpoint cut short is
/// replayed from the log, whole). The chunks are gathered in `appended`, emptied first.
fn write_table(
    data: &Tree,
    values: &Values,
    table: &Table,
    appended: &mut Vec<u8>,
    failed: impl Fn(sled::Error) -> StoreError,
) -> Result<(), StoreError> {
    /// A value for sled: its bytes, or the place of its bytes among those appended.
    enum Put<'a> {
        Inline(Cow<'a, [u8]>),
        Appended(std::ops::Range<usize>),
    }
    /// The run prefix, the first record's key, the records and their bytes of the chunk
    /// being gathered.
    type Gathering<'a> = (&'a [u8], &'a [u8], Vec<(RecordKey, &'a [u8])>, usize);
    /// Where the gathered chunk goes: appended to `appended`, or inline when small.
    fn put_chunk<'a>(
        puts: &mut Vec<(&'a [u8], Put<'a>)>,
        appended: &mut Vec<u8>,
        g: Option<Gathering<'a>>,
    ) {
        if let Some((_, first, records, size)) = g {
            if size < values::INLINE_BELOW {
                puts.push((first, Put::Inline(Cow::Owned(chunk::encode(&records)))));
            } else {
                let start = appended.len();
                chunk::encode_into(&records, appended);
                puts.push((first, Put::Appended(start..appended.len())));
            }
        }
    }
    // Room for every record in a chunk, so that the buffer is not grown (and copied) again and
    // again; the summaries and small chunks put inline leave some unused.
    appended.clear();
    appended.reserve(table.values().map(|v| chunk::room(v.len())).sum());
    let mut puts = Vec::new();
    let mut gathering: Option<Gathering<'_>> = None;
    for (k, v) in table {
        match split_record_key(k) {
            Some((prefix, at)) => {
                let joins = gathering.as_ref().is_some_and(|(p, _, _, size)| {
                    *p == prefix && size + v.len() <= chunk::MAX_CHUNK
                });
                if !joins {
                    put_chunk(&mut puts, appended, gathering.take());
                }
                let g = gathering.get_or_insert_with(|| (prefix, k, Vec::new(), 0));
                g.2.push((at, v));
                g.3 += v.len();
            }
            None => {
                put_chunk(&mut puts, appended, gathering.take());
                puts.push((k, Put::Inline(Cow::Borrowed(v))));
            }
        }
    }
    put_chunk(&mut puts, appended, gathering.take());
    // The values are durable before any ref to them is inserted.
    let (number, at) = if appended.is_empty() {
        (0, 0)
    } else {
        values.append(appended)?
    };
    for (k, put) in puts {
        match put {
            Put::Inline(v) => data.insert(k, &*v),
            Put::Appended(range) => {
                let r = values::ref_to(number, at + range.start as u64, range.len());
                data.insert(k, &r[..])
            }
        }
        .map_err(&failed)?;
    }
    Ok(())
}

impl DbFile {
    /// Makes sled's flushed log durable: sled makes its log writes stable with
    /// `sync_file_range`, which leaves them in the disk's write cache (its own fsync comes
    /// from a background thread, up to half a second later). An fdatasync of the database
    /// file, on any descriptor of it, flushes them to the medium.
    fn sync(&self, dir: &Path) -> Result<(), StoreError> {
        self.0.sync_data().map_err(|e| {
            StoreError::Backend(format!(
                "cannot sync the database file in {}: {e}",
                dir.display()
            ))
        })
    }
}

impl Shared {
    /// The checkpoint thread: a checkpoint whenever one is due, and at least every
    /// [`CHECKPOINT_EVERY`], until the store is dropped.
    fn checkpoints(&self) {
        loop {
            {
                let mut wake = lock(&self.wake.state);
                if !wake.due && !wake.stop {
                    wake = self
                        .wake
                        .signal
                        .wait_timeout(wake, CHECKPOINT_EVERY)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                if wake.stop {
                    return;
                }
                wake.due = false;
            }
            if let Err(e) = self.checkpoint() {
                tracing::warn!(
                    "a checkpoint of {} failed ({e}); it is tried again",
                    self.dir.display()
                );
            }
        }
    }

    /// Moves the pending writes into sled: freezes them and starts a new log segment (unless a
    /// frozen table is left from a checkpoint that failed), inserts them, flushes sled, and
    /// retires the segments that held them.
    fn checkpoint(&self) -> Result<(), StoreError> {
        let mut chunks = lock(&self.checkpointing);
        let rotated = self.rotate();
        let Some(table) = self.pending.frozen() else {
            return rotated;
        };
        let size: usize = table.iter().map(|(k, v)| k.len() + v.len()).sum();
        self.room(size)?;
        let written = write_table(&self.data, &self.values, &table, &mut chunks, |e| {
            self.failed(e)
        });
        if chunks.capacity() > KEPT_CHUNK_BUFFER {
            *chunks = Vec::new();
        }
        written?;
        self.db.flush().map_err(|e| self.failed(e))?;
        self.db_file.sync(&self.dir)?;
        // sled holds them now: reads find them there.
        self.pending.thaw();
        let retired = std::mem::take(&mut *lock(&self.retired));
        if !retired.is_empty() {
            // A spare holds its blocks: only while the disk has room to spare.
            let keep = rustix::fs::statvfs(&self.wal_dir)
                .is_ok_and(|fs| fs.f_bavail.saturating_mul(fs.f_frsize) >= SPARE_ROOM);
            for segment in retired {
                segment.retire(&self.wal_dir, keep)?;
            }
            wal::sync_dir(&self.wal_dir)?;
        }
        rotated
    }

    /// Freezes the pending writes and moves on to a new log segment once the current one holds
    /// all of them, durably.
    fn rotate(&self) -> Result<(), StoreError> {
        let mut segment = lock(&self.segment);
        let Some(unwritten) = self.pending.freeze() else {
            return Ok(());
        };
        // On failure the next sync writes them: the frozen writes stay in this segment.
        self.write_unwritten(&mut segment, unwritten)?;
        segment.finish()?;
        let next = Segment::next(&self.wal_dir, segment.generation() + 1)?;
        let old = std::mem::replace(&mut *segment, next);
        lock(&self.retired).push(old);
        Ok(())
    }

    /// Writes `bytes`, log entries taken from the pending writes, to `segment`; puts them back
    /// when that fails, so a later write has them.
    fn write_unwritten(&self, segment: &mut Segment, mut bytes: Vec<u8>) -> Result<(), StoreError> {
        let written = segment.write(&mut bytes);
        match written {
            Ok(()) => self.pending.recycle(bytes),
            Err(_) => self.pending.restore_unwritten(bytes),
        }
        written
    }

    /// Logs `writes` together, once the disk has room for them; they are durable after the
    /// next [`Store::sync`].
    fn put(&self, writes: Vec<(Vec<u8>, &[u8])>) -> Result<(), StoreError> {
        self.room(writes.iter().map(|(_, value)| value.len()).sum())?;
        if self.pending.put(writes)? {
            lock(&self.wake.state).due = true;
            self.wake.signal.notify_one();
        }
        Ok(())
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

    /// The key of run `id`'s record at `at`; refused at [`FIRST_AT`], where the run's first
    /// value is, which no record's key reaches (a record's seq is at least 1).
    fn record_key(id: &str, at: RecordKey) -> Result<Vec<u8>, StoreError> {
        if at == FIRST_AT {
            return Err(StoreError::Backend(format!(
                "run {id}: a record cannot be stored at {at:?}, where the run's first state is \
                 kept; this is a bug in weft, please report it"
            )));
        }
        Ok(record_key(id, at))
    }

    fn summary_bytes(s: &RunSummary) -> Result<Vec<u8>, StoreError> {
        serde_json::to_vec(s).map_err(|e| StoreError::Backend(e.to_string()))
    }

    /// The latest value of a run's entry of `kind`: pending, or in sled.
    fn get(&self, kind: u8, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let k = key(kind, id);
        if let Some(v) = self.pending.get(&k) {
            return Ok(Some(v));
        }
        Ok(self
            .data
            .get(&k)
            .map_err(|e| self.failed(e))?
            .map(|v| v.to_vec()))
    }

    /// A run's records from `from` on: those in sled (a chunk that starts before `from` may
    /// hold some) and the pending ones.
    fn records(
        &self,
        run_id: &str,
        from: RecordKey,
    ) -> Result<Vec<(RecordKey, Vec<u8>)>, StoreError> {
        let prefix = key(RECORD, run_id);
        let start = record_key(run_id, from);
        let mut out = std::collections::BTreeMap::new();
        let mut add = |k: &[u8], v: &[u8]| -> Result<(), StoreError> {
            for (at, bytes) in self.stored_records(&prefix, k, v)? {
                if at >= from && at != FIRST_AT {
                    out.insert(at, bytes);
                }
            }
            Ok(())
        };
        if let Some(kv) = self
            .data
            .range(prefix.as_slice()..start.as_slice())
            .next_back()
        {
            let (k, v) = kv.map_err(|e| self.failed(e))?;
            add(&k, &v)?;
        }
        for kv in self.data.range(start.as_slice()..) {
            let (k, v) = kv.map_err(|e| self.failed(e))?;
            if !k.starts_with(&prefix) {
                break;
            }
            add(&k, &v)?;
        }
        for (k, v) in self.pending.range(&prefix, &start) {
            add(&k, &v)?;
        }
        Ok(out.into_iter().collect())
    }

    /// The records of the value stored under `k`, a key under the run's record `prefix`.
    fn stored_records(
        &self,
        prefix: &[u8],
        k: &[u8],
        v: &[u8],
    ) -> Result<Vec<(RecordKey, Vec<u8>)>, StoreError> {
        let corrupt = |message: &str| StoreError::Corrupt {
            key: String::from_utf8_lossy(k).into_owned(),
            message: message.into(),
        };
        let at = parse_record_key(prefix, k).ok_or_else(|| corrupt("not a record key"))?;
        let v = self.values.resolve(k, v)?;
        chunk::decode(at, &v).ok_or_else(|| corrupt("a chunk of records that does not read back"))
    }

    fn last_record(&self, run_id: &str) -> Result<Option<RecordKey>, StoreError> {
        let prefix = key(RECORD, run_id);
        let pending = self
            .pending
            .last_key(&prefix)
            .and_then(|k| parse_record_key(&prefix, &k));
        let stored = match self.data.scan_prefix(&prefix).next_back() {
            None => None,
            Some(kv) => {
                let (k, v) = kv.map_err(|e| self.failed(e))?;
                self.stored_records(&prefix, &k, &v)?
                    .last()
                    .map(|(at, _)| *at)
            }
        };
        // The first value sorts before every record: last only in a run that has none.
        Ok(pending.max(stored).filter(|at| *at != FIRST_AT))
    }

    /// Run `id`'s first value: its record at [`FIRST_AT`], pending or at the head of its first
    /// chunk in sled (the chunk's other records left unread); under [`FIRST`] for a run written
    /// in format 4.
    fn first(&self, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let k = record_key(id, FIRST_AT);
        if let Some(v) = self.pending.get(&k) {
            return Ok(Some(v));
        }
        match self.data.get(&k).map_err(|e| self.failed(e))? {
            Some(v) => match chunk::first(FIRST_AT, &self.values.resolve(&k, &v)?) {
                Some(first) => Ok(Some(first.to_vec())),
                None => Err(StoreError::Corrupt {
                    key: format!("first state of {id}"),
                    message: "a chunk of records that does not read back".into(),
                }),
            },
            None => self.get(FIRST, id),
        }
    }

    fn runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        let mut summaries = Table::new();
        for kv in self.data.scan_prefix([SUMMARY]) {
            let (k, v) = kv.map_err(|e| self.failed(e))?;
            summaries.insert(k.to_vec(), v.to_vec());
        }
        summaries.extend(self.pending.range(&[SUMMARY], &[SUMMARY]));
        let mut out = Vec::new();
        for (k, v) in summaries {
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

impl Store for SledStore {
    fn create_run(&self, run: NewRun<'_>) -> Result<(), StoreError> {
        let s = &self.shared;
        let id = &run.summary.run_id;
        if !run.fresh_id && s.get(SUMMARY, id)?.is_some() {
            return Err(StoreError::RunExists(id.clone()));
        }
        let plugins: usize = run.plugins.iter().map(|(_, bytes)| bytes.len()).sum();
        s.room(plugins + run.definition.bytes().len())?;
        // Blobs first: they are synced before anything names them.
        for (digest, bytes) in run.plugins {
            s.blobs.put(digest, bytes)?;
        }
        let definition = run.definition.digest();
        s.blobs.put(definition, run.definition.bytes())?;
        let summary = Shared::summary_bytes(run.summary)?;
        // The summary is what makes the run exist: logged with the rest, after it.
        s.put(vec![
            (record_key(id, FIRST_AT), &keys::first(definition, run.base)),
            (key(SUMMARY, id), &summary),
        ])
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(id: &str) -> RunSummary {
        RunSummary {
            run_id: id.into(),
            workflow_id: "w".into(),
            status: crate::engine::RunStatus::Running,
            created_at: 1,
            updated_at: 1,
        }
    }

    fn record(i: u64) -> Vec<u8> {
        format!("{{\"i\":{i}}}").into_bytes()
    }

    fn keys(records: &[(RecordKey, Vec<u8>)]) -> Vec<u64> {
        records.iter().map(|((seq, _), _)| *seq).collect()
    }

    #[test]
    fn records_read_the_same_from_the_log_from_chunks_in_sled_and_after_reopening() {
        let dir = tempfile::tempdir().expect("temp dir");
        let home = dir.path().join("home");
        let store = SledStore::open(&home, 8).expect("open");
        store.put_summary(&summary("r")).expect("summary");
        store.put_summary(&summary("other")).expect("summary");
        for i in 1..=5 {
            store
                .append("r", (i, i as u32), &record(i))
                .expect("append");
            store.append("other", (i, 0), &record(i)).expect("append");
        }
        store.sync().expect("sync");
        let from_log = store.records("r", (0, 0)).expect("records");
        assert_eq!(keys(&from_log), vec![1, 2, 3, 4, 5]);
        // Into sled, as one chunk for each run.
        Store::checkpoint(&store).expect("checkpoint");
        assert!(store.shared.pending.is_empty());
        assert_eq!(store.records("r", (0, 0)).expect("records"), from_log);
        for i in 6..=7 {
            store
                .append("r", (i, i as u32), &record(i))
                .expect("append");
        }
        // From the middle of a chunk on, across sled and the log.
        let tail = store.records("r", (3, 3)).expect("records");
        assert_eq!(keys(&tail), vec![3, 4, 5, 6, 7]);
        assert_eq!(tail[0].1, record(3));
        assert_eq!(store.last_record("r").expect("last"), Some((7, 7)));
        assert_eq!(
            keys(&store.records("other", (0, 0)).expect("records")).len(),
            5
        );
        store.sync().expect("sync");
        drop(store);
        let store = SledStore::open(&home, 8).expect("open again");
        assert_eq!(
            keys(&store.records("r", (0, 0)).expect("records")),
            (1..=7).collect::<Vec<_>>()
        );
        assert_eq!(store.last_record("r").expect("last"), Some((7, 7)));
        assert_eq!(store.last_record("other").expect("last"), Some((5, 0)));
        assert_eq!(store.runs().expect("runs").len(), 2);
        // A clean close leaves no log behind.
        drop(store);
        assert!(wal::segments(&home.join("wal")).expect("list").is_empty());
    }

    /// The bytes of the values files in `home`.
    fn values_bytes(home: &Path) -> u64 {
        std::fs::read_dir(home.join("values"))
            .expect("the values directory")
            .map(|e| e.expect("entry").metadata().expect("metadata").len())
            .sum()
    }

    #[test]
    fn each_checkpoint_appends_only_its_own_chunks_to_the_values_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        let home = dir.path().join("home");
        let store = SledStore::open(&home, 8).expect("open");
        let big = |run: u8, i: u64| vec![b'a' + run; values::INLINE_BELOW + i as usize];
        let mut before = values_bytes(&home);
        for (run, id) in (0u8..).zip(["first", "second"]) {
            let records: Vec<(RecordKey, Vec<u8>)> =
                (1..=3).map(|i| ((i, 0), big(run, i))).collect();
            for (at, bytes) in &records {
                store.append(id, *at, bytes).expect("append");
            }
            Store::checkpoint(&store).expect("checkpoint");
            // The buffer the chunks were gathered in is kept for the next checkpoint, and
            // nothing of this one's chunk is written by the next.
            let chunk = chunk::encode(
                &records
                    .iter()
                    .map(|(at, b)| (*at, b.as_slice()))
                    .collect::<Vec<_>>(),
            );
            let after = values_bytes(&home);
            assert_eq!(after - before, chunk.len() as u64, "{id}");
            assert!(lock(&store.shared.checkpointing).capacity() >= chunk.len());
            before = after;
            assert_eq!(store.records(id, (0, 0)).expect("records"), records);
        }
        drop(store);
        let store = SledStore::open(&home, 8).expect("open again");
        for (run, id) in (0u8..).zip(["first", "second"]) {
            let read = store.records(id, (0, 0)).expect("records");
            assert_eq!(read.len(), 3);
            assert!(read.iter().all(|(_, b)| b[0] == b'a' + run), "{id}");
        }
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

    /// A home under `dir` whose store was created and closed cleanly.
    fn created_home(dir: &Path) -> PathBuf {
        let home = dir.join("home");
        drop(SledStore::open(&home, 8).expect("create"));
        home
    }

    #[test]
    fn a_log_left_behind_is_replayed_when_the_store_opens() {
        let dir = tempfile::tempdir().expect("temp dir");
        let home = created_home(dir.path());
        // What a process killed after its syncs leaves: a segment sled never saw.
        let mut log = Vec::new();
        let summary_bytes = serde_json::to_vec(&summary("r")).expect("json");
        wal::encode(&mut log, &key(SUMMARY, "r"), &summary_bytes).expect("encode");
        wal::encode(&mut log, &record_key("r", (1, 0)), &record(1)).expect("encode");
        let torn = log.len();
        wal::encode(&mut log, &record_key("r", (2, 0)), &record(2)).expect("encode");
        wal::seal(&mut log, 7);
        std::fs::write(
            home.join("wal").join("0000000000000007.log"),
            &log[..torn + 5],
        )
        .expect("write the log");
        let store = SledStore::open(&home, 8).expect("open");
        assert_eq!(store.runs().expect("runs").len(), 1);
        // The torn entry was never acknowledged: it is not there.
        assert_eq!(keys(&store.records("r", (0, 0)).expect("records")), vec![1]);
        assert!(store.shared.pending.is_empty(), "replayed into sled");
        assert_eq!(lock(&store.shared.segment).generation(), 8);
    }

    #[test]
    fn a_damaged_segment_before_the_last_is_refused_as_a_damaged_home() {
        let dir = tempfile::tempdir().expect("temp dir");
        let home = created_home(dir.path());
        let mut log = Vec::new();
        wal::encode(&mut log, &record_key("r", (1, 0)), &record(1)).expect("encode");
        let mut second = log.clone();
        wal::seal(&mut log, 1);
        wal::seal(&mut second, 2);
        let wal_dir = home.join("wal");
        std::fs::write(wal_dir.join("0000000000000001.log"), &log[..log.len() - 1]).expect("write");
        std::fs::write(wal_dir.join("0000000000000002.log"), &second).expect("write");
        let Err(e) = SledStore::open(&home, 8) else {
            panic!("a damaged log opened");
        };
        assert!(matches!(e, StoreError::Damaged { .. }), "{e}");
        assert!(e.to_string().contains("0000000000000001.log"), "{e}");
        // Finished, it is read whole, and the segment after it too.
        let mut finished = Vec::new();
        wal::encode(&mut finished, &record_key("r", (1, 0)), &record(1)).expect("encode");
        wal::encode(&mut finished, &[], &[]).expect("the end mark");
        wal::seal(&mut finished, 1);
        std::fs::write(wal_dir.join("0000000000000001.log"), &finished).expect("write");
        let mut later = Vec::new();
        wal::encode(&mut later, &record_key("r", (2, 0)), &record(2)).expect("encode");
        wal::seal(&mut later, 2);
        std::fs::write(wal_dir.join("0000000000000002.log"), &later).expect("write");
        let store = SledStore::open(&home, 8).expect("open");
        assert_eq!(
            keys(&store.records("r", (0, 0)).expect("records")),
            vec![1, 2]
        );
    }
}
