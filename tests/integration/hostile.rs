//! The hostile catalog (S12–S16, S77, S83, S84, S91, S110, S111): every misbehaviour of the
//! `hostile` plugin ends, in bounded time, with its code or a proven denial, and the same home
//! then runs a normal step as if nothing had happened.

use std::io::ErrorKind;
use std::net::TcpListener as StdTcpListener;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use weft::{ErrorInfo, EventKind, RunStatus, StepStatus};
use weft::{RunRecord, StoredEvent};

use crate::common::{Env, config, kinds};

/// A guard against a hang, not a measurement: a run that has not ended by then is a bug.
const HANG_GUARD: Duration = Duration::from_secs(300);

/// The default `limits.max-events`.
const MAX_EVENTS: usize = 100_000;

/// A one-step workflow: step `h` of the hostile plugin with `sandbox` (`limits`, `grants`) merged
/// into the plugin entry and `step` (`config`, `timeout-ms`, ...) merged into the step entry.
/// Written as JSON, which workflow files accept.
fn hostile(name: &str, sandbox: Value, step: Value) -> String {
    let mut plugin = json!({"wasm": "{hostile}"});
    merge(&mut plugin, sandbox);
    let mut entry = json!({"id": "h", "plugin": "h", "step": name});
    merge(&mut entry, step);
    json!({"id": "hostile", "plugins": {"h": plugin}, "steps": [entry]}).to_string()
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(into), Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}

/// Runs `workflow` with input `{}` until it ends or suspends.
async fn run(env: &Env, workflow: &str) -> RunRecord {
    run_with(env, workflow, json!({})).await
}

/// Runs `workflow` with `input` until it ends or suspends.
async fn run_with(env: &Env, workflow: &str, input: Value) -> RunRecord {
    match tokio::time::timeout(HANG_GUARD, env.run(workflow, input)).await {
        Ok(record) => record,
        Err(_) => panic!("the run did not end within {HANG_GUARD:?}"),
    }
}

/// The same home still runs normal steps after whatever came before (S14): testkit's `inc`, and
/// a well-behaved step of the hostile plugin itself.
async fn a_normal_run_still_succeeds(env: &Env) {
    let normal = r#"
id: normal
plugins:
  kit: { wasm: "{testkit}" }
  hostile: { wasm: "{hostile}" }
steps:
  - { id: inc, plugin: kit, step: inc }
  - { id: nap, plugin: hostile, step: sleep, config: { ms: 0 } }
"#;
    let rec = run_with(env, normal, json!({"n": 41})).await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:#?}");
    assert_eq!(rec.steps["inc"].output.as_deref(), Some(&json!({"n": 42})));
    assert_eq!(rec.steps["inc"].attempts, Some(1));
    assert_eq!(rec.result, Some(json!({})));
}

/// The run failed at step `h` with `code`: the run, the step record and both closing events
/// carry the same one-line error (S13, S14, S83–S85).
fn failed_with(env: &Env, rec: &RunRecord, code: &str) -> ErrorInfo {
    assert_eq!(rec.status, RunStatus::Failed, "{rec:#?}");
    let err = rec.error.clone().expect("a failed run has an error");
    assert_eq!(err.code, code, "{err:#?}");
    assert_eq!(err.step, "h");
    let step = &rec.steps["h"];
    assert_eq!(step.status, StepStatus::Failed);
    assert_eq!(step.error.as_ref(), Some(&err));
    assert_eq!(step.output, None);
    assert_one_line(&err.message);

    let events = env.events(&rec.run_id);
    let closing: Vec<&StoredEvent> = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::StepFailed | EventKind::RunFailed))
        .collect();
    assert_eq!(closing.len(), 2, "{:?}", kinds(&events));
    for ev in closing {
        assert_eq!(ev.data["error"]["code"], json!(code), "{ev:?}");
        assert_eq!(ev.data["error"]["message"], json!(err.message), "{ev:?}");
    }
    assert_eq!(events.last().map(|e| e.kind), Some(EventKind::RunFailed));
    no_backtraces(&events, rec);
    err
}

/// S84: one line, no backtrace.
fn assert_one_line(message: &str) {
    assert!(!message.is_empty());
    assert!(!message.contains('\n'), "not one line: {message:?}");
    assert!(
        !message.to_lowercase().contains("backtrace"),
        "a backtrace: {message:?}"
    );
}

