//! Retention on the tests' backend: `Runtime::prune` and `weft prune` delete ended runs past
//! an age, whole, and nothing else; a workflow's `retention:` and the runtime's apply in
//! `prune_expired`; a prune killed with SIGKILL half-way leaves every run whole or gone; and
//! `POST /prune` in the OpenAPI document.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{Value, json};
use weft::{ManualClock, PruneFilter, ResumeRequest, RunStatus, Runtime, RuntimeError};

use crate::common::{config_for, plugin_paths};
use crate::torture::{Home, Proc, http, run_weft, serve, weft};

/// 2030-01-01T00:00:00Z.
const T0: i64 = 1_893_456_000_000;

const MINUTE: i64 = 60_000;

const OK: &str = "id: ok\nsteps:\n  - map: { id: a, expr: '{ n: 1 }' }\n";

const BAD: &str = "id: bad\nsteps:\n  - map: { id: a, expr: 'error(\"boom\")' }\n";

const ASK: &str = r#"
id: ask
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: ask, plugin: kit, step: suspend, config: { payload: { question: "go?" } } }
"#;

/// A runtime on `home` whose clock reads `clock`.
fn open(home: &Path, clock: &ManualClock) -> Runtime {
    Runtime::open(home, config_for(home).with_clock(clock.clone())).expect("open the home")
}

/// Runs `yaml` to its end or suspension; returns the run's id.
async fn run(rt: &Runtime, yaml: &str) -> String {
    let w = rt
        .load_workflow_text("w.yaml", &plugin_paths(yaml))
        .await
        .expect("load");
    rt.start_and_wait(&w, json!({}), None)
        .await
        .expect("run")
        .run_id
}

