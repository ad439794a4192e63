//! Content-addressed files beside the database: `<home>/blobs/sha256/<hex>`.
//!
//! Components and run definitions are stored here once per digest, however many runs use them,
//! and never inside sled: a large value in sled's tree is copied again whenever sled rewrites
//! the nodes and segments around it. A blob is written to a temporary file, synced, renamed into
//! place and its directory synced, so it is either whole or absent, and it is durable before the
//! run that names it is.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::store::StoreError;

/// The blob files of one home.
pub(super) struct Blobs {
    dir: PathBuf,
    /// Digests this process stored or found stored: every run start names its definition's and
    /// its plugins' blobs, and looking for their files each time cost two `statx` per run.
    known: Mutex<HashSet<String>>,
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Backend(format!("cannot {what} {}: {e}", path.display()))
}

impl Blobs {
    /// The blobs under `root` (`<home>/blobs`), made when missing.
    pub(super) fn open(root: &Path) -> Result<Self, StoreError> {
        let dir = root.join("sha256");
        crate::home::create_dir(&dir).map_err(|e| io_error("create", &dir, e))?;
        Ok(Blobs {
            dir,
            known: Mutex::new(HashSet::new()),
        })
    }

    /// Whether this process stored or found the blob of `digest`.
    fn is_known(&self, digest: &str) -> bool {
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(digest)
    }

    /// Remembers that the blob of `digest` is stored.
    fn remember(&self, digest: &str) {
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(digest.to_owned());
    }

    /// The file of `digest`; refuses anything but 64 lower-case hex digits, so a digest read
    /// from a damaged record can never name a path outside the blob directory.
    fn path(&self, digest: &str) -> Result<PathBuf, StoreError> {
        if digest.len() == 64
            && digest
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            Ok(self.dir.join(digest))
        } else {
            Err(StoreError::Corrupt {
                key: format!("blob {digest:?}"),
                message: "a blob is named by a sha256 digest: 64 lower-case hex digits".into(),
            })
        }
    }

    /// Stores `bytes` under `digest` (their sha256) unless a blob of that digest exists.
    pub(super) fn put(&self, digest: &str, bytes: &[u8]) -> Result<(), StoreError> {
        if self.is_known(digest) {
            return Ok(());
        }
        let path = self.path(digest)?;
        if path.exists() {
            self.remember(digest);
            return Ok(());
        }
        let tmp = self.dir.join(format!(
            ".{digest}.tmp-{}-{:x}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        let written = (|| {
            let mut file = crate::home::create_file(&tmp)?;
            file.write_all(bytes)?;
            file.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            std::fs::File::open(&self.dir)?.sync_all()
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_error("write", &path, e));
        }
        self.remember(digest);
        Ok(())
    }

    /// Whether any blob is stored.
    pub(super) fn any(&self) -> Result<bool, StoreError> {
        let mut entries =
            std::fs::read_dir(&self.dir).map_err(|e| io_error("list", &self.dir, e))?;
        Ok(entries.next().is_some())
    }

    /// Every stored blob's digest and size (a file being written, not yet renamed into place,
    /// is none).
    pub(super) fn list(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(|e| io_error("list", &self.dir, e))? {
            let entry = entry.map_err(|e| io_error("list", &self.dir, e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if self.path(&name).is_err() {
                continue;
            }
            let size = entry.metadata().map_or(0, |m| m.len());
            out.push((name, size));
        }
        Ok(out)
    }

    /// Removes the blob of `digest`, which no run names.
    pub(super) fn remove(&self, digest: &str) -> Result<(), StoreError> {
        let path = self.path(digest)?;
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(digest);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error("remove", &path, e)),
        }
    }

    /// The bytes stored under `digest`, if any.
    pub(super) fn get(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let path = self.path(digest)?;
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error("read", &path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sha256_hex;

    #[test]
    fn a_blob_is_stored_once_and_read_back() {
        let dir = tempfile::tempdir().expect("temp dir");
        let blobs = Blobs::open(dir.path()).expect("open");
        let digest = sha256_hex(b"component");
        assert_eq!(blobs.get(&digest).expect("get"), None);
        blobs.put(&digest, b"component").expect("put");
        blobs.put(&digest, b"component").expect("put again");
        assert_eq!(
            blobs.get(&digest).expect("get").as_deref(),
            Some(&b"component"[..])
        );
        let names: Vec<_> = std::fs::read_dir(dir.path().join("sha256"))
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(&digest)]);
    }

    #[test]
    fn a_digest_never_names_a_path_outside() {
        let dir = tempfile::tempdir().expect("temp dir");
        let blobs = Blobs::open(dir.path()).expect("open");
        for bad in ["../../etc/passwd", "", &"A".repeat(64), &"0".repeat(63)] {
            assert!(blobs.get(bad).is_err(), "{bad}");
            assert!(blobs.put(bad, b"x").is_err(), "{bad}");
        }
    }
}