/// S84: neither the record nor any event holds a wasm backtrace.
fn no_backtraces(events: &[StoredEvent], rec: &RunRecord) {
    let text = format!(
        "{}{}",
        serde_json::to_string(events).expect("events serialize"),
        serde_json::to_string(rec).expect("record serializes")
    );
    assert!(
        !text.contains("wasm backtrace"),
        "a wasm backtrace was stored"
    );
    assert!(!text.contains("wasm function"), "a wasm frame was stored");
}

/// The step's output, for steps that report what they tried.
fn output(rec: &RunRecord) -> &Value {
    assert_eq!(rec.status, RunStatus::Success, "{rec:#?}");
    rec.steps["h"].output.as_ref().expect("output")
}

fn count(events: &[StoredEvent], kind: EventKind) -> usize {
    events.iter().filter(|e| e.kind == kind).count()
}

// ---------------------------------------------------------------------------------------------
// Deadlines, fuel, memory, traps.

#[tokio::test]
async fn s14_s15_an_endless_loop_fails_with_timeout_and_is_stopped_by_the_host() {
    let env = Env::new();
    let rec = run(
        &env,
        &hostile("spin", json!({"limits": {"timeout-ms": 200}}), json!({})),
    )
    .await;
    let err = failed_with(&env, &rec, "timeout");
    assert!(err.message.contains("200 ms"), "{}", err.message);
    assert!(
        err.message.contains("stopped after the abort grace"),
        "{}",
        err.message
    );
    a_normal_run_still_succeeds(&env).await;
}

#[tokio::test]
async fn s15_a_sleep_past_the_step_deadline_fails_with_timeout() {
    let env = Env::new();
    // The step's own timeout-ms (S15), the guest blocked in a WASI poll for 10 minutes.
    let rec = run(
        &env,
        &hostile(
            "sleep",
            json!({}),
            json!({"timeout-ms": 150, "config": {"ms": 600_000}}),
        ),
    )
    .await;
    let err = failed_with(&env, &rec, "timeout");
    assert!(err.message.contains("150 ms"), "{}", err.message);
    a_normal_run_still_succeeds(&env).await;
}

#[tokio::test]
async fn s15_the_step_timeout_overrides_the_plugin_limit() {
    let env = Env::new();
    // limits.timeout-ms would let the sleep finish; the step's own deadline does not.
    let rec = run(
        &env,
        &hostile(
            "sleep",
            json!({"limits": {"timeout-ms": 600_000}}),
            json!({"timeout-ms": 100, "config": {"ms": 600_000}}),
        ),
    )
    .await;
    let err = failed_with(&env, &rec, "timeout");
    assert!(err.message.contains("100 ms"), "{}", err.message);
    // And a sleep that ends before its deadline succeeds.
    let rec = run(
        &env,
        &hostile(
            "sleep",
            json!({"limits": {"timeout-ms": 600_000}}),
            json!({"config": {"ms": 1}}),
        ),
    )
    .await;
    assert_eq!(output(&rec), &json!({}));
    a_normal_run_still_succeeds(&env).await;
}

#[tokio::test]
async fn s15_a_step_that_returns_after_its_deadline_still_fails_with_timeout() {
    // A grace far longer than the step needs to notice and return, so "it returned" is certain.
    let mut config = config();
    config.host.abort_grace = Duration::from_secs(60);
    let env = Env::with_config(config);
    // wait-abort returns {aborted: true, reason: "timeout"} once it sees the deadline pass; the
    // attempt fails with `timeout` whatever it returns, and it was not stopped: it returned.
    let workflow = r#"
id: late
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: h, plugin: kit, step: wait-abort, timeout-ms: 100, config: { max-ms: 600000 } }
"#;
    let rec = run(&env, workflow).await;
    let err = failed_with(&env, &rec, "timeout");
    assert!(!err.message.contains("stopped"), "{}", err.message);
    a_normal_run_still_succeeds(&env).await;
}

#[tokio::test]
async fn s15_s54_a_timed_out_attempt_is_retried_once_it_was_stopped() {
    let mut config = config();
    config.host.abort_grace = Duration::from_millis(50);
    let env = Env::with_config(config);
    let rec = run(
        &env,
        &hostile(
            "spin",
            json!({}),
            json!({"timeout-ms": 100, "retry": {"attempts": 2}}),
        ),
    )
    .await;
    failed_with(&env, &rec, "timeout");
    assert_eq!(rec.steps["h"].attempts, Some(2));
    let events = env.events(&rec.run_id);
    assert_eq!(
        kinds(&events),
        [
            "run-started",
            "step-started:h",
            "step-retrying:h",
            "step-failed:h",
            "run-failed"
        ]
    );
    assert_eq!(events[2].data["attempt"], json!(1));
    assert_eq!(events[2].data["error"]["code"], json!("timeout"));
    a_normal_run_still_succeeds(&env).await;
}

