//! Pruning, alike on every backend (`store_tests!` of `store_conformance.rs`:
//! `store_pruning::sled::NAME` and `store_pruning::postgres::NAME`): `Store::delete_ended`
//! deletes the ended runs it is given, all of each, and nothing else; `Store::collect_garbage`
//! removes the blobs no remaining run names and keeps the others. Then what only a store shared
//! by several processes does: a run a live process holds is left alone, and a collection waits
//! for a run being created.

use sha2::{Digest, Sha256};
use weft::RunStatus;
use weft::internal::{Definition, NewRun, RunsPage, Store};
use weft::{RunSummary, StoreError};

use crate::store_conformance::{pg_store, sled_store, store_tests};

store_tests!(
    deleting_ended_runs_removes_all_of_each_and_returns_only_their_ids,
    runs_that_have_not_ended_and_unknown_ids_are_left_as_they_are,
    a_deleted_run_is_deleted_once_and_no_ids_delete_nothing,
    collecting_garbage_removes_the_blobs_no_remaining_run_names,
    collecting_garbage_keeps_the_blobs_a_remaining_run_shares_with_a_deleted_one,
    collecting_garbage_after_every_run_is_deleted_removes_every_blob,
    a_run_created_after_a_collection_stores_its_removed_blobs_again,
);

/// The hex sha256 of `bytes`, the name the driver gives their blob.
fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A definition's bytes, naming `components` by digest (what [`plugins_of`] reads back).
fn definition(name: &str, components: &[&[u8]]) -> Vec<u8> {
    let mut text = format!("definition {name} uses");
    for c in components {
        text.push(' ');
        text.push_str(&digest(c));
    }
    text.into_bytes()
}

