//! Reads: a run's entries, its records and its first value, from the pending writes and sled
//! (a chunk's records, in sled or in a values file), and the listing of runs.

use super::Shared;
use super::chunk;
use super::keys::{FIRST, FIRST_AT, RECORD, SUMMARY, key, parse_record_key, record_key};
use super::pending::Table;
use crate::store::json::from_stored;
use crate::store::{RecordKey, RunSummary, StoreError};

impl Shared {
    /// The latest value of a run's entry of `kind`: pending, or in sled.
    pub(super) fn get(&self, kind: u8, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.quietly(|| {
            let k = key(kind, id);
            if let Some(v) = self.pending.get(&k) {
                return Ok(Some(v));
            }
            Ok(self
                .data
                .get(&k)
                .map_err(|e| self.failed(e))?
                .map(|v| v.to_vec()))
        })
    }

    /// A run's records from `from` on: those in sled (a chunk that starts before `from` may
    /// hold some) and the pending ones.
    pub(super) fn records(
        &self,
        run_id: &str,
        from: RecordKey,
    ) -> Result<Vec<(RecordKey, Vec<u8>)>, StoreError> {
        self.quietly(|| {
            let _reading = self.values.reading();
            let prefix = key(RECORD, run_id);
            let start = record_key(run_id, from);
            let mut out = std::collections::BTreeMap::new();
            let mut add = |k: &[u8], v: &[u8]| -> Result<(), StoreError> {
                for (at, bytes) in self.stored_records(&prefix, k, v)? {
                    if at >= from && at != FIRST_AT {
                        out.insert(at, bytes);
                    }
                }
                Ok(())
            };
            if let Some(kv) = self
                .data
                .range(prefix.as_slice()..start.as_slice())
                .next_back()
            {
                let (k, v) = kv.map_err(|e| self.failed(e))?;
                add(&k, &v)?;
            }
            for kv in self.data.range(start.as_slice()..) {
                let (k, v) = kv.map_err(|e| self.failed(e))?;
                if !k.starts_with(&prefix) {
                    break;
                }
                add(&k, &v)?;
            }
            for (k, v) in self.pending.range(&prefix, &start) {
                add(&k, &v)?;
            }
            Ok(out.into_iter().collect())
        })
    }

    /// The records of the value stored under `k`, a key under the run's record `prefix`.
    fn stored_records(
        &self,
        prefix: &[u8],
        k: &[u8],
        v: &[u8],
    ) -> Result<Vec<(RecordKey, Vec<u8>)>, StoreError> {
        let corrupt = |message: &str| StoreError::Corrupt {
            key: String::from_utf8_lossy(k).into_owned(),
            message: message.into(),
        };
        let at = parse_record_key(prefix, k).ok_or_else(|| corrupt("not a record key"))?;
        let v = self.values.resolve(k, v)?;
        chunk::decode(at, &v).ok_or_else(|| corrupt("a chunk of records that does not read back"))
    }

    /// The key of a run's last record, pending or in sled.
    pub(super) fn last_record(&self, run_id: &str) -> Result<Option<RecordKey>, StoreError> {
        self.quietly(|| {
            let _reading = self.values.reading();
            let prefix = key(RECORD, run_id);
            let pending = self
                .pending
                .last_key(&prefix)
                .and_then(|k| parse_record_key(&prefix, &k));
            let stored = match self.data.scan_prefix(&prefix).next_back() {
                None => None,
                Some(kv) => {
                    let (k, v) = kv.map_err(|e| self.failed(e))?;
                    self.stored_records(&prefix, &k, &v)?
                        .last()
                        .map(|(at, _)| *at)
                }
            };
            // The first value sorts before every record: last only in a run that has none.
            Ok(pending.max(stored).filter(|at| *at != FIRST_AT))
        })
    }

