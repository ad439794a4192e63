//! Deleting ended runs and giving their room back: each run's keys removed from sled in one
//! batch, the blobs no run names removed, and values files that hold mostly deleted chunks
//! rewritten (their live chunks copied to the current file, their refs moved, the file
//! removed).
//!
//! A run is deleted only once none of its writes is pending (a checkpoint has moved them into
//! sled and retired the log segments that held them), so no replay of the log can bring a
//! deleted key back; the batch is atomic, so a crash leaves the run whole or gone. A moved
//! chunk's old file is removed only once sled durably holds the refs to its new place.

use std::collections::{HashMap, HashSet};

use sled::Batch;

use super::keys::{
    BASE, DEFINITION, FIRST, RECORD, SNAPSHOT, SUMMARY, USES, key, listing_key, uses_key,
};
use super::values;
use super::{Shared, lock, split_first};
use crate::store::json::from_stored;
use crate::store::{ENDED, PluginsOf, Reclaimed, RunSummary, StoreError};

/// A values file of at least this many bytes whose live chunks are less than half of it is
/// rewritten; a smaller one is left until it grows or empties (then it is removed).
const COMPACT_MIN_BYTES: u64 = 1 << 20;

/// The key of the marker, in sled's default tree, that says every run is in the index of runs
/// by definition ([`USES`]).
const USES_INDEXED_KEY: &[u8] = b"weft-uses-indexed";

impl Shared {
    /// [`Store::delete_ended`](crate::store::Store::delete_ended): the runs of `ids` that are
    /// stored and ended, each removed in one batch, sled flushed once at the end.
    pub(super) fn delete_ended(&self, ids: &[&str]) -> Result<Vec<String>, StoreError> {
        let mut deleted = Vec::new();
        let mut checkpointed = false;
        for id in ids {
            if self.is_pending(id) {
                if checkpointed {
                    // Written since the checkpoint below: not a run left alone for long.
                    continue;
                }
                self.checkpoint_all()?;
                checkpointed = true;
            }
            // No checkpoint moves a frozen table into sled meanwhile.
            let _checkpointing = lock(&self.checkpointing);
            if self.is_pending(id) {
                continue;
            }
            let Some(summary) = self.stored_summary(id)? else {
                continue;
            };
            if !ENDED.contains(&summary.status) {
                continue;
            }
            let batch = self.deletion(&summary)?;
            self.data.apply_batch(batch).map_err(|e| self.failed(e))?;
            deleted.push((*id).to_owned());
        }
        if !deleted.is_empty() {
            self.db.flush().map_err(|e| self.failed(e))?;
            self.db_file.sync(&self.dir)?;
        }
        Ok(deleted)
    }

    /// Checkpoints until nothing is pending, or twice.
    fn checkpoint_all(&self) -> Result<(), StoreError> {
        for _ in 0..2 {
            if self.pending.is_empty() {
                break;
            }
            self.checkpoint()?;
        }
        Ok(())
    }

    /// Whether any write of run `id` is still pending (its summary, snapshot or a record).
    fn is_pending(&self, id: &str) -> bool {
        let records = key(RECORD, id);
        self.pending.get(&key(SUMMARY, id)).is_some()
            || self.pending.get(&key(SNAPSHOT, id)).is_some()
            || !self.pending.range(&records, &records).is_empty()
    }

    /// Run `id`'s summary as sled holds it.
    fn stored_summary(&self, id: &str) -> Result<Option<RunSummary>, StoreError> {
        let Some(v) = self
            .data
            .get(key(SUMMARY, id))
            .map_err(|e| self.failed(e))?
        else {
            return Ok(None);
        };
        from_stored(&v).map(Some).map_err(|e| StoreError::Corrupt {
            key: format!("summary of {id}"),
            message: e.to_string(),
        })
    }

