//! SEMANTICS.md rules for plugin steps: data flow, context, retries, schemas, state, suspend and
//! resume, cancel, bail, tripwire, errors and events. Each test is named after its rules.
//!
//! The helpers here are shared with `blocks.rs`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;
use weft::{ErrorInfo, ResumeRequest, RunStatus, StepStatus};
use weft::{NativeCall, NativeStep};
use weft::{RunRecord, StoredEvent};
use weft::{StepFailure, StepOutcome};

use crate::common::{Env, kinds};

/// A workflow `t` with the testkit plugin declared as `kit`, then `rest` (schemas, state, steps).
pub(crate) fn wf(rest: &str) -> String {
    format!("id: t\nplugins:\n  kit: {{ wasm: \"{{testkit}}\" }}\n{rest}")
}

/// Writes, loads and starts `yaml`; returns the run id without waiting.
pub(crate) async fn start(env: &Env, yaml: &str, input: Value) -> String {
    let path = env.file("workflow.yaml", yaml);
    let w = env.load(&path).await;
    env.rt.start(&w, input, None).await.expect("start")
}

/// Turns a hang into a failure; never an assertion about how fast anything is.
const HANG_GUARD: Duration = Duration::from_secs(300);

/// Waits until the run has ended or suspended.
pub(crate) async fn settle(env: &Env, id: &str) -> RunRecord {
    tokio::time::timeout(HANG_GUARD, env.rt.wait(id))
        .await
        .expect("the run never settled")
        .expect("wait")
}

/// A resume request: `--step`, `--label`, `--foreach-index`, `--data`.
pub(crate) fn req(
    step: Option<&str>,
    label: Option<&str>,
    index: Option<u32>,
    data: Value,
) -> ResumeRequest {
    ResumeRequest {
        step: step.map(str::to_owned),
        label: label.map(str::to_owned),
        foreach_index: index,
        data,
    }
}

/// Resumes and waits until the run settles again; a refusal comes back as its message.
pub(crate) async fn resume(
    env: &Env,
    id: &str,
    request: ResumeRequest,
) -> Result<RunRecord, String> {
    env.rt
        .resume(id, request)
        .await
        .map_err(|e| e.to_string())?;
    Ok(settle(env, id).await)
}

/// The type of an event, as written: `step-started`.
pub(crate) fn kind(e: &StoredEvent) -> String {
    serde_json::to_value(e.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The events of type `k` whose path is `path` (any path when `None`).
pub(crate) fn find<'a>(
    events: &'a [StoredEvent],
    k: &str,
    path: Option<&str>,
) -> Vec<&'a StoredEvent> {
    events
        .iter()
        .filter(|e| kind(e) == k && (path.is_none() || e.path.as_deref() == path))
        .collect()
}

/// Reads `rx` until an event of type `k` at `path` arrives.
pub(crate) async fn until_event(
    rx: &mut UnboundedReceiver<Arc<StoredEvent>>,
    k: &str,
    path: Option<&str>,
) -> Arc<StoredEvent> {
    loop {
        let ev = tokio::time::timeout(HANG_GUARD, rx.recv())
            .await
            .expect("the event never came")
            .unwrap_or_else(|| panic!("the stream ended before {k} {path:?}"));
        if kind(&ev) == k && (path.is_none() || ev.path.as_deref() == path) {
            return ev;
        }
    }
}

/// The run's error.
pub(crate) fn error(rec: &RunRecord) -> &ErrorInfo {
    rec.error.as_ref().expect("the run has an error")
}

/// A value as JSON.
pub(crate) fn js<T: serde::Serialize>(t: &T) -> Value {
    serde_json::to_value(t).expect("serializable")
}

// ---------------------------------------------------------------------------------------------
// 1. Entries and data flow

#[tokio::test]
async fn s2_s4_null_and_scalars_pass_between_steps_unchanged() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: a, plugin: kit, step: echo }
  - { id: b, plugin: kit, step: echo }
  - { id: c, plugin: kit, step: context }
"#);
    for input in [
        Value::Null,
        json!("text"),
        json!([1, "2", null]),
        json!(7.5),
        json!(false),
    ] {
        let rec = env.run(&yaml, input.clone()).await;
        assert_eq!(rec.status, RunStatus::Success);
        assert_eq!(rec.input, input);
        let c = rec.result.expect("result");
        assert_eq!(
            c["input"], input,
            "S4: c gets exactly what a and b passed on"
        );
        let events = env.events(&rec.run_id);
        assert_eq!(
            find(&events, "step-succeeded", Some("a"))[0].data,
            json!({"output": input})
        );
        assert_eq!(
            find(&events, "step-started", Some("c"))[0].data,
            json!({"input": input})
        );
    }
}

#[tokio::test]
async fn s5_s7_a_null_input_output_and_result_stay_in_the_record() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: a, plugin: kit, step: echo }
  - { id: b, plugin: kit, step: echo }
"#);
    let rec = env.run(&yaml, Value::Null).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(
        rec.steps["a"].output.as_deref(),
        Some(&Value::Null),
        "S3: a's output is null"
    );
    assert_eq!(
        rec.steps["b"].input.as_deref(),
        Some(&Value::Null),
        "S7: b's full input is kept"
    );
    assert_eq!(rec.result, Some(Value::Null), "S5: the result is null");
    let shown = js(&env.rt.show(&rec.run_id).await.expect("show"));
    assert!(
        shown["steps"]["b"]
            .as_object()
            .is_some_and(|b| b.contains_key("input")),
        "S7: {shown}"
    );
    assert!(
        shown.as_object().is_some_and(|r| r.contains_key("result")),
        "S5: {shown}"
    );
}

#[tokio::test]
async fn s12_s116_a_step_context_carries_every_field_and_a_missing_config_is_an_empty_object() {
    let env = Env::new();
    let yaml = wf(r#"
initial-state: { s: 1 }
steps:
  - { id: c, plugin: kit, step: context, config: { k: v } }
  - { id: d, plugin: kit, step: context }
"#);
    let rec = env.run(&yaml, json!({"n": 1})).await;
    assert_eq!(rec.status, RunStatus::Success);
    let c = rec.steps["c"].output.as_deref().cloned().expect("c output");
    assert_eq!(
        c,
        json!({
            "run_id": rec.run_id,
            "workflow_id": "t",
            "step_path": "c",
            "attempt": 0,
            "input": {"n": 1},
            "config": {"k": "v"},
            "state": {"s": 1},
            "resume": null,
            "foreach_index": null,
            "iteration": null
        })
    );
    let d = rec.result.expect("result");
    assert_eq!(d["config"], json!({}));
    assert_eq!(d["input"], c, "S2: d gets c's output");
}

#[tokio::test]
async fn s8_step_result_and_steps_see_only_succeeded_entries_and_init_is_the_run_input() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: a, plugin: kit, step: inc }
  - { id: r, plugin: kit, step: step-result, config: { step: a } }
  - { id: early, plugin: kit, step: step-result, config: { step: z } }
  - { id: z, plugin: kit, step: step-result, config: { step: r } }
  - map: { id: m, expr: '{a: .steps.a, r: .steps.r.result, init: .init, missing: .steps.nope}' }
