//! The listing of runs a page at a time: an index of every run in creation order
//! (`keys::CREATED`), written with the run's creation and read backwards from a page's cursor,
//! so a page reads its own runs and no others, however many are stored. Each entry holds the
//! run's workflow id: a page of one workflow's runs reads the index entries of the runs it
//! passes over, but no summary of theirs. One index, not one more per workflow: each is an
//! insert more per run at every checkpoint. A database written before the index existed is
//! indexed once, when it opens. A tagged run is also in one index per tag (`keys::TAGGED`), in
//! the same order, so a page of a tag reads the runs that carry it and no others.

use sled::{Db, Tree};

use super::Shared;
use super::error::sled_error;
use super::keys::{
    CREATED, SUMMARY, index_end, indexed_key, listing_key, split_indexed_key, tag_prefix,
};
use super::wal::Entry;
use crate::store::json::from_stored;
use crate::store::{RunSummary, RunsPage, StoreError};

/// The key, in sled's default tree, that marks the listing's indexes as holding every run.
const INDEXED_KEY: &[u8] = b"weft-runs-indexed";

/// The most index entries a page reads at once while it passes over other workflows' runs.
const SCAN_BATCH: usize = 4096;

/// The index entry that lists run `s`: its key and value.
pub(super) fn index_entry(s: &RunSummary) -> (Vec<u8>, &[u8]) {
    (
        listing_key(s.created_at, &s.run_id),
        s.workflow_id.as_bytes(),
    )
}

/// The entries of the index of runs by tag that list run `s`, one per tag.
pub(super) fn tag_entries(s: &RunSummary) -> impl Iterator<Item = (Vec<u8>, &[u8])> {
    s.tags.iter().map(|(k, v)| {
        (
            indexed_key(&tag_prefix(k, v), s.created_at, &s.run_id),
            s.workflow_id.as_bytes(),
        )
    })
}

impl Shared {
    /// A page of the listing: the index read backwards from the cursor (in sled and among the
    /// pending writes, merged), entries of other workflows passed over, then each listed run's
    /// summary.
    pub(super) fn runs_page(&self, page: &RunsPage<'_>) -> Result<Vec<RunSummary>, StoreError> {
        self.quietly(|| {
            // A page of a tag reads that tag's index; of none, the index of every run.
            let prefix = match page.tags.first() {
                Some((k, v)) => tag_prefix(k, v),
                None => vec![CREATED],
            };
            let mut before = match page.after {
                Some((at, id)) => indexed_key(&prefix, at, id),
                None => index_end(&prefix),
            };
            let mut out = Vec::new();
            let mut batch = page.limit.max(1);
            while out.len() < page.limit {
                let entries = self.index_before(&prefix, &before, batch)?;
                let ended = entries.len() < batch;
                for (k, workflow) in &entries {
                    if out.len() < page.limit
                        && page
                            .workflow
                            .is_none_or(|w| w.as_bytes() == workflow.as_slice())
                    {
                        let summary = self.indexed_summary(&prefix, k)?;
                        if summary.has_tags(page.tags) {
                            out.push(summary);
                        }
                    }
                }
                match entries.last() {
                    Some((k, _)) if !ended => before = k.clone(),
                    _ => break,
                }
                batch = batch.saturating_mul(2).min(SCAN_BATCH.max(page.limit));
            }
            Ok(out)
        })
    }

    /// The summary of the run that index entry `k` (under `prefix`) lists.
    fn indexed_summary(&self, prefix: &[u8], k: &[u8]) -> Result<RunSummary, StoreError> {
        let corrupt = |message: &str| StoreError::Corrupt {
            key: String::from_utf8_lossy(k).into_owned(),
            message: message.into(),
        };
        let (_, id) =
            split_indexed_key(prefix, k).ok_or_else(|| corrupt("not a key of the runs' index"))?;
        let v = self
            .get(SUMMARY, id)?
            .ok_or_else(|| corrupt("the index lists a run that has no summary"))?;
        from_stored(&v).map_err(|e| corrupt(&e.to_string()))
    }

    /// The last `n` entries under `prefix` of an index before key `before`, last first, from
    /// sled and the pending writes.
    fn index_before(
        &self,
        prefix: &[u8],
        before: &[u8],
        n: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        let mut entries = std::collections::BTreeMap::new();
        for kv in self.data.range(prefix..before).rev().take(n) {
            let (k, v) = kv.map_err(|e| self.failed(e))?;
            entries.insert(k.to_vec(), v.to_vec());
        }
        // The pending writes are newer than sled's: they win.
        entries.extend(self.pending.range_back(prefix, Some(before), n));
        Ok(entries.into_iter().rev().take(n).collect())
    }
}