    /// The batch that removes every key of the run of `summary`.
    fn deletion(&self, summary: &RunSummary) -> Result<Batch, StoreError> {
        let id = summary.run_id.as_str();
        let mut batch = Batch::default();
        for kind in [SUMMARY, SNAPSHOT, FIRST, BASE, DEFINITION] {
            batch.remove(key(kind, id));
        }
        batch.remove(listing_key(summary.created_at, id));
        for (k, _) in super::listing::tag_entries(summary) {
            batch.remove(k);
        }
        for k in self.data.scan_prefix(key(RECORD, id)).keys() {
            batch.remove(k.map_err(|e| self.failed(e))?);
        }
        match self.definition_digest(id) {
            Ok(Some(digest)) => batch.remove(uses_key(&digest, id)),
            // Its first value does not read: its entry in the index is looked for.
            _ => {
                for k in self.data.scan_prefix([USES]).keys() {
                    let k = k.map_err(|e| self.failed(e))?;
                    if k.ends_with(id.as_bytes()) && is_uses_key_of(&k, id) {
                        batch.remove(k);
                    }
                }
            }
        }
        Ok(batch)
    }

    /// The digest of run `id`'s definition, as its first value (or, written before format 4,
    /// a key of its own) names it.
    fn definition_digest(&self, id: &str) -> Result<Option<String>, StoreError> {
        if let Some(v) = self.first(id)? {
            return Ok(Some(split_first(id, &v)?.0.to_owned()));
        }
        Ok(self
            .get(DEFINITION, id)?
            .map(|d| String::from_utf8_lossy(&d).into_owned()))
    }

    /// Indexes every run by its definition ([`USES`]) unless the database is marked as indexed:
    /// for a database written before format 10, once, when it opens (after the log's replay).
    pub(super) fn index_uses(&self) -> Result<(), StoreError> {
        if self
            .db
            .get(USES_INDEXED_KEY)
            .map_err(|e| self.failed(e))?
            .is_some()
        {
            return Ok(());
        }
        let mut ids = Vec::new();
        for k in self.data.scan_prefix([SUMMARY]).keys() {
            let k = k.map_err(|e| self.failed(e))?;
            if let Some(id) = k.get(5..).and_then(|id| std::str::from_utf8(id).ok()) {
                ids.push(id.to_owned());
            }
        }
        for (k, _) in self.pending.range(&[SUMMARY], &[SUMMARY]) {
            if let Some(id) = k.get(5..).and_then(|id| std::str::from_utf8(id).ok()) {
                ids.push(id.to_owned());
            }
        }
        for id in ids {
            if let Some(digest) = self.definition_digest(&id)? {
                self.data
                    .insert(uses_key(&digest, &id), &[][..])
                    .map_err(|e| self.failed(e))?;
            }
        }
        self.data.flush().map_err(|e| self.failed(e))?;
        self.db
            .insert(USES_INDEXED_KEY, &b"1"[..])
            .map_err(|e| self.failed(e))?;
        self.db.flush().map_err(|e| self.failed(e))?;
        Ok(())
    }

    /// [`Store::collect_garbage`](crate::store::Store::collect_garbage): the blobs no run
    /// names, then the values files.
    pub(super) fn collect_garbage(&self, plugins_of: &PluginsOf) -> Result<Reclaimed, StoreError> {
        let mut reclaimed = self.collect_blobs(plugins_of)?;
        reclaimed.bytes += self.compact_values()?;
        Ok(reclaimed)
    }

    /// Removes the blob files that are neither the definition of a stored run nor a component
    /// such a definition names. Holds off every run's creation meanwhile (which stores its
    /// blobs before the run that names them).
    fn collect_blobs(&self, plugins_of: &PluginsOf) -> Result<Reclaimed, StoreError> {
        let _creating = self
            .blob_guard
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let stored = self.blobs.list()?;
        let mut named = HashSet::new();
        for (digest, _) in &stored {
            if self.is_used(digest)? {
                named.insert(digest.clone());
                if let Some(bytes) = self.blobs.get(digest)? {
                    named.extend(plugins_of(&bytes)?);
                }
            }
        }
        let mut reclaimed = Reclaimed::default();
        for (digest, size) in stored {
            if !named.contains(&digest) {
                self.blobs.remove(&digest)?;
                reclaimed.blobs += 1;
                reclaimed.bytes += size;
            }
        }
        Ok(reclaimed)
    }

