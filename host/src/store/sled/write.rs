//! Writes: what goes into the log and the pending table, and the room on the disk each write
//! needs first.

use std::path::Path;
use std::sync::atomic::Ordering;

use super::keys::{FIRST_AT, record_key};
use super::wal::Segment;
use super::{Shared, lock};
use crate::store::{RecordKey, RunSummary, StoreError};

/// Free space a write leaves to sled beyond its own bytes: a log segment (sled's default
/// segment size, which weft keeps) that sled may start writing at any time.
const HEADROOM: u64 = 512 << 10;

/// The most a store writes between two looks at the free space of its disk.
const RECHECK_BYTES: u64 = 16 << 20;

/// What the disk holding `dir` has free beyond `need` bytes, or [`StoreError::DiskFull`] when
/// it has less; `None` when the disk cannot tell.
fn room_left(dir: &Path, need: u64) -> Result<Option<u64>, StoreError> {
    let Ok(fs) = rustix::fs::statvfs(dir) else {
        return Ok(None);
    };
    let free = fs.f_bavail.saturating_mul(fs.f_frsize);
    if free < need {
        return Err(StoreError::DiskFull(format!(
            "{} KiB free, and writing needs {} KiB",
            free >> 10,
            need.div_ceil(1 << 10)
        )));
    }
    Ok(Some(free - need))
}

/// Refuses a write of `bytes` into the database in `dir`, as [`Shared::room`] does, when its
/// disk lacks room for them and [`HEADROOM`]: for the writes of a store not open yet (the
/// replay of its log).
pub(super) fn check_room(dir: &Path, bytes: usize) -> Result<(), StoreError> {
    room_left(dir, (bytes as u64).saturating_add(HEADROOM)).map(|_| ())
}

impl Shared {
    /// Writes `bytes`, log entries taken from the pending writes, to `segment`; puts them back
    /// when that fails, so a later write has them.
    pub(super) fn write_unwritten(
        &self,
        segment: &mut Segment,
        mut bytes: Vec<u8>,
    ) -> Result<(), StoreError> {
        let written = segment.write(&mut bytes);
        match written {
            Ok(()) => self.pending.recycle(bytes),
            Err(_) => self.pending.restore_unwritten(bytes),
        }
        written
    }

    /// Logs `writes` together, once the disk has room for them; they are durable after the
    /// next [`Store::sync`](crate::store::Store::sync).
    pub(super) fn put(&self, writes: Vec<(Vec<u8>, &[u8])>) -> Result<(), StoreError> {
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
    pub(super) fn room(&self, bytes: usize) -> Result<(), StoreError> {
        let need = (bytes as u64).saturating_add(HEADROOM);
        // A write's own overhead in sled's log (key, header), beyond the value.
        let bytes = (bytes as u64).saturating_add(256);
        // Take `bytes` from the budget left by the last look at the disk, if it covers them.
        let covered = self
            .unchecked
            .try_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                left.checked_sub(bytes)
            })
            .is_ok();
        if covered {
            return Ok(());
        }
        match room_left(&self.dir, need) {
            Ok(Some(left)) => {
                self.unchecked
                    .store((left / 8).min(RECHECK_BYTES), Ordering::Release);
                Ok(())
            }
            Ok(None) => Ok(()), // cannot tell: sled reports what happens
            Err(e) => {
                self.unchecked.store(0, Ordering::Release);
                Err(e)
            }
        }
    }

    /// The key of run `id`'s record at `at`; refused at [`FIRST_AT`], where the run's first
    /// value is, which no record's key reaches (a record's seq is at least 1).
    pub(super) fn record_key(id: &str, at: RecordKey) -> Result<Vec<u8>, StoreError> {
        if at == FIRST_AT {
            return Err(StoreError::Backend(format!(
                "run {id}: a record cannot be stored at {at:?}, where the run's first state is \
                 kept; this is a bug in weft, please report it"
            )));
        }
        Ok(record_key(id, at))
    }

    /// The bytes of summary `s`, as the store keeps them (JSON).
    pub(super) fn summary_bytes(s: &RunSummary) -> Result<Vec<u8>, StoreError> {
        serde_json::to_vec(s).map_err(|e| StoreError::Backend(e.to_string()))
    }
}