"#);
    let rec = env.run(&yaml, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Success);
    let r = rec.steps["r"].output.as_deref().cloned().expect("r");
    assert_eq!(r, json!({"init": {"n": 0}, "result": {"n": 1}}));
    assert_eq!(
        rec.steps["early"].output.as_deref(),
        Some(&json!({"init": {"n": 0}, "result": null})),
        "a step that has not run yet is not visible"
    );
    assert_eq!(
        rec.steps["z"].output.as_deref(),
        Some(&json!({"init": {"n": 0}, "result": r}))
    );
    assert_eq!(
        rec.result,
        Some(json!({"a": {"n": 1}, "r": {"n": 1}, "init": {"n": 0}, "missing": null}))
    );
}

// ---------------------------------------------------------------------------------------------
// 2. Steps and outcomes; 16. Errors

#[tokio::test]
async fn s13_s83_s85_a_plugin_failure_gives_message_code_step_and_details_to_the_step_and_the_run()
{
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: a, plugin: kit, step: inc }
  - { id: f, plugin: kit, step: fail, config: { code: boom, message: "it broke", details: { k: 1 } } }
  - { id: z, plugin: kit, step: echo }
"#);
    let rec = env.run(&yaml, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    let expected = ErrorInfo {
        message: "it broke".into(),
        code: "boom".into(),
        step: "f".into(),
        details: Some(json!({"k": 1})),
        foreach_index: None,
        iteration: None,
    };
    assert_eq!(error(&rec), &expected);
    assert_eq!(rec.steps["f"].error.as_ref(), Some(&expected));
    assert_eq!(rec.steps["f"].status, StepStatus::Failed);
    assert!(
        !rec.steps.contains_key("z"),
        "S1: nothing starts after a failure"
    );
    assert!(rec.result.is_none());
    let events = env.events(&rec.run_id);
    assert_eq!(
        find(&events, "step-failed", Some("f"))[0].data,
        json!({"error": expected})
    );
    let last = events.last().expect("events");
    assert_eq!(kind(last), "run-failed");
    assert_eq!(last.data, json!({"error": expected}));
    assert_eq!(
        js(&expected),
        json!({"message": "it broke", "code": "boom", "step": "f", "details": {"k": 1}})
    );
}

#[tokio::test]
async fn s83_s110_a_failure_without_code_is_step_failed_and_scalar_details_are_wrapped() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: f, plugin: kit, step: fail, config: { details: 5 } }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    let e = error(&rec);
    assert_eq!(e.code, "step-failed");
    assert_eq!(e.message, "failed on purpose");
    assert_eq!(e.details, Some(json!({"value": 5})));
}

#[tokio::test]
async fn s14_s83_output_that_is_not_json_fails_with_malformed_result() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: b, plugin: kit, step: bad-json }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    assert_eq!(error(&rec).code, "malformed-result");
    assert_eq!(error(&rec).step, "b");
}

// ---------------------------------------------------------------------------------------------
// 10. Retries

#[tokio::test]
async fn s51_s55_a_step_retry_overrides_the_workflow_default_field_by_field() {
    let env = Env::new();
    let yaml = wf(r#"
retry: { attempts: 2, delay-ms: 1, backoff: 3 }
steps:
  - parallel:
      id: p
      steps:
        - { id: own, plugin: kit, step: fail, config: { code: x }, retry: { attempts: 4 } }
        - { id: inherited, plugin: kit, step: fail, config: { code: y } }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    assert_eq!(rec.steps["p.own"].attempts, Some(4));
    assert_eq!(rec.steps["p.inherited"].attempts, Some(2));
    let events = env.events(&rec.run_id);
    let own: Vec<(Value, Value)> = find(&events, "step-retrying", Some("p.own"))
        .iter()
        .map(|e| (e.data["attempt"].clone(), e.data["delay_ms"].clone()))
        .collect();
    assert_eq!(
        own,
        [
            (json!(1), json!(1)),
            (json!(2), json!(3)),
            (json!(3), json!(9))
        ],
        "S52: delay-ms and backoff inherited, attempts overridden"
    );
    let inherited: Vec<Value> = find(&events, "step-retrying", Some("p.inherited"))
        .iter()
        .map(|e| e.data["delay_ms"].clone())
        .collect();
    assert_eq!(inherited, [json!(1)]);
    assert_eq!(
        find(&events, "step-failed", Some("p.own")).len(),
        1,
        "S55: step-failed only at the end"
    );
}

#[tokio::test]
async fn s52_s55_retry_waits_grow_by_backoff_up_to_max_delay_and_step_retrying_carries_the_error() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: a, plugin: kit, step: fail, config: { code: flaky, message: nope }, retry: { attempts: 4, delay-ms: 1, backoff: 3, max-delay-ms: 5 } }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    assert_eq!(rec.steps["a"].attempts, Some(4));
    let events = env.events(&rec.run_id);
    let retrying: Vec<Value> = find(&events, "step-retrying", Some("a"))
        .iter()
        .map(|e| e.data.clone())
        .collect();
    let err = json!({"message": "nope", "code": "flaky", "step": "a"});
    assert_eq!(
        retrying,
        [
            json!({"attempt": 1, "delay_ms": 1, "error": err}),
            json!({"attempt": 2, "delay_ms": 3, "error": err}),
            json!({"attempt": 3, "delay_ms": 5, "error": err}),
        ]
    );
    assert_eq!(
        kinds(&events),
        [
            "run-started",
            "step-started:a",
            "step-retrying:a",
            "step-retrying:a",
            "step-retrying:a",
            "step-failed:a",
            "run-failed"
        ]
    );
}

#[tokio::test]
async fn s53_attempt_grows_with_each_retry_and_a_later_attempt_may_succeed() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: a, plugin: kit, step: fail, config: { succeed-on-attempt: 2 }, retry: { attempts: 5, delay-ms: 1 } }
"#);
    let rec = env.run(&yaml, json!({"v": 1})).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(rec.result, Some(json!({"v": 1})));
    assert_eq!(rec.steps["a"].attempts, Some(3));
    let events = env.events(&rec.run_id);
    let attempts: Vec<Value> = find(&events, "step-retrying", Some("a"))
        .iter()
        .map(|e| e.data["attempt"].clone())
        .collect();
    assert_eq!(attempts, [json!(1), json!(2)]);
    assert_eq!(
        kinds(&events),
        [
            "run-started",
            "step-started:a",
            "step-retrying:a",
            "step-retrying:a",
            "step-succeeded:a",
            "run-succeeded"
        ]
    );
}

#[tokio::test]
async fn s54_a_failure_with_retryable_false_is_not_retried() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: a, plugin: kit, step: fail, config: { retryable: false }, retry: { attempts: 3, delay-ms: 1 } }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    assert_eq!(rec.steps["a"].attempts, Some(1));
    assert!(find(&env.events(&rec.run_id), "step-retrying", None).is_empty());
}

// ---------------------------------------------------------------------------------------------
// 11. Schema validation

const TYPED: &str = r#"
steps:
  - { id: check, plugin: kit, step: typed, retry: { attempts: 3, delay-ms: 1 } }
"#;

