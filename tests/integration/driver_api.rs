//! The driver's API as the CLI, the HTTP API and an embedder see it: where watches end (S106),
//! reads past a run's last event, stored entries that this weft cannot read, the injectable
//! clock, and the embedding surface.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;
use weft::internal::rfc3339;
use weft::{ManualClock, StoredEvent};
use weft::{RunStatus, StepStatus};

use crate::cli::{Home, INC, SUSPEND, path_str};
use crate::common::{Env, kinds};
use crate::rules::{req, settle, until_event};
use crate::server::{http, serve};

/// Turns a hang into a failure; never an assertion about how fast anything is.
const HANG_GUARD: Duration = Duration::from_secs(300);

/// A run that suspends twice, then ends.
const TWICE: &str = r#"
id: twice
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: first, plugin: kit, step: suspend }
  - { id: second, plugin: kit, step: suspend }
"#;

/// Every event a receiver yields until it ends.
async fn drain(mut rx: UnboundedReceiver<Arc<StoredEvent>>) -> Vec<StoredEvent> {
    let mut out = Vec::new();
    loop {
        match tokio::time::timeout(HANG_GUARD, rx.recv()).await {
            Ok(Some(ev)) => out.push((*ev).clone()),
            Ok(None) => return out,
            Err(_) => panic!("the watch never ended; it had {:?}", kinds(&out)),
        }
    }
}

/// The `type` of each JSON event, with its path: `step-started:a`.
fn json_kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e["path"].as_str() {
            Some(p) => format!("{}:{p}", e["type"].as_str().unwrap_or_default()),
            None => e["type"].as_str().unwrap_or_default().to_owned(),
        })
        .collect()
}

/// `GET path`: the status and the body, failing (not hanging) when the answer never ends.
async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    tokio::time::timeout(HANG_GUARD, http(addr, "GET", path, None))
        .await
        .unwrap_or_else(|_| panic!("GET {path} never ended"))
}

/// NDJSON as values.
fn ndjson(body: &str) -> Vec<Value> {
    body.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?} is not JSON: {e}")))
        .collect()
}

/// Asserts the seqs run 1, 2, 3, ... without gap or duplicate.
fn assert_gapless(seqs: &[u64]) {
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
}

// ---------------------------------------------------------------------------------------------
// Where a watch ends (S106), and reads past the last event

#[test]
fn s106_watch_on_the_binary_passes_a_suspension_that_was_resumed_or_cancelled() {
    let home = Home::new();
    let file = home.file("twice.yaml", TWICE);
    let run = home.weft(&["run", path_str(&file), "--run-id", "t"]);
    assert_eq!(run.code, 3, "{run:?}");
    let resumed = home.weft(&["resume", "t", "--data", "{}"]);
    assert_eq!(resumed.code, 3, "suspended again at `second`: {resumed:?}");

    // The plain watch passes the first suspension (resumed since) and stops at the second,
    // where the run stands.
    let out = home.weft(&["watch", "t"]);
    assert_eq!(out.code, 0, "{out:?}");
    let events = out.json_lines();
    let k = json_kinds(&events);
    assert_eq!(
        k.iter().filter(|k| *k == "run-suspended").count(),
        2,
        "{k:?}"
    );
    assert!(k.contains(&"run-resumed".to_owned()), "{k:?}");
    assert_eq!(k.last().map(String::as_str), Some("run-suspended"), "{k:?}");
    assert_gapless(
        &events
            .iter()
            .filter_map(|e| e["seq"].as_u64())
            .collect::<Vec<_>>(),
    );

    // Cancelled: the watch goes through both suspensions and ends with run-cancelled.
    assert_eq!(home.weft(&["cancel", "t"]).code, 0);
    let out = home.weft(&["watch", "t"]);
    assert_eq!(out.code, 0, "{out:?}");
    let after = out.json_lines();
    assert_eq!(after[..events.len()], events[..]);
    assert_eq!(
        json_kinds(&after).last().map(String::as_str),
        Some("run-cancelled")
    );
}

#[tokio::test]
async fn s106_http_events_pass_a_suspension_that_was_resumed_or_ended() {
    let env = Env::new();
    let addr = serve(&env).await;
    let rec = env.run(TWICE, json!({})).await;
    assert_eq!(rec.status, RunStatus::Suspended);
    let id = rec.run_id;
    env.rt
        .resume(&id, req(None, None, None, json!({})))
        .await
        .expect("resume");
    assert_eq!(settle(&env, &id).await.status, RunStatus::Suspended);

    let (status, body) = get(addr, &format!("/runs/{id}/events")).await;
    assert_eq!(status, 200, "{body}");
    let events = ndjson(&body);
    let k = json_kinds(&events);
    assert_eq!(
        k.iter().filter(|k| *k == "run-suspended").count(),
        2,
        "{k:?}"
    );
    assert_eq!(k.last().map(String::as_str), Some("run-suspended"), "{k:?}");

    env.rt
        .resume(&id, req(None, None, None, json!({})))
        .await
        .expect("resume");
    assert_eq!(settle(&env, &id).await.status, RunStatus::Success);
    let (status, body) = get(addr, &format!("/runs/{id}/events")).await;
    assert_eq!(status, 200, "{body}");
    let all = ndjson(&body);
    assert_eq!(all[..events.len()], events[..]);
    assert_eq!(
        json_kinds(&all).last().map(String::as_str),
        Some("run-succeeded")
    );
}

#[tokio::test]
async fn s106_embedded_watch_passes_a_suspension_that_was_resumed_or_cancelled() {
    let env = Env::new();
    let rec = env.run(TWICE, json!({})).await;
    let id = rec.run_id;
    let first = drain(env.rt.watch_settled(&id, 1).expect("watch")).await;
    assert_eq!(
        kinds(&first).last().map(String::as_str),
        Some("run-suspended")
    );
    env.rt
        .resume(&id, req(None, None, None, json!({})))
        .await
        .expect("resume");
    assert_eq!(settle(&env, &id).await.status, RunStatus::Suspended);

    let second = drain(env.rt.watch_settled(&id, 1).expect("watch")).await;
    assert_eq!(second[..first.len()], first[..]);
    let k = kinds(&second);
    assert!(k.contains(&"run-resumed".to_owned()), "{k:?}");
    assert_eq!(k.last().map(String::as_str), Some("run-suspended"), "{k:?}");
    assert_gapless(&second.iter().map(|e| e.seq).collect::<Vec<_>>());

    env.rt.cancel(&id).await.expect("cancel");
    assert_eq!(settle(&env, &id).await.status, RunStatus::Cancelled);
    for all in [
        drain(env.rt.watch_settled(&id, 1).expect("watch")).await,
        drain(env.rt.watch(&id, 1).expect("watch")).await,
    ] {
        assert_eq!(all[..second.len()], second[..]);
        assert_eq!(
            kinds(&all).last().map(String::as_str),
            Some("run-cancelled")
        );
    }
}

