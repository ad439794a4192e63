//! The write-ahead log of the embedded store: segment files `<home>/wal/<generation>.log`.
//!
//! Every write of the store is appended to the current segment as one entry, and the group
//! commit makes it durable with one `fdatasync` of that file; sled receives the writes later,
//! many at once, in a checkpoint (`sled_store`), after which the segment is removed. This keeps
//! sled's B-tree inserts and its log flush off the path of every transition.
//!
//! An entry is `len: u32 LE | crc32: u32 LE | key_len: u32 LE | key | value`, `len` counting
//! what follows the CRC, and the CRC covering the segment's generation (u64 LE) and then what
//! follows it. A reader stops at the first entry that is cut short or fails its CRC: the tail a
//! process was writing when it died, never acknowledged (an acknowledgment waits for the
//! `fdatasync` that covers the whole entry), or what an earlier generation left in a recycled
//! file, whose CRCs are of another generation. Such a tail has no whole entry of the segment's
//! own generation after it (writes go in one after another, each cut back if it fails): one
//! found after the entry that stopped the reading means that entry was damaged after it was
//! written, and the segment is damaged ([`Decoded::damage`]), never read as ending there. A
//! segment that a newer one followed ends in an
//! entry with an empty key (no write of the store has one), so a reader can tell the end of a
//! finished segment from damage.
//!
//! A segment whose writes are in sled is kept as the spare (`<home>/wal/spare`) and renamed
//! into the next generation when the log moves on: its blocks are allocated already, so an
//! `fdatasync` of writes into it need not update the file's size or extents (about 0.1 ms here
//! against 0.17 ms for writes that grow a file).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::store::StoreError;

/// The bytes before an entry's payload: its length and its CRC.
const HEADER: usize = 8;

/// The extension of segment files.
const EXTENSION: &str = "log";

/// The error of `what` (a verb) on `path`; a full disk is [`StoreError::DiskFull`].
pub(super) fn io_error(what: &str, path: &Path, e: std::io::Error) -> StoreError {
    if matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    ) {
        return StoreError::DiskFull(format!("cannot {what} {}: {e}", path.display()));
    }
    StoreError::Backend(format!("cannot {what} {}: {e}", path.display()))
}

/// The name of the spare segment in the log's directory.
const SPARE: &str = "spare";

/// Appends the entry `key` = `value` to `buf`, its CRC left to [`seal`] (the segment it goes
/// to, and so the generation the CRC covers, is known only when it is written).
pub(super) fn encode(buf: &mut Vec<u8>, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
    let too_large = || {
        StoreError::Backend(format!(
            "a value of {} bytes is too large for the store's log (at most 4 GiB)",
            value.len()
        ))
    };
    let key_len = u32::try_from(key.len()).map_err(|_| too_large())?;
    let len = u32::try_from(4 + key.len() + value.len()).map_err(|_| too_large())?;
    let start = buf.len();
    buf.reserve(HEADER + len as usize);
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(&key_len.to_le_bytes());
    buf.extend_from_slice(key);
    buf.extend_from_slice(value);
    debug_assert_eq!(buf.len() - start, HEADER + len as usize);
    Ok(())
}

/// The CRC of an entry's `payload` in a segment of `generation`.
fn crc(generation: u64, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&generation.to_le_bytes());
    hasher.update(payload);
    hasher.finalize()
}