#[tokio::test]
async fn s54_s59_s63_invalid_input_fails_without_invoking_the_step_and_is_never_retried() {
    let env = Env::new();
    let rec = env.run(&wf(TYPED), json!({"amount": "x"})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    let e = error(&rec);
    assert_eq!(e.code, "invalid-input");
    assert_eq!(e.step, "check");
    assert!(
        e.message.starts_with("step check: input: /amount: "),
        "{}",
        e.message
    );
    let violations = e.details.as_ref().expect("details")["violations"].clone();
    assert_eq!(violations.as_array().map(Vec::len), Some(1), "{violations}");
    assert_eq!(violations[0]["path"], "/amount");
    assert!(
        violations[0]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
    );
    let check = &rec.steps["check"];
    assert_eq!(check.attempts, Some(0), "S59: never invoked");
    assert_eq!(
        check.input.as_deref(),
        Some(&json!({"amount": "x", "currency": "EUR"})),
        "S59: defaults filled"
    );
    let events = env.events(&rec.run_id);
    assert!(find(&events, "step-retrying", None).is_empty());
    assert_eq!(
        kinds(&events),
        [
            "run-started",
            "step-started:check",
            "step-failed:check",
            "run-failed"
        ]
    );
}

#[tokio::test]
async fn s57_s59_s116_defaults_are_filled_into_step_input_and_config() {
    let env = Env::new();
    let path = env.file("workflow.yaml", &wf(TYPED));
    let w = env.load(&path).await;
    assert_eq!(
        weft::internal::step_config(&w, "check"),
        Some(json!({"factor": 1})),
        "S116: config defaults"
    );
    let id = env
        .rt
        .start(&w, json!({"amount": 2}), None)
        .await
        .expect("start");
    let rec = settle(&env, &id).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(
        rec.steps["check"].input.as_deref(),
        Some(&json!({"amount": 2, "currency": "EUR"}))
    );
    assert_eq!(
        rec.result,
        Some(json!({"total": 2, "currency": "EUR", "resumed": null}))
    );
    let events = env.events(&id);
    assert_eq!(
        find(&events, "step-started", Some("check"))[0].data,
        json!({"input": {"amount": 2, "currency": "EUR"}})
    );

    let yaml = wf(r#"
steps:
  - { id: check, plugin: kit, step: typed, config: { factor: 3 } }
"#);
    let rec = env
        .run(&yaml, json!({"amount": 2, "currency": "USD"}))
        .await;
    assert_eq!(
        rec.result,
        Some(json!({"total": 6, "currency": "USD", "resumed": null}))
    );
}

#[tokio::test]
async fn s17_a_config_breaking_the_config_schema_refuses_the_file() {
    let env = Env::new();
    let path = env.file(
        "workflow.yaml",
        &wf(r#"
steps:
  - { id: check, plugin: kit, step: typed, config: { factor: "x" } }
"#),
    );
    let err = weft::load_workflow(&path, env.rt.host())
        .await
        .err()
        .expect("the file is refused");
    assert!(err.message.contains("config"), "{err}");
    assert!(err.message.contains("/factor"), "{err}");
}

#[tokio::test]
async fn s46_an_initial_state_breaking_the_state_schema_refuses_the_file() {
    let env = Env::new();
    let path = env.file(
        "workflow.yaml",
        &wf(r#"
state-schema: { type: object, properties: { count: { type: number } } }
initial-state: { count: "zero" }
steps:
  - { id: a, plugin: kit, step: echo }
"#),
    );
    let err = weft::load_workflow(&path, env.rt.host())
        .await
        .err()
        .expect("the file is refused");
    assert!(err.message.contains("state"), "{err}");
    assert!(env.rt.runs(None, None).expect("runs").is_empty());
}

#[tokio::test]
async fn s46_s57_the_initial_state_gets_the_state_schema_defaults() {
    let env = Env::new();
    let yaml = wf(r#"
state-schema:
  type: object
  properties: { count: { type: number, default: 0 }, tags: { type: array, default: [a] } }
initial-state: { tags: [] }
steps:
  - { id: c, plugin: kit, step: context }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Success);
    let expected = json!({"tags": [], "count": 0});
    assert_eq!(
        rec.result.as_ref().map(|c| c["state"].clone()),
        Some(expected.clone())
    );
    assert_eq!(rec.state, expected);
    assert_eq!(
        env.events(&rec.run_id)[0].data["state"],
        expected,
        "S88: run-started carries it"
    );
}

#[tokio::test]
async fn s57_s58_s113_an_invalid_run_input_is_refused_and_nothing_is_stored() {
    let env = Env::new();
    let path = env.file(
        "workflow.yaml",
        &wf(r#"
input-schema:
  type: object
  required: [amount]
  properties: { amount: { type: number }, currency: { type: string, default: EUR } }
steps:
  - { id: a, plugin: kit, step: echo }
"#),
    );
    let w = env.load(&path).await;
    let err = env
        .rt
        .start(&w, json!({"amount": "x"}), None)
        .await
        .expect_err("refused");
    match &err {
        weft::RuntimeError::InvalidInput(v) => {
            assert_eq!(v.len(), 1);
            assert_eq!(v[0].path, "/amount");
        }
        other => panic!("expected InvalidInput, got {other:?}"),
    }
    assert!(
        err.to_string().lines().any(|l| l.starts_with("/amount: ")),
        "S113: {err}"
    );
    assert!(
        env.rt.runs(None, None).expect("runs").is_empty(),
        "S58: nothing stored"
    );

    let id = env
        .rt
        .start(&w, json!({"amount": 1}), None)
        .await
        .expect("start");
    let rec = settle(&env, &id).await;
    assert_eq!(
        rec.input,
        json!({"amount": 1, "currency": "EUR"}),
        "S58: input has defaults"
    );
    assert_eq!(rec.result, Some(json!({"amount": 1, "currency": "EUR"})));
    let events = env.events(&id);
    assert_eq!(
        events[0].data["input"],
        json!({"amount": 1, "currency": "EUR"})
    );
}

#[tokio::test]
async fn s54_s60_an_invalid_output_fails_the_attempt_and_is_retried() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: check, plugin: kit, step: typed, config: { output: { total: "x" } }, retry: { attempts: 2, delay-ms: 1 } }
"#);
    let rec = env.run(&yaml, json!({"amount": 1})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    let e = error(&rec);
    assert_eq!(e.code, "invalid-output");
    assert!(
        e.message.starts_with("step check: output: /total: "),
        "{}",
        e.message
    );
    assert_eq!(
        e.details.as_ref().expect("details")["violations"][0]["path"],
        "/total"
    );
    assert_eq!(rec.steps["check"].attempts, Some(2));
    let events = env.events(&rec.run_id);
    let retrying = find(&events, "step-retrying", Some("check"));
    assert_eq!(retrying.len(), 1);
    assert_eq!(retrying[0].data["error"]["code"], "invalid-output");
}

#[tokio::test]
async fn s61_an_invalid_suspend_payload_fails_the_attempt_instead_of_suspending() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: check, plugin: kit, step: typed, config: { suspend-payload: { nope: 1 } } }
"#);
    let rec = env.run(&yaml, json!({"amount": 1})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    assert_eq!(error(&rec).code, "invalid-suspend-payload");
    assert_eq!(
        error(&rec).details.as_ref().expect("details")["violations"][0]["path"],
        ""
    );
    assert_eq!(rec.steps["check"].status, StepStatus::Failed);
    assert!(rec.steps["check"].suspend_payload.is_none());
    let events = env.events(&rec.run_id);
    assert!(find(&events, "step-suspended", None).is_empty());
    assert!(find(&events, "run-suspended", None).is_empty());
}

#[tokio::test]
async fn s62_s63_invalid_resume_data_is_refused_and_the_run_stays_exactly_as_it_was() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: check, plugin: kit, step: typed, config: { suspend-payload: { question: "ok?" } } }
"#);
    let rec = env.run(&yaml, json!({"amount": 2})).await;
    assert_eq!(rec.status, RunStatus::Suspended);
    let id = rec.run_id.clone();
    let before_events = env.events(&id);
    let before = env.rt.show(&id).await.expect("show");
    let err = resume(
        &env,
        &id,
        req(Some("check"), None, None, json!({"ok": "yes"})),
    )
    .await
    .expect_err("refused");
    assert!(err.starts_with("step check: resume data: /ok: "), "{err}");
    let err = resume(&env, &id, req(None, None, None, json!({})))
        .await
        .expect_err("refused: ok is required");
    assert!(err.starts_with("step check: resume data: "), "{err}");
    assert_eq!(
        env.rt.show(&id).await.expect("show"),
        before,
        "S62: nothing changed"
    );
    assert_eq!(env.events(&id), before_events, "S62: no event");

    let rec = resume(&env, &id, req(None, None, None, json!({"ok": true})))
        .await
        .expect("resumed");
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(
        rec.result,
        Some(json!({"total": 2, "currency": "EUR", "resumed": {"ok": true}}))
    );
}

/// Loads `yaml` with this runtime's native steps and runs it with `input`.
async fn run_native(env: &Env, yaml: &str, input: Value) -> RunRecord {
    let path = env.file("workflow.yaml", yaml);
    let w = env.rt.load_workflow(&path).await.expect("load");
    let id = env.rt.start(&w, input, None).await.expect("start");
    settle(env, &id).await
}

#[tokio::test]
async fn s57_s60_outputs_are_checked_as_produced_and_a_bail_value_is_not_checked() {
    let env = Env::new();
    let schema = json!({"type": "object", "required": ["total"], "properties": {"total": {"type": "number"}, "x": {"type": "number", "default": 5}}});
    env.rt.register(
        "done-total",
        NativeStep::new(
            |_call: NativeCall| async move { Ok(StepOutcome::Done(json!({"total": 1}))) },
        )
        .output_schema(schema.clone()),
    );
    env.rt.register(
        "bail-text",
        NativeStep::new(|_call: NativeCall| async move {
            Ok(StepOutcome::Bail(json!("not an object")))
        })
        .output_schema(schema),
    );
    let rec = run_native(
        &env,
        &wf("steps:\n  - { id: d, native: done-total }\n"),
        json!({}),
    )
    .await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(
        rec.result,
        Some(json!({"total": 1})),
        "S57: no default is filled into an output"
    );
    let rec = run_native(
        &env,
        &wf("steps:\n  - { id: b, native: bail-text }\n  - { id: z, plugin: kit, step: echo }\n"),
        json!({}),
    )
    .await;
    assert_eq!(rec.status, RunStatus::Success, "{:?}", rec.error);
    assert_eq!(rec.result, Some(json!("not an object")));
    assert_eq!(rec.steps["b"].bail, Some(true));
}

#[tokio::test]
async fn s16_s55_s91_a_failed_attempts_chunks_stay_delivered_and_its_patches_are_dropped() {
    let env = Env::new();
    env.rt.register(
        "flaky-writer",
        NativeStep::new(|call: NativeCall| async move {
            let attempt = call.call.attempt;
            call.write(json!(format!("chunk of attempt {attempt}")));
            call.set_state(json!({format!("k{attempt}"): attempt}));
            if attempt == 0 {
                return Err(StepFailure::new("flaky", "the first attempt fails"));
            }
            Ok(StepOutcome::Done(json!({"state": call.call.state})))
        }),
    );
    let yaml = wf(r#"
initial-state: { s: 0 }
steps:
  - { id: w, native: flaky-writer, retry: { attempts: 2 } }
"#);
    let rec = run_native(&env, &yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(
        rec.state,
        json!({"s": 0, "k1": 1}),
        "S55: attempt 0's patch is dropped"
    );
    assert_eq!(
        rec.result,
        Some(json!({"state": {"s": 0}})),
        "attempt 1 starts from the unpatched state"
    );
    let events = env.events(&rec.run_id);
    assert_eq!(
        kinds(&events),
        [
            "run-started",
            "step-started:w",
            "step-output:w",
            "step-retrying:w",
            "step-output:w",
            "step-succeeded:w",
            "run-succeeded"
        ]
    );
    assert_eq!(events[2].data, json!("chunk of attempt 0"));
    assert_eq!(events[4].data, json!("chunk of attempt 1"));
}

// ---------------------------------------------------------------------------------------------
// 9. State

#[tokio::test]
async fn s16_s47_s48_patches_apply_in_call_order_replacing_top_level_keys_and_later_steps_see_them()
{
    let env = Env::new();
    let yaml = wf(r#"
initial-state: { a: { x: 1 }, b: 2, d: [0] }
steps:
  - { id: before, plugin: kit, step: context }
  - id: s
    plugin: kit
    step: set-state
    config: { patches: [ { a: { y: 2 } }, { c: null }, { d: [1] }, { d: [2, 3], e: 5 } ] }
  - { id: after, plugin: kit, step: context }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Success);
    let expected = json!({"a": {"y": 2}, "b": 2, "d": [2, 3], "c": null, "e": 5});
    assert_eq!(rec.state, expected);
    assert_eq!(
        rec.steps["before"]
            .output
            .as_ref()
            .map(|o| o["state"].clone()),
        Some(json!({"a": {"x": 1}, "b": 2, "d": [0]}))
    );
    assert_eq!(
        rec.result.as_ref().map(|o| o["state"].clone()),
        Some(expected)
    );
}

#[tokio::test]
async fn s16_s55_patches_of_a_failed_attempt_are_dropped() {
    let env = Env::new();
    let yaml = wf(r#"
initial-state: { keep: 0 }
steps:
  - { id: s, plugin: kit, step: set-state, config: { patches: [ { keep: 1 }, { other: 2 } ], fail: true }, retry: { attempts: 2, delay-ms: 1 } }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    assert_eq!(error(&rec).code, "after-patch");
    assert_eq!(rec.steps["s"].attempts, Some(2));
    assert_eq!(rec.state, json!({"keep": 0}));
}

#[tokio::test]
async fn s16_a_patch_that_is_not_an_object_fails_with_invalid_state_patch_and_drops_every_patch() {
    let env = Env::new();
    let yaml = wf(r#"
initial-state: { keep: 0 }
steps:
  - { id: s, plugin: kit, step: set-state, config: { patches: [ { keep: 9 }, 5 ] } }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    assert_eq!(error(&rec).code, "invalid-state-patch");
    assert_eq!(error(&rec).step, "s");
    assert_eq!(rec.state, json!({"keep": 0}));
}

#[tokio::test]
async fn s49_s54_a_patch_breaking_the_state_schema_fails_with_invalid_state_and_is_retried() {
    let env = Env::new();
    let yaml = wf(r#"
state-schema: { type: object, properties: { count: { type: number } } }
initial-state: { count: 0 }
steps:
  - { id: s, plugin: kit, step: set-state, config: { patches: [ { count: "x" } ] }, retry: { attempts: 2, delay-ms: 1 } }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    let e = error(&rec);
    assert_eq!(e.code, "invalid-state");
    assert_eq!(
        e.details.as_ref().expect("details")["violations"][0]["path"],
        "/count"
    );
    assert_eq!(
        rec.steps["s"].attempts,
        Some(2),
        "S54: invalid-state is retried"
    );
    assert_eq!(
        rec.state,
        json!({"count": 0}),
        "S49: the patch is not applied"
    );

    let yaml = wf(r#"
state-schema: { type: object, properties: { count: { type: number } } }
initial-state: { count: 0 }
steps:
  - { id: s, plugin: kit, step: set-state, config: { patches: [ { count: "x" }, { count: 2 } ] } }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(
        rec.status,
        RunStatus::Failed,
        "S49: the state is checked after each patch"
    );
    assert_eq!(error(&rec).code, "invalid-state");
    assert_eq!(rec.state, json!({"count": 0}));
}

#[tokio::test]
async fn s50_s86_a_failed_run_keeps_succeeded_outputs_and_its_state_and_cannot_be_resumed() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: a, plugin: kit, step: inc }
  - { id: s, plugin: kit, step: set-state, config: { patches: [ { k: 1 } ] } }
  - { id: f, plugin: kit, step: fail, config: { retryable: false } }
"#);
    let rec = env.run(&yaml, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    assert_eq!(rec.steps["a"].output.as_deref(), Some(&json!({"n": 1})));
    assert_eq!(rec.steps["s"].output.as_deref(), Some(&json!({"n": 1})));
    assert_eq!(rec.state, json!({"k": 1}));
    let err = resume(&env, &rec.run_id, req(None, None, None, json!({})))
        .await
        .expect_err("refused");
    assert_eq!(
        err,
        format!("run {} is not suspended (status: failed)", rec.run_id)
    );
}

// ---------------------------------------------------------------------------------------------
// 12. Suspend and resume

#[tokio::test]
async fn s64_s65_s66_s112_a_suspended_step_records_its_payload_and_labels_and_stops_its_successors()
{
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: a, plugin: kit, step: inc }
  - { id: s, plugin: kit, step: suspend, config: { payload: { q: 1 }, labels: [boss, ops] } }
  - { id: z, plugin: kit, step: echo }
"#);
    let rec = env.run(&yaml, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Suspended);
    let s = &rec.steps["s"];
    assert_eq!(s.status, StepStatus::Suspended);
    assert_eq!(s.suspend_payload, Some(json!({"q": 1})));
    assert_eq!(s.labels, Some(vec!["boss".to_owned(), "ops".to_owned()]));
    assert!(s.suspended_at.is_some());
    assert!(!rec.steps.contains_key("z"));
    assert!(rec.result.is_none() && rec.error.is_none());
    let expected = json!([{"path": "s", "labels": ["boss", "ops"], "payload": {"q": 1}, "foreach_index": null}]);
    assert_eq!(
        js(&rec.suspended),
        expected,
        "S66/S112: exactly these members"
    );
    let events = env.events(&rec.run_id);
    assert_eq!(
        kinds(&events),
        [
            "run-started",
            "step-started:a",
            "step-succeeded:a",
            "step-started:s",
            "step-suspended:s",
            "run-suspended"
        ]
    );
    assert_eq!(
        events[4].data,
        json!({"payload": {"q": 1}, "labels": ["boss", "ops"]})
    );
    assert_eq!(events[5].data, json!({"suspended": expected}));
}

#[tokio::test]
async fn s70_s71_s73_s88_a_resume_by_path_reinvokes_the_step_with_the_data_and_keeps_its_record() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: a, plugin: kit, step: inc }
  - { id: s, plugin: kit, step: suspend, config: { payload: { q: 1 } } }
  - { id: z, plugin: kit, step: echo }
"#);
    let rec = env.run(&yaml, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Suspended);
    let id = rec.run_id.clone();
    let before = rec.steps["s"].clone();
    let n_before = env.events(&id).len();
    let rec = resume(&env, &id, req(Some("s"), None, None, json!({"ok": 1})))
        .await
        .expect("resumed");
    assert_eq!(rec.status, RunStatus::Success);
    assert!(
        rec.suspended.is_none(),
        "S66: the list exists only while suspended"
    );
    assert_eq!(
        rec.result,
        Some(json!({"resumed": {"ok": 1}, "payload": {"q": 1}, "input": {"n": 1}}))
    );
    let s = &rec.steps["s"];
    assert_eq!(s.status, StepStatus::Success);
    assert_eq!(s.input.as_deref(), Some(&json!({"n": 1})));
    assert_eq!(s.started_at, before.started_at, "S73");
    assert_eq!(s.suspended_at, before.suspended_at, "S73");
    assert!(s.resumed_at.is_some(), "S73");
    assert_eq!(s.resume_data, Some(json!({"ok": 1})), "S73");
    assert_eq!(s.attempts, Some(1));
    let events = env.events(&id);
    assert_eq!(
        kinds(&events[n_before..]),
        [
            "run-resumed",
            "step-started:s",
            "step-succeeded:s",
            "step-started:z",
            "step-succeeded:z",
            "run-succeeded"
        ]
    );
    assert_eq!(
        events[n_before].data,
        json!({"path": "s", "foreach_indexes": [], "data": {"ok": 1}})
    );
    assert_eq!(
        events[n_before + 1].data,
        json!({"input": {"n": 1}, "resume": true})
    );
    assert_eq!(
        find(&events, "step-started", Some("a")).len(),
        1,
        "S71: a never runs again"
    );
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>(), "S87");
}

#[tokio::test]
async fn s53_s70_s72_a_resumed_step_starts_again_at_attempt_0_and_it_and_its_retries_see_the_resume_data()
 {
    let env = Env::new();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    env.rt.register(
        "flaky-suspend",
        NativeStep::new(move |call: NativeCall| {
            let log = log.clone();
            async move {
                let c = &call.call;
                log.lock()
                    .expect("lock")
                    .push((c.attempt, c.resume.is_some()));
                if c.attempt == 0 {
                    return Err(StepFailure::new("flaky", "every first attempt fails"));
                }
                if let Some(r) = &c.resume {
                    return Ok(StepOutcome::Done(json!({
                        "attempt": c.attempt,
                        "data": r.data,
                        "payload": r.suspend_payload,
                        "state": c.state,
                        "input": c.input
                    })));
                }
                Ok(StepOutcome::Suspend {
                    payload: json!({"attempt": c.attempt}),
                    labels: vec!["l".into()],
                })
            }
        }),
    );
    let path = env.file(
        "workflow.yaml",
        &wf(r#"
initial-state: { v: 0 }
steps:
  - parallel:
      id: p
      steps:
        - { id: n, native: flaky-suspend, retry: { attempts: 2 } }
        - { id: s, plugin: kit, step: set-state, config: { patches: [ { v: 1 } ] } }
"#),
    );
    let w = env.rt.load_workflow(&path).await.expect("load");
    let id = env
        .rt
        .start(&w, json!({"in": 1}), None)
        .await
        .expect("start");
    let rec = settle(&env, &id).await;
    assert_eq!(rec.status, RunStatus::Suspended);
    assert_eq!(rec.steps["p.n"].attempts, Some(2));
    assert_eq!(
        rec.steps["p.n"].suspend_payload,
        Some(json!({"attempt": 1}))
    );
    let rec = resume(&env, &id, req(None, Some("l"), None, json!({"go": true})))
        .await
        .expect("resumed");
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(
        rec.steps["p.n"].output.as_deref(),
        Some(
            &json!({"attempt": 1, "data": {"go": true}, "payload": {"attempt": 1}, "state": {"v": 1}, "input": {"in": 1}})
        )
    );
    assert_eq!(
        rec.steps["p.n"].attempts,
        Some(2),
        "S53: a full budget again"
    );
    assert_eq!(
        *seen.lock().expect("lock"),
        [(0, false), (1, false), (0, true), (1, true)],
        "S53: the resumed execution starts at attempt 0; S72: its retry gets the resume too"
    );
}

#[tokio::test]
async fn s67_s68_s69_resume_selection_and_its_refusals() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - parallel:
      id: p
      steps:
        - { id: a, plugin: kit, step: suspend, config: { labels: [x] } }
        - { id: b, plugin: kit, step: suspend, config: { labels: [why, x2] } }
"#);
    let rec = env.run(&yaml, json!({"v": 1})).await;
    assert_eq!(rec.status, RunStatus::Suspended);
    let id = rec.run_id.clone();
    let paths: Vec<&str> = rec
        .suspended
        .as_ref()
        .expect("suspended")
        .iter()
        .map(|s| s.path.as_str())
        .collect();
    assert_eq!(paths, ["p.a", "p.b"]);
    let before = env.events(&id);
    let refusals = [
        (
            req(None, None, None, json!({})),
            "ambiguous resume: suspended steps p.a, p.b; pick one with --step or --label",
        ),
        (
            req(Some("p"), None, None, json!({})),
            "ambiguous resume: suspended steps p.a, p.b; pick one with --step or --label",
        ),
        (
            req(Some("q"), None, None, json!({})),
            "step q is not suspended; suspended steps: p.a, p.b",
        ),
        (
            req(Some("p.a.b"), None, None, json!({})),
            "step p.a.b is not suspended; suspended steps: p.a, p.b",
        ),
        (
            req(None, Some("z"), None, json!({})),
            "no suspended step has label z; suspended steps: p.a, p.b",
        ),
        (
            req(Some("p.a"), None, Some(0), json!({})),
            "step p.a is not inside a foreach",
        ),
    ];
    for (request, message) in refusals {
        let err = resume(&env, &id, request).await.expect_err(message);
        assert_eq!(err, message);
    }
    assert!(
        resume(&env, &id, req(Some("p.a"), Some("x"), None, json!({})))
            .await
            .is_err(),
        "S67: --step with --label"
    );
    assert_eq!(env.events(&id), before, "S69: refusals change nothing");
    assert_eq!(
        env.rt.show(&id).await.expect("show").status,
        RunStatus::Suspended
    );

    let rec = resume(&env, &id, req(None, Some("why"), None, json!({"who": "b"})))
        .await
        .expect("resume b");
    assert_eq!(rec.status, RunStatus::Suspended);
    assert_eq!(rec.steps["p.b"].status, StepStatus::Success);
    let left = js(&rec.suspended);
    assert_eq!(
        left,
        json!([{"path": "p.a", "labels": ["x"], "payload": {"v": 1}, "foreach_index": null}])
    );
    let err = resume(&env, &id, req(None, Some("why"), None, json!({})))
        .await
        .expect_err("why released");
    assert_eq!(err, "no suspended step has label why; suspended steps: p.a");

    let rec = resume(&env, &id, req(None, None, None, json!({"who": "a"})))
        .await
        .expect("resume a");
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(
        rec.result,
        Some(json!({
            "a": {"resumed": {"who": "a"}, "payload": {"v": 1}, "input": {"v": 1}},
            "b": {"resumed": {"who": "b"}, "payload": {"v": 1}, "input": {"v": 1}}
        }))
    );
    let err = resume(&env, &id, req(None, None, None, json!({})))
        .await
        .expect_err("ended");
    assert_eq!(err, format!("run {id} is not suspended (status: success)"));
}

#[tokio::test]
async fn s72_a_resumed_step_may_suspend_again() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: s, plugin: kit, step: suspend, config: { payload: { p: 1 }, labels: [l], suspend-again-unless: go } }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Suspended);
    let id = rec.run_id.clone();
    let rec = resume(&env, &id, req(None, Some("l"), None, json!({"not": "yet"})))
        .await
        .expect("resumed");
    assert_eq!(rec.status, RunStatus::Suspended);
    let s = &rec.steps["s"];
    assert_eq!(s.status, StepStatus::Suspended);
    assert_eq!(s.resume_data, Some(json!({"not": "yet"})));
    assert_eq!(
        js(&rec.suspended),
        json!([{"path": "s", "labels": ["l"], "payload": {"p": 1}, "foreach_index": null}])
    );
    let rec = resume(&env, &id, req(Some("s"), None, None, json!({"go": 1})))
        .await
        .expect("resumed");
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(
        rec.result,
        Some(json!({"resumed": {"go": 1}, "payload": {"p": 1}, "input": {}}))
    );
    let events = env.events(&id);
    assert_eq!(
        kinds(&events),
        [
            "run-started",
            "step-started:s",
            "step-suspended:s",
            "run-suspended",
            "run-resumed",
            "step-started:s",
            "step-suspended:s",
            "run-suspended",
            "run-resumed",
            "step-started:s",
            "step-succeeded:s",
            "run-succeeded"
        ]
    );
}