/// A run of [`TWICE`] suspended at `first`, and a run of it cancelled there.
async fn suspended_and_cancelled(env: &Env) -> (String, String) {
    let suspended = env.run(TWICE, json!({})).await;
    assert_eq!(suspended.status, RunStatus::Suspended);
    let cancelled = env.run(TWICE, json!({})).await.run_id;
    env.rt.cancel(&cancelled).await.expect("cancel");
    assert_eq!(settle(env, &cancelled).await.status, RunStatus::Cancelled);
    (suspended.run_id, cancelled)
}

#[test]
fn s106_watch_on_the_binary_from_past_the_last_event_prints_nothing_at_once() {
    let home = Home::new();
    let file = home.file("twice.yaml", TWICE);
    assert_eq!(
        home.weft(&["run", path_str(&file), "--run-id", "s"]).code,
        3
    );
    assert_eq!(
        home.weft(&["run", path_str(&file), "--run-id", "c"]).code,
        3
    );
    assert_eq!(home.weft(&["cancel", "c"]).code, 0);
    for args in [
        &["watch", "s", "--from-seq", "1000"][..],
        &["watch", "c", "--from-seq", "1000"][..],
        &["watch", "c", "--from-seq", "1000", "--follow"][..],
    ] {
        let past = home.weft(args);
        assert_eq!(past.code, 0, "{args:?}: {past:?}");
        assert_eq!(past.stdout, "", "{args:?}: {past:?}");
    }
    // From the last event itself: that event.
    let all = home.weft(&["watch", "c"]).json_lines();
    let from_last = all.len().to_string();
    let last = home.weft(&["watch", "c", "--from-seq", &from_last]);
    assert_eq!(last.json_lines(), all[all.len() - 1..].to_vec());
}

#[tokio::test]
async fn s106_http_events_from_past_the_last_event_are_empty_at_once() {
    let env = Env::new();
    let addr = serve(&env).await;
    let (suspended, cancelled) = suspended_and_cancelled(&env).await;
    for path in [
        format!("/runs/{suspended}/events?from_seq=1000"),
        format!("/runs/{cancelled}/events?from_seq=1000"),
        format!("/runs/{cancelled}/events?from_seq=1000&follow=true"),
    ] {
        let (status, body) = get(addr, &path).await;
        assert_eq!((status, body.as_str()), (200, ""), "{path}");
    }
}

#[tokio::test]
async fn s87_embedded_watch_from_past_the_last_event_ends_at_once() {
    let env = Env::new();
    let (suspended, cancelled) = suspended_and_cancelled(&env).await;
    for past in [
        drain(env.rt.watch_settled(&suspended, 1000).expect("watch")).await,
        drain(env.rt.watch_settled(&cancelled, 1000).expect("watch")).await,
        drain(env.rt.watch(&cancelled, 1000).expect("watch")).await,
    ] {
        assert!(past.is_empty(), "{:?}", kinds(&past));
    }
}

/// A run that suspends or ends writes no snapshot for it: read back, it folds its records into
/// its first state, and reads as the record its waiter was given.
#[test]
fn a_settled_run_writes_no_snapshot_and_reads_back_from_its_records_alike() {
    let home = Home::new();
    let file = home.file("twice.yaml", TWICE);
    let run = |args: &[&str], code: i32| {
        let out = home.weft(args);
        assert_eq!(out.code, code, "{args:?}: {out:?}");
        out.json()
    };
    let suspended = run(&["run", path_str(&file), "--run-id", "s", "--json"], 3);
    run(&["run", path_str(&file), "--run-id", "e", "--json"], 3);
    run(&["resume", "e", "--data", "{}", "--json"], 3);
    let ended = run(&["resume", "e", "--data", "{}", "--json"], 0);
    assert_eq!(ended["status"], "success", "{ended}");

    let store = store_of(&home.home());
    for id in ["s", "e"] {
        assert_eq!(store.snapshot(id).expect("read"), None, "{id}");
    }
    drop(store);
    assert_eq!(home.show("s"), suspended);
    assert_eq!(home.show("e"), ended);
}

/// A run of many transitions is snapshotted whenever the records since its last snapshot
/// outweigh it `snapshot_ratio` times (and `snapshot_min_bytes`): a reload folds fewer records
/// than that, and reads as the record its waiter was given.
#[test]
fn a_long_run_is_snapshotted_once_its_records_outweigh_the_last_snapshot() {
    let (_dir, home, file) = home_and_workflow("count.yaml", COUNT_TO_30);
    let waited = in_a_process(&home, 512, async |rt| {
        let w = rt.load_workflow(&file).await.expect("load");
        let id = rt.start(&w, json!({"n": 0}), None).await.expect("start");
        rt.wait(&id).await.expect("wait")
    });
    assert_eq!(waited.result, Some(json!({"n": 30})));

    let store = store_of(&home);
    let (snapshot, tail) = snapshot_and_tail(store.as_ref(), &waited.run_id);
    assert!(snapshot > 0, "no snapshot");
    assert!(
        tail < (RATIO * snapshot).max(512),
        "{tail} bytes of records after a snapshot of {snapshot}"
    );
    drop(store);

    let shown = in_a_process(&home, 512, async |rt| {
        rt.show(&waited.run_id).await.expect("show")
    });
    assert_eq!(shown, waited);
}

/// A run taken up by a new runtime at every resume (a process of its own each time) counts
/// the records it found after its snapshot toward the next one: however often it was resumed,
/// a reload folds less than `snapshot_min_bytes` of them (or `snapshot_ratio` times the
/// snapshot's size).
#[test]
fn a_run_resumed_by_a_new_process_each_time_keeps_its_records_after_the_snapshot_bounded() {
    let (_dir, home, file) = home_and_workflow("again.yaml", AGAIN);
    let min = 4096;
    let first = in_a_process(&home, min, async |rt| {
        let w = rt.load_workflow(&file).await.expect("load");
        let id = rt.start(&w, json!({}), None).await.expect("start");
        rt.wait(&id).await.expect("wait")
    });
    assert_eq!(first.status, RunStatus::Suspended);
    let id = first.run_id;
    // Enough resumes that their records outweigh `snapshot_min_bytes` twice over.
    for _ in 0..24 {
        let rec = in_a_process(&home, min, async |rt| {
            rt.resume(&id, req(None, None, None, json!({})))
                .await
                .expect("resume");
            rt.wait(&id).await.expect("wait")
        });
        assert_eq!(rec.status, RunStatus::Suspended, "suspended again");
    }

    let store = store_of(&home);
    let all: usize = store
        .records(&id, (0, 0))
        .expect("records")
        .iter()
        .map(|(_, r)| r.len())
        .sum();
    assert!(
        all > 2 * min,
        "the resumes stored only {all} bytes of records"
    );
    let (snapshot, tail) = snapshot_and_tail(store.as_ref(), &id);
    assert!(
        tail < (RATIO * snapshot).max(min),
        "{tail} bytes of records after a snapshot of {snapshot}"
    );
}