/// The digests of the components a [`definition`] names: the driver reads them from the graph.
fn plugins_of(bytes: &[u8]) -> Result<Vec<String>, StoreError> {
    let text = String::from_utf8_lossy(bytes);
    Ok(text
        .split_once(" uses")
        .map(|(_, names)| names.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default())
}

/// Stores run `run_id` (workflow `w`) with the definition naming `components`, two records, a
/// snapshot and, unless it is pending, a summary with `status`.
fn create(
    store: &dyn Store,
    run_id: &str,
    created_at: i64,
    status: RunStatus,
    definition_bytes: &[u8],
    components: &[&[u8]],
) -> RunSummary {
    let mut s = RunSummary {
        run_id: run_id.into(),
        workflow_id: "w".into(),
        status: RunStatus::Pending,
        created_at,
        updated_at: created_at,
        tags: Default::default(),
    };
    let named: Vec<(String, &[u8])> = components.iter().map(|c| (digest(c), *c)).collect();
    let plugins: Vec<(&str, &[u8])> = named.iter().map(|(d, c)| (d.as_str(), *c)).collect();
    store
        .create_run(NewRun {
            summary: &s,
            definition: &Definition::new(definition_bytes.to_vec()),
            plugins: &plugins,
            base: format!("base of {run_id}").as_bytes(),
            fresh_id: false,
        })
        .unwrap_or_else(|e| panic!("create {run_id}: {e}"));
    for key in [(1, 0), (2, 1)] {
        store
            .append(
                run_id,
                key,
                format!("record {key:?} of {run_id}").as_bytes(),
            )
            .unwrap_or_else(|e| panic!("append to {run_id}: {e}"));
    }
    store
        .put_snapshot(run_id, format!("snapshot of {run_id}").as_bytes())
        .unwrap_or_else(|e| panic!("snapshot of {run_id}: {e}"));
    if status != RunStatus::Pending {
        s.status = status;
        s.updated_at = created_at + 1;
        store
            .put_summary(&s)
            .unwrap_or_else(|e| panic!("summary of {run_id}: {e}"));
    }
    s
}

/// Creates run `run_id` with a definition of its own naming no component.
fn create_plain(store: &dyn Store, run_id: &str, created_at: i64, status: RunStatus) -> RunSummary {
    create(
        store,
        run_id,
        created_at,
        status,
        &definition(run_id, &[]),
        &[],
    )
}

/// Deletes `ids`, returning the deleted ones sorted.
fn delete(store: &dyn Store, ids: &[&str]) -> Vec<String> {
    let mut deleted = store.delete_ended(ids).expect("delete ended runs");
    deleted.sort();
    deleted
}

fn listed(store: &dyn Store) -> Vec<String> {
    store
        .runs()
        .expect("runs")
        .into_iter()
        .map(|s| s.run_id)
        .collect()
}

fn page(store: &dyn Store, workflow: Option<&str>, after: Option<(i64, &str)>) -> Vec<String> {
    store
        .runs_page(&RunsPage {
            workflow,
            after,
            tags: &[],
            limit: 100,
        })
        .expect("page")
        .into_iter()
        .map(|s| s.run_id)
        .collect()
}

/// Nothing of `run_id` reads back.
#[track_caller]
fn assert_gone(store: &dyn Store, run_id: &str) {
    assert_eq!(store.summary(run_id).expect("summary"), None, "{run_id}");
    assert_eq!(
        store.records(run_id, (0, 0)).expect("records"),
        vec![],
        "{run_id}"
    );
    assert_eq!(store.last_record(run_id).expect("last"), None, "{run_id}");
    assert_eq!(store.snapshot(run_id).expect("snapshot"), None, "{run_id}");
    assert_eq!(store.base(run_id).expect("base"), None, "{run_id}");
    assert_eq!(
        store.definition(run_id).expect("definition"),
        None,
        "{run_id}"
    );
}

/// All of `s`'s run reads back as [`create`] stored it (its definition `definition_bytes`).
#[track_caller]
fn assert_whole(store: &dyn Store, s: &RunSummary, definition_bytes: &[u8]) {
    let id = s.run_id.as_str();
    assert_eq!(store.summary(id).expect("summary").as_ref(), Some(s));
    let records: Vec<_> = [(1, 0), (2, 1)]
        .into_iter()
        .map(|k| (k, format!("record {k:?} of {id}").into_bytes()))
        .collect();
    assert_eq!(store.records(id, (0, 0)).expect("records"), records, "{id}");
    assert_eq!(store.last_record(id).expect("last"), Some((2, 1)), "{id}");
    assert_eq!(
        store.snapshot(id).expect("snapshot"),
        Some(format!("snapshot of {id}").into_bytes()),
        "{id}"
    );
    assert_eq!(
        store.base(id).expect("base"),
        Some(format!("base of {id}").into_bytes()),
        "{id}"
    );
    assert_eq!(
        store.definition(id).expect("definition").as_deref(),
        Some(definition_bytes),
        "{id}"
    );
}

fn deleting_ended_runs_removes_all_of_each_and_returns_only_their_ids(store: &dyn Store) {
    let running = create_plain(store, "running", 1_000, RunStatus::Running);
    for (id, at, status) in [
        ("s", 2_000, RunStatus::Success),
        ("f", 3_000, RunStatus::Failed),
        ("c", 4_000, RunStatus::Cancelled),
        ("t", 5_000, RunStatus::Tripwire),
    ] {
        create_plain(store, id, at, status);
    }
    let ended = create_plain(store, "ended", 6_000, RunStatus::Success);
    assert_eq!(delete(store, &["s", "f", "c", "t"]), ["c", "f", "s", "t"]);
    for id in ["s", "f", "c", "t"] {
        assert_gone(store, id);
    }
    // Listed no more, in any page; the runs not named are whole.
    assert_eq!(listed(store), ["ended", "running"]);
    assert_eq!(page(store, None, None), ["ended", "running"]);
    assert_eq!(page(store, Some("w"), None), ["ended", "running"]);
    assert_eq!(page(store, None, Some((6_000, "ended"))), ["running"]);
    assert_eq!(page(store, Some("w"), Some((5_000, "t"))), ["running"]);
    assert_whole(store, &ended, &definition("ended", &[]));
    assert_whole(store, &running, &definition("running", &[]));
}

fn runs_that_have_not_ended_and_unknown_ids_are_left_as_they_are(store: &dyn Store) {
    let pending = create_plain(store, "p", 1_000, RunStatus::Pending);
    let running = create_plain(store, "r", 2_000, RunStatus::Running);
    let suspended = create_plain(store, "u", 3_000, RunStatus::Suspended);
    create_plain(store, "s", 4_000, RunStatus::Success);
    assert_eq!(
        delete(store, &["p", "r", "u", "unknown", "", "s2", "s"]),
        ["s"]
    );
    assert_gone(store, "s");
    for s in [&pending, &running, &suspended] {
        assert_whole(store, s, &definition(&s.run_id, &[]));
    }
    assert_eq!(listed(store), ["u", "r", "p"]);
    // A run that ends later is deleted then.
    let mut ended = suspended.clone();
    ended.status = RunStatus::Cancelled;
    ended.updated_at = 9_000;
    store.put_summary(&ended).expect("summary");
    assert_eq!(delete(store, &["p", "r", "u"]), ["u"]);
    assert_eq!(listed(store), ["r", "p"]);
}

fn a_deleted_run_is_deleted_once_and_no_ids_delete_nothing(store: &dyn Store) {
    create_plain(store, "s", 1_000, RunStatus::Success);
    assert_eq!(delete(store, &[]), Vec::<String>::new());
    assert_eq!(listed(store), ["s"]);
    assert_eq!(
        delete(store, &["s", "s"]),
        ["s"],
        "named twice, deleted once"
    );
    assert_eq!(delete(store, &["s"]), Vec::<String>::new());
    assert_gone(store, "s");
    assert_eq!(listed(store), Vec::<String>::new());
}

const COMPONENT_A: &[u8] = b"component a";
const COMPONENT_B: &[u8] = b"component b, a little longer";

fn collecting_garbage_removes_the_blobs_no_remaining_run_names(store: &dyn Store) {
    let gone_definition = definition("gone", &[COMPONENT_B]);
    let kept_definition = definition("kept", &[COMPONENT_A]);
    create(
        store,
        "gone",
        1_000,
        RunStatus::Failed,
        &gone_definition,
        &[COMPONENT_B],
    );
    let kept = create(
        store,
        "kept",
        2_000,
        RunStatus::Running,
        &kept_definition,
        &[COMPONENT_A],
    );
    // Nothing is unnamed while both runs are stored.
    let none = store.collect_garbage(&plugins_of).expect("collect");
    assert_eq!(none.blobs, 0, "{none:?}");
    assert!(
        store
            .plugin(&digest(COMPONENT_B))
            .expect("plugin")
            .is_some()
    );
    assert_eq!(delete(store, &["gone"]), ["gone"]);
    let reclaimed = store.collect_garbage(&plugins_of).expect("collect");
    assert_eq!(reclaimed.blobs, 2, "the definition and component of gone");
    let bytes = (gone_definition.len() + COMPONENT_B.len()) as u64;
    assert!(reclaimed.bytes >= bytes, "{reclaimed:?}: {bytes} at least");
    assert_eq!(store.plugin(&digest(COMPONENT_B)).expect("plugin"), None);
    assert_eq!(
        store.plugin(&digest(&gone_definition)).expect("plugin"),
        None
    );
    assert_eq!(
        store
            .plugin(&digest(COMPONENT_A))
            .expect("plugin")
            .as_deref(),
        Some(COMPONENT_A)
    );
    assert_whole(store, &kept, &kept_definition);
    let again = store.collect_garbage(&plugins_of).expect("collect");
    assert_eq!(again.blobs, 0, "{again:?}");
}

fn collecting_garbage_keeps_the_blobs_a_remaining_run_shares_with_a_deleted_one(store: &dyn Store) {
    let shared = definition("shared", &[COMPONENT_A]);
    let other = definition("other", &[COMPONENT_A, COMPONENT_B]);
    create(
        store,
        "old",
        1_000,
        RunStatus::Success,
        &shared,
        &[COMPONENT_A],
    );
    let new = create(
        store,
        "new",
        2_000,
        RunStatus::Suspended,
        &shared,
        &[COMPONENT_A],
    );
    create(
        store,
        "other",
        3_000,
        RunStatus::Success,
        &other,
        &[COMPONENT_A, COMPONENT_B],
    );
    assert_eq!(delete(store, &["old", "other", "new"]), ["old", "other"]);
    let reclaimed = store.collect_garbage(&plugins_of).expect("collect");
    assert_eq!(reclaimed.blobs, 2, "other's definition and component B");
    let bytes = (other.len() + COMPONENT_B.len()) as u64;
    assert!(reclaimed.bytes >= bytes, "{reclaimed:?}: {bytes} at least");
    // The definition old shared with new, and the component other shared with it, are kept.
    assert_whole(store, &new, &shared);
    assert_eq!(
        store
            .plugin(&digest(COMPONENT_A))
            .expect("plugin")
            .as_deref(),
        Some(COMPONENT_A)
    );
    assert_eq!(store.plugin(&digest(COMPONENT_B)).expect("plugin"), None);
    assert_eq!(store.plugin(&digest(&other)).expect("plugin"), None);
}

fn collecting_garbage_after_every_run_is_deleted_removes_every_blob(store: &dyn Store) {
    let empty = store.collect_garbage(&plugins_of).expect("collect");
    assert_eq!(empty.blobs, 0, "an empty store: {empty:?}");
    let one = definition("one", &[COMPONENT_A]);
    let two = definition("two", &[COMPONENT_B]);
    create(
        store,
        "one",
        1_000,
        RunStatus::Success,
        &one,
        &[COMPONENT_A],
    );
    create(
        store,
        "two",
        2_000,
        RunStatus::Tripwire,
        &two,
        &[COMPONENT_B],
    );
    assert_eq!(delete(store, &["one", "two"]), ["one", "two"]);
    let reclaimed = store.collect_garbage(&plugins_of).expect("collect");
    assert_eq!(reclaimed.blobs, 4, "two definitions and two components");
    let bytes = (one.len() + two.len() + COMPONENT_A.len() + COMPONENT_B.len()) as u64;
    assert!(reclaimed.bytes >= bytes, "{reclaimed:?}: {bytes} at least");
    for blob in [&one[..], &two, COMPONENT_A, COMPONENT_B] {
        assert_eq!(store.plugin(&digest(blob)).expect("plugin"), None);
    }
    assert_eq!(listed(store), Vec::<String>::new());
}

fn a_run_created_after_a_collection_stores_its_removed_blobs_again(store: &dyn Store) {
    let bytes = definition("again", &[COMPONENT_B]);
    create(
        store,
        "first",
        1_000,
        RunStatus::Success,
        &bytes,
        &[COMPONENT_B],
    );
    assert_eq!(delete(store, &["first"]), ["first"]);
    assert_eq!(
        store.collect_garbage(&plugins_of).expect("collect").blobs,
        2
    );
    let second = create(
        store,
        "second",
        2_000,
        RunStatus::Running,
        &bytes,
        &[COMPONENT_B],
    );
    assert_whole(store, &second, &bytes);
    assert_eq!(
        store
            .plugin(&digest(COMPONENT_B))
            .expect("plugin")
            .as_deref(),
        Some(COMPONENT_B)
    );
    assert_eq!(
        store.collect_garbage(&plugins_of).expect("collect").blobs,
        0
    );
}

/// Two `PgStore` values on one schema stand for two processes.
mod shared_postgres {
    use std::time::Duration;

    use sha2::{Digest, Sha256};
    use weft::RunStatus;
    use weft::StoreError;
    use weft::internal::{PgStore, Store};

    use super::{COMPONENT_A, COMPONENT_B, create, create_plain, definition, delete, digest};
    use crate::backend;

    /// A fresh schema's URL and a store on it; `None` (the skip told once) without PostgreSQL.
    fn store() -> Option<(String, PgStore)> {
        let url = backend::postgres_url()?;
        let store = open(&url);
        Some((url, store))
    }

    fn open(url: &str) -> PgStore {
        PgStore::open(url).unwrap_or_else(|e| panic!("open {url}: {e}"))
    }

    fn worker_id(store: &PgStore) -> String {
        store.shared().expect("shared").worker_id().to_owned()
    }

    /// The value of parameter `name` of the tests' store URL `url`.
    fn param<'a>(url: &'a str, name: &str) -> &'a str {
        url.split(['?', '&'])
            .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("{url} has no {name}"))
    }

    #[test]
    fn a_run_a_live_process_holds_is_left_until_it_lets_the_run_go() {
        let Some((url, a)) = store() else {
            return;
        };
        let b = open(&url);
        create_plain(&a, "r", 1_000, RunStatus::Success);
        assert_eq!(delete(&b, &["r"]), Vec::<String>::new(), "a holds r");
        assert!(b.summary("r").expect("summary").is_some());
        a.release("r").expect("release");
        assert_eq!(delete(&b, &["r"]), ["r"]);
        super::assert_gone(&a, "r");
    }

    #[test]
    fn a_run_whose_process_is_gone_from_the_workers_is_deleted_by_another() {
        let Some((url, a)) = store() else {
            return;
        };
        let b = open(&url);
        create_plain(&a, "r", 1_000, RunStatus::Failed);
        let gone = backend::execute(
            &url,
            &format!("DELETE FROM {{s}}.workers WHERE id = '{}'", worker_id(&a)),
        );
        assert_eq!(gone, 1);
        assert_eq!(delete(&b, &["r"]), ["r"]);
        super::assert_gone(&b, "r");
    }

    #[test]
    fn a_deleted_run_takes_its_records_and_requests_along_and_its_writes_are_refused() {
        let Some((url, a)) = store() else {
            return;
        };
        let b = open(&url);
        create_plain(&a, "r", 1_000, RunStatus::Success);
        create_plain(&a, "other", 2_000, RunStatus::Success);
        let shared = b.shared().expect("shared");
        shared
            .send_request("r", &worker_id(&a), "cancel")
            .expect("request");
        shared
            .send_request("other", &worker_id(&a), "cancel")
            .expect("request");
        assert_eq!(delete(&a, &["r"]), ["r"]);
        let rows = |table: &str, run: &str| {
            backend::execute(
                &url,
                &format!("SELECT 1 FROM {{s}}.{table} WHERE run_id = '{run}'"),
            )
        };
        assert_eq!(rows("records", "r"), 0);
        assert_eq!(rows("requests", "r"), 0);
        assert_eq!(rows("records", "other"), 2);
        assert_eq!(rows("requests", "other"), 1);
        // Held no more: a late write is refused, as one of a run taken over is.
        let late = a.append("r", (3, 2), b"late");
        assert!(
            matches!(&late, Err(StoreError::Fenced(id)) if id == "r"),
            "{late:?}"
        );
        assert_eq!(rows("records", "r"), 0);
    }

    #[test]
    fn a_collection_counts_exactly_the_bytes_of_the_blobs_it_removes() {
        let Some((_url, a)) = store() else {
            return;
        };
        let gone = definition("gone", &[COMPONENT_A, COMPONENT_B]);
        create(
            &a,
            "gone",
            1_000,
            RunStatus::Success,
            &gone,
            &[COMPONENT_A, COMPONENT_B],
        );
        assert_eq!(delete(&a, &["gone"]), ["gone"]);
        let reclaimed = a.collect_garbage(&super::plugins_of).expect("collect");
        assert_eq!(reclaimed.blobs, 3);
        assert_eq!(
            reclaimed.bytes,
            (gone.len() + COMPONENT_A.len() + COMPONENT_B.len()) as u64
        );
    }

    /// The blobs lock's key for `schema`: part of the protocol between weft versions on one
    /// schema, so it is pinned here.
    fn blobs_lock(schema: &str) -> i64 {
        let hash = Sha256::digest(format!("weft blobs {schema}").as_bytes());
        let mut first = [0u8; 8];
        first.copy_from_slice(&hash[..8]);
        i64::from_be_bytes(first)
    }

    #[test]
    fn a_collection_waits_for_a_run_being_created_and_keeps_its_blobs() {
        let Some((url, a)) = store() else {
            return;
        };
        let schema = param(&url, "schema").to_owned();
        let bytes = definition("again", &[COMPONENT_A]);
        create(&a, "old", 1_000, RunStatus::Success, &bytes, &[COMPONENT_A]);
        assert_eq!(delete(&a, &["old"]), ["old"]);
        // A creation of a run naming those blobs, stopped after it found them stored (so it
        // stores only its row), its transaction open: what `create_run` does, paused.
        let tokio = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio");
        let mut config = tokio_postgres::Config::new();
        config
            .host_path(param(&url, "host"))
            .user(
                url.strip_prefix("postgres://")
                    .and_then(|u| u.split_once('@'))
                    .map(|(user, _)| user)
                    .expect("a user in the URL"),
            )
            .dbname("postgres");
        let client = tokio.block_on(async {
            let (client, connection) = config
                .connect(tokio_postgres::NoTls)
                .await
                .expect("connect");
            tokio::spawn(connection);
            client
                .batch_execute(&format!(
                    "BEGIN; SELECT pg_advisory_xact_lock_shared({}); \
                     INSERT INTO \"{schema}\".runs (run_id, workflow_id, status, created_at, \
                       updated_at, definition, base) \
                     VALUES ('new', 'w', 'pending', 2000, 2000, '{}', '\\x00'::bytea)",
                    blobs_lock(&schema),
                    digest(&bytes)
                ))
                .await
                .expect("the paused creation");
            client
        });
        std::thread::scope(|scope| {
            let collection = scope.spawn(|| a.collect_garbage(&super::plugins_of));
            std::thread::sleep(Duration::from_millis(500));
            assert!(
                !collection.is_finished(),
                "the collection waits for the creation's transaction"
            );
            tokio.block_on(async {
                client.batch_execute("COMMIT").await.expect("commit");
            });
            let reclaimed = collection.join().expect("join").expect("collect");
            assert_eq!(reclaimed.blobs, 0, "the new run names them: {reclaimed:?}");
        });
        assert_eq!(a.definition("new").expect("definition"), Some(bytes));
        assert_eq!(
            a.plugin(&digest(COMPONENT_A)).expect("plugin").as_deref(),
            Some(COMPONENT_A)
        );
    }
}
