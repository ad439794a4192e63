//! Bulk operations on the tests' backend: `Runtime::cancel_matching` / `resume_matching`,
//! `weft bulk cancel|resume` and `POST /bulk/cancel|resume` act on exactly the runs a filter
//! matches (workflow, status, tags, creation window), a dry run changes nothing, and a filter
//! that names no run is refused.

use serde_json::{Value, json};
use weft::{ManualClock, ResumeRequest, RunFilter, RunStatus, Runtime, StartOptions};

use crate::common::{config_for, plugin_paths};
use crate::torture::{Home, http, run_weft, serve};

const ASK: &str = r#"
id: ask
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: ask, plugin: kit, step: suspend, config: { payload: { question: "go?" } } }
"#;

const OK: &str = "id: ok\nsteps:\n  - map: { id: a, expr: '1' }\n";

/// 2030-01-01T00:00:00Z.
const T0: i64 = 1_893_456_000_000;

#[tokio::test(flavor = "multi_thread")]
async fn a_bulk_operation_acts_on_exactly_the_runs_its_filter_matches() {
    let home = Home::new();
    let clock = ManualClock::new(T0);
    let rt = Runtime::open(
        &home.home(),
        config_for(&home.home()).with_clock(clock.clone()),
    )
    .expect("open");
    let ask = rt
        .load_workflow_text("ask.yaml", &plugin_paths(ASK))
        .await
        .expect("load");
    let ok = rt.load_workflow_text("ok.yaml", OK).await.expect("load");
    let start = |team: &'static str| {
        let (rt, ask) = (rt.clone(), &ask);
        async move {
            rt.start_and_wait_with(
                ask,
                json!({}),
                StartOptions::default().with_tag("team", team),
            )
            .await
            .expect("suspends")
            .run_id
        }
    };
    let a1 = start("a").await;
    clock.advance(60_000);
    let a2 = start("a").await;
    let b = start("b").await;
    let done = rt
        .start_and_wait(&ok, json!({}), None)
        .await
        .expect("run")
        .run_id;
    let status = |id: String| {
        let rt = rt.clone();
        async move { rt.show(&id).await.expect("show").status }
    };

    let counted = rt
        .cancel_matching(&RunFilter::default().with_tag("team", "a"), true)
        .await
        .expect("dry run");
    assert_eq!(
        (counted.matched, counted.done, counted.dry_run),
        (2, 0, true)
    );
    assert_eq!(
        status(a1.clone()).await,
        RunStatus::Suspended,
        "a dry run changes nothing"
    );

    let request = ResumeRequest {
        step: None,
        label: None,
        foreach_index: None,
        data: json!({ "approved": true }),
    };
    let resumed = rt
        .resume_matching(&RunFilter::default().with_tag("team", "b"), &request, false)
        .await
        .expect("resume");
    assert_eq!((resumed.matched, resumed.done), (1, 1), "{resumed:?}");
    assert_eq!(rt.wait(&b).await.expect("wait").status, RunStatus::Success);

    // The creation window: only the first run was made before the clock moved.
    let mut early = RunFilter::default().with_workflow("ask");
    early.created_before = Some(T0 + 1);
    let cancelled = rt.cancel_matching(&early, false).await.expect("cancel");
    assert_eq!((cancelled.matched, cancelled.done), (1, 1), "{cancelled:?}");
    assert_eq!(
        rt.wait(&a1).await.expect("wait").status,
        RunStatus::Cancelled
    );
    assert_eq!(status(a2.clone()).await, RunStatus::Suspended);

    // A cancel of a workflow's runs leaves the ended ones, of it and of others.
    let rest = rt
        .cancel_matching(&RunFilter::default().with_workflow("ask"), false)
        .await
        .expect("cancel");
    assert_eq!((rest.matched, rest.done), (1, 1), "{rest:?}");
    assert_eq!(
        rt.wait(&a2).await.expect("wait").status,
        RunStatus::Cancelled
    );
    assert_eq!(status(b).await, RunStatus::Success);
    assert_eq!(status(done).await, RunStatus::Success);
}

#[test]
fn weft_bulk_refuses_a_filter_that_names_no_run_and_counts_in_a_dry_run() {
    let home = Home::new();
    let file = home.file("ask.yaml", ASK);
    let file = file.to_str().expect("utf-8");
    for _ in 0..2 {
        let out = run_weft(&home.home(), &["run", file, "--tag", "team:a"]);
        assert_eq!(out.code, 3, "suspends: {out:?}");
    }
    let refused = run_weft(&home.home(), &["bulk", "cancel"]);
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(
        refused.stderr.contains("name the runs"),
        "{}",
        refused.stderr
    );
    let counted = run_weft(
        &home.home(),
        &["bulk", "cancel", "--tag", "team:a", "--dry-run", "--json"],
    );
    assert_eq!(counted.code, 0, "{counted:?}");
    let report: Value = serde_json::from_str(counted.stdout.trim()).expect("a JSON report");
    assert_eq!(report["matched"], 2, "{report}");
    assert_eq!(report["done"], 0);
    let done = run_weft(
        &home.home(),
        &[
            "bulk",
            "resume",
            "--workflow",
            "ask",
            "--data",
            "{}",
            "--json",
        ],
    );
    assert_eq!(done.code, 0, "{done:?}");
    let report: Value = serde_json::from_str(done.stdout.trim()).expect("a JSON report");
    assert_eq!(report["done"], 2, "{report}");
}

#[test]
fn post_bulk_cancel_and_resume_act_on_the_runs_named_and_the_document_describes_them() {
    let home = Home::new();
    let file = home.file("ask.yaml", ASK);
    let (_server, addr) = serve(&home.home(), file.parent().expect("dir"));
    for team in ["a", "a", "b"] {
        let body = format!(r#"{{"workflow":"ask","tags":{{"team":"{team}"}}}}"#);
        let (status, body) = http(addr, "POST", "/runs?wait=true", &body).expect("an answer");
        assert_eq!(status, 200, "{body}");
    }
    let post = |path: &str, body: &str| http(addr, "POST", path, body).expect("an answer");
    // With no member, every run: counted first.
    let (status, body) = post("/bulk/cancel", r#"{"dry_run":true}"#);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("JSON")["matched"],
        3
    );
    let (status, body) = post("/bulk/cancel", r#"{"tag":"team:a","dry_run":true}"#);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("JSON")["matched"],
        2
    );
    let (status, body) = post(
        "/bulk/resume",
        r#"{"tag":"team:b","data":{"approved":true}}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("JSON")["done"],
        1
    );
    let (status, body) = post("/bulk/cancel", r#"{"workflow":"ask","status":"suspended"}"#);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("JSON")["done"],
        2,
        "{body}"
    );
    let (status, body) = post("/bulk/cancel", r#"{"created_after":"soon"}"#);
    assert_eq!(status, 400, "{body}");
    let (_, doc) = http(addr, "GET", "/openapi.json", "").expect("the document");
    let doc: Value = serde_json::from_str(&doc).expect("JSON");
    for path in ["/bulk/cancel", "/bulk/resume"] {
        assert!(doc["paths"][path]["post"].is_object(), "{path}");
    }
}
