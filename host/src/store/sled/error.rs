//! sled's errors as the store's: a lock another process holds, a damaged database, a full disk.

use std::path::Path;

use super::Shared;
use super::quiet_panic::quietly;
use crate::store::StoreError;

/// The home of the database directory `dir`, as messages name it.
pub(super) fn home_of(dir: &Path) -> String {
    dir.parent().unwrap_or(dir).display().to_string()
}

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

/// The error of a sled operation on the database in `dir`.
pub(super) fn sled_error(dir: &Path, e: sled::Error) -> StoreError {
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

impl Shared {
    /// The error of a sled operation on this store.
    pub(super) fn failed(&self, e: sled::Error) -> StoreError {
        sled_error(&self.dir, e)
    }

    /// Runs a read of sled: sled panics on some damaged databases that it opened without an
    /// error (`cannot find pid N in view_for_key` in a scan of a truncated file), and such a
    /// panic is a damaged database too, refused as opening one is, not a crash.
    pub(super) fn quietly<T>(
        &self,
        read: impl FnOnce() -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        quietly(read).unwrap_or_else(|panic| {
            Err(StoreError::Damaged {
                home: home_of(&self.dir),
                dir: self.dir.display().to_string(),
                detail: format!("sled gave up reading it: {panic}"),
            })
        })
    }
}
