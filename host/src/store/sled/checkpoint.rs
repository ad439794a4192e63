//! Checkpoints: the background thread that moves the pending writes into sled (a run's
//! records as one chunk, appended to the values files), flushes it, and retires the log
//! segments that held them.

use std::borrow::Cow;
use std::time::Duration;

use sled::Tree;

use super::chunk;
use super::keys::split_record_key;
use super::pending::Table;
use super::values::{self, Values};
use super::wal::{self, Segment};
use super::{Shared, lock};
use crate::store::{RecordKey, StoreError};

/// Log bytes after which a checkpoint is due.
pub(super) const CHECKPOINT_BYTES: usize = 4 << 20;

/// The largest buffer of chunks a checkpoint keeps for the next one; a checkpoint that carried
/// very large values does not hold their room for the store's lifetime.
const KEPT_CHUNK_BUFFER: usize = 16 << 20;

/// The free space a disk must have for a checkpoint to keep a finished segment as the spare.
const SPARE_ROOM: u64 = 256 << 20;

/// A checkpoint runs at least this often while anything is pending.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// Writes `table` into sled, each run's consecutive records as one chunk, which goes to the
/// values files (all of the table's chunks in one append and one sync) with only its ref in
/// sled, unless it is smaller than a ref is worth ([`values::INLINE_BELOW`]). One insert at a
/// time, not one batch: a batch holds sled's tree lock for all of its inserts, stalling every
/// read meanwhile, and nothing needs the writes to land together (a checkpoint cut short is
/// replayed from the log, whole). The chunks are gathered in `appended`, emptied first.
pub(super) fn write_table(
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

impl Shared {
    /// The checkpoint thread: a checkpoint whenever one is due, and at least every
    /// [`CHECKPOINT_EVERY`], until the store is dropped.
    pub(super) fn checkpoints(&self) {
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
    pub(super) fn checkpoint(&self) -> Result<(), StoreError> {
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
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::store::Store;
    use crate::store::sled::SledStore;

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
}
