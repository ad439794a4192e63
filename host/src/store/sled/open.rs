//! Opening and closing the store: the database file and its lock, the store format marker
//! (checked, and upgraded from the formats this build still reads), and the replay of the log
//! segments a process left.

use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use sled::{Db, Tree};

use super::blobs::Blobs;
use super::checkpoint::{CHECKPOINT_BYTES, write_table};
use super::error::{home_of, sled_error};
use super::pending::{Pending, Table};
use super::quiet_panic::quietly;
use super::values::Values;
use super::wal::{self, Segment};
use super::write::check_room;
use super::{Shared, SledStore, Wake, lock};
use crate::store::{Store, StoreError};

/// The database file sled writes its log to and locks (`<home>/db/db`), on a descriptor of
/// its own: [`Store::sync`] fdatasyncs it, and dropping it waits until sled has let go of the
/// file's lock.
///
/// sled's background threads (a log write, the snapshot it writes on opening) hold the
/// database for a moment after its last handle is dropped; a store opened on the same home in
/// that moment would find it held. With this wait, a dropped store's home can be opened again
/// at once, by this process or another.
pub(super) struct DbFile(std::fs::File);

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

impl DbFile {
    /// Makes sled's flushed log durable: sled makes its log writes stable with
    /// `sync_file_range`, which leaves them in the disk's write cache (its own fsync comes
    /// from a background thread, up to half a second later). An fdatasync of the database
    /// file, on any descriptor of it, flushes them to the medium.
    pub(super) fn sync(&self, dir: &Path) -> Result<(), StoreError> {
        self.0.sync_data().map_err(|e| {
            StoreError::Backend(format!(
                "cannot sync the database file in {}: {e}",
                dir.display()
            ))
        })
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

/// Removes the newest of sled's snapshot files in `dir` (the one it reads), when a damaged
/// database is refused: a snapshot only indexes sled's log for a faster start, and without it
/// sled reads the log whole, so a snapshot with a flipped bit costs nothing but that. Says
/// whether there was one to remove.
fn drop_newest_snapshot(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let newest = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("snap.") && !n.ends_with(".generating"))
        })
        .max();
    let Some(snapshot) = newest else {
        return false;
    };
    match std::fs::remove_file(&snapshot) {
        Ok(()) => {
            tracing::warn!(
                "sled refused its snapshot {} as damaged; weft removed it, and sled reads its \
                 log whole instead",
                snapshot.display()
            );
            true
        }
        Err(_) => false,
    }
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
/// array (`driver::record`); format 9 indexes every run for the listing (`listing`), which a
/// weft that does not would leave out of it; format 10 indexes every run by its definition
/// (`keys::USES`), without which a prune would remove the definitions of runs a weft that
/// does not wrote. Runs written before are read where their format
/// put them, and their records as they were written: a format 2 to 9 database reads as format
/// 10, is indexed and marked 10 when opened, so a weft that reads only an older format refuses it
/// from then on.
pub const STORE_FORMAT: u32 = 10;

/// The formats this build reads and upgrades to [`STORE_FORMAT`] when it opens a database.
const UPGRADED_FORMATS: [u32; 8] = [2, 3, 4, 5, 6, 7, 8, 9];

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
        let open = || {
            quietly(|| open_db(dir, cache_mib, had_runs)).unwrap_or_else(|panic| {
                Err(StoreError::Damaged {
                    home: home_of(dir),
                    dir: dir.display().to_string(),
                    detail: format!("sled gave up reading it: {panic}"),
                })
            })
        };
        let (db, data) = match open() {
            Err(StoreError::Damaged { .. }) if drop_newest_snapshot(dir) => open()?,
            opened => opened?,
        };
        // sled creates its files with the umask's mode.
        crate::home::restrict_tree(dir).map_err(private)?;
        let file = std::fs::File::open(dir.join("db")).map_err(|e| {
            StoreError::Backend(format!("cannot open {}: {e}", dir.join("db").display()))
        })?;
        let db_file = DbFile(file);
        let wal_dir = home.join("wal");
        let replayed = (|| {
            crate::home::create_dir(&wal_dir).map_err(|e| {
                StoreError::Backend(format!("cannot create {}: {e}", wal_dir.display()))
            })?;
            let values = Values::open(&home.join("values"))?;
            let (segment, held) = match replay(dir, &wal_dir, &db, &data, &values, &db_file)? {
                Replayed::Done(generation) => (Segment::create(&wal_dir, generation + 1)?, None),
                Replayed::Held {
                    table,
                    bytes,
                    current,
                    retired,
                } => (current, Some((table, bytes, retired))),
            };
            super::listing::index_runs(dir, &db, &data)?;
            Ok((values, segment, held))
        })();
        let (values, segment, held) = match replayed {
            Ok(replayed) => replayed,
            Err(e) => {
                // sled first, so that the wait for its lock (dropping `db_file`) has an end.
                drop(data);
                drop(db);
                drop(db_file);
                return Err(e);
            }
        };
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
            blob_guard: std::sync::RwLock::default(),
            unchecked: AtomicU64::new(0),
            db_file,
        });
        if let Some((table, bytes, retired)) = held {
            shared.pending.hold(table, bytes);
            *lock(&shared.retired) = retired;
        }
        shared.index_uses()?;
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