    /// Run `id`'s first value: its record at [`FIRST_AT`], pending or at the head of its first
    /// chunk in sled (the chunk's other records left unread); under [`FIRST`] for a run written
    /// in format 4.
    pub(super) fn first(&self, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.quietly(|| {
            let k = record_key(id, FIRST_AT);
            if let Some(v) = self.pending.get(&k) {
                return Ok(Some(v));
            }
            let reading = self.values.reading();
            match self.data.get(&k).map_err(|e| self.failed(e))? {
                Some(v) => match chunk::first(FIRST_AT, &self.values.resolve(&k, &v)?) {
                    Some(first) => Ok(Some(first.to_vec())),
                    None => Err(StoreError::Corrupt {
                        key: format!("first state of {id}"),
                        message: "a chunk of records that does not read back".into(),
                    }),
                },
                None => {
                    drop(reading);
                    self.get(FIRST, id)
                }
            }
        })
    }

    /// Every run's summary, pending or in sled, newest first.
    pub(super) fn runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        self.quietly(|| {
            let mut summaries = Table::new();
            for kv in self.data.scan_prefix([SUMMARY]) {
                let (k, v) = kv.map_err(|e| self.failed(e))?;
                summaries.insert(k.to_vec(), v.to_vec());
            }
            summaries.extend(self.pending.range(&[SUMMARY], &[SUMMARY]));
            let mut out = Vec::new();
            for (k, v) in summaries {
                let s: RunSummary = from_stored(&v).map_err(|e| StoreError::Corrupt {
                    key: String::from_utf8_lossy(&k).into_owned(),
                    message: e.to_string(),
                })?;
                out.push(s);
            }
            out.sort_by(|a, b| {
                b.created_at
                    .cmp(&a.created_at)
                    .then(b.run_id.cmp(&a.run_id))
            });
            Ok(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::store::Store;
    use crate::store::sled::SledStore;
    use crate::store::sled::tests::{keys, record, summary};
    use crate::store::sled::wal;

    #[test]
    fn records_read_the_same_from_the_log_from_chunks_in_sled_and_after_reopening() {
        let dir = tempfile::tempdir().expect("temp dir");
        let home = dir.path().join("home");
        let store = SledStore::open(&home, 8).expect("open");
        store.put_summary(&summary("r")).expect("summary");
        store.put_summary(&summary("other")).expect("summary");
        for i in 1..=5 {
            store
                .append("r", (i, i as u32), &record(i))
                .expect("append");
            store.append("other", (i, 0), &record(i)).expect("append");
        }
        store.sync().expect("sync");
        let from_log = store.records("r", (0, 0)).expect("records");
        assert_eq!(keys(&from_log), vec![1, 2, 3, 4, 5]);
        // Into sled, as one chunk for each run.
        Store::checkpoint(&store).expect("checkpoint");
        assert!(store.shared.pending.is_empty());
        assert_eq!(store.records("r", (0, 0)).expect("records"), from_log);
        for i in 6..=7 {
            store
                .append("r", (i, i as u32), &record(i))
                .expect("append");
        }
        // From the middle of a chunk on, across sled and the log.
        let tail = store.records("r", (3, 3)).expect("records");
        assert_eq!(keys(&tail), vec![3, 4, 5, 6, 7]);
        assert_eq!(tail[0].1, record(3));
        assert_eq!(store.last_record("r").expect("last"), Some((7, 7)));
        assert_eq!(
            keys(&store.records("other", (0, 0)).expect("records")).len(),
            5
        );
        store.sync().expect("sync");
        drop(store);
        let store = SledStore::open(&home, 8).expect("open again");
        assert_eq!(
            keys(&store.records("r", (0, 0)).expect("records")),
            (1..=7).collect::<Vec<_>>()
        );
        assert_eq!(store.last_record("r").expect("last"), Some((7, 7)));
        assert_eq!(store.last_record("other").expect("last"), Some((5, 0)));
        assert_eq!(store.runs().expect("runs").len(), 2);
        // A clean close leaves no log behind.
        drop(store);
        assert!(wal::segments(&home.join("wal")).expect("list").is_empty());
    }
}
