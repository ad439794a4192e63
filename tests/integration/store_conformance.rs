//! What every store backend does alike, written once over the `Store` trait and run on each by
//! `store_tests!`: `store_conformance::sled::NAME` on a sled store in a fresh home,
//! `store_conformance::postgres::NAME` on a `PgStore` in a fresh schema of the tests' own
//! PostgreSQL cluster (in every mode, not only with `WEFT_TEST_BACKEND=postgres`; skipped with a
//! note when PostgreSQL is not installed, see `backend.rs`). Then what only a store shared by
//! several processes does: claims, releases and fencing between two `PgStore` values on one
//! database.

use weft::RunStatus;
use weft::internal::{Definition, NewRun, PgStore, RecordKey, RunsPage, SledStore, Store};
use weft::{RunSummary, StoreError};

use crate::backend;

/// Defines, for each named conformance function (`fn NAME(store: &dyn Store)`), a test on each
/// backend.
macro_rules! store_tests {
    ($($name:ident),* $(,)?) => {
        mod sled {
            $(
                #[test]
                fn $name() {
                    let (_dir, store) = super::sled_store();
                    super::$name(&store);
                }
            )*
        }

        mod postgres {
            $(
                #[test]
                fn $name() {
                    let Some(store) = super::pg_store() else {
                        return;
                    };
                    super::$name(&store);
                }
            )*
        }
    };
}
/// For the other files of conformance tests (`store_pruning.rs`), whose module provides
/// `sled_store` and `pg_store` too (they may import these).
pub(crate) use store_tests;

store_tests!(
    a_created_run_reads_back_its_summary_definition_base_and_components,
    a_second_run_with_an_existing_id_is_refused_with_run_exists,
    records_read_back_in_key_order_from_any_key,
    the_last_record_is_the_highest_key,
    a_snapshot_is_replaced_by_the_next,
    runs_are_listed_newest_first_with_ties_by_id_descending,
    runs_are_paged_in_the_listing_order_from_any_cursor_and_by_workflow,
    put_summary_replaces_the_summary_a_run_is_listed_with,
    reads_of_an_unknown_run_give_nothing,
    runs_sharing_a_component_and_a_definition_each_read_them_back,
);

/// sha256 of `component a`, `component b` and `never stored` (the stores take digests as
/// given; the driver computes them).
const DIGEST_A: &str = "cc774a9bbb6bc8ca7fee1881fde46f260ccdcd6eecd84955faf306d4b36479ef";
const DIGEST_B: &str = "93858a9852f9da40538d8c10fac80091917fda9dbc53279a12d1da04ee68b6ad";
const DIGEST_UNKNOWN: &str = "b68565cf5699273f6a21847b3fe44726374cbd6c3bfdc829527f1db2a0504341";

/// A sled store in a fresh home (the directory goes when dropped, after the store).
pub(crate) fn sled_store() -> (tempfile::TempDir, SledStore) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SledStore::open(&dir.path().join("home"), 8).expect("open the sled store");
    (dir, store)
}

/// A `PgStore` in a fresh schema; `None` (the skip told once) without PostgreSQL.
pub(crate) fn pg_store() -> Option<PgStore> {
    let url = backend::postgres_url()?;
    Some(PgStore::open(&url).unwrap_or_else(|e| panic!("open {url}: {e}")))
}

fn summary(run_id: &str, created_at: i64) -> RunSummary {
    RunSummary {
        run_id: run_id.into(),
        workflow_id: format!("workflow of {run_id}"),
        status: RunStatus::Pending,
        created_at,
        updated_at: created_at,
        tags: Default::default(),
    }
}