/// What opening a store did with the log a process left.
enum Replayed {
    /// Moved into sled and removed: the last segment's generation (0 when there was none).
    Done(u64),
    /// Kept, for want of room on the disk to move it into sled: its writes, read from the
    /// pending table until a checkpoint has room; the segment to go on with, and the finished
    /// ones for that checkpoint to retire.
    Held {
        table: Table,
        bytes: usize,
        current: Segment,
        retired: Vec<Segment>,
    },
}

/// Moves what the log segments in `wal_dir` hold into sled, flushes it and removes them; on a
/// disk without room for that, keeps them ([`Replayed::Held`]), so that the home opens (reads
/// see every write, writes are refused as the disk is full) and the move waits for space.
fn replay(
    dir: &Path,
    wal_dir: &Path,
    db: &Db,
    data: &Tree,
    values: &Values,
    db_file: &DbFile,
) -> Result<Replayed, StoreError> {
    wal::remove_spare(wal_dir)?;
    let segments = wal::segments(wal_dir)?;
    let Some((last, _)) = segments.last() else {
        return Ok(Replayed::Done(0));
    };
    let last = *last;
    let mut table = Table::new();
    // Whether the last segment is finished, and where its whole entries end.
    let mut last_end = (false, 0);
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
        if let Some(damage) = &decoded.damage {
            return Err(StoreError::Damaged {
                home: home_of(dir),
                dir: wal_dir.display().to_string(),
                detail: format!(
                    "its log segment {path} is damaged at byte {at}, after {n} entries, and \
                     whole entries follow from byte {later}: writes acknowledged after the \
                     damage would be lost. To open the home with the {n} entries before it and \
                     without the rest, cut the segment there (`truncate -s {at} {path}`)",
                    path = path.display(),
                    at = damage.at,
                    later = damage.later,
                    n = decoded.entries.len(),
                ),
            });
        }
        last_end = (decoded.finished, decoded.end);
        table.extend(decoded.entries);
    }
    // A write of sled's that fails for want of space stops it for good (its flush may then
    // hang): the room is checked first, as for every write.
    let bytes = table.iter().map(|(k, v)| k.len() + v.len()).sum();
    match check_room(dir, bytes) {
        Ok(()) => {}
        Err(StoreError::DiskFull(why)) => {
            tracing::warn!(
                "the disk holding {} is full ({why}): its log is kept, read as it is, until \
                 there is room to move it into the database; writes are refused until then",
                home_of(dir)
            );
            let mut retired = Vec::new();
            for (generation, path) in &segments {
                if *generation != last || last_end.0 {
                    retired.push(Segment::finished(path, *generation)?);
                }
            }
            let current = match (last_end, segments.last()) {
                ((false, end), Some((_, path))) => Segment::resume(path, last, end as u64)?,
                _ => Segment::create(wal_dir, last + 1)?,
            };
            return Ok(Replayed::Held {
                table,
                bytes,
                current,
                retired,
            });
        }
        Err(e) => return Err(e),
    }
    let failed = |e| sled_error(dir, e);
    write_table(data, values, &table, &mut Vec::new(), failed)?;
    db.flush().map_err(failed)?;
    db_file.sync(dir)?;
    for (_, path) in &segments {
        std::fs::remove_file(path).map_err(|e| wal::io_error("remove", path, e))?;
    }
    wal::sync_dir(wal_dir)?;
    Ok(Replayed::Done(last))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::store::sled::keys::{SUMMARY, key, record_key};
    use crate::store::sled::tests::{keys, record, summary};

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
    fn a_flipped_bit_before_the_last_segment_ends_is_refused_with_how_to_go_on() {
        let dir = tempfile::tempdir().expect("temp dir");
        let home = created_home(dir.path());
        let mut log = Vec::new();
        for at in 1..=3 {
            wal::encode(&mut log, &record_key("r", (at, 0)), &record(at)).expect("encode");
        }
        let first = {
            let mut one = Vec::new();
            wal::encode(&mut one, &record_key("r", (1, 0)), &record(1)).expect("encode");
            one.len()
        };
        wal::seal(&mut log, 3);
        // One bit of the second entry: an acknowledged write follows it.
        log[first + 20] ^= 0x10;
        let segment = home.join("wal").join("0000000000000003.log");
        std::fs::write(&segment, &log).expect("write the log");
        let Err(e) = SledStore::open(&home, 8) else {
            panic!("a log damaged before its end opened");
        };
        let text = e.to_string();
        assert!(matches!(e, StoreError::Damaged { .. }), "{text}");
        assert!(text.contains(&home.display().to_string()), "{text}");
        let cut = format!("truncate -s {first} {}", segment.display());
        assert!(text.contains(&cut), "{text}");
        // Refused, it is left as it was; cut as the message says, the home opens with the
        // entry before the damage.
        assert_eq!(std::fs::read(&segment).expect("read"), log);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&segment)
            .and_then(|f| f.set_len(first as u64))
            .expect("cut the segment");
        let store = SledStore::open(&home, 8).expect("open");
        assert_eq!(keys(&store.records("r", (0, 0)).expect("records")), vec![1]);
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