#[tokio::test]
async fn s19_s74_a_failed_arm_ends_the_run_failed_and_a_suspended_sibling_becomes_cancelled() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - parallel:
      id: p
      steps:
        - { id: wait, plugin: kit, step: suspend }
        - { id: bad, plugin: kit, step: fail, config: { code: nope, retryable: false } }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    assert_eq!(error(&rec).code, "nope");
    assert_eq!(error(&rec).step, "p.bad");
    assert_eq!(rec.steps["p.wait"].status, StepStatus::Cancelled);
    assert_eq!(rec.steps["p"].status, StepStatus::Failed);
    assert_eq!(
        rec.steps["p"].error, rec.error,
        "S85: the same error object"
    );
    assert!(rec.suspended.is_none());
    let events = env.events(&rec.run_id);
    assert!(find(&events, "run-suspended", None).is_empty());
    assert_eq!(events.last().map(kind).as_deref(), Some("run-failed"));
    let err = resume(&env, &rec.run_id, req(None, None, None, json!({})))
        .await
        .expect_err("ended");
    assert_eq!(
        err,
        format!("run {} is not suspended (status: failed)", rec.run_id)
    );
}

// ---------------------------------------------------------------------------------------------
// 13. Cancel

#[tokio::test]
async fn s74_s75_s76_s78_cancelling_a_suspended_run_cancels_its_suspended_step() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: s, plugin: kit, step: suspend }
  - { id: z, plugin: kit, step: echo }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Suspended);
    let id = rec.run_id.clone();
    let n = env.events(&id).len();
    env.rt.cancel(&id).await.expect("cancel accepted");
    let rec = settle(&env, &id).await;
    assert_eq!(rec.status, RunStatus::Cancelled);
    assert_eq!(rec.steps["s"].status, StepStatus::Cancelled);
    assert!(!rec.steps.contains_key("z"), "S76: nothing new starts");
    assert!(rec.suspended.is_none() && rec.error.is_none() && rec.result.is_none());
    let events = env.events(&id);
    assert_eq!(
        kinds(&events[n..]),
        ["step-cancelled:s", "run-cancelled"],
        "S78: run-cancelled is last"
    );
    assert_eq!(events.last().map(|e| &e.data), Some(&json!({})));

    let err = env.rt.cancel(&id).await.expect_err("ended").to_string();
    assert_eq!(
        err,
        format!("run {id} has already ended (status: cancelled)")
    );
    let err = resume(&env, &id, req(None, None, None, json!({})))
        .await
        .expect_err("S78");
    assert_eq!(
        err,
        format!("run {id} is not suspended (status: cancelled)")
    );
    assert_eq!(env.events(&id).len(), n + 2, "the refusals added nothing");
}

