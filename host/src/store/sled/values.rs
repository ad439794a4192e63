//! Values kept beside sled's tree rather than in it: `<home>/values/<number>.values`.
//!
//! A checkpoint appends the chunks of records it moves out of the log (`chunk`) to the
//! current values file, makes them durable, and inserts into sled only where each one lies: a
//! ref, `REF | file: u32 BE | offset: u64 BE | len: u32 BE`. sled 0.34 copies a leaf whole at
//! every insert and writes it out whole when it splits or flushes it, so the cost of its inserts
//! grows with the size of the values beside them; a ref keeps its leaves small. A record is a
//! MessagePack map (a JSON object before format 7) and a chunk starts with `chunk::CHUNK`, and a run's first value with a digest's length
//! (`keys::first`): none starts with [`REF`], so a value stored inline (before format 6, or one
//! too small to be worth a ref) reads as before.
//!
//! Values files are only appended to: a checkpoint cut short leaves bytes no ref names, which
//! the log's replay writes again further on. A ref is inserted only once the bytes it names are
//! synced, so it never names bytes a crash could take away. A prune takes the room of deleted
//! runs back (`prune`): a file that no ref names is removed, and one whose live chunks are
//! less than half of it has them copied to the current file, their refs moved, and is removed.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::wal::{io_error, sync_dir};
use crate::store::StoreError;

/// The first byte of a ref.
const REF: u8 = 0x02;

/// The bytes of a ref.
const REF_LEN: usize = 17;

/// A value smaller than this stays in sled's tree: its ref would save little.
pub(super) const INLINE_BELOW: usize = 64;

/// A values file takes no more appends once it holds this many bytes: the next starts.
const FILE_BYTES: u64 = 256 << 20;

/// The ending of a values file's name.
const SUFFIX: &str = ".values";

/// The values files of one home.
pub(super) struct Values {
    dir: PathBuf,
    /// A file takes no more appends once it holds this many bytes ([`FILE_BYTES`]).
    file_bytes: u64,
    /// The file appended to.
    current: Mutex<Current>,
    /// Files opened for reading, by number, with their size when last looked at (a file
    /// only grows: it is looked at again only for a ref past that size).
    readers: Mutex<HashMap<u32, (Arc<File>, u64)>>,
    /// Held to read through refs ([`Values::reading`]) and, exclusively, to move chunks
    /// ([`Values::moving`]): a read never holds a ref to a file that a move took its chunks
    /// out of and removed.
    moves: RwLock<()>,
}

/// The values file appended to, and how many bytes it holds.
struct Current {
    number: u32,
    file: File,
    len: u64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The file of values file `number` in `dir`.
fn path_of(dir: &Path, number: u32) -> PathBuf {
    dir.join(format!("{number:08}{SUFFIX}"))
}

/// Opens values file `number` in `dir` for appending, made (private) when missing.
fn open_append(dir: &Path, number: u32) -> Result<(File, u64), StoreError> {
    let path = path_of(dir, number);
    let file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(crate::home::FILE_MODE)
        .open(&path)
        .map_err(|e| io_error("open", &path, e))?;
    let len = file
        .metadata()
        .map_err(|e| io_error("read the size of", &path, e))?
        .len();
    Ok((file, len))
}

impl Values {
    /// The values files in `dir` (`<home>/values`), made when missing; appends go to the last.
    pub(super) fn open(dir: &Path) -> Result<Self, StoreError> {
        Self::open_with(dir, FILE_BYTES)
    }

    /// [`Values::open`], each file taking appends until it holds `file_bytes`.
    fn open_with(dir: &Path, file_bytes: u64) -> Result<Self, StoreError> {
        let new_dir = !dir.exists();
        crate::home::create_dir(dir).map_err(|e| io_error("create", dir, e))?;
        if new_dir && let Some(home) = dir.parent() {
            // Refs to its files become durable in sled: so must the directory itself.
            sync_dir(home)?;
        }
        let mut last = 0;
        for entry in std::fs::read_dir(dir).map_err(|e| io_error("list", dir, e))? {
            let entry = entry.map_err(|e| io_error("list", dir, e))?;
            let name = entry.file_name();
            if let Some(n) = name
                .to_str()
                .and_then(|n| n.strip_suffix(SUFFIX))
                .and_then(|n| n.parse::<u32>().ok())
            {
                last = last.max(n);
            }
        }
        let number = last.max(1);
        let (file, len) = open_append(dir, number)?;
        if last == 0 {
            // The first file was made here.
            sync_dir(dir)?;
        }
        Ok(Values {
            dir: dir.to_path_buf(),
            file_bytes,
            current: Mutex::new(Current { number, file, len }),
            readers: Mutex::default(),
            moves: RwLock::default(),
        })
    }