/// Fills in the CRCs of the whole entries in `bytes` for a segment of `generation`.
pub(super) fn seal(bytes: &mut [u8], generation: u64) {
    let mut at = 0;
    while let Some(len) = bytes
        .get(at..at + 4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(|b| u32::from_le_bytes(b) as usize)
    {
        let end = at + HEADER + len;
        let Some(payload) = bytes.get(at + HEADER..end) else {
            return;
        };
        let sum = crc(generation, payload);
        bytes[at + 4..at + HEADER].copy_from_slice(&sum.to_le_bytes());
        at = end;
    }
}

/// What a segment's bytes hold.
#[derive(Debug, PartialEq)]
pub(super) struct Decoded {
    /// The entries, in order.
    pub entries: Vec<Entry>,
    /// Whether they end in the mark of a finished segment.
    pub finished: bool,
    /// Damage before the segment's end: the reading stopped at an entry, yet a whole entry of
    /// the segment's generation follows it.
    pub damage: Option<Damage>,
    /// Where the entries read end (after the mark, in a finished segment).
    pub end: usize,
}

/// Where a segment is damaged before its end.
#[derive(Debug, PartialEq)]
pub(super) struct Damage {
    /// The offset of the entry that fails its CRC or its framing.
    pub at: usize,
    /// The offset of the first whole entry of the segment's generation after it.
    pub later: usize,
}

/// A logged write: its key and value.
pub(super) type Entry = (Vec<u8>, Vec<u8>);

/// The entries of the bytes of a segment of `generation`: reading stops at the first entry that
/// is cut short or fails its CRC, or at the mark of a finished segment. Where it stopped at an
/// entry, the rest of the bytes are searched for a whole entry of `generation`: one found
/// means damage, not a torn tail.
pub(super) fn decode(bytes: &[u8], generation: u64) -> Decoded {
    let mut entries = Vec::new();
    let mut at = 0;
    while let Some((key, value, next)) = entry_at(bytes, at, generation) {
        if key.is_empty() {
            return Decoded {
                entries,
                finished: true,
                damage: None,
                end: next,
            };
        }
        entries.push((key.to_vec(), value.to_vec()));
        at = next;
    }
    let damage = (at + 1..bytes.len())
        .find(|&later| entry_at(bytes, later, generation).is_some())
        .map(|later| Damage { at, later });
    Decoded {
        entries,
        finished: false,
        damage,
        end: at,
    }
}

/// The entry at `at`, and where the next one starts.
fn entry_at(bytes: &[u8], at: usize, generation: u64) -> Option<(&[u8], &[u8], usize)> {
    let word = |i: usize| -> Option<usize> {
        let b: [u8; 4] = bytes.get(i..i + 4)?.try_into().ok()?;
        Some(u32::from_le_bytes(b) as usize)
    };
    let len = word(at)?;
    if len < 4 {
        return None;
    }
    let crc = word(at + 4)? as u32;
    let payload = bytes.get(at + HEADER..(at + HEADER).checked_add(len)?)?;
    if self::crc(generation, payload) != crc {
        return None;
    }
    let key_len = word(at + HEADER)?;
    let key = payload.get(4..4usize.checked_add(key_len)?)?;
    let value = payload.get(4 + key_len..)?;
    Some((key, value, at + HEADER + len))
}

/// The segment files in `dir`, oldest first, by generation.
pub(super) fn segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, StoreError> {
    let entries = std::fs::read_dir(dir).map_err(|e| io_error("list", dir, e))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error("list", dir, e))?;
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some(EXTENSION) {
            continue;
        }
        let generation = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| u64::from_str_radix(s, 16).ok());
        if let Some(generation) = generation {
            out.push((generation, path));
        }
    }
    out.sort();
    Ok(out)
}

/// Makes a directory entry durable: a created or removed file in `dir`.
pub(super) fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error("sync", dir, e))
}

/// The segment being written.
pub(super) struct Segment {
    file: Arc<File>,
    path: PathBuf,
    generation: u64,
    /// Bytes in the file.
    len: u64,
    /// Writes so far.
    writes: u64,
    /// The writes an `fdatasync` has covered.
    synced: Arc<AtomicU64>,
}

/// What makes a segment's writes so far durable, outside the lock that orders writes: one
/// `fdatasync` may run while the next writes go in, and several syncs share one.
pub(super) struct SyncPoint {
    file: Arc<File>,
    path: PathBuf,
    writes: u64,
    synced: Arc<AtomicU64>,
}

impl SyncPoint {
    /// Returns once every write made before this point is durable: at once when an
    /// `fdatasync` that started after them has ended, else after one of its own.
    pub(super) fn sync(&self) -> Result<(), StoreError> {
        if self.synced.load(Ordering::Acquire) >= self.writes {
            return Ok(());
        }
        self.file
            .sync_data()
            .map_err(|e| io_error("sync", &self.path, e))?;
        self.synced.fetch_max(self.writes, Ordering::AcqRel);
        Ok(())
    }
}

impl Segment {
    /// Creates the segment of `generation` in `dir` (private to the owner) and makes its name
    /// durable.
    pub(super) fn create(dir: &Path, generation: u64) -> Result<Self, StoreError> {
        let path = segment_path(dir, generation);
        let file = crate::home::create_file(&path).map_err(|e| io_error("create", &path, e))?;
        sync_dir(dir)?;
        Ok(Segment::at(file, path, generation))
    }

    /// The segment of `generation` in `dir`, made of the spare when there is one (its blocks
    /// allocated already), else a new file.
    pub(super) fn next(dir: &Path, generation: u64) -> Result<Self, StoreError> {
        let spare = dir.join(SPARE);
        let Ok(file) = std::fs::OpenOptions::new().write(true).open(&spare) else {
            return Segment::create(dir, generation);
        };
        let path = segment_path(dir, generation);
        std::fs::rename(&spare, &path).map_err(|e| io_error("rename", &spare, e))?;
        sync_dir(dir)?;
        Ok(Segment::at(file, path, generation))
    }