/// Creates `run_id` with a definition and first state of its own, using component A.
fn create(store: &dyn Store, run_id: &str, created_at: i64) -> RunSummary {
    let s = summary(run_id, created_at);
    store
        .create_run(NewRun {
            summary: &s,
            definition: &Definition::new(format!("definition of {run_id}").into_bytes()),
            plugins: &[(DIGEST_A, b"component a")],
            base: format!("base of {run_id}").as_bytes(),
            fresh_id: false,
        })
        .unwrap_or_else(|e| panic!("create {run_id}: {e}"));
    s
}

fn record(key: RecordKey) -> Vec<u8> {
    format!("record {}.{}", key.0, key.1).into_bytes()
}

/// Appends `keys` to `run_id` in this order, each with [`record`]'s bytes.
fn append_all(store: &dyn Store, run_id: &str, keys: &[RecordKey]) {
    for &key in keys {
        store
            .append(run_id, key, &record(key))
            .unwrap_or_else(|e| panic!("append {key:?} to {run_id}: {e}"));
    }
}

fn ids(runs: &[RunSummary]) -> Vec<&str> {
    runs.iter().map(|s| s.run_id.as_str()).collect()
}

fn a_created_run_reads_back_its_summary_definition_base_and_components(store: &dyn Store) {
    let s = summary("r1", 1_000);
    store
        .create_run(NewRun {
            summary: &s,
            definition: &Definition::new(b"{\"id\":\"w\"}".to_vec()),
            plugins: &[(DIGEST_A, b"component a"), (DIGEST_B, b"component b")],
            base: b"first state",
            fresh_id: false,
        })
        .expect("create");
    assert_eq!(store.summary("r1").expect("summary"), Some(s.clone()));
    assert_eq!(
        store.definition("r1").expect("definition").as_deref(),
        Some(&b"{\"id\":\"w\"}"[..])
    );
    assert_eq!(
        store.base("r1").expect("base").as_deref(),
        Some(&b"first state"[..])
    );
    assert_eq!(
        store.plugin(DIGEST_A).expect("plugin").as_deref(),
        Some(&b"component a"[..])
    );
    assert_eq!(
        store.plugin(DIGEST_B).expect("plugin").as_deref(),
        Some(&b"component b"[..])
    );
    assert_eq!(store.runs().expect("runs"), vec![s]);
    // Nothing else exists yet.
    assert_eq!(store.snapshot("r1").expect("snapshot"), None);
    assert_eq!(store.records("r1", (0, 0)).expect("records"), vec![]);
    assert_eq!(store.last_record("r1").expect("last record"), None);
}

fn a_second_run_with_an_existing_id_is_refused_with_run_exists(store: &dyn Store) {
    let first = create(store, "r1", 1_000);
    let mut second = summary("r1", 2_000);
    second.workflow_id = "another workflow".into();
    let refused = store.create_run(NewRun {
        summary: &second,
        definition: &Definition::new(b"another definition".to_vec()),
        plugins: &[(DIGEST_B, b"component b")],
        base: b"another base",
        fresh_id: false,
    });
    assert!(
        matches!(&refused, Err(StoreError::RunExists(id)) if id == "r1"),
        "{refused:?}"
    );
    // The first run is untouched.
    assert_eq!(store.summary("r1").expect("summary"), Some(first.clone()));
    assert_eq!(
        store.base("r1").expect("base").as_deref(),
        Some(&b"base of r1"[..])
    );
    assert_eq!(
        store.definition("r1").expect("definition").as_deref(),
        Some(&b"definition of r1"[..])
    );
    assert_eq!(store.runs().expect("runs"), vec![first]);
}

/// Keys whose order is neither their text's (`10` before `9`) nor their counter's alone, one
/// beyond 32 bits.
const KEYS: [RecordKey; 6] = [(1, 0), (1, 1), (9, 2), (10, 3), (10, 4), (5_000_000_000, 5)];