#[tokio::test]
async fn s12_each_attempt_gets_a_fresh_instance_even_after_a_trap() {
    let env = Env::new();
    // A trapped instance cannot be entered again: had the retry reused it, its failure would not
    // be the guest's own panic.
    let rec = run(
        &env,
        &hostile("panic", json!({}), json!({"retry": {"attempts": 3}})),
    )
    .await;
    let err = failed_with(&env, &rec, "trap");
    assert_eq!(rec.steps["h"].attempts, Some(3));
    let events = env.events(&rec.run_id);
    let retries: Vec<&StoredEvent> = events
        .iter()
        .filter(|e| e.kind == EventKind::StepRetrying)
        .collect();
    assert_eq!(retries.len(), 2);
    for ev in retries {
        assert_eq!(ev.data["error"]["message"], json!(err.message), "{ev:?}");
    }
    assert!(err.message.contains("boom"), "{}", err.message);
    a_normal_run_still_succeeds(&env).await;
}

#[tokio::test]
async fn s12_an_instance_sees_nothing_an_earlier_one_left_in_its_pooled_slot() {
    let env = Env::new();
    // Six steps of one component, one after another, reuse the same pooled slot: between them
    // its memory is reset (the 512 pages each one writes, scattered, are more regions than one
    // PAGEMAP_SCAN reports, so part is reset in place and the rest decommitted) and must read
    // as the image again.
    let steps: Vec<Value> = (1..=6)
        .map(|i| json!({"id": format!("s{i}"), "plugin": "h", "step": "scribble"}))
        .collect();
    let workflow =
        json!({"id": "scribble", "plugins": {"h": {"wasm": "{hostile}"}}, "steps": steps});
    for _ in 0..2 {
        let rec = run(&env, &workflow.to_string()).await;
        assert_eq!(rec.status, RunStatus::Success, "{rec:#?}");
        for i in 1..=6 {
            assert_eq!(
                rec.steps[&format!("s{i}")].output.as_deref(),
                Some(&json!({"counter": 0, "dirty_pages": 0})),
                "step s{i} read what an earlier instance wrote"
            );
        }
    }
}

/// A one-step workflow: testkit's `set-state` with `config`, over `initial-state: {kept: 1}`.
fn set_state(config: Value) -> String {
    json!({
        "id": "patches",
        "initial-state": {"kept": 1},
        "plugins": {"kit": {"wasm": "{testkit}"}},
        "steps": [{"id": "h", "plugin": "kit", "step": "set-state", "config": config}]
    })
    .to_string()
}

#[tokio::test]
async fn s16_patches_apply_only_when_the_invocation_succeeds() {
    let env = Env::new();
    // Applied in call order on `done`.
    let rec = run(
        &env,
        &set_state(json!({"patches": [{"a": 1}, {"a": 2, "b": 3}]})),
    )
    .await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:#?}");
    assert_eq!(rec.state, json!({"kept": 1, "a": 2, "b": 3}));

    // Dropped when the invocation fails after patching.
    let rec = run(
        &env,
        &set_state(json!({"patches": [{"a": 1}], "fail": true})),
    )
    .await;
    failed_with(&env, &rec, "after-patch");
    assert_eq!(rec.state, json!({"kept": 1}));

    // A patch that is not an object fails the invocation, and its valid neighbours are dropped.
    let rec = run(&env, &set_state(json!({"patches": [{"a": 1}, [1, 2]]}))).await;
    let err = failed_with(&env, &rec, "invalid-state-patch");
    assert!(err.message.contains("an array"), "{}", err.message);
    assert_eq!(rec.state, json!({"kept": 1}));
    a_normal_run_still_succeeds(&env).await;
}

#[tokio::test]
async fn s14_fuel_runs_out_with_fuel_exhausted() {
    let env = Env::new();
    let rec = run(
        &env,
        &hostile("spin", json!({"limits": {"fuel": 1000}}), json!({})),
    )
    .await;
    let err = failed_with(&env, &rec, "fuel-exhausted");
    assert!(err.message.contains("1000"), "{}", err.message);
    a_normal_run_still_succeeds(&env).await;
}