/// A temp dir (removed when dropped) holding a home and the workflow file `name` made of
/// `yaml`: the dir, the home and the file.
fn home_and_workflow(
    name: &str,
    yaml: &str,
) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("home");
    let file = dir.path().join(name);
    std::fs::write(&file, crate::common::plugin_paths(yaml)).expect("write workflow");
    (dir, home, file)
}

/// The `snapshot_ratio` of the runtimes of [`in_a_process`].
const RATIO: usize = 2;

/// `act` on a runtime over `home` (with `snapshot_min_bytes` at `min`, `snapshot_ratio` at
/// [`RATIO`]) in a tokio runtime of its own, gone with every task after: as a process of its
/// own would.
fn in_a_process<T>(
    home: &std::path::Path,
    min: usize,
    act: impl AsyncFnOnce(weft::Runtime) -> T,
) -> T {
    let config = crate::common::config_for(home)
        .with_snapshot_min_bytes(min)
        .with_snapshot_ratio(RATIO);
    tokio::runtime::Runtime::new()
        .expect("tokio")
        .block_on(async {
            let rt = weft::Runtime::open(home, config).expect("open");
            act(rt).await
        })
}

/// The size of `run`'s snapshot (0 without one), and the bytes of its records after it: what
/// loading it folds.
fn snapshot_and_tail(store: &dyn weft::internal::Store, run: &str) -> (usize, usize) {
    let snapshot = store.snapshot(run).expect("read");
    let after = match &snapshot {
        Some(bytes) => {
            let snapshot: Value = serde_json::from_slice(bytes).expect("JSON");
            let covers = |i: usize| snapshot["covers"][i].as_u64().expect("covers a record");
            (covers(0), u32::try_from(covers(1)).expect("a sub") + 1)
        }
        None => (0, 0),
    };
    let tail = store
        .records(run, after)
        .expect("records")
        .iter()
        .map(|(_, r)| r.len())
        .sum();
    (snapshot.map_or(0, |s| s.len()), tail)
}

/// One step that suspends again at every resume whose data has no `go`.
const AGAIN: &str = r#"
id: again
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: ask, plugin: kit, step: suspend, config: { suspend-again-unless: go } }
"#;

/// Counts to 30, one plugin step per iteration.
const COUNT_TO_30: &str = r#"
id: count
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - loop:
      id: count
      do-until: '.output.n >= 30'
      do: { id: inc, plugin: kit, step: inc }
"#;

// ---------------------------------------------------------------------------------------------
// Stored entries this weft cannot read

/// A stored JSON value, changed by `edit`.
fn edited(bytes: &[u8], edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut value: Value = serde_json::from_slice(bytes).expect("stored JSON");
    edit(&mut value);
    serde_json::to_vec(&value).expect("JSON")
}

/// The store of `home` as its `weft` commands see it ([`Home::new`]): the sled store in the
/// home, or the home's PostgreSQL schema in postgres mode. Dropped, it lets go of every run it
/// claimed or made.
fn store_of(home: &std::path::Path) -> Box<dyn weft::internal::Store> {
    match crate::backend::store_url_for(home) {
        Some(url) => Box::new(weft::internal::PgStore::open(&url).expect("open the store")),
        None => Box::new(weft::internal::SledStore::open(home, 8).expect("open the store")),
    }
}

/// Replaces the snapshot of `run` (a run no process drives) with `snapshot`.
fn put_snapshot(store: &dyn weft::internal::Store, run: &str, snapshot: &[u8]) {
    // On a shared store only the process holding a run writes it (a no-op on sled).
    assert_eq!(
        store.claim(run).expect("claim"),
        weft::internal::Claim::Ours,
        "nobody drives {run}"
    );
    store.put_snapshot(run, snapshot).expect("write");
}

/// A snapshot of `run` as of its first state, which the records after it fold into: what a run
/// that has written no snapshot of its own stands for.
fn first_snapshot(store: &dyn weft::internal::Store, run: &str) -> Vec<u8> {
    let base: Value =
        serde_json::from_slice(&store.base(run).expect("read").expect("base")).expect("JSON");
    serde_json::to_vec(&json!({"covers": [0, 0], "state": base})).expect("JSON")
}

/// Writes bad entries into `home`'s store through the store's own interface: runs `newer`
/// (snapshot of a newer format), `broken` (snapshot naming an entry the graph lacks),
/// `garbled` (snapshot that is not JSON), `newgraph` (graph of a newer format) and `orphan`
/// (running, no process drives it, first state of a newer format). `good` stays as it is.
fn spoil(home: &std::path::Path) {
    let store = store_of(home);
    let store = store.as_ref();
    let snapshot = |run: &str| first_snapshot(store, run);
    let newer = edited(&snapshot("newer"), |v| v["state"]["format"] = json!(7));
    put_snapshot(store, "newer", &newer);
    let broken = edited(&snapshot("broken"), |v| {
        v["state"]["root"]["current"]["entry"] = json!(999)
    });
    put_snapshot(store, "broken", &broken);
    put_snapshot(store, "garbled", b"{\"covers\": [");

    for (run, graph_format, state_format, status) in [
        ("newgraph", 7, 1, RunStatus::Suspended),
        ("orphan", 1, 7, RunStatus::Running),
    ] {
        plant_copy(
            store,
            "good",
            run,
            status,
            |graph| graph["format"] = json!(graph_format),
            |state| state["format"] = json!(state_format),
        );
    }
    store.sync().expect("sync");
}