    /// Held by a read from its read of a ref in sled to its read of the bytes named.
    pub(super) fn reading(&self) -> RwLockReadGuard<'_, ()> {
        self.moves
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Held while refs to moved chunks replace the old ones in sled.
    pub(super) fn moving(&self) -> RwLockWriteGuard<'_, ()> {
        self.moves
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The number of the file appended to.
    pub(super) fn current(&self) -> u32 {
        lock(&self.current).number
    }

    /// Every values file, by number, with its size, in order.
    pub(super) fn files(&self) -> Result<Vec<(u32, u64)>, StoreError> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(|e| io_error("list", &self.dir, e))? {
            let entry = entry.map_err(|e| io_error("list", &self.dir, e))?;
            let number = entry
                .file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(SUFFIX))
                .and_then(|n| n.parse::<u32>().ok());
            if let Some(number) = number {
                let path = entry.path();
                let size = entry
                    .metadata()
                    .map_err(|e| io_error("read the size of", &path, e))?
                    .len();
                files.push((number, size));
            }
        }
        files.sort_unstable();
        Ok(files)
    }

    /// Moves appends on to a new file.
    pub(super) fn start_next(&self) -> Result<(), StoreError> {
        let mut current = lock(&self.current);
        let number = current.number.checked_add(1).ok_or_else(|| {
            StoreError::Backend(format!(
                "{} holds the most values files",
                self.dir.display()
            ))
        })?;
        let (file, len) = open_append(&self.dir, number)?;
        sync_dir(&self.dir)?;
        *current = Current { number, file, len };
        Ok(())
    }

    /// Removes values file `number`, which no ref names and which is not the current one;
    /// returns its size.
    pub(super) fn remove(&self, number: u32) -> Result<u64, StoreError> {
        if number == self.current() {
            return Ok(0);
        }
        lock(&self.readers).remove(&number);
        let path = path_of(&self.dir, number);
        let size = std::fs::metadata(&path).map_or(0, |m| m.len());
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io_error("remove", &path, e)),
        }
        sync_dir(&self.dir)?;
        Ok(size)
    }

    /// Appends `bytes` (the values of one checkpoint, back to back) and syncs them; returns the
    /// file and offset they start at, for [`ref_to`].
    pub(super) fn append(&self, bytes: &[u8]) -> Result<(u32, u64), StoreError> {
        if lock(&self.current).len >= self.file_bytes {
            self.start_next()?;
        }
        let mut current = lock(&self.current);
        let path = path_of(&self.dir, current.number);
        let at = current.len;
        let written = current
            .file
            .write_all(bytes)
            .and_then(|()| current.file.sync_data());
        if let Err(e) = written {
            // What was written of them is named by no ref; the file's end is where the next
            // append goes.
            current.len = current.file.metadata().map_or(at, |m| m.len());
            return Err(io_error("write", &path, e));
        }
        current.len = at + bytes.len() as u64;
        Ok((current.number, at))
    }

    /// The value `v` stored under `key`: itself, or the bytes its ref names.
    pub(super) fn resolve<'v>(&self, key: &[u8], v: &'v [u8]) -> Result<Cow<'v, [u8]>, StoreError> {
        let Some(&REF) = v.first() else {
            return Ok(Cow::Borrowed(v));
        };
        let corrupt = |message: String| StoreError::Corrupt {
            key: String::from_utf8_lossy(key).into_owned(),
            message,
        };
        let (number, offset, len) = parse_ref(v)
            .ok_or_else(|| corrupt("a ref to a values file that does not read".into()))?;
        let path = path_of(&self.dir, number);
        let end = offset.checked_add(u64::from(len));
        let (file, size) = self.reader(number, end.unwrap_or(u64::MAX)).map_err(|e| {
            corrupt(format!(
                "its value is in {}, which cannot be opened ({e}); restore the home from a \
                 backup",
                path.display()
            ))
        })?;
        // A damaged ref must not make this allocate more than the file holds.
        if end.is_none_or(|end| end > size) {
            return Err(corrupt(format!(
                "its value is {len} bytes at {offset} of {}, which holds {size} bytes; restore \
                 the home from a backup",
                path.display()
            )));
        }
        let mut out = vec![0; len as usize];
        file.read_exact_at(&mut out, offset).map_err(|e| {
            corrupt(format!(
                "its value is {len} bytes at {offset} of {}, which cannot be read ({e}); restore \
                 the home from a backup",
                path.display()
            ))
        })?;
        Ok(Cow::Owned(out))
    }

    /// Values file `number`, opened for reading once, and its size: as last looked at, or
    /// looked at again when that is short of `end`.
    fn reader(&self, number: u32, end: u64) -> std::io::Result<(Arc<File>, u64)> {
        let mut readers = lock(&self.readers);
        if let Some((f, size)) = readers.get_mut(&number) {
            if *size < end {
                *size = f.metadata()?.len();
            }
            return Ok((f.clone(), *size));
        }
        let f = Arc::new(File::open(path_of(&self.dir, number))?);
        let size = f.metadata()?.len();
        readers.insert(number, (f.clone(), size));
        Ok((f, size))
    }
}