    /// The unfinished segment `path` of `generation` again, to go on writing after the `len`
    /// bytes of its whole entries (what follows, a torn tail, is cut off): a log kept on a
    /// full disk goes on in its own segment.
    pub(super) fn resume(path: &Path, generation: u64, len: u64) -> Result<Self, StoreError> {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| io_error("open", path, e))?;
        file.set_len(len).map_err(|e| io_error("cut", path, e))?;
        std::io::Seek::seek(&mut &file, std::io::SeekFrom::Start(len))
            .map_err(|e| io_error("seek in", path, e))?;
        let mut segment = Segment::at(file, path.to_path_buf(), generation);
        segment.len = len;
        Ok(segment)
    }

    /// A finished segment whose writes are not in sled yet, for a checkpoint to retire.
    pub(super) fn finished(path: &Path, generation: u64) -> Result<Self, StoreError> {
        let file = File::open(path).map_err(|e| io_error("open", path, e))?;
        Ok(Segment::at(file, path.to_path_buf(), generation))
    }

    fn at(file: File, path: PathBuf, generation: u64) -> Self {
        Segment {
            file: Arc::new(file),
            path,
            generation,
            len: 0,
            writes: 0,
            synced: Arc::default(),
        }
    }

    /// Its generation: a later segment has a larger one.
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether nothing was written to it.
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its file.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `bytes` (whole entries), sealed for this segment. On failure the file is cut
    /// back to what it held, so no torn entry hides the ones written after it.
    pub(super) fn write(&mut self, bytes: &mut [u8]) -> Result<(), StoreError> {
        if bytes.is_empty() {
            return Ok(());
        }
        seal(bytes, self.generation);
        match (&*self.file).write_all(bytes) {
            Ok(()) => {
                self.len += bytes.len() as u64;
                self.writes += 1;
                Ok(())
            }
            Err(e) => {
                let _ = self.file.set_len(self.len);
                // The file is opened for writing, not appending: write from where it ends.
                let _ = std::io::Seek::seek(&mut &*self.file, std::io::SeekFrom::Start(self.len));
                Err(io_error("write", &self.path, e))
            }
        }
    }

    /// What makes the writes so far durable.
    pub(super) fn sync_point(&self) -> SyncPoint {
        SyncPoint {
            file: self.file.clone(),
            path: self.path.clone(),
            writes: self.writes,
            synced: self.synced.clone(),
        }
    }

    /// Makes what was written durable (`fdatasync`), unless that is done.
    pub(super) fn sync(&self) -> Result<(), StoreError> {
        self.sync_point().sync()
    }

    /// Marks the segment finished (a newer one follows) and makes it durable.
    pub(super) fn finish(&mut self) -> Result<(), StoreError> {
        let mut end = Vec::new();
        encode(&mut end, &[], &[])?;
        self.write(&mut end)?;
        self.sync()
    }

    /// Its writes are in sled, flushed: it becomes the spare when there is none (`keep`), or is
    /// removed.
    pub(super) fn retire(self, dir: &Path, keep: bool) -> Result<(), StoreError> {
        let spare = dir.join(SPARE);
        if keep && !spare.exists() {
            std::fs::rename(&self.path, &spare).map_err(|e| io_error("rename", &self.path, e))
        } else {
            std::fs::remove_file(&self.path).map_err(|e| io_error("remove", &self.path, e))
        }
    }
}

/// The file of the segment of `generation` in `dir`.
fn segment_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("{generation:016x}.{EXTENSION}"))
}