#[tokio::test]
async fn s75_cancelling_an_ended_run_is_refused_and_changes_nothing() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: a, plugin: kit, step: echo }
"#);
    let rec = env.run(&yaml, json!({})).await;
    let before = env.events(&rec.run_id);
    let err = env
        .rt
        .cancel(&rec.run_id)
        .await
        .expect_err("refused")
        .to_string();
    assert_eq!(
        err,
        format!("run {} has already ended (status: success)", rec.run_id)
    );
    assert_eq!(
        env.rt.show(&rec.run_id).await.expect("show").status,
        RunStatus::Success
    );
    assert_eq!(env.events(&rec.run_id), before);

    let failed = env
        .run(
            &wf("steps:\n  - { id: f, plugin: kit, step: fail }\n"),
            json!({}),
        )
        .await;
    let err = env
        .rt
        .cancel(&failed.run_id)
        .await
        .expect_err("refused")
        .to_string();
    assert_eq!(
        err,
        format!("run {} has already ended (status: failed)", failed.run_id)
    );
}

#[tokio::test]
async fn s76_a_cancel_ends_a_retry_wait_at_once_and_no_retry_starts() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: a, plugin: kit, step: fail, retry: { attempts: 3, delay-ms: 600000 } }
  - { id: z, plugin: kit, step: echo }
