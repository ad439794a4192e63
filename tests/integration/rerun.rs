//! Re-running from a step (S94–S99), the stored definition (S10), paths (S108), timestamps
//! (S109).

use serde_json::{Value, json};
use weft::RuntimeError;
use weft::{EventKind, RunStatus};

use crate::common::Env;

const FLOW: &str = r#"
id: flow
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: a, plugin: kit, step: inc }
  - { id: mark, plugin: kit, step: set-state, config: { patches: [ { seen: a } ] } }
  - { id: b, plugin: kit, step: inc }
  - { id: c, plugin: kit, step: fail, config: { code: broken, retryable: false } }
  - { id: d, plugin: kit, step: inc }
"#;

fn kinds(env: &Env, run: &str) -> Vec<(EventKind, Option<String>)> {
    env.events(run)
        .into_iter()
        .map(|e| (e.kind, e.path))
        .collect()
}

#[tokio::test]
async fn s94_s95_s98_s99_a_rerun_copies_what_preceded_the_step_and_starts_from_its_stored_input() {
    let env = Env::new();
    let source = env.run(FLOW, json!({"n": 0})).await;
    assert_eq!(source.status, RunStatus::Failed);
    let id = env
        .rt
        .rerun(&source.run_id, "b", None, None, Some("again".into()))
        .await
        .expect("rerun");
    assert_eq!(id, "again");
    let rec = env.rt.wait(&id).await.expect("wait");
    // The same failure again (S96 without FILE: the stored definition), from b on.
    assert_eq!(rec.status, RunStatus::Failed);
    assert_eq!(rec.error.as_ref().map(|e| e.code.as_str()), Some("broken"));
    assert_eq!(rec.input, json!({"n": 0}));
    assert_eq!(rec.steps["a"].output.as_deref(), Some(&json!({"n": 1})));
    assert_eq!(rec.steps["b"].input.as_deref(), Some(&json!({"n": 1})));
    assert_eq!(
        rec.state,
        json!({"seen": "a"}),
        "the state as it stood when b started"
    );
    let from = rec.restarted_from.as_ref().expect("restarted_from");
    assert_eq!(
        (from.run_id.as_str(), from.path.as_str()),
        (source.run_id.as_str(), "b")
    );
    // Copied entries are not evented: the new run's events start at b (S98).
    let events = kinds(&env, &id);
    assert_eq!(events[0].0, EventKind::RunStarted);
    assert_eq!(events[1], (EventKind::StepStarted, Some("b".into())));
    assert!(!events.iter().any(|(_, p)| p.as_deref() == Some("a")));
    let started = &env.events(&id)[0];
    assert_eq!(started.data["restarted_from"]["path"], "b");
    // The source is unchanged (S95).
    let again = env.rt.show(&source.run_id).await.expect("show");
    assert_eq!(again, source);
}

#[tokio::test]
async fn s96_a_rerun_with_a_fixed_file_runs_the_fixed_step() {
    let env = Env::new();
    let source = env.run(FLOW, json!({"n": 0})).await;
    let fixed = env.file(
        "fixed.yaml",
        &FLOW.replace("code: broken, retryable: false", "succeed-on-attempt: 0"),
    );
    let w = env.load(&fixed).await;
    let id = env
        .rt
        .rerun(&source.run_id, "c", Some(&w), None, None)
        .await
        .expect("rerun");
    let rec = env.rt.wait(&id).await.expect("wait");
    assert_eq!(rec.status, RunStatus::Success, "{:?}", rec.error);
    assert_eq!(rec.result, Some(json!({"n": 3})));
    // A file whose entries differ is refused.
    let other = env.file(
        "other.yaml",
        "id: flow\nplugins:\n  kit: { wasm: \"{testkit}\" }\nsteps:\n  - { id: a, plugin: kit, step: inc }\n",
    );
    let w = env.load(&other).await;
    let err = env
        .rt
        .rerun(&source.run_id, "a", Some(&w), None, None)
        .await
        .expect_err("different entries");
    assert!(
        err.to_string().contains("does not have the entries"),
        "{err}"
    );
}