fn records_read_back_in_key_order_from_any_key(store: &dyn Store) {
    create(store, "r1", 1_000);
    create(store, "r2", 1_000);
    append_all(store, "r1", &KEYS);
    // Another run's records, interleaved in time, stay its own.
    append_all(store, "r2", &[(1, 0), (2, 1)]);
    let expected = |from: usize| -> Vec<(RecordKey, Vec<u8>)> {
        KEYS[from..].iter().map(|&k| (k, record(k))).collect()
    };
    let read = |from: RecordKey| store.records("r1", from).expect("records");
    assert_eq!(read((0, 0)), expected(0), "from the start");
    assert_eq!(
        read((1, 1)),
        expected(1),
        "from a stored key: it is included"
    );
    assert_eq!(read((9, 2)), expected(2), "from the middle");
    assert_eq!(
        read((2, 0)),
        expected(2),
        "from a key between two stored ones"
    );
    assert_eq!(
        read((10, 0)),
        expected(3),
        "from a seq whose first key is later"
    );
    assert_eq!(read((10, 4)), expected(4), "from the counter within a seq");
    assert_eq!(read((10, 5)), expected(5), "from past the last of a seq");
    assert_eq!(read((5_000_000_000, 5)), expected(5), "from the last");
    assert_eq!(read((5_000_000_000, 6)), vec![], "from past the last");
    assert_eq!(
        store.records("r2", (0, 0)).expect("records"),
        vec![((1, 0), record((1, 0))), ((2, 1), record((2, 1)))]
    );
}

fn the_last_record_is_the_highest_key(store: &dyn Store) {
    create(store, "r1", 1_000);
    create(store, "r2", 1_000);
    assert_eq!(store.last_record("r1").expect("last record"), None);
    append_all(store, "r1", &KEYS[..3]);
    assert_eq!(store.last_record("r1").expect("last record"), Some((9, 2)));
    append_all(store, "r1", &KEYS[3..]);
    assert_eq!(
        store.last_record("r1").expect("last record"),
        Some((5_000_000_000, 5))
    );
    append_all(store, "r2", &[(1, 0)]);
    assert_eq!(store.last_record("r2").expect("last record"), Some((1, 0)));
}

fn a_snapshot_is_replaced_by_the_next(store: &dyn Store) {
    create(store, "r1", 1_000);
    create(store, "r2", 1_000);
    store.put_snapshot("r1", b"snapshot one").expect("put");
    assert_eq!(
        store.snapshot("r1").expect("snapshot").as_deref(),
        Some(&b"snapshot one"[..])
    );
    store
        .put_snapshot("r1", b"snapshot two, longer")
        .expect("put");
    assert_eq!(
        store.snapshot("r1").expect("snapshot").as_deref(),
        Some(&b"snapshot two, longer"[..])
    );
    store.put_snapshot("r1", b"3").expect("put");
    assert_eq!(
        store.snapshot("r1").expect("snapshot").as_deref(),
        Some(&b"3"[..]),
        "a shorter snapshot replaces a longer one whole"
    );
    assert_eq!(store.snapshot("r2").expect("snapshot"), None);
    // A snapshot is not a record, nor the first state.
    assert_eq!(store.records("r1", (0, 0)).expect("records"), vec![]);
    assert_eq!(
        store.base("r1").expect("base").as_deref(),
        Some(&b"base of r1"[..])
    );
}

fn runs_are_listed_newest_first_with_ties_by_id_descending(store: &dyn Store) {
    for (id, at) in [
        ("a", 1_000),
        ("b", 3_000),
        ("c", 2_000),
        ("d", 2_000),
        ("e", 500),
    ] {
        create(store, id, at);
    }
    // Creation descending, then id descending: one order, which the server's cursor pages
    // (`GET /runs`) rely on.
    assert_eq!(ids(&store.runs().expect("runs")), ["b", "d", "c", "a", "e"]);
}