    /// Whether any stored run follows the definition of `digest`.
    fn is_used(&self, digest: &str) -> Result<bool, StoreError> {
        let prefix = key(USES, digest);
        if !self.pending.range(&prefix, &prefix).is_empty() {
            return Ok(true);
        }
        match self.data.scan_prefix(&prefix).keys().next() {
            Some(k) => k.map(|_| true).map_err(|e| self.failed(e)),
            None => Ok(false),
        }
    }

    /// Rewrites the values files whose live chunks are less than half of them (the current
    /// one too, once it is [`COMPACT_MIN_BYTES`]: appends move on to a new file first) and
    /// removes those that hold none; returns the bytes given back.
    fn compact_values(&self) -> Result<u64, StoreError> {
        let _checkpointing = lock(&self.checkpointing);
        let mut live: HashMap<u32, u64> = HashMap::new();
        for kv in self.data.scan_prefix([RECORD]) {
            let (_, v) = kv.map_err(|e| self.failed(e))?;
            if let Some((number, _, len)) = values::parse_ref(&v) {
                *live.entry(number).or_default() += u64::from(len);
            }
        }
        let current = self.values.current();
        let mut freed = 0;
        for (number, size) in self.values.files()? {
            let held = live.get(&number).copied().unwrap_or(0);
            let wasteful = size >= COMPACT_MIN_BYTES && held.saturating_mul(2) < size;
            if number == current {
                if !wasteful {
                    continue;
                }
                self.values.start_next()?;
            }
            if held == 0 {
                freed += self.values.remove(number)?;
            } else if wasteful {
                freed += self.move_values(number)?.saturating_sub(held);
            }
        }
        Ok(freed)
    }

    /// Copies the chunks values file `number` holds to the current file, points their refs
    /// there, and removes the file once sled holds the new refs durably; returns its size.
    fn move_values(&self, number: u32) -> Result<u64, StoreError> {
        let mut moving = Vec::new();
        let mut bytes = Vec::new();
        for kv in self.data.scan_prefix([RECORD]) {
            let (k, v) = kv.map_err(|e| self.failed(e))?;
            if let Some((n, _, _)) = values::parse_ref(&v)
                && n == number
            {
                let start = bytes.len();
                bytes.extend_from_slice(&self.values.resolve(&k, &v)?);
                moving.push((k, start, bytes.len() - start));
            }
        }
        let (to, at) = self.values.append(&bytes)?;
        let mut batch = Batch::default();
        for (k, start, len) in moving {
            batch.insert(k, &values::ref_to(to, at + start as u64, len)[..]);
        }
        {
            // No read is between a ref it read and the bytes the ref names.
            let _moving = self.values.moving();
            self.data.apply_batch(batch).map_err(|e| self.failed(e))?;
        }
        self.db.flush().map_err(|e| self.failed(e))?;
        self.db_file.sync(&self.dir)?;
        self.values.remove(number)
    }
}