/// Stores a copy of run `good` as run `run` with status `status`, through the store's own
/// interface: its stored graph changed by `graph`, its first state (given `run` as its id)
/// by `state`.
fn plant_copy(
    store: &dyn weft::internal::Store,
    good: &str,
    run: &str,
    status: RunStatus,
    graph: impl FnOnce(&mut Value),
    state: impl FnOnce(&mut Value),
) {
    use weft::internal::NewRun;
    let definition = edited(
        &store.definition(good).expect("read").expect("graph"),
        graph,
    );
    let base = edited(&store.base(good).expect("read").expect("base"), |v| {
        v["run_id"] = json!(run);
        state(v);
    });
    let mut summary = store.summary(good).expect("read").expect("summary");
    summary.run_id = run.into();
    summary.status = status;
    store
        .create_run(NewRun {
            summary: &summary,
            definition: &weft::internal::Definition::new(definition),
            plugins: &[],
            base: &base,
            fresh_id: false,
        })
        .expect("create");
}

#[tokio::test]
async fn stored_entries_of_a_newer_format_or_corrupt_are_refused_naming_the_run() {
    let home = Home::new();
    let file = home.file("twice.yaml", TWICE);
    for run in ["good", "newer", "broken", "garbled"] {
        let out = home.weft(&["run", path_str(&file), "--run-id", run]);
        assert_eq!(out.code, 3, "{out:?}");
    }
    spoil(&home.home());

    let newer = "run newer: stored state has format 7, this weft reads format 1: upgrade weft";
    let refusals = [
        (&["show", "newer"][..], newer),
        (&["resume", "newer", "--data", "{}"][..], newer),
        (
            &["show", "broken"][..],
            "run broken: stored state is corrupt: ",
        ),
        (
            &["resume", "broken", "--data", "{}"][..],
            "run broken: stored state is corrupt: ",
        ),
        (
            &["show", "garbled"][..],
            "run garbled: stored state is corrupt: ",
        ),
        (
            &["show", "newgraph"][..],
            "run newgraph: stored graph has format 7, this weft reads format 1: upgrade weft",
        ),
        // With no selector and no data: recovery of the orphaned running run (S101).
        (
            &["resume", "orphan"][..],
            "run orphan: stored state has format 7, this weft reads format 1: upgrade weft",
        ),
    ];
    for (args, message) in refusals {
        let out = home.weft(args);
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        assert!(
            out.stderr.contains(&format!("error: {message}")),
            "{args:?}: {out:?}"
        );
        assert!(!out.stderr.contains("panicked"), "{args:?}: {out:?}");
    }

    // The other runs are unaffected.
    assert_eq!(home.weft(&["runs"]).code, 0);
    assert_eq!(home.show("good")["status"], "suspended");
    let resumed = home.weft(&["resume", "good", "--data", "{}", "--json"]);
    assert_eq!(resumed.code, 3, "suspended again at `second`: {resumed:?}");

    // The same through the embedding API.
    let rt = weft::Runtime::open(&home.home(), home.config()).expect("open");
    let err = rt.show("newer").await.expect_err("refused").to_string();
    assert_eq!(err, newer);
    let err = rt.recover("orphan").await.expect_err("refused").to_string();
    assert!(
        err.starts_with("run orphan: stored state has format 7"),
        "{err}"
    );
    assert_eq!(
        rt.show("good").await.expect("show").status,
        RunStatus::Suspended
    );
}

// ---------------------------------------------------------------------------------------------
// One call that answers once the run settles

/// The paths a record stands suspended at.
fn suspended_at(rec: &weft::RunRecord) -> Vec<String> {
    rec.suspended
        .iter()
        .flatten()
        .map(|s| s.path.clone())
        .collect()
}

#[tokio::test]
async fn start_and_wait_and_resume_and_wait_answer_once_the_run_settles_again() {
    let env = Env::new();
    let w = env.load(&env.file("twice.yaml", TWICE)).await;
    let first = env
        .rt
        .start_and_wait(&w, json!({"n": 1}), None)
        .await
        .expect("start");
    assert_eq!(first.status, RunStatus::Suspended);
    assert_eq!(suspended_at(&first), ["first"]);
    let id = first.run_id.clone();

    let refused = env
        .rt
        .resume_and_wait(&id, req(Some("nowhere"), None, None, json!({})))
        .await;
    assert!(
        refused.is_err(),
        "a resume of no suspended step: {refused:?}"
    );
    assert_eq!(
        env.rt.show(&id).await.expect("show"),
        first,
        "left as it was"
    );

    let second = env
        .rt
        .resume_and_wait(&id, req(None, None, None, json!({"add": 1})))
        .await
        .expect("resume");
    assert_eq!(second.status, RunStatus::Suspended);
    assert_eq!(suspended_at(&second), ["second"]);
    assert_eq!(second.steps["first"].status, StepStatus::Success);

    let end = env
        .rt
        .resume_and_wait(&id, req(None, None, None, json!({"add": 2})))
        .await
        .expect("resume");
    assert_eq!(end.status, RunStatus::Success, "{end:?}");
    assert_eq!(end, env.rt.show(&id).await.expect("show"));
    assert_eq!(end, env.rt.wait(&id).await.expect("wait"));
}

#[tokio::test]
async fn every_waiter_of_a_running_run_gets_its_record_when_it_ends() {
    let (env, clock) = manual_env();
    let (id, _) = napping(&env, 60_000).await;
    // Each asks the run's actor on its first poll; one gives up at once.
    let mut waiters: Vec<_> = (0..3).map(|_| Box::pin(env.rt.wait(&id))).collect();
    for waiter in &mut waiters {
        assert!(futures::poll!(waiter).is_pending(), "the run is asleep");
    }
    let gave_up = Box::pin(env.rt.wait(&id));
    drop(futures::FutureExt::now_or_never(gave_up));

    clock.advance(60_000);
    let records: Vec<_> = tokio::time::timeout(HANG_GUARD, futures::future::join_all(waiters))
        .await
        .expect("every waiter is answered")
        .into_iter()
        .map(|r| r.expect("wait"))
        .collect();
    for rec in &records {
        assert_eq!(rec.status, RunStatus::Success);
        assert_eq!(rec.result, Some(json!("woke")));
    }
    assert!(records.windows(2).all(|p| p[0] == p[1]), "{records:?}");
}

/// Awaits `call`, failing (not hanging) when it is never answered.
async fn answered<T>(what: &str, call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(HANG_GUARD, call)
        .await
        .unwrap_or_else(|_| panic!("`{what}` was never answered"))
}