fn runs_are_paged_in_the_listing_order_from_any_cursor_and_by_workflow(store: &dyn Store) {
    // Ids that sort differently byte by byte than in most locales' collations.
    for (id, at) in [
        ("a", 1_000),
        ("B", 3_000),
        ("b", 3_000),
        ("c", 2_000),
        ("D", 2_000),
        ("e-1", 500),
        ("e.1", 500),
    ] {
        create(store, id, at);
    }
    let mut shared = summary("w2", 2_500);
    shared.workflow_id = "workflow of a".into();
    store
        .create_run(NewRun {
            summary: &shared,
            definition: &Definition::new(b"definition of w2".to_vec()),
            plugins: &[],
            base: b"base",
            fresh_id: false,
        })
        .expect("create w2");
    let listed = store.runs().expect("runs");
    let all = ids(&listed);
    assert_eq!(all, ["b", "B", "w2", "c", "D", "a", "e.1", "e-1"]);
    let page = |workflow: Option<&str>, after: Option<(i64, &str)>, limit: usize| {
        let runs = store
            .runs_page(&RunsPage {
                workflow,
                after,
                tags: &[],
                limit,
            })
            .expect("page");
        runs.into_iter().map(|r| r.run_id).collect::<Vec<String>>()
    };
    assert_eq!(page(None, None, 3), ["b", "B", "w2"]);
    assert_eq!(page(None, Some((2_500, "w2")), 3), ["c", "D", "a"]);
    assert_eq!(page(None, Some((1_000, "a")), 3), ["e.1", "e-1"]);
    assert_eq!(page(None, Some((500, "e-1")), 3), Vec::<String>::new());
    // From a cursor no run has: where it would sit.
    assert_eq!(page(None, Some((2_000, "Da")), 2), ["D", "a"]);
    assert_eq!(page(None, None, 100), all);
    assert_eq!(page(Some("workflow of a"), None, 5), ["w2", "a"]);
    assert_eq!(page(Some("workflow of a"), Some((2_500, "w2")), 5), ["a"]);
    assert_eq!(
        page(Some("workflow of nobody"), None, 5),
        Vec::<String>::new()
    );
    // A page holds the summaries as they are now.
    let mut ended = summary("c", 2_000);
    ended.status = RunStatus::Success;
    ended.updated_at = 9_000;
    store.put_summary(&ended).expect("put summary");
    let runs = store
        .runs_page(&RunsPage {
            workflow: Some("workflow of c"),
            after: None,
            tags: &[],
            limit: 1,
        })
        .expect("page");
    assert_eq!(runs, vec![ended]);
}

fn put_summary_replaces_the_summary_a_run_is_listed_with(store: &dyn Store) {
    let older = create(store, "older", 1_000);
    create(store, "newer", 2_000);
    let mut ended = older.clone();
    ended.status = RunStatus::Success;
    ended.updated_at = 9_000;
    store.put_summary(&ended).expect("put summary");
    assert_eq!(
        store.summary("older").expect("summary"),
        Some(ended.clone())
    );
    let runs = store.runs().expect("runs");
    // Listed by creation still, not by the last change.
    assert_eq!(ids(&runs), ["newer", "older"]);
    assert_eq!(runs[1], ended);
    assert_eq!(runs[0], summary("newer", 2_000));
    let mut suspended = ended.clone();
    suspended.status = RunStatus::Suspended;
    suspended.updated_at = 9_500;
    store.put_summary(&suspended).expect("put summary");
    assert_eq!(store.summary("older").expect("summary"), Some(suspended));
}

fn reads_of_an_unknown_run_give_nothing(store: &dyn Store) {
    assert_eq!(store.runs().expect("runs"), vec![]);
    create(store, "known", 1_000);
    append_all(store, "known", &[(1, 0)]);
    store.put_snapshot("known", b"snapshot").expect("put");
    for id in ["unknown", "know", "known2", ""] {
        assert_eq!(store.summary(id).expect("summary"), None, "{id:?}");
        assert_eq!(store.definition(id).expect("definition"), None, "{id:?}");
        assert_eq!(store.base(id).expect("base"), None, "{id:?}");
        assert_eq!(store.snapshot(id).expect("snapshot"), None, "{id:?}");
        assert_eq!(
            store.records(id, (0, 0)).expect("records"),
            vec![],
            "{id:?}"
        );
        assert_eq!(store.last_record(id).expect("last record"), None, "{id:?}");
    }
    assert_eq!(store.plugin(DIGEST_UNKNOWN).expect("plugin"), None);
    assert_eq!(ids(&store.runs().expect("runs")), ["known"]);
}

