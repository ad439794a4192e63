//! Writes that are in the log but not yet in sled, read before sled's own entries.
//!
//! Two tables: the active one takes new writes; a checkpoint freezes it (a new active table
//! starts) and moves the frozen one into sled, then drops it. A read looks in the active table,
//! then the frozen one, then sled, so it always sees the latest write of a key.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::wal;
use crate::store::StoreError;

/// The most room a new buffer of unwritten log entries starts with: one sync that carried a
/// very large value does not make every later buffer as large.
const UNWRITTEN_ROOM: usize = 1 << 20;

/// Keys to values, in sled's key order.
pub(super) type Table = BTreeMap<Vec<u8>, Vec<u8>>;

/// The writes sled does not hold yet.
pub(super) struct Pending {
    state: Mutex<State>,
    /// Log bytes in the active table at which a checkpoint is due.
    due_at: usize,
}

impl Default for Pending {
    fn default() -> Self {
        Pending::new(usize::MAX)
    }
}

#[derive(Default)]
struct State {
    active: Table,
    frozen: Option<Arc<Table>>,
    /// Log entries of the active table's writes that the segment does not hold yet.
    unwritten: Vec<u8>,
    /// Bytes logged into the active table since it started.
    logged: usize,
    /// An emptied buffer of log entries, written and given back ([`Pending::recycle`]), for
    /// the entries logged next.
    spare: Vec<u8>,
}

impl State {
    /// Takes the unwritten log entries; those logged next go into the spare buffer, or a new
    /// one of the same size (up to [`UNWRITTEN_ROOM`]), so that one sync's worth of them does
    /// not grow it again and again.
    fn take_unwritten(&mut self) -> Vec<u8> {
        let room = match std::mem::take(&mut self.spare) {
            spare if spare.capacity() > 0 => spare,
            _ => Vec::with_capacity(self.unwritten.len().min(UNWRITTEN_ROOM)),
        };
        std::mem::replace(&mut self.unwritten, room)
    }
}