/// Whether `k`, a key of the index of runs by definition, is run `id`'s.
fn is_uses_key_of(k: &[u8], id: &str) -> bool {
    let Some(len) = k.get(1..5).and_then(|l| l.try_into().ok()) else {
        return false;
    };
    let len = u32::from_be_bytes(len) as usize;
    k.get(5 + len..) == Some(id.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::super::keys::{self, FIRST_AT, record_key};
    use super::*;
    use crate::engine::RunStatus;
    use crate::store::sled::SledStore;
    use crate::store::{Definition, NewRun, Store};

    /// Stores run `id` with `status` and `records` records of `size` bytes each.
    fn create(store: &SledStore, id: &str, status: RunStatus, records: u64, size: usize) {
        let summary = RunSummary {
            run_id: id.into(),
            workflow_id: "w".into(),
            status: RunStatus::Running,
            created_at: 1,
            updated_at: 1,
            tags: Default::default(),
        };
        let definition = Definition::new(format!("{{\"w\":\"{id}\"}}").into_bytes());
        let run = NewRun {
            summary: &summary,
            definition: &definition,
            plugins: &[],
            base: b"{}",
            fresh_id: true,
        };
        store.create_run(run).expect("create");
        for i in 1..=records {
            store.append(id, (i, 0), &vec![b'x'; size]).expect("append");
        }
        store
            .put_summary(&RunSummary { status, ..summary })
            .expect("summary");
    }

    fn values_bytes(store: &SledStore) -> u64 {
        store
            .shared
            .values
            .files()
            .expect("files")
            .iter()
            .map(|(_, s)| s)
            .sum()
    }

    #[test]
    fn deleted_runs_leave_no_key_and_their_room_is_given_back() {
        let dir = tempfile::tempdir().expect("temp dir");
        let home = dir.path().join("home");
        let store = SledStore::open(&home, 8).expect("open");
        for i in 0..8 {
            // Each run's records are checkpointed into a chunk of its own.
            create(&store, &format!("old-{i}"), RunStatus::Success, 4, 100_000);
            Store::checkpoint(&store).expect("checkpoint");
        }
        create(&store, "live", RunStatus::Suspended, 4, 100_000);
        Store::checkpoint(&store).expect("checkpoint");
        let before = values_bytes(&store);
        let ids: Vec<String> = (0..8)
            .map(|i| format!("old-{i}"))
            .chain(["live".into()])
            .collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let deleted = store.delete_ended(&ids).expect("delete");
        assert_eq!(deleted.len(), 8, "{deleted:?}");
        assert!(!deleted.contains(&"live".to_string()));
        let data = &store.shared.data;
        for id in &ids[..8] {
            for kind in [SUMMARY, SNAPSHOT, RECORD] {
                assert_eq!(data.scan_prefix(key(kind, id)).count(), 0, "{id}");
            }
            assert_eq!(data.get(record_key(id, FIRST_AT)).expect("get"), None);
        }
        assert_eq!(data.scan_prefix([keys::CREATED]).count(), 1);
        let reclaimed = store.collect_garbage(&|_| Ok(Vec::new())).expect("collect");
        assert_eq!(reclaimed.blobs, 8, "the deleted runs' definitions");
        let after = values_bytes(&store);
        assert!(
            after < before / 4,
            "values files: {before} bytes before, {after} after"
        );
        // What stays reads back, also once reopened.
        let check = |store: &SledStore| {
            assert_eq!(store.records("live", (0, 0)).expect("records").len(), 4);
            assert!(store.definition("live").expect("definition").is_some());
            assert_eq!(store.summary("old-0").expect("summary"), None);
            assert_eq!(store.runs().expect("runs").len(), 1);
        };
        check(&store);
        drop(store);
        let store = SledStore::open(&home, 8).expect("open again");
        check(&store);
    }

    #[test]
    fn a_run_whose_writes_are_pending_is_checkpointed_first_and_one_not_ended_is_kept() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SledStore::open(&dir.path().join("home"), 8).expect("open");
        create(&store, "ended", RunStatus::Failed, 2, 10);
        create(&store, "running", RunStatus::Running, 2, 10);
        let deleted = store
            .delete_ended(&["ended", "running", "unknown"])
            .expect("delete");
        assert_eq!(deleted, vec!["ended".to_string()]);
        assert_eq!(store.summary("ended").expect("summary"), None);
        assert!(store.summary("running").expect("summary").is_some());
    }

    #[test]
    fn a_database_without_the_index_of_definitions_is_indexed_when_it_opens() {
        let dir = tempfile::tempdir().expect("temp dir");
        let home = dir.path().join("home");
        let store = SledStore::open(&home, 8).expect("open");
        create(&store, "a", RunStatus::Success, 1, 10);
        Store::checkpoint(&store).expect("checkpoint");
        for k in store.shared.data.scan_prefix([USES]).keys() {
            store.shared.data.remove(k.expect("key")).expect("remove");
        }
        store.shared.db.remove(USES_INDEXED_KEY).expect("unmark");
        drop(store);
        let store = SledStore::open(&home, 8).expect("open again");
        // Its definition is named again: not collected.
        let reclaimed = store.collect_garbage(&|_| Ok(Vec::new())).expect("collect");
        assert_eq!(reclaimed.blobs, 0);
        assert!(store.definition("a").expect("definition").is_some());
    }
}