fn runs_sharing_a_component_and_a_definition_each_read_them_back(store: &dyn Store) {
    for (id, at) in [("r1", 1_000), ("r2", 2_000)] {
        store
            .create_run(NewRun {
                summary: &summary(id, at),
                definition: &Definition::new(b"the same definition".to_vec()),
                plugins: &[(DIGEST_A, b"component a")],
                base: id.as_bytes(),
                fresh_id: false,
            })
            .unwrap_or_else(|e| panic!("create {id}, naming a stored component again: {e}"));
    }
    for id in ["r1", "r2"] {
        assert_eq!(
            store.definition(id).expect("definition").as_deref(),
            Some(&b"the same definition"[..]),
            "{id}"
        );
        assert_eq!(
            store.base(id).expect("base").as_deref(),
            Some(id.as_bytes()),
            "{id}"
        );
    }
    assert_eq!(
        store.plugin(DIGEST_A).expect("plugin").as_deref(),
        Some(&b"component a"[..])
    );
    assert_eq!(ids(&store.runs().expect("runs")), ["r2", "r1"]);
}

/// A store that several processes share: two `PgStore` values on one schema stand for two
/// processes.
mod shared_postgres {
    use weft::StoreError;
    use weft::internal::{Claim, PgStore, Store};

    use super::{append_all, create, record, summary};
    use crate::backend;

    /// Two stores on one fresh schema; `None` (the skip told once) without PostgreSQL.
    fn two_processes() -> Option<(PgStore, PgStore)> {
        let url = backend::postgres_url()?;
        let open = || PgStore::open(&url).unwrap_or_else(|e| panic!("open {url}: {e}"));
        Some((open(), open()))
    }

    fn worker_id(store: &PgStore) -> String {
        store
            .shared()
            .expect("a PgStore is shared")
            .worker_id()
            .to_owned()
    }

    #[track_caller]
    fn assert_fenced(result: Result<(), StoreError>, run_id: &str) {
        assert!(
            matches!(&result, Err(StoreError::Fenced(id)) if id == run_id),
            "a write of {run_id} from a process that does not hold it: {result:?}"
        );
    }

    #[test]
    fn the_two_processes_have_distinct_worker_ids() {
        let Some((a, b)) = two_processes() else {
            return;
        };
        assert_ne!(worker_id(&a), worker_id(&b));
    }

    #[test]
    fn s127_a_run_held_by_one_process_is_claimed_elsewhere_and_not_written_by_the_other() {
        let Some((a, b)) = two_processes() else {
            return;
        };
        let created = create(&a, "r1", 1_000);
        append_all(&a, "r1", &[(1, 0)]);
        assert_eq!(
            b.claim("r1").expect("claim"),
            Claim::Elsewhere(worker_id(&a))
        );
        assert_fenced(b.append("r1", (2, 1), b"intruder"), "r1");
        assert_fenced(b.put_snapshot("r1", b"intruder"), "r1");
        let mut changed = created.clone();
        changed.updated_at = 5_000;
        assert_fenced(b.put_summary(&changed), "r1");
        // None of the refused writes left anything, and the holder goes on writing.
        assert_eq!(
            a.records("r1", (0, 0)).expect("records"),
            vec![((1, 0), record((1, 0)))]
        );
        assert_eq!(a.snapshot("r1").expect("snapshot"), None);
        assert_eq!(a.summary("r1").expect("summary"), Some(created));
        append_all(&a, "r1", &[(2, 1)]);
        a.put_snapshot("r1", b"by a").expect("a's snapshot");
        assert_eq!(a.claim("r1").expect("claim"), Claim::Ours);
    }