impl Pending {
    /// Pending writes that call for a checkpoint once the active table holds `due_at` bytes of
    /// log entries.
    pub(super) fn new(due_at: usize) -> Self {
        Pending {
            state: Mutex::default(),
            due_at,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves whole entries behind (each write is one insert
        // and one append), so the state stays usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Logs and applies `writes` together (no checkpoint or sync sees some without the
    /// others); returns whether they made a checkpoint due.
    pub(super) fn put(&self, writes: Vec<(Vec<u8>, &[u8])>) -> Result<bool, StoreError> {
        // Values are copied before the lock is taken.
        let owned: Vec<(Vec<u8>, Vec<u8>)> = writes
            .into_iter()
            .map(|(key, value)| (key, value.to_vec()))
            .collect();
        let mut s = self.state();
        let before = s.unwritten.len();
        for (key, value) in &owned {
            if let Err(e) = wal::encode(&mut s.unwritten, key, value) {
                s.unwritten.truncate(before);
                return Err(e);
            }
        }
        let was = s.logged;
        s.logged += s.unwritten.len() - before;
        s.active.extend(owned);
        Ok(was < self.due_at && s.logged >= self.due_at)
    }

    /// The log entries not yet written to the segment; the caller writes them, then gives the
    /// buffer back ([`Pending::recycle`]).
    pub(super) fn take_unwritten(&self) -> Vec<u8> {
        self.state().take_unwritten()
    }

    /// Takes `table` into the active table as writes the log holds already (a log replayed on
    /// a full disk, kept in the log until a checkpoint has room to move it into sled).
    pub(super) fn hold(&self, table: Table, logged: usize) {
        let mut s = self.state();
        s.active.extend(table);
        s.logged += logged;
    }

    /// Keeps `written`, a buffer of log entries the segment holds now, emptied for the entries
    /// logged after the next take; one larger than [`UNWRITTEN_ROOM`] is dropped instead.
    pub(super) fn recycle(&self, mut written: Vec<u8>) {
        if written.capacity() <= UNWRITTEN_ROOM {
            written.clear();
            self.state().spare = written;
        }
    }

    /// Puts back entries taken with [`Pending::take_unwritten`] that could not be written,
    /// before any logged since.
    pub(super) fn restore_unwritten(&self, mut bytes: Vec<u8>) {
        let mut s = self.state();
        bytes.extend_from_slice(&s.unwritten);
        s.unwritten = bytes;
    }

    /// Starts a new active table, the old one frozen (see [`Pending::frozen`]), and returns the
    /// log entries of the frozen writes not yet written; `None` when a frozen table is still
    /// being checkpointed or nothing was written.
    pub(super) fn freeze(&self) -> Option<Vec<u8>> {
        let mut s = self.state();
        if s.frozen.is_some() || s.active.is_empty() {
            return None;
        }
        s.frozen = Some(Arc::new(std::mem::take(&mut s.active)));
        s.logged = 0;
        Some(s.take_unwritten())
    }

    /// The table frozen by [`Pending::freeze`], until [`Pending::thaw`].
    pub(super) fn frozen(&self) -> Option<Arc<Table>> {
        self.state().frozen.clone()
    }

    /// The frozen table is in sled: drop it.
    pub(super) fn thaw(&self) {
        self.state().frozen = None;
    }

    /// Whether there is nothing sled does not hold.
    pub(super) fn is_empty(&self) -> bool {
        let s = self.state();
        s.active.is_empty() && s.frozen.is_none()
    }

    /// The latest pending value of `key`.
    pub(super) fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let s = self.state();
        s.active
            .get(key)
            .or_else(|| s.frozen.as_ref().and_then(|f| f.get(key)))
            .cloned()
    }

    /// The pending entries from `from` on whose keys start with `prefix`, latest values, in key
    /// order.
    pub(super) fn range(&self, prefix: &[u8], from: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let s = self.state();
        let mut out = Table::new();
        for table in s.frozen.as_deref().into_iter().chain([&s.active]) {
            for (k, v) in table
                .range::<[u8], _>((std::ops::Bound::Included(from), std::ops::Bound::Unbounded))
            {
                if !k.starts_with(prefix) {
                    break;
                }
                out.insert(k.clone(), v.clone());
            }
        }
        out.into_iter().collect()
    }

    /// The last `limit` pending entries whose keys lie in `from..before` (`before` `None`: from
    /// `from` on), latest values, last first.
    pub(super) fn range_back(
        &self,
        from: &[u8],
        before: Option<&[u8]>,
        limit: usize,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        use std::ops::Bound;
        let s = self.state();
        let upper = before.map_or(Bound::Unbounded, Bound::Excluded);
        let mut out = Table::new();
        for table in s.frozen.as_deref().into_iter().chain([&s.active]) {
            for (k, v) in table
                .range::<[u8], _>((Bound::Included(from), upper))
                .rev()
                .take(limit)
            {
                out.insert(k.clone(), v.clone());
            }
        }
        out.into_iter().rev().take(limit).collect()
    }

    /// The last pending key that starts with `prefix`.
    pub(super) fn last_key(&self, prefix: &[u8]) -> Option<Vec<u8>> {
        let s = self.state();
        s.frozen
            .as_deref()
            .into_iter()
            .chain([&s.active])
            .filter_map(|t| {
                t.range::<[u8], _>((
                    std::ops::Bound::Included(prefix),
                    std::ops::Bound::Unbounded,
                ))
                .take_while(|(k, _)| k.starts_with(prefix))
                .last()
                .map(|(k, _)| k.clone())
            })
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys of the log entries in `bytes`, taken from a [`Pending`].
    fn logged_keys(mut bytes: Vec<u8>) -> Vec<Vec<u8>> {
        wal::seal(&mut bytes, 1);
        wal::decode(&bytes, 1)
            .entries
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    }

    fn put(p: &Pending, k: &str, v: &str) {
        p.put(vec![(k.as_bytes().to_vec(), v.as_bytes())])
            .expect("put");
    }

    #[test]
    fn the_latest_write_wins_across_the_frozen_and_active_tables() {
        let p = Pending::default();
        put(&p, "a1", "old");
        put(&p, "a2", "kept");
        let unwritten = p.freeze().expect("something to freeze");
        let frozen = p.frozen().expect("frozen");
        assert_eq!(frozen.len(), 2);
        let mut unwritten = unwritten;
        wal::seal(&mut unwritten, 1);
        assert_eq!(wal::decode(&unwritten, 1).entries.len(), 2);
        put(&p, "a1", "new");
        put(&p, "b1", "other");
        assert_eq!(p.get(b"a1").as_deref(), Some(&b"new"[..]));
        assert_eq!(p.get(b"a2").as_deref(), Some(&b"kept"[..]));
        let range: Vec<_> = p.range(b"a", b"a").into_iter().map(|(k, _)| k).collect();
        assert_eq!(range, vec![b"a1".to_vec(), b"a2".to_vec()]);
        assert_eq!(p.last_key(b"a"), Some(b"a2".to_vec()));
        // Only one frozen table at a time: the next freeze waits for the thaw.
        assert!(p.freeze().is_none());
        p.thaw();
        assert_eq!(p.get(b"a2"), None);
        assert!(p.freeze().is_some());
    }

    #[test]
    fn a_checkpoint_is_due_once_when_the_log_reaches_the_threshold() {
        let p = Pending::new(100);
        let value = [0u8; 40];
        let due: Vec<bool> = (0..4)
            .map(|i| p.put(vec![(vec![i], &value[..])]).expect("put"))
            .collect();
        // Each entry logs 8 + 4 + 1 + 40 = 53 bytes: the second crosses 100.
        assert_eq!(due, vec![false, true, false, false]);
        p.freeze().expect("frozen");
        assert!(!p.put(vec![(vec![9], &value[..])]).expect("put"));
        assert!(p.put(vec![(vec![10], &value[..])]).expect("put"));
    }

    #[test]
    fn unwritten_entries_put_back_come_before_later_ones() {
        let p = Pending::default();
        put(&p, "a", "1");
        let taken = p.take_unwritten();
        put(&p, "b", "2");
        p.restore_unwritten(taken);
        assert_eq!(
            logged_keys(p.take_unwritten()),
            vec![b"a".to_vec(), b"b".to_vec()]
        );
    }

    #[test]
    fn a_written_buffer_given_back_takes_the_entries_logged_after_the_next_take() {
        let p = Pending::default();
        put(&p, "a", "1");
        let written = p.take_unwritten();
        let place = written.as_ptr();
        p.recycle(written);
        put(&p, "b", "2");
        // Taking "b" leaves the given-back buffer in its place, empty.
        let taken = p.take_unwritten();
        put(&p, "c", "3");
        let reused = p.take_unwritten();
        assert_eq!(reused.as_ptr(), place);
        assert_eq!(logged_keys(reused), vec![b"c".to_vec()]);
        assert!(!taken.is_empty());
    }
}
