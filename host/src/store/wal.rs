//! The write-ahead log of the embedded store: segment files `<home>/wal/<generation>.log`.
//!
//! Every write of the store is appended to the current segment as one entry, and the group
//! commit makes it durable with one `fdatasync` of that file; sled receives the writes later,
//! many at once, in a checkpoint (`sled_store`), after which the segment is removed. This keeps
//! sled's B-tree inserts and its log flush off the path of every transition.
//!
//! An entry is `len: u32 LE | crc32: u32 LE | key_len: u32 LE | key | value`, `len` counting
//! what follows the CRC and the CRC covering it. A reader stops at the first entry that is cut
//! short or fails its CRC: the tail a process was writing when it died. Such a tail was never
//! acknowledged, since an acknowledgment waits for the `fdatasync` that covers the whole entry.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::StoreError;

/// The bytes before an entry's payload: its length and its CRC.
const HEADER: usize = 8;

/// The extension of segment files.
const EXTENSION: &str = "log";

fn io_error(what: &str, path: &Path, e: std::io::Error) -> StoreError {
    if matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    ) {
        return StoreError::DiskFull(format!("cannot {what} {}: {e}", path.display()));
    }
    StoreError::Backend(format!("cannot {what} {}: {e}", path.display()))
}

/// Appends the entry `key` = `value` to `buf`.
pub fn encode(buf: &mut Vec<u8>, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
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
    let crc = crc32fast::hash(&buf[start + HEADER..]);
    buf[start + 4..start + HEADER].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// A logged write: its key and value.
pub type Entry = (Vec<u8>, Vec<u8>);

/// The entries of a segment's bytes, in order, and how many bytes they span: reading stops at
/// the first entry that is cut short or fails its CRC.
pub fn decode(bytes: &[u8]) -> (Vec<Entry>, usize) {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some((key, value, next)) = entry_at(bytes, at) {
        out.push((key.to_vec(), value.to_vec()));
        at = next;
    }
    (out, at)
}

/// The entry at `at`, and where the next one starts.
fn entry_at(bytes: &[u8], at: usize) -> Option<(&[u8], &[u8], usize)> {
    let word = |i: usize| -> Option<usize> {
        let b: [u8; 4] = bytes.get(i..i + 4)?.try_into().ok()?;
        Some(u32::from_le_bytes(b) as usize)
    };
    let len = word(at)?;
    let crc = word(at + 4)? as u32;
    let payload = bytes.get(at + HEADER..(at + HEADER).checked_add(len)?)?;
    if len < 4 || crc32fast::hash(payload) != crc {
        return None;
    }
    let key_len = word(at + HEADER)?;
    let key = payload.get(4..4usize.checked_add(key_len)?)?;
    let value = payload.get(4 + key_len..)?;
    Some((key, value, at + HEADER + len))
}

/// The segment files in `dir`, oldest first, by generation.
pub fn segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, StoreError> {
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
pub fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error("sync", dir, e))
}

/// The segment being written.
pub struct Segment {
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
pub struct SyncPoint {
    file: Arc<File>,
    path: PathBuf,
    writes: u64,
    synced: Arc<AtomicU64>,
}

impl SyncPoint {
    /// Returns once every write made before this point is durable: at once when an
    /// `fdatasync` that started after them has ended, else after one of its own.
    pub fn sync(&self) -> Result<(), StoreError> {
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
    pub fn create(dir: &Path, generation: u64) -> Result<Self, StoreError> {
        let path = dir.join(format!("{generation:016x}.{EXTENSION}"));
        let file = crate::home::create_file(&path).map_err(|e| io_error("create", &path, e))?;
        sync_dir(dir)?;
        Ok(Segment {
            file: Arc::new(file),
            path,
            generation,
            len: 0,
            writes: 0,
            synced: Arc::default(),
        })
    }

    /// Its generation: a later segment has a larger one.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether nothing was written to it.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `bytes` (whole entries). On failure the file is cut back to what it held, so
    /// no torn entry hides the ones written after it.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        if bytes.is_empty() {
            return Ok(());
        }
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
    pub fn sync_point(&self) -> SyncPoint {
        SyncPoint {
            file: self.file.clone(),
            path: self.path.clone(),
            writes: self.writes,
            synced: self.synced.clone(),
        }
    }

    /// Makes what was written durable (`fdatasync`), unless that is done.
    pub fn sync(&self) -> Result<(), StoreError> {
        self.sync_point().sync()
    }

    /// Removes the file (its writes are in sled, flushed).
    pub fn remove(self) -> Result<(), StoreError> {
        std::fs::remove_file(&self.path).map_err(|e| io_error("remove", &self.path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(entries: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut buf = Vec::new();
        for (k, v) in entries {
            encode(&mut buf, k, v).expect("encode");
        }
        buf
    }

    #[test]
    fn entries_read_back_in_order() {
        let buf = log(&[(b"a", b"1"), (b"", b""), (b"key", &[7; 1000])]);
        let (entries, len) = decode(&buf);
        assert_eq!(len, buf.len());
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0], (b"a".to_vec(), b"1".to_vec()));
        assert_eq!(entries[1], (Vec::new(), Vec::new()));
        assert_eq!(entries[2], (b"key".to_vec(), vec![7; 1000]));
    }

    #[test]
    fn a_torn_tail_ends_the_log_at_the_last_whole_entry() {
        let whole = log(&[(b"a", b"1"), (b"b", b"2")]);
        let first = log(&[(b"a", b"1")]).len();
        for cut in first..whole.len() {
            let (entries, len) = decode(&whole[..cut]);
            assert_eq!(entries.len(), 1, "cut at {cut}");
            assert_eq!(len, first);
        }
    }

    #[test]
    fn a_garbled_entry_ends_the_log_before_it() {
        let mut buf = log(&[(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]);
        let first = log(&[(b"a", b"1")]).len();
        // A flipped bit in the second entry's value, and a length that points past the end.
        let at = first + HEADER + 4 + 1;
        buf[at] ^= 1;
        assert_eq!(decode(&buf).0.len(), 1);
        buf[at] ^= 1;
        buf[first..first + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(&buf).0.len(), 1);
        // Zeros (space the file system gave but nothing wrote) end it too.
        let zeros = vec![0; 64];
        assert_eq!(decode(&zeros), (Vec::new(), 0));
    }

    #[test]
    fn segments_list_oldest_first_and_ignore_other_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        for g in [0x11, 0x2, 0x100] {
            Segment::create(dir.path(), g).expect("create");
        }
        std::fs::write(dir.path().join("notes.txt"), "x").expect("write");
        std::fs::write(dir.path().join("zz.log"), "x").expect("write");
        let found: Vec<u64> = segments(dir.path())
            .expect("list")
            .into_iter()
            .map(|(g, _)| g)
            .collect();
        assert_eq!(found, vec![0x2, 0x11, 0x100]);
    }

    #[test]
    fn a_segment_holds_what_was_written_and_synced() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut seg = Segment::create(dir.path(), 1).expect("create");
        let buf = log(&[(b"k", b"v")]);
        seg.write(&buf).expect("write");
        seg.sync().expect("sync");
        let (_, path) = segments(dir.path()).expect("list").remove(0);
        assert_eq!(std::fs::read(&path).expect("read"), buf);
        seg.remove().expect("remove");
        assert!(segments(dir.path()).expect("list").is_empty());
    }
}