    #[test]
    fn s127_after_a_release_the_other_process_claims_the_run_and_fences_the_first_out() {
        let Some((a, b)) = two_processes() else {
            return;
        };
        let created = create(&a, "r1", 1_000);
        append_all(&a, "r1", &[(1, 0)]);
        a.release("r1").expect("release");
        assert_eq!(b.claim("r1").expect("claim"), Claim::Ours);
        append_all(&b, "r1", &[(2, 1)]);
        b.put_snapshot("r1", b"by b").expect("b's snapshot");
        let mut ended = created.clone();
        ended.status = weft::RunStatus::Success;
        ended.updated_at = 7_000;
        b.put_summary(&ended).expect("b's summary");
        // The first process's writes are refused now.
        assert_fenced(a.append("r1", (3, 2), b"late"), "r1");
        assert_fenced(a.put_snapshot("r1", b"late"), "r1");
        assert_fenced(a.put_summary(&created), "r1");
        assert_eq!(
            a.claim("r1").expect("claim"),
            Claim::Elsewhere(worker_id(&b))
        );
        assert_eq!(
            a.records("r1", (0, 0)).expect("records"),
            vec![((1, 0), record((1, 0))), ((2, 1), record((2, 1)))]
        );
        assert_eq!(
            a.snapshot("r1").expect("snapshot").as_deref(),
            Some(&b"by b"[..])
        );
        assert_eq!(a.summary("r1").expect("summary"), Some(ended));
    }

    #[test]
    fn records_appended_by_one_process_are_read_by_the_other() {
        let Some((a, b)) = two_processes() else {
            return;
        };
        let created = create(&a, "r1", 1_000);
        append_all(&a, "r1", &super::KEYS);
        a.put_snapshot("r1", b"by a").expect("snapshot");
        let all: Vec<_> = super::KEYS.iter().map(|&k| (k, record(k))).collect();
        assert_eq!(b.records("r1", (0, 0)).expect("records"), all);
        assert_eq!(b.records("r1", (9, 2)).expect("records"), all[2..]);
        assert_eq!(
            b.last_record("r1").expect("last record"),
            Some((5_000_000_000, 5))
        );
        assert_eq!(
            b.snapshot("r1").expect("snapshot").as_deref(),
            Some(&b"by a"[..])
        );
        assert_eq!(b.summary("r1").expect("summary"), Some(created.clone()));
        assert_eq!(b.runs().expect("runs"), vec![created]);
        assert_eq!(
            b.base("r1").expect("base").as_deref(),
            Some(&b"base of r1"[..])
        );
        assert_eq!(
            b.definition("r1").expect("definition").as_deref(),
            Some(&b"definition of r1"[..])
        );
    }

    #[test]
    fn a_run_another_process_created_is_refused_with_run_exists_even_with_equal_contents() {
        let Some((a, b)) = two_processes() else {
            return;
        };
        let created = create(&a, "r1", 1_000);
        let same = summary("r1", 1_000);
        let refused = b.create_run(weft::internal::NewRun {
            summary: &same,
            definition: &weft::internal::Definition::new(b"definition of r1".to_vec()),
            plugins: &[(super::DIGEST_A, b"component a")],
            base: b"base of r1",
            fresh_id: false,
        });
        assert!(
            matches!(&refused, Err(StoreError::RunExists(id)) if id == "r1"),
            "{refused:?}"
        );
        // And b holds nothing: its writes of r1 are refused.
        assert_fenced(b.append("r1", (1, 0), b"intruder"), "r1");
        assert_eq!(a.summary("r1").expect("summary"), Some(created));
    }
}