#[tokio::test]
async fn s14_fuel_metered_plugins_still_run_normal_steps() {
    let env = Env::new();
    let workflow = r#"
id: metered
plugins:
  kit: { wasm: "{testkit}", limits: { fuel: 100000000 } }
steps:
  - { id: a, plugin: kit, step: inc }
  - { id: b, plugin: kit, step: inc }
"#;
    let rec = run_with(&env, workflow, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:#?}");
    assert_eq!(rec.steps["b"].output.as_deref(), Some(&json!({"n": 2})));
}

#[tokio::test]
async fn s14_a_memory_bomb_fails_with_memory_limit() {
    let env = Env::new();
    let rec = run(
        &env,
        &hostile("membomb", json!({"limits": {"memory-mib": 32}}), json!({})),
    )
    .await;
    let err = failed_with(&env, &rec, "memory-limit");
    assert!(err.message.contains("32 MiB"), "{}", err.message);
    a_normal_run_still_succeeds(&env).await;
}

#[tokio::test]
async fn s14_a_stack_overflow_is_a_trap() {
    let env = Env::new();
    let rec = run(&env, &hostile("stack-overflow", json!({}), json!({}))).await;
    failed_with(&env, &rec, "trap");
    a_normal_run_still_succeeds(&env).await;
}

#[tokio::test]
async fn s14_s84_a_panic_is_a_trap_with_a_one_line_message() {
    let env = Env::new();
    let rec = run(&env, &hostile("panic", json!({}), json!({}))).await;
    let err = failed_with(&env, &rec, "trap");
    assert!(
        err.message.contains("boom"),
        "the panic's reason is named: {}",
        err.message
    );
    assert!(!err.message.contains("wasm backtrace"), "{}", err.message);
    a_normal_run_still_succeeds(&env).await;
}

#[tokio::test]
async fn s110_a_wasi_exit_is_a_trap_naming_the_status() {
    let env = Env::new();
    let rec = run(&env, &hostile("exit", json!({}), json!({}))).await;
    let err = failed_with(&env, &rec, "trap");
    // The guest calls `std::process::exit(3)`, but WASI 0.2's `wasi:cli/exit.exit` carries only
    // ok or err (the component does not import the unstable `exit-with-code`): Rust's std sends
    // err, which reaches the host as status 1.
    assert_eq!(err.message, "plugin exited with status 1");
    a_normal_run_still_succeeds(&env).await;
}

#[tokio::test]
async fn s14_output_that_is_not_json_is_a_malformed_result() {
    let env = Env::new();
    let rec = run(&env, &hostile("not-json", json!({}), json!({}))).await;
    let err = failed_with(&env, &rec, "malformed-result");
    assert!(err.message.contains("not valid JSON"), "{}", err.message);
    a_normal_run_still_succeeds(&env).await;
}

#[tokio::test]
async fn s83_a_64_mib_result_fails_with_output_limit_under_default_limits() {
    let env = Env::new();
    let rec = run(&env, &hostile("big-result", json!({}), json!({}))).await;
    let err = failed_with(&env, &rec, "output-limit");
    assert!(
        err.message.contains("limits.max-output-mib (8 MiB)"),
        "{}",
        err.message
    );
    a_normal_run_still_succeeds(&env).await;
}

// ---------------------------------------------------------------------------------------------
// Floods of output.

#[tokio::test]
async fn s83_s91_a_writer_flood_stops_at_max_events_and_keeps_what_was_delivered() {
    let env = Env::new();
    let rec = run(
        &env,
        &hostile(
            "writer-flood",
            json!({}),
            json!({"config": {"count": 1_000_000}}),
        ),
    )
    .await;
    let err = failed_with(&env, &rec, "output-limit");
    assert!(err.message.contains("limits.max-events"), "{}", err.message);
    // S91: the chunks written before the limit stay delivered, and not one more.
    let events = env.events(&rec.run_id);
    assert_eq!(count(&events, EventKind::StepOutput), MAX_EVENTS);
    a_normal_run_still_succeeds(&env).await;
}

#[tokio::test]
async fn s91_s111_a_thousand_chunks_arrive_exactly_in_order_before_the_step_ends() {
    let env = Env::new();
    let rec = run(
        &env,
        &hostile(
            "writer-flood",
            json!({}),
            json!({"config": {"count": 1000}}),
        ),
    )
    .await;
    assert_eq!(output(&rec), &json!({"written": 1000}));
    let events = env.events(&rec.run_id);
    let k = kinds(&events);
    // run-started, step-started, 1000 chunks, step-succeeded, run-succeeded: nothing in between.
    assert_eq!(k.len(), 1004, "{:?}", &k[..k.len().min(8)]);
    assert_eq!(k[..2], ["run-started", "step-started:h"]);
    assert!(k[2..1002].iter().all(|x| x == "step-output:h"));
    assert_eq!(k[1002..], ["step-succeeded:h", "run-succeeded"]);
    assert!(events[2..1002].iter().all(|e| e.data == json!(1)));
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=1004).collect::<Vec<u64>>());
    a_normal_run_still_succeeds(&env).await;
}