"#);
    let id = start(&env, &yaml, json!({})).await;
    let mut rx = env.rt.watch(&id, 1).expect("watch");
    until_event(&mut rx, "step-retrying", Some("a")).await;
    env.rt.cancel(&id).await.expect("cancel accepted");
    let rec = settle(&env, &id).await;
    assert_eq!(rec.status, RunStatus::Cancelled);
    assert_eq!(rec.steps["a"].status, StepStatus::Cancelled);
    assert_eq!(rec.steps["a"].attempts, Some(1), "no retry started");
    assert!(!rec.steps.contains_key("z"));
    let events = env.events(&id);
    assert_eq!(
        kinds(&events),
        [
            "run-started",
            "step-started:a",
            "step-retrying:a",
            "step-cancelled:a",
            "run-cancelled"
        ]
    );
}

#[tokio::test]
async fn s74_s76_s77_a_cancel_while_running_cancels_a_suspended_sibling_and_aborts_the_running_one()
{
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - parallel:
      id: p
      steps:
        - { id: s, plugin: kit, step: suspend }
        - { id: w, plugin: kit, step: wait-abort }
  - { id: z, plugin: kit, step: echo }
"#);
    let id = start(&env, &yaml, json!({})).await;
    let mut rx = env.rt.watch(&id, 1).expect("watch");
    until_event(&mut rx, "step-suspended", Some("p.s")).await;
    assert_eq!(
        env.rt.show(&id).await.expect("show").status,
        RunStatus::Running,
        "S65: w still runs"
    );
    env.rt.cancel(&id).await.expect("cancel accepted");
    let rec = settle(&env, &id).await;
    assert_eq!(rec.status, RunStatus::Cancelled);
    assert_eq!(rec.steps["p.s"].status, StepStatus::Cancelled);
    assert_eq!(rec.steps["p.w"].status, StepStatus::Cancelled);
    assert!(
        rec.steps["p.w"].output.is_none(),
        "S77: what it returned is discarded"
    );
    assert!(!rec.steps.contains_key("z"));
    let events = env.events(&id);
    assert_eq!(events.last().map(kind).as_deref(), Some("run-cancelled"));
    assert!(find(&events, "step-succeeded", Some("p.w")).is_empty());
}