/// Calls that reach a run's actor while it suspends, resumes, is cancelled, ends and retires
/// are each answered, and the answers agree with what is stored. A request that landed in the
/// queue of an actor that had just stopped reading it was once waited for forever (about once
/// in ten thousand runs under load): this drives a few hundred such races on two threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_racing_a_runs_end_are_each_answered_and_agree_with_the_store() {
    let env = Env::new();
    let once = Arc::new(env.load(&env.file("once.yaml", SUSPEND)).await);
    let inc = Arc::new(env.load(&env.file("inc.yaml", INC)).await);
    let tasks: Vec<_> = (0..4)
        .map(|task| {
            let (rt, once, inc) = (env.rt.clone(), once.clone(), inc.clone());
            tokio::spawn(async move {
                for n in 0..25 {
                    // Waited for as soon as started: the actor of a one-step run retires at once.
                    let id = answered("start", rt.start(&inc, json!({"n": n}), None))
                        .await
                        .expect("start");
                    let end = answered("wait", rt.wait(&id)).await.expect("wait");
                    assert_eq!(end.status, RunStatus::Success, "{end:?}");

                    let id = answered("start", rt.start(&once, json!({"n": n}), None))
                        .await
                        .expect("start");
                    let shown = tokio::spawn({
                        let (rt, id) = (rt.clone(), id.clone());
                        async move { answered("show", rt.show(&id)).await }
                    });
                    let asked = answered("wait", rt.wait(&id)).await.expect("wait");
                    assert_eq!(asked.status, RunStatus::Suspended, "{asked:?}");
                    shown.await.expect("task").expect("show");

                    // A wait, a show and (on every other run) a cancel race the resume.
                    let cancels = (n + task) % 2 == 0;
                    let racing = tokio::spawn({
                        let (rt, id) = (rt.clone(), id.clone());
                        async move {
                            let waited = answered("wait", rt.wait(&id)).await.expect("wait");
                            let shown = answered("show", rt.show(&id)).await.expect("show");
                            let cancelled = if cancels {
                                Some(answered("cancel", rt.cancel(&id)).await)
                            } else {
                                None
                            };
                            (waited, shown, cancelled)
                        }
                    });
                    let resumed = if n % 2 == 0 {
                        answered(
                            "resume_and_wait",
                            rt.resume_and_wait(&id, req(None, None, None, json!({}))),
                        )
                        .await
                        .map(|r| r.status)
                    } else {
                        let resumed =
                            answered("resume", rt.resume(&id, req(None, None, None, json!({}))))
                                .await;
                        let after = answered("wait", rt.wait(&id)).await.expect("wait");
                        resumed.map(|()| after.status)
                    };
                    let (waited, shown, cancelled) = racing.await.expect("task");
                    for status in [waited.status, shown.status] {
                        assert!(
                            matches!(status, RunStatus::Suspended | RunStatus::Running)
                                || status.is_ended(),
                            "{status}"
                        );
                    }

                    let end = answered("wait", rt.wait(&id)).await.expect("wait");
                    // A cancel that was applied (before the resume or after it) ends the run
                    // cancelled; else the resume ran it to its end.
                    let expected = match &cancelled {
                        Some(Ok(())) => RunStatus::Cancelled,
                        _ => RunStatus::Success,
                    };
                    assert_eq!(
                        end.status, expected,
                        "resume {resumed:?}, cancel {cancelled:?}"
                    );
                    if let Ok(status) = resumed {
                        assert_eq!(status, end.status, "the resume's caller saw the end");
                    }
                    let stored = answered("show", rt.show(&id)).await.expect("show");
                    assert_eq!(stored, end, "what `show` and `wait` answer agree");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a task failed");
    }
}

// The injectable clock

/// 2030-01-01T00:00:00Z: where the manual clocks of these tests start.
const T0: i64 = 1_893_456_000_000;

/// A runtime whose clock stands at [`T0`] until the test moves it.
fn manual_env() -> (Env, ManualClock) {
    let clock = ManualClock::new(T0);
    let config = crate::common::config().with_clock(clock.clone());
    (Env::with_config(config), clock)
}

/// A run that sleeps `ms`, then maps `"woke"`, once it sleeps: its id, and its `step-waiting`.
async fn napping(env: &Env, ms: u64) -> (String, Arc<StoredEvent>) {
    let yaml = format!(
        "id: nap\nsteps:\n  - sleep: {{ id: nap, ms: {ms} }}\n  - map: {{ id: after, expr: '\"woke\"' }}\n"
    );
    let w = env.load(&env.file("nap.yaml", &yaml)).await;
    let id = env.rt.start(&w, json!({}), None).await.expect("start");
    let mut rx = env.rt.watch(&id, 1).expect("watch");
    let waiting = until_event(&mut rx, "step-waiting", Some("nap")).await;
    (id, waiting)
}

#[tokio::test]
async fn s37_an_hour_long_sleep_ends_when_the_manual_clock_passes_it() {
    let (env, clock) = manual_env();
    let (id, waiting) = napping(&env, 3_600_000).await;
    assert_eq!(
        waiting.data,
        json!({ "until": rfc3339(T0 + 3_600_000) }),
        "the wake instant is read on the manual clock"
    );
    assert_eq!(waiting.at, rfc3339(T0));

    clock.advance(3_600_000);
    let rec = settle(&env, &id).await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    assert_eq!(rec.result, Some(json!("woke")));
    assert_eq!(rec.created_at, rfc3339(T0));
    assert_eq!(rec.steps["nap"].started_at, Some(rfc3339(T0)));
    assert_eq!(rec.steps["nap"].ended_at, Some(rfc3339(T0 + 3_600_000)));
    assert_eq!(rec.updated_at, rfc3339(T0 + 3_600_000));
}

#[tokio::test]
async fn s52_a_ten_minute_retry_wait_ends_when_the_manual_clock_passes_it() {
    let (env, clock) = manual_env();
    let yaml = r#"
id: flaky
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: f, plugin: kit, step: fail, config: { succeed-on-attempt: 1 }, retry: { attempts: 2, delay-ms: 600000 } }
"#;
    let w = env.load(&env.file("flaky.yaml", yaml)).await;
    let id = env.rt.start(&w, json!({}), None).await.expect("start");
    let mut rx = env.rt.watch(&id, 1).expect("watch");
    let retrying = until_event(&mut rx, "step-retrying", Some("f")).await;
    assert_eq!(retrying.at, rfc3339(T0));

    clock.advance(600_000);
    let rec = settle(&env, &id).await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    assert_eq!(rec.steps["f"].attempts, Some(2));
    assert_eq!(rec.steps["f"].ended_at, Some(rfc3339(T0 + 600_000)));
    let events = env.events(&id);
    let succeeded = events
        .iter()
        .find(|e| kinds(std::slice::from_ref(*e)) == ["step-succeeded:f"])
        .map(|e| e.at.clone());
    assert_eq!(succeeded, Some(rfc3339(T0 + 600_000)));
}

// ---------------------------------------------------------------------------------------------
// Settings

/// Three fast steps, then one that runs until it is aborted.
const FAST_THEN_HELD: &str = r#"
id: fast-then-held
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: a, plugin: kit, step: inc }
  - { id: b, plugin: kit, step: inc }
  - { id: c, plugin: kit, step: inc }
  - { id: w, plugin: kit, step: wait-abort }
"#;

/// A suspension, then a step that runs until it is aborted.
const ASK_THEN_HELD: &str = r#"
id: ask-then-held
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: ask, plugin: kit, step: suspend }
  - { id: w, plugin: kit, step: wait-abort }