#[tokio::test]
async fn s111_stdout_spam_is_bounded() {
    let env = Env::new();
    // A million lines of 100 bytes: 100 MB the guest tries to print.
    let rec = run(&env, &hostile("stdout-spam", json!({}), json!({}))).await;
    assert!(rec.status.is_ended(), "{rec:#?}");
    match rec.status {
        RunStatus::Success => {}
        RunStatus::Failed => {
            failed_with(&env, &rec, "output-limit");
        }
        other => panic!("stdout-spam ended {other}"),
    }
    let events = env.events(&rec.run_id);
    let logs: Vec<&StoredEvent> = events.iter().filter(|e| e.kind == EventKind::Log).collect();
    assert!(
        logs.len() <= MAX_EVENTS + 1,
        "{} log events stored",
        logs.len()
    );
    assert!(logs.len() < 1_000_000);
    // Whatever was kept is the guest's lines, then one notice that the rest was dropped.
    let notices: Vec<&&StoredEvent> = logs
        .iter()
        .filter(|e| {
            e.data["message"]
                .as_str()
                .is_some_and(|m| m.contains("truncated"))
        })
        .collect();
    assert_eq!(notices.len(), 1, "one truncation notice");
    assert_eq!(logs.last().map(|e| e.seq), notices.first().map(|e| e.seq));
    assert!(logs[..logs.len() - 1]
        .iter()
        .all(|e| e.data["message"] == json!("x".repeat(99)) && e.data["level"] == json!("info")));
    a_normal_run_still_succeeds(&env).await;
}

// ---------------------------------------------------------------------------------------------
// Reaching out: files, environment, network.

/// A granted directory `data` beside an `etc/passwd` a `..` would reach, a `secret/passwd` its
/// symlink `data/escape-link` points to, and canary contents in both.
struct Escape {
    outer: tempfile::TempDir,
}

impl Escape {
    fn new() -> Escape {
        let outer = tempfile::tempdir().expect("temp dir");
        let root = outer.path();
        for dir in ["data", "etc", "secret"] {
            std::fs::create_dir(root.join(dir)).expect("mkdir");
        }
        std::fs::write(root.join("etc/passwd"), "CANARY-DOTDOT").expect("write");
        std::fs::write(root.join("secret/passwd"), "CANARY-SYMLINK").expect("write");
        std::os::unix::fs::symlink(root.join("secret"), root.join("data/escape-link"))
            .expect("symlink");
        // The symlink does lead out on the host: the guest's failure is the sandbox's doing.
        assert_eq!(
            std::fs::read_to_string(root.join("data/escape-link/passwd")).expect("read"),
            "CANARY-SYMLINK"
        );
        Escape { outer }
    }

    fn data(&self) -> std::path::PathBuf {
        self.outer.path().join("data")
    }

    fn workflow(&self, mode: &str) -> String {
        hostile(
            "fs-escape",
            json!({"grants": {"dirs": [{"host": path_str(&self.data()), "guest": "/data", "mode": mode}]}}),
            json!({"config": {"dir": "/data"}}),
        )
    }
}

fn path_str(path: &Path) -> String {
    path.to_str().expect("utf-8 temp path").to_owned()
}

/// The attempts the step reported, by name.
fn attempts(out: &Value) -> Vec<(String, Value)> {
    let list = out["attempts"].as_array().expect("attempts");
    assert_eq!(list.len(), 5, "{out:#}");
    for a in list {
        let content = a["content"].as_str().unwrap_or("");
        assert!(!content.contains("CANARY"), "read outside the grant: {a}");
    }
    list.iter()
        .map(|a| (a["what"].as_str().unwrap_or("").to_owned(), a.clone()))
        .collect()
}