#[tokio::test]
async fn s95_s97_reruns_are_refused_for_runs_not_ended_steps_not_run_and_steps_inside_repeats() {
    let env = Env::new();
    let suspended = env
        .run(
            r#"
id: waits
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: hold, plugin: kit, step: suspend }
"#,
            json!({}),
        )
        .await;
    let err = env
        .rt
        .rerun(&suspended.run_id, "hold", None, None, None)
        .await
        .expect_err("not ended");
    assert_eq!(
        err.to_string(),
        format!("run {} has not ended (status: suspended)", suspended.run_id)
    );
    let source = env.run(FLOW, json!({"n": 0})).await;
    let err = env
        .rt
        .rerun(&source.run_id, "d", None, None, None)
        .await
        .expect_err("d never ran");
    assert_eq!(
        err.to_string(),
        format!("step d did not run in run {}", source.run_id)
    );
    let looped = env
        .run(
            r#"
id: looped
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - foreach:
      id: each
      do: { id: dbl, plugin: kit, step: double }
"#,
            json!([1, 2]),
        )
        .await;
    let err = env
        .rt
        .rerun(&looped.run_id, "each.dbl", None, None, None)
        .await
        .expect_err("inside a foreach");
    assert_eq!(
        err.to_string(),
        "step each.dbl is inside each; re-run from each instead"
    );
    let whole = env
        .rt
        .rerun(&looped.run_id, "each", None, None, None)
        .await
        .expect("the foreach itself");
    assert_eq!(
        env.rt.wait(&whole).await.expect("wait").result,
        Some(json!([2, 4]))
    );
}

#[tokio::test]
async fn s99_an_input_given_to_a_rerun_replaces_the_stored_one_and_is_checked() {
    let env = Env::new();
    let source = env
        .run(
            r#"
id: typed
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: t, plugin: kit, step: typed, config: { factor: 2 } }
"#,
            json!({"amount": 5}),
        )
        .await;
    assert_eq!(
        source.result.as_ref().map(|r| r["total"].clone()),
        Some(json!(10))
    );
    let err = env
        .rt
        .rerun(
            &source.run_id,
            "t",
            None,
            Some(json!({"amount": "lots"})),
            None,
        )
        .await
        .expect_err("invalid input");
    assert!(matches!(err, RuntimeError::Refused(_)), "{err}");
    assert!(err.to_string().contains("/amount"), "{err}");
    let id = env
        .rt
        .rerun(&source.run_id, "t", None, Some(json!({"amount": 7})), None)
        .await
        .expect("rerun");
    let rec = env.rt.wait(&id).await.expect("wait");
    assert_eq!(
        rec.steps["t"].input.as_deref(),
        Some(&json!({"amount": 7, "currency": "EUR"}))
    );
    assert_eq!(
        rec.result.as_ref().map(|r| r["total"].clone()),
        Some(json!(14))
    );
}

#[tokio::test]
async fn s10_resume_uses_the_stored_definition_whatever_the_files_say_now() {
    let env = Env::new();
    let wasm = env.dir.path().join("kit.wasm");
    std::fs::copy(weft_guests::TESTKIT, &wasm).expect("copy plugin");
    let path = env.file(
        "held.yaml",
        r#"
id: held
plugins:
  kit: { wasm: kit.wasm }
steps:
  - { id: hold, plugin: kit, step: suspend }
  - { id: next, plugin: kit, step: echo }
"#,
    );
    let w = env.load(&path).await;
    let id = env
        .rt
        .start(&w, json!({"n": 1}), None)
        .await
        .expect("start");
    assert_eq!(
        env.rt.wait(&id).await.expect("wait").status,
        RunStatus::Suspended
    );
    // Both the file and the plugin change on disk; the run keeps what it started with.
    std::fs::write(&wasm, b"not a component any more").expect("overwrite plugin");
    std::fs::write(&path, "id: changed\nsteps: []\n").expect("overwrite file");
    let req = weft::ResumeRequest {
        step: None,
        label: None,
        foreach_index: None,
        data: json!({"n": 41}),
    };
    env.rt.resume(&id, req).await.expect("resume");
    let rec = env.rt.wait(&id).await.expect("wait");
    assert_eq!(rec.status, RunStatus::Success, "{:?}", rec.error);
    assert_eq!(
        rec.result.map(|r| r["resumed"].clone()),
        Some(json!({"n": 41}))
    );
}