"#;

/// A `start_and_wait` or `resume_and_wait` on a task of its own, answered once the run settles.
type Settling = tokio::task::JoinHandle<Result<weft::RunRecord, weft::RuntimeError>>;

/// Starts [`ASK_THEN_HELD`] until it suspends, then resumes it with `resume_and_wait` on a task
/// of its own: the run's id, and the task.
async fn resumed_in_background(env: &Env) -> (String, Settling) {
    let w = env.load(&env.file("held.yaml", ASK_THEN_HELD)).await;
    let rec = env
        .rt
        .start_and_wait(&w, json!({}), None)
        .await
        .expect("start");
    assert_eq!(rec.status, RunStatus::Suspended);
    let resuming = tokio::spawn({
        let (rt, id) = (env.rt.clone(), rec.run_id.clone());
        async move {
            rt.resume_and_wait(&id, req(None, None, None, json!({})))
                .await
        }
    });
    (rec.run_id, resuming)
}

/// Cancels the run [`resumed_in_background`] resumed: its `resume_and_wait` then answers with
/// the cancelled run.
async fn cancel_resumed(env: &Env, id: &str, resuming: Settling) {
    env.rt.cancel(id).await.expect("cancel accepted");
    let rec = answered("resume_and_wait", resuming)
        .await
        .expect("task")
        .expect("resume");
    assert_eq!(rec.status, RunStatus::Cancelled);
}

/// An environment with `config` whose background syncs wait an hour
/// (`background_sync_after`): a run syncs only when something waits on its transitions.
fn syncs_put_off(config: weft::RuntimeConfig) -> Env {
    Env::with_config(config.with_background_sync_after(Duration::from_secs(3600)))
}

/// A figure of the runtime's metrics (Prometheus text), `None` when it is not there.
fn metric(env: &Env, name: &str) -> Option<f64> {
    crate::common::metric(&env.rt.metrics().expect("metrics"), name)
}

/// S100 with the background sync put off (`background_sync_after`): a run nobody watches
/// stores its fast steps' transitions and syncs them once, at its end, and its record and
/// events are all there.
#[tokio::test]
async fn s100_a_run_nobody_watches_syncs_its_fast_steps_at_its_end_only() {
    // The count of syncs is sled's: a shared store syncs each transition for the other
    // processes that follow the run.
    let env = syncs_put_off(crate::common::sled_config());
    let rec = env.run(&ten_fast_steps(), json!({ "n": 0 })).await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    assert_eq!(rec.result, Some(json!({ "n": 10 })));
    // One sync for the run's start (its creation with its first transition), one for its end:
    // none for the nine transitions between, which nothing waited on.
    assert_eq!(metric(&env, "weft_store_syncs_total"), Some(2.0));
    let events = env.events(&rec.run_id);
    assert_gapless(&events.iter().map(|e| e.seq).collect::<Vec<_>>());
    assert_eq!(
        events
            .iter()
            .filter(|e| kinds(std::slice::from_ref(*e))[0].starts_with("step-succeeded"))
            .count(),
        10
    );
}

/// A sequence of ten fast steps, each adding one to `n`.
fn ten_fast_steps() -> String {
    format!(
        "id: ten\nplugins:\n  kit: {{ wasm: \"{{testkit}}\" }}\nsteps:\n{}",
        (0..10)
            .map(|i| format!("  - {{ id: s{i}, plugin: kit, step: inc }}\n"))
            .collect::<String>()
    )
}

/// S100 with the background sync put off: `start_and_wait`'s start waits for no sync of its
/// own, its caller being answered once the run settles, after a sync that covers it.
#[tokio::test]
async fn s100_start_and_wait_shares_the_sync_of_the_runs_end() {
    let env = syncs_put_off(crate::common::sled_config());
    let w = env.load(&env.file("ten.yaml", &ten_fast_steps())).await;
    let rec = env
        .rt
        .start_and_wait(&w, json!({ "n": 0 }), None)
        .await
        .expect("start");
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    assert_eq!(rec.result, Some(json!({ "n": 10 })));
    // One sync for the run's creation, its start, its steps and its end together.
    assert_eq!(metric(&env, "weft_store_syncs_total"), Some(1.0));
    let events = env.events(&rec.run_id);
    assert_gapless(&events.iter().map(|e| e.seq).collect::<Vec<_>>());
    assert_eq!(kinds(&events)[0], "run-started");
}