#[tokio::test]
async fn s14_fs_escapes_are_denied_and_a_read_only_grant_refuses_writes() {
    let env = Env::new();
    let escape = Escape::new();
    let rec = run(&env, &escape.workflow("ro")).await;
    for (what, attempt) in attempts(output(&rec)) {
        assert_eq!(attempt["ok"], json!(false), "{what} was allowed: {attempt}");
    }
    assert!(
        !escape.data().join("new-file").exists(),
        "a read-only grant was written to"
    );
    a_normal_run_still_succeeds(&env).await;
}

#[tokio::test]
async fn s14_a_read_write_grant_allows_the_write_and_nothing_outside_it() {
    let env = Env::new();
    let escape = Escape::new();
    let rec = run(&env, &escape.workflow("rw")).await;
    for (what, attempt) in attempts(output(&rec)) {
        let expected = what == "write";
        assert_eq!(attempt["ok"], json!(expected), "{what}: {attempt}");
    }
    assert_eq!(
        std::fs::read_to_string(escape.data().join("new-file"))
            .expect("the write reached the host"),
        "written by fs-escape"
    );
    a_normal_run_still_succeeds(&env).await;
}

#[tokio::test]
async fn s14_the_guest_sees_only_the_granted_environment() {
    let env = Env::new();
    let rec = run(
        &env,
        &hostile(
            "env-peek",
            json!({"grants": {"env": {"CURRENCY": "EUR"}}}),
            json!({}),
        ),
    )
    .await;
    let out = output(&rec).clone();
    assert_eq!(out["env"], json!({"CURRENCY": "EUR"}), "exactly the grant");
    assert_eq!(out["args"], json!([]), "no host arguments");
    let guest_env = out["env"].as_object().expect("env object");
    let host_vars: Vec<(String, String)> = std::env::vars().collect();
    assert!(!host_vars.is_empty());
    for (name, _) in &host_vars {
        if name != "CURRENCY" {
            assert!(!guest_env.contains_key(name), "host variable {name} leaked");
        }
    }
    // No host value anywhere in what the run stored.
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned());
    let mut canaries = vec![manifest_dir];
    canaries.extend(std::env::var("PATH").ok().filter(|p| p.len() > 8));
    let stored = format!(
        "{}{}",
        serde_json::to_string(&env.events(&rec.run_id)).expect("events"),
        serde_json::to_string(&rec).expect("record")
    );
    for canary in canaries {
        assert!(
            !stored.contains(&canary),
            "host value {canary:?} was stored"
        );
    }
    a_normal_run_still_succeeds(&env).await;
}

#[tokio::test]
async fn s14_an_env_grant_from_the_host_is_read_when_the_step_runs_and_only_its_name_is_stored() {
    let (config, url) = crate::common::config_and_url();
    let env = Env::with_config(config);
    // PATH is set wherever tests run; its value stands for a secret.
    let secret = std::env::var("PATH").expect("PATH is set");
    assert!(secret.len() > 8);
    let rec = run(
        &env,
        &hostile(
            "env-peek",
            json!({"grants": {"env": {"TOKEN": {"from-host": "PATH"}, "MODE": "test"}}}),
            json!({}),
        ),
    )
    .await;
    let out = output(&rec).clone();
    assert_eq!(
        out["env"],
        json!({"MODE": "test", "TOKEN": secret}),
        "the guest sees the host's value under the granted name"
    );
    // The run's definition (a content-addressed blob) names the variable, never its value.
    let stored: Vec<(String, Vec<u8>)> = match &url {
        // On PostgreSQL: the blobs' rows. (Not the snapshot or records: the guest's output
        // holds the value, as it should.)
        Some(url) => crate::backend::query_bytes(url, "SELECT bytes FROM {s}.blobs")
            .into_iter()
            .map(|b| ("blobs".to_owned(), b))
            .collect(),
        None => walk(&env.dir.path().join("home").join("blobs"))
            .into_iter()
            .map(|entry| {
                let bytes = std::fs::read(&entry).expect("read blob");
                (entry.display().to_string(), bytes)
            })
            .collect(),
    };
    let mut definitions = 0;
    for (entry, bytes) in &stored {
        let text = String::from_utf8_lossy(bytes);
        assert!(
            !text.contains(&secret),
            "the host value was stored in {entry}"
        );
        if entry.contains("blobs") && text.contains("\"from-host\":\"PATH\"") {
            definitions += 1;
        }
    }
    assert_eq!(definitions, 1, "the definition keeps the reference");
}