/// The ref to the `len` bytes at `offset` of values file `number`.
pub(super) fn ref_to(number: u32, offset: u64, len: usize) -> [u8; REF_LEN] {
    let mut out = [0; REF_LEN];
    out[0] = REF;
    out[1..5].copy_from_slice(&number.to_be_bytes());
    out[5..13].copy_from_slice(&offset.to_be_bytes());
    // A chunk holds at most `chunk::MAX_CHUNK` bytes of records, or one record the log took.
    out[13..].copy_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
    out
}

/// The file, offset and length a ref names; `None` when `v` is not one.
pub(super) fn parse_ref(v: &[u8]) -> Option<(u32, u64, u32)> {
    if v.len() != REF_LEN || v[0] != REF {
        return None;
    }
    Some((
        u32::from_be_bytes(v[1..5].try_into().ok()?),
        u64::from_be_bytes(v[5..13].try_into().ok()?),
        u32::from_be_bytes(v[13..].try_into().ok()?),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_appended_reads_back_through_its_ref_and_an_inline_one_as_itself() {
        let dir = tempfile::tempdir().expect("temp dir");
        let values = Values::open(&dir.path().join("values")).expect("open");
        let (n, at) = values.append(b"firstsecond").expect("append");
        let first = ref_to(n, at, 5);
        let second = ref_to(n, at + 5, 6);
        assert_eq!(&*values.resolve(b"k", &first).expect("read"), b"first");
        assert_eq!(&*values.resolve(b"k", &second).expect("read"), b"second");
        assert_eq!(&*values.resolve(b"k", b"{}").expect("read"), b"{}");
        // Reopened, appends go on after what is there.
        drop(values);
        let values = Values::open(&dir.path().join("values")).expect("reopen");
        let (n2, at2) = values.append(b"third").expect("append");
        assert_eq!((n2, at2), (n, at + 11));
        assert_eq!(&*values.resolve(b"k", &first).expect("read"), b"first");
    }

    #[test]
    fn a_full_file_is_followed_by_the_next_and_both_read_back_after_reopening() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("values");
        let values = Values::open_with(&path, 8).expect("open");
        let a = values.append(b"0123456789").expect("append");
        let b = values.append(b"abc").expect("append");
        assert_eq!((a, b), ((1, 0), (2, 0)), "the first file was full");
        drop(values);
        let values = Values::open_with(&path, 8).expect("reopen");
        assert_eq!(values.append(b"de").expect("append"), (2, 3));
        let read = |(n, at): (u32, u64), len| {
            values
                .resolve(b"k", &ref_to(n, at, len))
                .map(|v| v.into_owned())
        };
        assert_eq!(read(a, 10).expect("read"), b"0123456789");
        assert_eq!(read(b, 3).expect("read"), b"abc");
        assert_eq!(read((2, 3), 2).expect("read"), b"de");
    }

    #[test]
    fn a_ref_past_its_files_end_is_a_corrupt_entry_naming_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let values = Values::open(&dir.path().join("values")).expect("open");
        let (n, at) = values.append(b"short").expect("append");
        let err = values
            .resolve(b"key", &ref_to(n, at, 50))
            .expect_err("past the end");
        let text = err.to_string();
        assert!(text.contains("00000001.values"), "{text}");
        assert!(text.contains("restore the home"), "{text}");
        // A damaged ref naming far more than the file holds is refused before anything is
        // allocated for it.
        let err = values
            .resolve(b"key", &ref_to(n, u64::MAX - 1, u32::MAX as usize))
            .expect_err("past the end");
        assert!(err.to_string().contains("which holds 5 bytes"), "{err}");
        let err = values
            .resolve(b"key", &ref_to(7, 0, 5))
            .expect_err("no such file");
        assert!(err.to_string().contains("00000007.values"), "{err}");
    }
}