#[tokio::test]
async fn s108_paths_in_a_file_are_relative_to_that_file() {
    let env = Env::new();
    let root = env.dir.path();
    std::fs::create_dir_all(root.join("flows/sub/data")).expect("dirs");
    std::fs::create_dir_all(root.join("plugins")).expect("plugins dir");
    std::fs::copy(weft_guests::TESTKIT, root.join("plugins/kit.wasm")).expect("copy");
    std::fs::copy(weft_guests::FILES, root.join("plugins/files.wasm")).expect("copy");
    std::fs::write(root.join("flows/sub/data/hello.txt"), "hi").expect("data");
    std::fs::write(
        root.join("flows/sub/inner.yaml"),
        r#"
id: inner
plugins:
  files:
    wasm: ../../plugins/files.wasm
    grants: { dirs: [ { host: ./data, guest: /data, mode: ro } ] }
steps:
  - { id: read, plugin: files, config: { dir: /data } }
"#,
    )
    .expect("inner");
    std::fs::write(
        root.join("flows/outer.yaml"),
        r#"
id: outer
plugins:
  kit: { wasm: ../plugins/kit.wasm }
steps:
  - { id: first, plugin: kit, step: echo }
  - workflow: { id: nested, file: sub/inner.yaml }
"#,
    )
    .expect("outer");
    let w = env.load(&root.join("flows/outer.yaml")).await;
    let id = env.rt.start(&w, json!({}), None).await.expect("start");
    let rec = env.rt.wait(&id).await.expect("wait");
    assert_eq!(rec.status, RunStatus::Success, "{:?}", rec.error);
    let files = &rec.result.as_ref().expect("result")["files"];
    assert_eq!(files[0]["name"], "hello.txt");
    assert_eq!(files[0]["text"], "hi");
}

fn is_rfc3339_millis_utc(v: &Value) -> bool {
    let Some(s) = v.as_str() else { return false };
    let b = s.as_bytes();
    s.len() == 24
        && b[4] == b'-'
        && b[10] == b'T'
        && b[19] == b'.'
        && b[23] == b'Z'
        && chrono::DateTime::parse_from_rfc3339(s).is_ok()
}

#[tokio::test]
async fn s109_every_timestamp_is_rfc3339_utc_with_milliseconds() {
    let env = Env::new();
    let rec = env.run(FLOW, json!({"n": 0})).await;
    let record = serde_json::to_value(&rec).expect("record");
    for key in ["created_at", "updated_at"] {
        assert!(
            is_rfc3339_millis_utc(&record[key]),
            "{key}: {}",
            record[key]
        );
    }
    for (path, step) in record["steps"].as_object().expect("steps") {
        assert!(is_rfc3339_millis_utc(&step["started_at"]), "{path}");
        assert!(is_rfc3339_millis_utc(&step["ended_at"]), "{path}");
    }
    for ev in env.events(&rec.run_id) {
        assert!(is_rfc3339_millis_utc(&json!(ev.at)), "{}", ev.at);
    }
}

#[tokio::test]
async fn s99_s119_a_rerun_gives_a_step_its_stored_made_input_without_making_it_again() {
    let env = Env::new();
    let yaml = r#"
id: made
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: a, plugin: kit, step: inc, input: '{n: (.input.n * 10)}' }
  - { id: c, plugin: kit, step: fail, config: { code: broken, retryable: false } }
"#;
    let source = env.run(yaml, json!({"n": 1})).await;
    assert_eq!(source.steps["a"].input.as_deref(), Some(&json!({"n": 10})));
    let id = env
        .rt
        .rerun(&source.run_id, "a", None, None, Some("again".into()))
        .await
        .expect("rerun");
    let rec = env.rt.wait(&id).await.expect("wait");
    assert_eq!(
        rec.steps["a"].input.as_deref(),
        Some(&json!({"n": 10})),
        "not made again"
    );
    assert_eq!(rec.steps["a"].output.as_deref(), Some(&json!({"n": 11})));
}