#[tokio::test]
async fn s14_an_env_grant_from_an_unset_host_variable_fails_the_step_naming_it() {
    let env = Env::new();
    let rec = run(
        &env,
        &hostile(
            "env-peek",
            json!({"grants": {"env": {"TOKEN": {"from-host": "WEFT_TEST_NEVER_SET_7F3A"}}}}),
            json!({}),
        ),
    )
    .await;
    let err = failed_with(&env, &rec, "sandbox-error");
    assert!(
        err.message
            .contains("`WEFT_TEST_NEVER_SET_7F3A`, which is not set"),
        "{}",
        err.message
    );
    assert_eq!(rec.steps["h"].attempts, Some(1), "not retried");
}

#[tokio::test]
async fn an_env_grant_of_another_shape_is_refused_at_load_naming_the_forms() {
    let env = Env::new();
    for value in [
        json!({"from-hosts": "X"}),
        json!(5),
        json!({"from-host": 5}),
    ] {
        let path = env.file(
            "bad-env.yaml",
            &hostile(
                "env-peek",
                json!({"grants": {"env": {"TOKEN": value}}}),
                json!({}),
            ),
        );
        let text = match weft::load_workflow(&path, env.rt.host()).await {
            Ok(_) => panic!("{value}: loaded"),
            Err(err) => err.to_string(),
        };
        assert!(
            text.contains("`grants.env` `TOKEN` must be a string, or `{ from-host: NAME }`"),
            "{value}: {text}"
        );
    }
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

/// True when a connection is waiting on `listener` (non-blocking).
fn accepted(listener: &StdTcpListener) -> bool {
    match listener.accept() {
        Ok(_) => true,
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(e) => panic!("accept: {e}"),
    }
}

#[tokio::test]
async fn s14_tcp_connections_are_refused() {
    let env = Env::new();
    let listener = StdTcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("non-blocking");
    let addr = listener.local_addr().expect("addr").to_string();
    let rec = run(
        &env,
        &hostile("tcp-connect", json!({}), json!({"config": {"addr": addr}})),
    )
    .await;
    let out = output(&rec);
    assert_eq!(out["ok"], json!(false), "{out}");
    assert!(out["error"].is_string(), "{out}");
    assert!(!accepted(&listener), "the guest reached the listener");
    a_normal_run_still_succeeds(&env).await;
}

#[tokio::test]
async fn s14_http_to_a_host_not_granted_is_denied_before_any_connection() {
    let env = Env::new();
    let listener = StdTcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("non-blocking");
    let url = format!("http://{}/hello", listener.local_addr().expect("addr"));
    let rec = run(
        &env,
        &hostile(
            "http-get",
            json!({"grants": {"http": ["example.com"]}}),
            json!({"config": {"url": url}}),
        ),
    )
    .await;
    let out = output(&rec);
    assert_eq!(out["ok"], json!(false), "{out}");
    assert_eq!(out["status"], json!(null), "{out}");
    assert!(!accepted(&listener), "a request reached the server");
    // The denial is told in the step's log, naming the host.
    let events = env.events(&rec.run_id);
    let port = listener.local_addr().expect("addr").port();
    assert!(
        events.iter().any(|e| e.kind == EventKind::Log
            && e.data["message"]
                .as_str()
                .is_some_and(|m| m.contains("denied") && m.contains(&format!("127.0.0.1:{port}")))),
        "{:?}",
        kinds(&events)
    );
    a_normal_run_still_succeeds(&env).await;
}

#[tokio::test]
async fn s14_http_to_a_granted_host_goes_through() {
    let env = Env::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/hello", listener.local_addr().expect("addr"));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let server = tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match sock.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let text = String::from_utf8_lossy(&head);
            let _ = tx.send(text.lines().next().unwrap_or("").to_owned());
            let _ = sock
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                .await;
            let _ = sock.shutdown().await;
        }
    });
    let rec = run(
        &env,
        &hostile(
            "http-get",
            json!({"grants": {"http": ["127.0.0.1"]}}),
            json!({"config": {"url": url}}),
        ),
    )
    .await;
    let out = output(&rec);
    assert_eq!(out, &json!({"ok": true, "status": 200, "error": null}));
    assert_eq!(rx.try_recv().ok().as_deref(), Some("GET /hello HTTP/1.1"));
    assert!(rx.try_recv().is_err(), "exactly one request");
    server.abort();
    a_normal_run_still_succeeds(&env).await;
}

// ---------------------------------------------------------------------------------------------
// Other runs, cancel and the abort grace.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s14_other_runs_are_untouched() {
    let env = Env::new();
    let spin_path = env.file(
        "spin.json",
        &hostile("spin", json!({"limits": {"timeout-ms": 300}}), json!({})),
    );
    let inc_path = env.file(
        "inc.yaml",
        r#"
id: normal
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: a, plugin: kit, step: inc }
  - { id: b, plugin: kit, step: inc }