#[tokio::test]
async fn s69_a_resume_while_the_run_is_running_is_refused_with_its_status() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: s, plugin: kit, step: suspend }
  - { id: w, plugin: kit, step: wait-abort }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Suspended);
    let id = rec.run_id.clone();
    let mut rx = env.rt.watch(&id, 1).expect("watch");
    env.rt
        .resume(&id, req(None, None, None, json!({})))
        .await
        .expect("resume accepted");
    until_event(&mut rx, "step-started", Some("w")).await;
    let err = env
        .rt
        .resume(&id, req(None, None, None, json!({})))
        .await
        .expect_err("refused")
        .to_string();
    assert_eq!(err, format!("run {id} is not suspended (status: running)"));
    env.rt.cancel(&id).await.expect("cancel accepted");
    let rec = settle(&env, &id).await;
    assert_eq!(rec.status, RunStatus::Cancelled);
    assert_eq!(find(&env.events(&id), "run-resumed", None).len(), 1);
}

#[tokio::test]
async fn s87_a_watcher_from_any_seq_gets_stored_then_live_events_without_gap_or_duplicate() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: a, plugin: kit, step: emit, config: { chunks: [1, 2, 3] } }
  - { id: b, plugin: kit, step: fail, config: { succeed-on-attempt: 2 }, retry: { attempts: 3, delay-ms: 1 } }
  - { id: c, plugin: kit, step: emit }
"#);
    let id = start(&env, &yaml, json!({})).await;
    let mut rx = env.rt.watch(&id, 3).expect("watch");
    let mut seen = Vec::new();
    loop {
        let ev = tokio::time::timeout(HANG_GUARD, rx.recv())
            .await
            .expect("the run never closed")
            .expect("the stream ended before the closing event");
        let closing = ev.kind.is_closing();
        seen.push((*ev).clone());
        if closing {
            break;
        }
    }
    let all = env.events(&id);
    assert_eq!(kind(all.last().expect("events")), "run-succeeded");
    assert_eq!(seen, all[2..].to_vec());
    let seqs: Vec<u64> = all.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=all.len() as u64).collect::<Vec<_>>());
}