/// Removes the spare segment from `dir`, if any: a store that closes leaves no file it does
/// not need.
pub(super) fn remove_spare(dir: &Path) -> Result<(), StoreError> {
    let spare = dir.join(SPARE);
    match std::fs::remove_file(&spare) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_error("remove", &spare, e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sealed entries `entries` of a segment of `generation`.
    fn log(generation: u64, entries: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut buf = Vec::new();
        for (k, v) in entries {
            encode(&mut buf, k, v).expect("encode");
        }
        seal(&mut buf, generation);
        buf
    }

    fn keys(d: &Decoded) -> Vec<Vec<u8>> {
        d.entries.iter().map(|(k, _)| k.clone()).collect()
    }

    #[test]
    fn entries_read_back_in_order() {
        let buf = log(3, &[(b"a", b"1"), (b"k", b""), (b"key", &[7; 1000])]);
        let d = decode(&buf, 3);
        assert!(!d.finished);
        assert_eq!(d.entries.len(), 3);
        assert_eq!(d.entries[0], (b"a".to_vec(), b"1".to_vec()));
        assert_eq!(d.entries[1], (b"k".to_vec(), Vec::new()));
        assert_eq!(d.entries[2], (b"key".to_vec(), vec![7; 1000]));
    }

    #[test]
    fn a_torn_tail_ends_the_log_at_the_last_whole_entry() {
        let whole = log(1, &[(b"a", b"1"), (b"b", b"2")]);
        let first = log(1, &[(b"a", b"1")]).len();
        for cut in first..whole.len() {
            assert_eq!(
                keys(&decode(&whole[..cut], 1)),
                vec![b"a".to_vec()],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn a_garbled_entry_before_the_end_is_damage_not_the_end() {
        let mut buf = log(1, &[(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]);
        let first = log(1, &[(b"a", b"1")]).len();
        let third = log(1, &[(b"a", b"1"), (b"b", b"2")]).len();
        // A flipped bit in the second entry's value, and a length that points past the end:
        // the third entry, whole, follows.
        let at = first + HEADER + 4 + 1;
        buf[at] ^= 1;
        let d = decode(&buf, 1);
        assert_eq!(d.entries.len(), 1);
        assert_eq!(
            d.damage,
            Some(Damage {
                at: first,
                later: third
            })
        );
        buf[at] ^= 1;
        buf[first..first + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let d = decode(&buf, 1);
        assert_eq!(d.entries.len(), 1);
        assert_eq!(d.damage.map(|d| d.later), Some(third));
        // Every bit of the first two entries: each flip is damage, never a shorter log.
        let clean = log(1, &[(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]);
        for bit in 0..third * 8 {
            let mut flipped = clean.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            let d = decode(&flipped, 1);
            assert!(d.damage.is_some(), "bit {bit} read as {:?}", keys(&d));
        }
    }

    #[test]
    fn a_garbled_last_entry_or_zeros_end_the_log() {
        let mut buf = log(1, &[(b"a", b"1"), (b"b", b"2")]);
        let last = buf.len() - 1;
        buf[last] ^= 1;
        let d = decode(&buf, 1);
        assert_eq!((keys(&d), d.damage), (vec![b"a".to_vec()], None));
        // Zeros (space the file system gave but nothing wrote) end it too.
        buf.truncate(last + 1 - log(1, &[(b"b", b"2")]).len());
        buf.extend_from_slice(&[0; 64]);
        assert_eq!(decode(&buf, 1).damage, None);
        assert!(decode(&[0; 64], 1).entries.is_empty());
    }

    #[test]
    fn what_an_earlier_generation_left_in_a_recycled_file_is_not_read() {
        let stale = log(4, &[(b"old", b"1"), (b"older", b"2")]);
        assert!(decode(&stale, 5).entries.is_empty());
        // New entries over the start of the old ones: the reading stops where they end.
        let mut file = stale.clone();
        let new = log(5, &[(b"n", b"")]);
        file[..new.len()].copy_from_slice(&new);
        let d = decode(&file, 5);
        assert_eq!((keys(&d), d.damage), (vec![b"n".to_vec()], None));
    }

    #[test]
    fn segments_list_oldest_first_and_ignore_other_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        for g in [0x11, 0x2, 0x100] {
            Segment::create(dir.path(), g).expect("create");
        }
        std::fs::write(dir.path().join("notes.txt"), "x").expect("write");
        std::fs::write(dir.path().join("zz.log"), "x").expect("write");
        std::fs::write(dir.path().join(SPARE), "x").expect("write");
        let found: Vec<u64> = segments(dir.path())
            .expect("list")
            .into_iter()
            .map(|(g, _)| g)
            .collect();
        assert_eq!(found, vec![0x2, 0x11, 0x100]);
    }

    #[test]
    fn a_finished_segment_becomes_the_spare_of_the_next_and_reads_as_new() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut seg = Segment::create(dir.path(), 1).expect("create");
        let mut buf = Vec::new();
        encode(&mut buf, b"k", b"v").expect("encode");
        seg.write(&mut buf).expect("write");
        seg.finish().expect("finish");
        let (_, path) = segments(dir.path()).expect("list").remove(0);
        let d = decode(&std::fs::read(&path).expect("read"), 1);
        assert_eq!((keys(&d), d.finished), (vec![b"k".to_vec()], true));
        seg.retire(dir.path(), true).expect("retire");
        assert!(segments(dir.path()).expect("list").is_empty());
        // The spare is the next segment: the old entries are there, but not for generation 2.
        let next = Segment::next(dir.path(), 2).expect("next");
        assert_eq!(next.generation(), 2);
        let (g, path) = segments(dir.path()).expect("list").remove(0);
        assert_eq!(g, 2);
        assert_eq!(
            decode(&std::fs::read(&path).expect("read"), 2).entries,
            Vec::new()
        );
        next.retire(dir.path(), false).expect("retire");
        remove_spare(dir.path()).expect("no spare is fine");
        assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 0);
    }
}