"#,
    );
    let spin = env.load(&spin_path).await;
    let inc = env.load(&inc_path).await;
    let spin_id = env
        .rt
        .start(&spin, json!({}), None)
        .await
        .expect("start spin");
    let inc_id = env
        .rt
        .start(&inc, json!({"n": 10}), None)
        .await
        .expect("start inc");
    let (spin_rec, inc_rec) = tokio::time::timeout(HANG_GUARD, async {
        tokio::join!(env.rt.wait(&spin_id), env.rt.wait(&inc_id))
    })
    .await
    .expect("both runs end");
    let inc_rec = inc_rec.expect("wait inc");
    assert_eq!(inc_rec.status, RunStatus::Success, "{inc_rec:#?}");
    assert_eq!(inc_rec.result, Some(json!({"n": 12})));
    assert!(inc_rec.error.is_none());
    let spin_rec = spin_rec.expect("wait spin");
    failed_with(&env, &spin_rec, "timeout");
    // The normal run's events hold nothing of the other run.
    let events = env.events(&inc_id);
    assert!(events.iter().all(|e| e.run_id == inc_id));
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
}

/// Starts `workflow`, waits for its step `w` to start (through `watch`), cancels, waits.
async fn cancel_once_started(env: &Env, workflow: &str) -> RunRecord {
    let path = env.file("cancel.yaml", workflow);
    let w = env.load(&path).await;
    let id = env.rt.start(&w, json!({}), None).await.expect("start");
    let mut rx = env.rt.watch(&id, 1).expect("watch");
    tokio::time::timeout(HANG_GUARD, async {
        while let Some(ev) = rx.recv().await {
            if ev.kind == EventKind::StepStarted && ev.path.as_deref() == Some("w") {
                return;
            }
            assert!(
                !ev.kind.is_closing(),
                "the run ended before the cancel: {ev:?}"
            );
        }
        panic!("the event stream ended before step w started");
    })
    .await
    .expect("step w starts");
    env.rt.cancel(&id).await.expect("cancel accepted");
    tokio::time::timeout(HANG_GUARD, env.rt.wait(&id))
        .await
        .expect("the cancelled run ends")
        .expect("wait")
}

/// S77, S78: cancelled, the step record cancelled with nothing of what it returned, and
/// `run-cancelled` last.
fn assert_cancelled(env: &Env, rec: &RunRecord) {
    assert_eq!(rec.status, RunStatus::Cancelled, "{rec:#?}");
    let step = &rec.steps["w"];
    assert_eq!(step.status, StepStatus::Cancelled, "{step:#?}");
    assert_eq!(
        step.output, None,
        "what it returned after the cancel is discarded"
    );
    assert!(rec.result.is_none() && rec.error.is_none());
    let events = env.events(&rec.run_id);
    let k = kinds(&events);
    assert_eq!(k.last().map(String::as_str), Some("run-cancelled"), "{k:?}");
    assert!(!k.iter().any(|x| x == "step-succeeded:w"), "{k:?}");
    assert_eq!(
        events.iter().filter(|e| e.kind.is_closing()).count(),
        1,
        "{k:?}"
    );
}

#[tokio::test]
async fn s76_s77_a_cancel_aborts_a_running_step_and_discards_its_result() {
    let env = Env::new();
    let rec = cancel_once_started(
        &env,
        r#"
id: cancel-me
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: w, plugin: kit, step: wait-abort, config: { max-ms: 60000 } }
  - { id: after, plugin: kit, step: echo }
"#,
    )
    .await;
    assert_cancelled(&env, &rec);
    assert!(
        !rec.steps.contains_key("after"),
        "nothing new starts after a cancel (S76)"
    );
    a_normal_run_still_succeeds(&env).await;
}

#[tokio::test]
async fn s77_a_step_that_ignores_the_abort_is_stopped_after_the_grace() {
    let mut config = config();
    config.host.abort_grace = Duration::from_millis(100);
    let env = Env::with_config(config);
    let rec = cancel_once_started(
        &env,
        r#"
id: ignore-me
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: w, plugin: kit, step: wait-abort, config: { ignore: true } }
"#,
    )
    .await;
    assert_cancelled(&env, &rec);
    a_normal_run_still_succeeds(&env).await;
}