#[tokio::test]
async fn s87_a_live_watcher_gets_every_event_of_a_large_burst_without_gap() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - loop: { id: l, do-until: '.output >= 3000', do: { map: { id: m, expr: '.input + 1' } } }
"#);
    let id = start(&env, &yaml, json!(0)).await;
    let mut rx = env.rt.watch(&id, 1).expect("watch");
    let mut seqs = Vec::new();
    loop {
        let ev = tokio::time::timeout(HANG_GUARD, rx.recv())
            .await
            .expect("the run never closed")
            .expect("the stream ended before the closing event");
        seqs.push(ev.seq);
        if ev.kind.is_closing() {
            break;
        }
    }
    let all = env.events(&id);
    assert_eq!(
        all.len(),
        6004,
        "run-started, loop started/succeeded, 3000 x 2 map events, run-succeeded"
    );
    assert_eq!(seqs.len(), all.len(), "the watcher missed events");
    assert_eq!(seqs, (1..=all.len() as u64).collect::<Vec<_>>());
}

// ---------------------------------------------------------------------------------------------
// 14. Bail; 15. Tripwire

#[tokio::test]
async fn s5_s79_s80_a_bail_at_top_level_ends_the_run_with_its_value() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - { id: a, plugin: kit, step: inc }
  - { id: b, plugin: kit, step: bail, config: { value: { x: 1 } } }
  - { id: c, plugin: kit, step: inc }
"#);
    let rec = env.run(&yaml, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(rec.result, Some(json!({"x": 1})));
    let b = &rec.steps["b"];
    assert_eq!(b.status, StepStatus::Success);
    assert_eq!(b.bail, Some(true));
    assert_eq!(b.output.as_deref(), Some(&json!({"x": 1})));
    assert_eq!(rec.steps["a"].bail, None);
    assert!(!rec.steps.contains_key("c"));
    let events = env.events(&rec.run_id);
    assert_eq!(
        kinds(&events),
        [
            "run-started",
            "step-started:a",
            "step-succeeded:a",
            "step-started:b",
            "step-succeeded:b",
            "run-succeeded"
        ]
    );
    assert_eq!(events[4].data, json!({"output": {"x": 1}, "bail": true}));
    assert_eq!(events[5].data, json!({"result": {"x": 1}}));

    let rec = env.run(&wf("steps:\n  - { id: b, plugin: kit, step: bail }\n  - { id: c, plugin: kit, step: inc }\n"), json!({"k": 2})).await;
    assert_eq!(
        rec.result,
        Some(json!({"k": 2})),
        "the default bail value is the input"
    );
}

#[tokio::test]
async fn s74_s79_a_bail_cancels_a_suspended_sibling() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - parallel:
      id: p
      steps:
        - { id: s, plugin: kit, step: suspend }
        - { id: b, plugin: kit, step: bail, config: { value: done } }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(rec.result, Some(json!("done")));
    assert_eq!(rec.steps["p.s"].status, StepStatus::Cancelled);
    assert!(find(&env.events(&rec.run_id), "run-suspended", None).is_empty());
}

#[tokio::test]
async fn s54_s82_s112_a_tripwire_is_not_retried_and_ends_the_run_tripwire_with_exactly_its_four_members()
 {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - id: g
    plugin: kit
    step: tripwire
    retry: { attempts: 3 }
    config: { reason: "too risky", retry: true, metadata: { score: 9 }, processor-id: guard }
  - { id: z, plugin: kit, step: echo }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Tripwire);
    let expected = json!({"reason": "too risky", "retry": true, "metadata": {"score": 9}, "processor_id": "guard"});
    let shown = js(&rec);
    assert_eq!(shown["tripwire"], expected, "S112: exactly these members");
    assert!(
        shown.get("error").is_none() && shown.get("result").is_none(),
        "{shown}"
    );
    let g = &rec.steps["g"];
    assert_eq!(g.status, StepStatus::Failed);
    assert_eq!(js(&g.tripwire), expected);
    assert_eq!(g.attempts, Some(1));
    assert!(!rec.steps.contains_key("z"));
    let events = env.events(&rec.run_id);
    assert!(find(&events, "step-retrying", None).is_empty());
    assert_eq!(
        kinds(&events),
        [
            "run-started",
            "step-started:g",
            "step-failed:g",
            "run-tripwire"
        ]
    );
    assert_eq!(events[3].data, json!({"tripwire": expected}));

    let rec = env
        .run(
            &wf("steps:\n  - { id: g, plugin: kit, step: tripwire }\n"),
            json!({}),
        )
        .await;
    assert_eq!(
        js(&rec)["tripwire"],
        json!({"reason": "blocked", "retry": false, "metadata": null, "processor_id": null})
    );
}

// ---------------------------------------------------------------------------------------------
// 17. Events

#[tokio::test]
async fn s88_s91_s93_s111_s112_writer_custom_log_and_captured_output_arrive_in_call_order() {
    let env = Env::new();
    let yaml = wf(r#"
initial-state: { s: 1 }
steps:
  - { id: e, plugin: kit, step: emit, config: { chunks: [ 1, "two", { three: 3 }, null ] } }
"#);
    let rec = env.run(&yaml, json!({"in": true})).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(rec.result, Some(json!({"in": true})));
    let events = env.events(&rec.run_id);
    let seen: Vec<(String, Option<String>, Value)> = events
        .iter()
        .map(|e| (kind(e), e.path.clone(), e.data.clone()))
        .collect();
    let e = Some("e".to_owned());
    let expected = vec![
        (
            "run-started".to_owned(),
            None,
            json!({"workflow_id": "t", "input": {"in": true}, "state": {"s": 1}}),
        ),
        (
            "step-started".to_owned(),
            e.clone(),
            json!({"input": {"in": true}}),
        ),
        ("step-output".to_owned(), e.clone(), json!(1)),
        ("step-output".to_owned(), e.clone(), json!("two")),
        ("step-output".to_owned(), e.clone(), json!({"three": 3})),
        ("step-output".to_owned(), e.clone(), Value::Null),
        (
            "step-custom".to_owned(),
            e.clone(),
            json!({"kind": "progress", "data": {"n": 1}}),
        ),
        (
            "log".to_owned(),
            e.clone(),
            json!({"level": "info", "message": "hello from emit"}),
        ),
        (
            "log".to_owned(),
            e.clone(),
            json!({"level": "info", "message": "stdout line"}),
        ),
        (
            "log".to_owned(),
            e.clone(),
            json!({"level": "warn", "message": "stderr line"}),
        ),
        ("step-output".to_owned(), e.clone(), json!("last")),
        (
            "step-succeeded".to_owned(),
            e.clone(),
            json!({"output": {"in": true}}),
        ),
        (
            "run-succeeded".to_owned(),
            None,
            json!({"result": {"in": true}}),
        ),
    ];
    assert_eq!(seen, expected);
    assert!(
        events
            .iter()
            .all(|e| e.foreach_index.is_none() && e.iteration.is_none())
    );
}