/// Waits until `succeeded` steps have succeeded and one more runs, reading metrics rather than
/// watching (a watch has the actor sync).
async fn until_held_step_runs(env: &Env, succeeded: f64) {
    tokio::time::timeout(HANG_GUARD, async {
        while metric(env, "weft_step_duration_seconds_count{outcome=\"success\"}")
            != Some(succeeded)
            || metric(env, "weft_steps_in_flight") != Some(1.0)
        {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the held step never started");
}

/// Waits until the only run is listed as running; `what` names it in the failure.
async fn until_listed_running(env: &Env, what: &str) {
    tokio::time::timeout(HANG_GUARD, async {
        while env
            .rt
            .runs(None, None)
            .expect("runs")
            .first()
            .map(|r| r.status)
            != Some(RunStatus::Running)
        {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what} was never listed as running"));
}

/// Starts [`FAST_THEN_HELD`] as run `held` with `start_and_wait` on a task of its own, and
/// waits until its fast steps ended and the held one runs.
async fn started_in_background(env: &Env) -> Settling {
    let w = env.load(&env.file("held.yaml", FAST_THEN_HELD)).await;
    let starting = tokio::spawn({
        let rt = env.rt.clone();
        async move {
            rt.start_and_wait(&w, json!({ "n": 0 }), Some("held".into()))
                .await
        }
    });
    until_held_step_runs(env, 3.0).await;
    starting
}

/// Cancels run `held` that [`started_in_background`] started: its `start_and_wait` then
/// answers with the cancelled run.
async fn cancel_started(env: &Env, starting: Settling) {
    env.rt.cancel("held").await.expect("cancel accepted");
    let rec = answered("start_and_wait", starting)
        .await
        .expect("task")
        .expect("start");
    assert_eq!(rec.status, RunStatus::Cancelled);
}

/// S100 with the background sync put off: a run started by `start_and_wait` is left out of
/// listings while its creation is not durable, and listed as running once it is (here once a
/// `show`, which answers with what is durable, made it so).
#[tokio::test]
async fn s100_a_run_started_by_start_and_wait_is_listed_once_its_creation_is_durable() {
    let env = syncs_put_off(crate::common::sled_config());
    let starting = started_in_background(&env).await;
    assert!(
        env.rt.runs(None, None).expect("runs").is_empty(),
        "its creation is not durable yet"
    );
    let shown = env.rt.show("held").await.expect("show");
    assert_eq!(shown.status, RunStatus::Running);
    let listed = env.rt.runs(None, None).expect("runs");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].status, RunStatus::Running);
    cancel_started(&env, starting).await;
}

/// S100 with the default settings: a run started by `start_and_wait` is listed as running once
/// a sync in the background covers its start, though nothing else happens meanwhile (its last
/// step runs until aborted).
#[tokio::test]
async fn s100_a_run_started_by_start_and_wait_is_listed_once_a_background_sync_covers_it() {
    let env = Env::new();
    let starting = started_in_background(&env).await;
    until_listed_running(&env, "the started run").await;
    cancel_started(&env, starting).await;
}

/// S100 with the background sync put off: `resume_and_wait`'s resume waits for no sync of its
/// own, its caller being answered once the run settles, after a sync that covers it.
#[tokio::test]
async fn s100_resume_and_wait_shares_the_sync_of_the_runs_end() {
    let env = syncs_put_off(crate::common::sled_config());
    let w = env.load(&env.file("suspend.yaml", SUSPEND)).await;
    let rec = env
        .rt
        .start_and_wait(&w, json!({ "n": 1 }), None)
        .await
        .expect("start");
    assert_eq!(rec.status, RunStatus::Suspended);
    // Its start and its suspension, together.
    assert_eq!(metric(&env, "weft_store_syncs_total"), Some(1.0));
    let rec = env
        .rt
        .resume_and_wait(&rec.run_id, req(None, None, None, json!({ "echo": "hi" })))
        .await
        .expect("resume");
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    // Only its end: the resume and the resumed step's end shared its sync.
    assert_eq!(metric(&env, "weft_store_syncs_total"), Some(2.0));
    let events = env.events(&rec.run_id);
    assert_gapless(&events.iter().map(|e| e.seq).collect::<Vec<_>>());
    assert!(
        kinds(&events).contains(&"run-resumed".to_owned()),
        "{:?}",
        kinds(&events)
    );
}

/// S100 with the background sync put off: while `resume_and_wait`'s resume is not yet durable
/// the run is listed as suspended, and a second resume, refused because the first applied, is
/// told so only once the first is durable, the listing then saying running.
#[tokio::test]
async fn s100_a_refusal_that_rests_on_a_resume_still_syncing_waits_for_it() {
    let env = syncs_put_off(crate::common::sled_config());
    let (id, resuming) = resumed_in_background(&env).await;
    // The resumed step ended, and the held one runs.
    until_held_step_runs(&env, 1.0).await;
    let listed = |env: &Env| env.rt.runs(None, None).expect("runs")[0].status;
    assert_eq!(
        listed(&env),
        RunStatus::Suspended,
        "the resume is not durable yet"
    );
    let refused = env.rt.resume(&id, req(None, None, None, json!({}))).await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(
        listed(&env),
        RunStatus::Running,
        "told after the resume was durable"
    );
    cancel_resumed(&env, &id, resuming).await;
}

/// S100 with the default settings: a run resumed by `resume_and_wait` is listed as running once
/// a sync in the background covers the resume, though nothing else happens meanwhile (its
/// next step runs until aborted).
#[tokio::test]
async fn s100_a_resumed_run_is_listed_running_once_a_background_sync_covers_its_resume() {
    let env = Env::new();
    let (id, resuming) = resumed_in_background(&env).await;
    until_listed_running(&env, "the resumed run").await;
    cancel_resumed(&env, &id, resuming).await;
}

/// S87 with the background sync put off: a watcher that subscribes while the run's last
/// transitions wait for a sync gets their events at once, not when the run next needs a sync
/// (here, never before it is cancelled).
#[tokio::test]
async fn s87_a_watcher_joining_while_transitions_wait_for_their_sync_gets_them_at_once() {
    let env = syncs_put_off(crate::common::config());
    let w = env.load(&env.file("held.yaml", FAST_THEN_HELD)).await;
    let id = env
        .rt
        .start(&w, json!({ "n": 0 }), None)
        .await
        .expect("start");
    // The three steps ended and the last one runs.
    until_held_step_runs(&env, 3.0).await;
    let mut rx = env.rt.watch(&id, 1).expect("watch");
    let started = until_event(&mut rx, "step-started", Some("w")).await;
    assert_eq!(started.data, json!({ "input": { "n": 3 } }));
    env.rt.cancel(&id).await.expect("cancel accepted");
    assert_eq!(settle(&env, &id).await.status, RunStatus::Cancelled);
}

#[tokio::test]
async fn s87_a_watcher_behind_a_one_event_live_buffer_catches_up_without_gap() {
    let env = Env::with_config(crate::common::config().with_watch_buffer(1));
    let yaml = r#"
id: burst
steps:
  - loop: { id: l, do-until: '.output >= 300', do: { map: { id: m, expr: '.input + 1' } } }
"#;
    let w = env.load(&env.file("burst.yaml", yaml)).await;
    let id = env.rt.start(&w, json!(0), None).await.expect("start");
    let seen = drain(env.rt.watch(&id, 1).expect("watch")).await;
    assert_eq!(
        kinds(&seen).last().map(String::as_str),
        Some("run-succeeded")
    );
    assert_gapless(&seen.iter().map(|e| e.seq).collect::<Vec<_>>());
    assert_eq!(seen, env.events(&id));
}

// ---------------------------------------------------------------------------------------------
// The embedding API

/// Stores `orphan`, a copy of run `good` as it was first stored (pending), as if the process
/// that stored it died before driving it (S114).
fn orphan_of(home: &std::path::Path, good: &str, orphan: &str) {
    let store = store_of(home);
    plant_copy(
        store.as_ref(),
        good,
        orphan,
        RunStatus::Pending,
        |_| {},
        |_| {},
    );
    store.sync().expect("sync");
}

#[tokio::test]
async fn s101_s114_recover_drives_an_orphaned_run_and_refuses_a_suspended_one() {
    let home = Home::new();
    let file = home.file("twice.yaml", TWICE);
    assert_eq!(
        home.weft(&["run", path_str(&file), "--run-id", "good"])
            .code,
        3
    );
    orphan_of(&home.home(), "good", "orphan");
    orphan_of(&home.home(), "good", "bare");

    // `weft resume RUN` with no selector and no data recovers it (S101).
    let out = home.weft(&["resume", "bare", "--json"]);
    assert_eq!(out.code, 3, "recovered and suspended at `first`: {out:?}");
    assert_eq!(out.json()["suspended"][0]["path"], "first");

    let rt = weft::Runtime::open(&home.home(), home.config()).expect("open");
    rt.recover("orphan").await.expect("recovered");
    let rec = tokio::time::timeout(HANG_GUARD, rt.wait("orphan"))
        .await
        .expect("the run never settled")
        .expect("wait");
    assert_eq!(rec.status, RunStatus::Suspended);
    assert_eq!(rec.suspended.expect("suspended")[0].path, "first");

    let err = rt.recover("good").await.expect_err("refused");
    assert!(
        matches!(
            err,
            weft::RuntimeError::NotRecoverable {
                status: RunStatus::Suspended,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "run good is suspended, not running: only a running or pending run is recovered; resume a suspended one"
    );
    assert!(matches!(
        rt.recover("nope").await,
        Err(weft::RuntimeError::UnknownRun(_))
    ));
}

/// Two steps around an hour-long sleep: a process killed during the sleep leaves the run
/// `running` with nobody driving it.
/// A step, then an hour's sleep, then a step: a run that waits long enough to be killed.
pub(crate) const NAPPER: &str = r#"
id: napper
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: before, plugin: kit, step: inc }
  - sleep: { id: nap, ms: 3600000 }
  - { id: after, plugin: kit, step: inc }
"#;

#[tokio::test]
async fn s101_s103_recover_takes_over_a_run_whose_weft_process_was_killed() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use weft::{Clock, Runtime, RuntimeError, SystemClock};

    let home = Home::new();
    let file = home.file("napper.yaml", NAPPER);
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .env_remove("WEFT_HOME")
        .env_remove("WEFT_LOG")
        .env_remove("WEFT_STORE")
        .arg("--home")
        .arg(home.home())
        .args(crate::common::store_args_for(&home.home()))
        .args([
            "run",
            path_str(&file),
            "--run-id",
            "held",
            "--input",
            r#"{"n": 1}"#,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weft run");
    // `weft run` prints a progress line per stored event: once the sleep waits, kill it.
    let stderr = child.stderr.take().expect("stderr");
    let mut seen = Vec::new();
    for line in BufReader::new(stderr).lines() {
        let line = line.expect("read stderr");
        let waiting = line.contains("step-waiting nap");
        seen.push(line);
        if waiting {
            break;
        }
    }
    assert!(
        seen.last().is_some_and(|l| l.contains("step-waiting nap")),
        "weft ended before the sleep: {seen:?}"
    );
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");

    // An hour later, by the clock the new runtime reads: the sleep is overdue (S103).
    let later = SystemClock.now_ms() + 2 * 3_600_000;
    let rt = Runtime::open(
        &home.home(),
        home.config().with_clock(ManualClock::new(later)),
    )
    .expect("open the home the dead process held");
    let rec = rt.show("held").await.expect("show");
    assert_eq!(
        rec.status,
        RunStatus::Running,
        "left running by the dead process"
    );

    rt.recover("held").await.expect("recovered");
    let rec = tokio::time::timeout(HANG_GUARD, rt.wait("held"))
        .await
        .expect("the recovered run never ended")
        .expect("wait");
    assert_eq!(rec.status, RunStatus::Success, "{:?}", rec.error);
    assert_eq!(rec.result, Some(json!({"n": 3})));
    let before = kinds(&drain(rt.watch("held", 1).expect("watch")).await)
        .into_iter()
        .filter(|k| k == "step-started:before")
        .count();
    assert_eq!(
        before, 1,
        "a step whose end was stored never runs again (S102)"
    );

    // An ended run is not taken over again.
    let err = rt.recover("held").await.expect_err("refused");
    assert!(
        matches!(
            err,
            RuntimeError::NotRecoverable {
                status: RunStatus::Success,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn recover_refuses_an_unknown_or_malformed_run_id_naming_it() {
    let env = Env::new();
    let err = env.rt.recover("no-such-run").await.expect_err("refused");
    assert!(matches!(err, weft::RuntimeError::UnknownRun(_)), "{err:?}");
    assert_eq!(err.to_string(), "no run with id no-such-run");
    for bad in ["", "../outside", ".hidden", "a/b"] {
        let err = env.rt.recover(bad).await.expect_err("refused");
        assert!(
            matches!(err, weft::RuntimeError::InvalidRunId(_)),
            "{bad:?}: {err:?}"
        );
        assert!(err.to_string().contains("1 to 128 characters"), "{err}");
    }
}

/// Set when this test binary runs again as the process of its own that
/// [`runtime_config_expr_steps_bounds_the_expressions_of_its_runs`] needs.
const OWN_PROCESS: &str = "WEFT_TEST_OWN_PROCESS";

/// An expression of about 5000 jq steps.
const COUNTS: &str = r#"
id: counts
steps:
  - map: { id: count, expr: '[range(5000)] | length' }
"#;

#[test]
fn runtime_config_expr_steps_bounds_the_expressions_of_its_runs() {
    // The budget is process-wide: changed here, it would change it for the tests running
    // beside this one. So the check runs in a process of its own, this binary again.
    let out = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "--exact",
            "driver_api::expr_steps_in_a_process_of_its_own",
            "--ignored",
            "--test-threads=1",
        ])
        .env(OWN_PROCESS, "1")
        .output()
        .expect("run this test binary again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
#[ignore = "run by runtime_config_expr_steps_bounds_the_expressions_of_its_runs, in a process of its own"]
async fn expr_steps_in_a_process_of_its_own() {
    if std::env::var_os(OWN_PROCESS).is_none() {
        return; // beside other tests, changing the process-wide budget would disturb them
    }
    let small = Env::with_config(crate::common::config().with_expr_steps(1000));
    let rec = small.run(COUNTS, json!({})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    let error = rec.error.expect("an error");
    assert_eq!(error.code, "expression-error");
    assert!(
        error.message.contains("did not finish within 1000 steps")
            && error.message.contains("RuntimeConfig::expr_steps"),
        "{}",
        error.message
    );

    // The budget is process-wide: the runtime opened last sets it for every runtime.
    let _default = Env::new();
    let rec = small.run(COUNTS, json!({})).await;
    assert_eq!(rec.status, RunStatus::Success, "{:?}", rec.error);
    assert_eq!(rec.result, Some(json!(5000)));
}