/// Indexes every run of `data` for the listing, unless the database is marked as indexed
/// already; marks it once it is (after a flush, so a crash halfway indexes again). Runs before
/// the log's replay has put everything in sled, so every run is seen.
pub(super) fn index_runs(dir: &std::path::Path, db: &Db, data: &Tree) -> Result<(), StoreError> {
    let failed = |e| sled_error(dir, e);
    if db.get(INDEXED_KEY).map_err(failed)?.is_some() {
        return Ok(());
    }
    for kv in data.scan_prefix([SUMMARY]) {
        let (k, v) = kv.map_err(failed)?;
        let s: RunSummary = from_stored(&v).map_err(|e| StoreError::Corrupt {
            key: String::from_utf8_lossy(&k).into_owned(),
            message: e.to_string(),
        })?;
        let (key, value) = index_entry(&s);
        data.insert(key, value).map_err(failed)?;
    }
    data.flush().map_err(failed)?;
    db.insert(INDEXED_KEY, &b"1"[..]).map_err(failed)?;
    db.flush().map_err(failed)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sled::SledStore;
    use crate::store::{Definition, NewRun, Store};

    /// Stores run `id` of workflow `w`, made at `at`.
    fn create(store: &SledStore, id: &str, w: &str, at: i64) {
        let summary = RunSummary {
            run_id: id.into(),
            workflow_id: w.into(),
            status: crate::engine::RunStatus::Running,
            created_at: at,
            updated_at: at,
            tags: Default::default(),
        };
        let definition = Definition::new(b"{}".to_vec());
        let run = NewRun {
            summary: &summary,
            definition: &definition,
            plugins: &[],
            base: b"{}",
            fresh_id: false,
        };
        store.create_run(run).expect("create");
    }

    /// Every page of `limit` runs of `workflow`, as ids.
    fn pages(store: &SledStore, workflow: Option<&str>, limit: usize) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        let mut last: Option<(i64, String)> = None;
        loop {
            let page = RunsPage {
                workflow,
                after: last.as_ref().map(|(at, id)| (*at, id.as_str())),
                tags: &[],
                limit,
            };
            let runs = store.runs_page(&page).expect("page");
            if runs.is_empty() {
                return out;
            }
            last = runs.last().map(|r| (r.created_at, r.run_id.clone()));
            out.push(runs.into_iter().map(|r| r.run_id).collect());
        }
    }

    #[test]
    fn pages_come_from_the_log_and_from_sled_alike_and_an_old_database_is_indexed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let home = dir.path().join("home");
        let store = SledStore::open(&home, 8).expect("open");
        for (id, w, at) in [("a", "x", 1), ("b", "y", 2), ("c", "x", 2), ("d", "x", 3)] {
            create(&store, id, w, at);
        }
        let all = vec![vec!["d", "c"], vec!["b", "a"]];
        let of_x = vec![vec!["d", "c"], vec!["a"]];
        assert_eq!(pages(&store, None, 2), all, "from the log");
        assert_eq!(pages(&store, Some("x"), 2), of_x);
        Store::checkpoint(&store).expect("checkpoint");
        assert_eq!(pages(&store, None, 2), all, "from sled");
        // Half in sled, half in the log.
        create(&store, "e", "y", 0);
        assert_eq!(pages(&store, Some("y"), 1), vec![vec!["b"], vec!["e"]]);
        assert_eq!(pages(&store, Some("none"), 5), Vec::<Vec<String>>::new());
        // A database from before the index: its entries gone and its mark too.
        Store::checkpoint(&store).expect("checkpoint");
        let data = &store.shared.data;
        for k in data.scan_prefix([CREATED]).keys() {
            data.remove(k.expect("key")).expect("remove");
        }
        store.shared.db.remove(INDEXED_KEY).expect("unmark");
        assert!(pages(&store, None, 3).is_empty(), "nothing indexed");
        drop(store);
        let store = SledStore::open(&home, 8).expect("open again");
        assert_eq!(
            pages(&store, None, 3),
            vec![vec!["d", "c", "b"], vec!["a", "e"]]
        );
        assert_eq!(pages(&store, Some("x"), 5), vec![vec!["d", "c", "a"]]);
    }

    #[test]
    fn a_page_of_one_workflow_passes_over_many_runs_of_others() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SledStore::open(&dir.path().join("home"), 8).expect("open");
        create(&store, "rare-old", "rare", 1);
        for i in 0..10_000 {
            create(&store, &format!("common-{i:05}"), "common", 10 + i);
        }
        create(&store, "rare-new", "rare", 20_000);
        Store::checkpoint(&store).expect("checkpoint");
        assert_eq!(
            pages(&store, Some("rare"), 1),
            vec![vec!["rare-new"], vec!["rare-old"]]
        );
        let first = pages(&store, Some("common"), 4000);
        assert_eq!(
            first.iter().map(Vec::len).collect::<Vec<_>>(),
            [4000, 4000, 2000]
        );
        assert_eq!(first[0][0], "common-09999");
    }
}