/// The ids of the runs stored.
fn ids(rt: &Runtime) -> BTreeSet<String> {
    rt.runs(None, None)
        .expect("runs")
        .into_iter()
        .map(|r| r.run_id)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_prune_deletes_only_ended_runs_past_the_age_whole_and_a_dry_run_deletes_nothing() {
    let home = Home::new();
    let clock = ManualClock::new(T0);
    let rt = open(&home.home(), &clock);
    let mut oks = Vec::new();
    for _ in 0..3 {
        oks.push(run(&rt, OK).await);
    }
    let bad = run(&rt, BAD).await;
    let asked = run(&rt, ASK).await;
    let cancelled = run(&rt, ASK).await;
    rt.cancel(&cancelled).await.expect("cancel");
    rt.wait(&cancelled).await.expect("cancelled");
    clock.advance(30 * MINUTE as u64);
    let young = run(&rt, OK).await;
    let old = PruneFilter::older_than(std::time::Duration::from_secs(600));

    let counted = rt.prune(&old.clone().dry_run()).await.expect("dry run");
    assert_eq!(
        (counted.deleted, counted.kept, counted.dry_run),
        (5, 0, true)
    );
    assert_eq!(ids(&rt).len(), 7, "a dry run deletes nothing");

    let failed = rt
        .prune(&old.clone().with_status(RunStatus::Failed))
        .await
        .expect("prune the failed");
    assert_eq!(failed.deleted, 1);
    let of_ok = rt
        .prune(&old.clone().with_workflow("ok"))
        .await
        .expect("prune ok's");
    assert_eq!(of_ok.deleted, 3, "the young one is not old enough");
    let rest = rt.prune(&old).await.expect("prune the rest");
    assert_eq!(rest.deleted, 1, "the cancelled one");
    assert!(
        rest.blobs + of_ok.blobs + failed.blobs >= 1,
        "bad's definition is named by no run now"
    );

    let left = ids(&rt);
    assert_eq!(left, BTreeSet::from([asked.clone(), young.clone()]));
    for gone in oks.iter().chain([&bad, &cancelled]) {
        assert!(
            matches!(rt.show(gone).await, Err(RuntimeError::UnknownRun(_))),
            "{gone} is gone whole"
        );
        assert!(rt.definition(gone).is_err(), "{gone}'s definition");
    }
    // What stays works: the suspended run resumes to its end.
    let request = ResumeRequest {
        step: None,
        label: None,
        foreach_index: None,
        data: json!({}),
    };
    let end = rt.resume_and_wait(&asked, request).await.expect("resume");
    assert_eq!(end.status, RunStatus::Success);
    assert_eq!(
        rt.show(&young).await.expect("show").status,
        RunStatus::Success
    );
    // A status that has not ended is refused, saying which are taken.
    let refused = rt
        .prune(
            &PruneFilter::older_than(std::time::Duration::ZERO).with_status(RunStatus::Suspended),
        )
        .await
        .expect_err("suspended runs are never pruned");
    assert!(
        refused
            .to_string()
            .contains("success, failed, cancelled or tripwire"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workflows_retention_and_the_runtimes_apply_to_their_runs_and_spare_the_suspended() {
    let home = Home::new();
    let clock = ManualClock::new(T0);
    let brief = "id: brief\nretention: 10m\nsteps:\n  - map: { id: a, expr: '1' }\n";
    let rt = open(&home.home(), &clock);
    let long = run(&rt, OK).await;
    let asked = run(&rt, ASK).await;
    // No retention anywhere: nothing expires, however old.
    clock.advance(15 * MINUTE as u64);
    assert_eq!(rt.prune_expired().await.expect("prune").deleted, 0);
    // Loading `brief` gives this runtime its retention.
    let w = rt
        .load_workflow_text("brief.yaml", brief)
        .await
        .expect("load");
    assert_eq!(w.retention(), Some(std::time::Duration::from_secs(600)));
    let short = rt
        .start_and_wait(&w, json!({}), None)
        .await
        .expect("run")
        .run_id;
    clock.advance(15 * MINUTE as u64);
    let first = rt.prune_expired().await.expect("prune");
    assert_eq!(first.deleted, 1, "brief's run, past its 10 minutes");
    assert!(!ids(&rt).contains(&short));
    assert_eq!(ids(&rt), BTreeSet::from([long.clone(), asked.clone()]));
    rt.set_retention(Some(std::time::Duration::from_secs(3600)));
    clock.advance(40 * MINUTE as u64);
    let second = rt.prune_expired().await.expect("prune");
    assert_eq!(second.deleted, 1, "ok's run, past the runtime's hour");
    assert_eq!(ids(&rt), BTreeSet::from([asked]), "a suspended run stays");
}

#[tokio::test]
async fn a_retention_that_is_not_a_duration_is_refused_at_its_line() {
    let home = Home::new();
    let rt = Runtime::open(&home.home(), config_for(&home.home())).expect("open");
    let err = rt
        .load_workflow_text(
            "w.yaml",
            "id: w\nretention: soon\nsteps:\n  - map: { id: a, expr: '1' }\n",
        )
        .await
        .err()
        .expect("refused");
    let text = err.to_string();
    assert!(
        text.contains("retention `soon` is not a duration"),
        "{text}"
    );
    assert!(text.contains("retention: 30d"), "{text}");
    assert!(
        text.contains("2 | retention: soon"),
        "the line is quoted: {text}"
    );
}

/// Ended runs made here: enough for several of the prune's batches.
const MANY: usize = 700;

/// The ids of the runs `GET /runs` lists on the server at `addr`.
fn listed(addr: std::net::SocketAddr) -> BTreeSet<String> {
    let (status, body) = http(addr, "GET", "/runs?limit=1000", "").expect("an answer");
    assert_eq!(status, 200, "{body}");
    let page: Value = serde_json::from_str(&body).expect("a page");
    page["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter_map(|r| r["run_id"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn a_prune_killed_half_way_leaves_each_run_whole_or_gone_and_the_next_one_finishes() {
    let home = Home::new();
    let ok = home.file("ok.yaml", OK);
    home.file("ask.yaml", ASK);
    let dir = ok.parent().expect("dir").to_path_buf();
    let (asked, made) = {
        let (_server, addr) = serve(&home.home(), &dir);
        let mut made = BTreeSet::new();
        for _ in 0..MANY {
            let (status, body) =
                http(addr, "POST", "/runs?wait=true", r#"{"workflow":"ok"}"#).expect("an answer");
            assert_eq!(status, 200, "{body}");
            let rec: Value = serde_json::from_str(&body).expect("a record");
            made.insert(rec["run_id"].as_str().expect("an id").to_owned());
        }
        let (status, body) =
            http(addr, "POST", "/runs?wait=true", r#"{"workflow":"ask"}"#).expect("an answer");
        assert_eq!(status, 200, "{body}");
        let rec: Value = serde_json::from_str(&body).expect("a record");
        (rec["run_id"].as_str().expect("an id").to_owned(), made)
    };
    let mut cmd = weft(&home.home(), &["prune", "--older-than", "0s"]);
    cmd.env("WEFT_LOG", "weft=info");
    let mut prune = Proc::start(cmd);
    prune.expect_line("pruned a batch of ended runs");
    prune.kill();

    let left = {
        let (_server, addr) = serve(&home.home(), &dir);
        let left = listed(addr);
        assert!(left.contains(&asked), "the suspended run is kept");
        assert!(
            left.len() <= MANY + 1 - 256,
            "at least one batch was deleted: {} left",
            left.len()
        );
        for id in &made {
            let (status, body) = http(addr, "GET", &format!("/runs/{id}"), "").expect("an answer");
            match status {
                200 => {
                    assert!(left.contains(id), "{id} reads but is not listed");
                    let rec: Value = serde_json::from_str(&body).expect("a record");
                    assert_eq!(rec["status"], "success", "{id} reads whole: {rec}");
                    let (status, events) =
                        http(addr, "GET", &format!("/runs/{id}/events"), "").expect("an answer");
                    assert_eq!(status, 200, "{events}");
                    assert!(events.contains("run-succeeded"), "{id}'s events: {events}");
                }
                404 => assert!(!left.contains(id), "{id} is listed but gone"),
                _ => panic!("{id} is half-deleted: {status} {body}"),
            }
        }
        left
    };
    let out = run_weft(&home.home(), &["prune", "--older-than", "0s", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let report: Value = serde_json::from_str(out.stdout.trim()).expect("a JSON report");
    assert_eq!(report["deleted"], json!(left.len() - 1), "{report}");
    assert_eq!(report["dry_run"], json!(false));
    let runs = run_weft(&home.home(), &["runs"]);
    assert_eq!(runs.stdout.lines().count(), 1, "{runs:?}");
    assert!(runs.stdout.contains(&asked));
    // Its definition and component were kept: a new process resumes it from the store.
    let resumed = run_weft(&home.home(), &["resume", &asked, "--json"]);
    assert_eq!(resumed.code, 0, "{resumed:?}");
}

#[test]
fn weft_prune_refuses_a_status_that_has_not_ended_and_a_duration_that_does_not_read() {
    let home = Home::new();
    let out = run_weft(
        &home.home(),
        &["prune", "--older-than", "1d", "--status", "running"],
    );
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("never pruned"), "{}", out.stderr);
    let out = run_weft(&home.home(), &["prune", "--older-than", "a while"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("30d"), "{}", out.stderr);
}

#[test]
fn post_prune_counts_then_deletes_and_the_document_describes_it() {
    let home = Home::new();
    let file = home.file("ok.yaml", OK);
    let (server, addr) = serve(&home.home(), file.parent().expect("dir"));
    let (status, body) =
        http(addr, "POST", "/runs?wait=true", r#"{"workflow":"ok"}"#).expect("an answer");
    assert_eq!(status, 200, "{body}");
    let dry = http(
        addr,
        "POST",
        "/prune",
        r#"{"older_than":"0s","dry_run":true}"#,
    )
    .expect("an answer");
    assert_eq!(dry.0, 200, "{}", dry.1);
    let dry: Value = serde_json::from_str(&dry.1).expect("JSON");
    assert_eq!(
        (dry["deleted"].clone(), dry["dry_run"].clone()),
        (json!(1), json!(true))
    );
    let bad = http(
        addr,
        "POST",
        "/prune",
        r#"{"older_than":"0s","status":"suspended"}"#,
    )
    .expect("an answer");
    assert_eq!(bad.0, 400, "{}", bad.1);
    assert!(bad.1.contains("not-prunable"), "{}", bad.1);
    let as_array = http(addr, "POST", "/prune", r#"["0s"]"#).expect("an answer");
    assert_eq!(as_array.0, 422, "a body is an object: {}", as_array.1);
    let other_tag = http(
        addr,
        "POST",
        "/prune",
        r#"{"older_than":"0s","tag":"team:x"}"#,
    )
    .expect("an answer");
    let other_tag: Value = serde_json::from_str(&other_tag.1).expect("JSON");
    assert_eq!(
        other_tag["deleted"],
        json!(0),
        "no run carries the tag: {other_tag}"
    );
    let unreadable = http(addr, "POST", "/prune", r#"{"older_than":"soon"}"#).expect("an answer");
    assert_eq!(unreadable.0, 400, "{}", unreadable.1);
    let done = http(addr, "POST", "/prune", r#"{"older_than":"0s"}"#).expect("an answer");
    let done: Value = serde_json::from_str(&done.1).expect("JSON");
    assert_eq!(done["deleted"], json!(1), "{done}");
    let (_, runs) = http(addr, "GET", "/runs", "").expect("an answer");
    let runs: Value = serde_json::from_str(&runs).expect("JSON");
    assert_eq!(runs["runs"], json!([]), "{runs}");
    let (_, doc) = http(addr, "GET", "/openapi.json", "").expect("the document");
    let doc: Value = serde_json::from_str(&doc).expect("JSON");
    assert!(
        doc["paths"]["/prune"]["post"].is_object(),
        "{}",
        doc["paths"]
    );
    drop(server);
}
