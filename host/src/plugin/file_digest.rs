//! Plugin files read and hashed once per process: a file is read again only when its size,
//! modification time or identity changed since it was last read.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use super::cache;
use super::error::PluginError;
use super::lock;
use crate::limits::files::{MAX_PLUGIN_FILE_BYTES, read_at_most};

/// What tells a file's contents apart without reading them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    /// Device, inode and change time (ns): a file replaced or rewritten in place within the
    /// modification time's granularity still differs here.
    #[cfg(unix)]
    identity: (u64, u64, i64, i64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        #[cfg(unix)]
        use std::os::unix::fs::MetadataExt;
        Stamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            #[cfg(unix)]
            identity: (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// A file as last read.
struct Seen {
    stamp: Stamp,
    digest: String,
    wasm: Arc<[u8]>,
}

/// The plugin files read so far, by path.
#[derive(Default)]
pub(crate) struct FileDigests {
    seen: Mutex<HashMap<PathBuf, Seen>>,
    hashed: AtomicU64,
}

impl FileDigests {
    /// The digest and bytes of the file at `path`, read and hashed only when it changed.
    pub(crate) async fn read(&self, path: &Path) -> Result<(String, Arc<[u8]>), PluginError> {
        let failed = |source| PluginError::Read {
            path: path.to_path_buf(),
            source,
        };
        // The stamp is taken before reading: a change during the read shows at the next call.
        let stamp = Stamp::of(&tokio::fs::metadata(path).await.map_err(failed)?);
        if let Some(seen) = lock(&self.seen).get(path)
            && seen.stamp == stamp
        {
            return Ok((seen.digest.clone(), seen.wasm.clone()));
        }
        let owned = path.to_path_buf();
        let wasm: Arc<[u8]> =
            tokio::task::spawn_blocking(move || read_at_most(&owned, MAX_PLUGIN_FILE_BYTES))
                .await
                .map_err(std::io::Error::other)
                .and_then(|read| read)
                .map_err(failed)?
                .into();
        let digest = cache::sha256_hex(&wasm);
        self.hashed.fetch_add(1, Ordering::Relaxed);
        lock(&self.seen).insert(
            path.to_path_buf(),
            Seen {
                stamp,
                digest: digest.clone(),
                wasm: wasm.clone(),
            },
        );
        Ok((digest, wasm))
    }

    /// How many times a file was read and hashed.
    pub(crate) fn hashed(&self) -> u64 {
        self.hashed.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_file_is_hashed_again_only_when_it_changed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("p.wasm");
        std::fs::write(&path, b"first").expect("write");
        let files = FileDigests::default();
        let (d1, w1) = files.read(&path).await.expect("read");
        let (d2, _) = files.read(&path).await.expect("read");
        assert_eq!(
            (d1.as_str(), &w1[..], files.hashed()),
            (d2.as_str(), &b"first"[..], 1)
        );
        std::fs::write(&path, b"second, longer").expect("rewrite");
        let (d3, w3) = files.read(&path).await.expect("read");
        assert_ne!(d3, d1);
        assert_eq!((&w3[..], files.hashed()), (&b"second, longer"[..], 2));
        assert!(files.read(&dir.path().join("missing.wasm")).await.is_err());
    }
}
