//! The Rust SDK for guests (`sdk/rust`, crate `weft-plugin`) through its demo plugin
//! (`guests/plugins/sdk-demo`): every step and the tool run in real workflows, in real
//! components in real wasmtime.

use serde_json::{Value, json};
use weft::RunStatus;

use crate::common::Env;
use crate::rules::{error, find, req, resume, settle, start};

/// A workflow `sdk` with the demo plugin declared as `demo`, then `steps` (YAML lines).
fn wf(steps: &str) -> String {
    format!(
        "id: sdk\nplugins:\n  demo: {{ wasm: \"{}\" }}\n{steps}",
        weft_guests::SDK_DEMO
    )
}

#[tokio::test]
async fn the_sdks_wit_is_the_hosts() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let host = std::fs::read_to_string(format!("{root}/wit/plugin.wit")).expect("wit/plugin.wit");
    let sdk = std::fs::read_to_string(format!("{root}/sdk/rust/wit/plugin.wit"))
        .expect("sdk/rust/wit/plugin.wit");
    assert!(
        host == sdk,
        "sdk/rust/wit/plugin.wit must be a copy of wit/plugin.wit: copy it over"
    );
}

#[tokio::test]
async fn the_demo_exports_both_interfaces_with_what_it_registered() {
    let env = Env::new();
    let bytes = std::fs::read(weft_guests::SDK_DEMO).expect("the built demo");
    let plugin = env
        .rt
        .host()
        .load(&bytes, None)
        .await
        .expect("the demo loads");
    let exports = plugin.exports();
    assert!(exports.steps && exports.tools, "{exports:?}");
    let steps: Vec<&str> = plugin.steps().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(steps, ["shout", "ask", "guard", "boom", "ctx"]);
    let shout = plugin.step("shout").expect("shout");
    assert_eq!(shout.description, "Upper-cases {text}.");
    assert_eq!(
        shout.input_schema.as_ref().map(|s| &s["required"]),
        Some(&json!(["text"]))
    );
    assert!(shout.output_schema.is_some() && shout.config_schema.is_none());
    let ask = plugin.step("ask").expect("ask");
    assert!(ask.config_schema.is_some() && ask.suspend_schema.is_some());
    let tools: Vec<&str> = plugin.tools().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tools, ["count-words"]);
    let count = plugin.tool("count-words").expect("count-words");
    assert_eq!(count.input_schema["required"], json!(["text"]));
    assert!(!count.needs_approval);
}

#[tokio::test]
async fn shout_takes_typed_input_and_returns_typed_output() {
    let env = Env::new();
    let yaml = wf("steps:\n  - { id: s, plugin: demo, step: shout }\n");
    let rec = env.run(&yaml, json!({"text": "hello, sdk"})).await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    assert_eq!(rec.result, Some(json!({"text": "HELLO, SDK"})));

    // The input schema the SDK described is the host's to check: the step never runs.
    let rec = env.run(&yaml, json!({"txt": "hello"})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    assert_eq!(error(&rec).code, "invalid-input");
    assert_eq!(rec.steps["s"].attempts, Some(0));
}

#[tokio::test]
async fn ask_suspends_with_its_labels_and_returns_the_resume_data() {
    let env = Env::new();
    let yaml = wf(
        "steps:\n  - { id: a, plugin: demo, step: ask, config: { labels: [boss, ops] } }\n  \
         - { id: s, plugin: demo, step: shout }\n",
    );
    let id = start(&env, &yaml, json!({"text": "ship it?"})).await;
    let rec = settle(&env, &id).await;
    assert_eq!(rec.status, RunStatus::Suspended, "{rec:?}");
    let a = &rec.steps["a"];
    assert_eq!(a.labels, Some(vec!["boss".to_owned(), "ops".to_owned()]));
    assert_eq!(
        a.suspend_payload,
        Some(json!({"question": {"text": "ship it?"}}))
    );
    assert!(!rec.steps.contains_key("s"));

    let rec = resume(
        &env,
        &id,
        req(None, Some("ops"), None, json!({"text": "yes"})),
    )
    .await
    .expect("resume by label");
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    assert_eq!(
        rec.steps["a"].output.as_deref(),
        Some(&json!({"text": "yes"}))
    );
    assert_eq!(rec.result, Some(json!({"text": "YES"})));
}

#[tokio::test]
async fn ask_without_config_suspends_with_the_default_label() {
    let env = Env::new();
    let yaml = wf("steps:\n  - { id: a, plugin: demo, step: ask }\n");
    let id = start(&env, &yaml, json!(1)).await;
    let rec = settle(&env, &id).await;
    assert_eq!(rec.status, RunStatus::Suspended, "{rec:?}");
    assert_eq!(rec.steps["a"].labels, Some(vec!["answer".to_owned()]));
    let rec = resume(&env, &id, req(None, Some("answer"), None, json!([2])))
        .await
        .expect("resume by label");
    assert_eq!(rec.result, Some(json!([2])));
}

#[tokio::test]
async fn guard_trips_on_a_forbidden_word_with_its_reason_and_metadata() {
    let env = Env::new();
    let yaml = wf("steps:\n  - { id: g, plugin: demo, step: guard }\n  \
         - { id: s, plugin: demo, step: shout }\n");
    let rec = env.run(&yaml, json!({"text": "fine words"})).await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    assert_eq!(rec.result, Some(json!({"text": "FINE WORDS"})));

    let rec = env.run(&yaml, json!({"text": "a Forbidden word"})).await;
    assert_eq!(rec.status, RunStatus::Tripwire, "{rec:?}");
    assert!(rec.error.is_none());
    let tripwire = rec.tripwire.as_ref().expect("the run's tripwire");
    assert_eq!(tripwire.reason, "the text contains \"forbidden\"");
    assert!(!tripwire.retry);
    assert_eq!(tripwire.metadata, json!({"word": "forbidden"}));
    assert_eq!(tripwire.processor_id.as_deref(), Some("guard"));
    assert!(!rec.steps.contains_key("s"), "the run stopped at the guard");
}

#[tokio::test]
async fn boom_panics_and_the_step_fails_with_the_panic_message() {
    // Built for wasm32-wasip2 with stable Rust, a guest aborts on panic (its standard library
    // cannot unwind), so the SDK's catch_unwind never sees it: the component traps, and weft
    // records the panic's message under code `trap`. (Where panics unwind, as in native unit
    // tests of a plugin, the SDK makes them failures with code `exception`; see
    // docs/PLUGINS-RUST-SDK.md.)
    let env = Env::new();
    let yaml = wf(
        "steps:\n  - { id: b, plugin: demo, step: boom, retry: { attempts: 2, delay-ms: 1 } }\n",
    );
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Failed, "{rec:?}");
    let err = error(&rec);
    assert_eq!(err.code, "trap");
    assert_eq!(
        err.message,
        "plugin panicked: boom: sdk-demo panicked on purpose"
    );
    assert_eq!(err.step, "b");
    assert_eq!(
        rec.steps["b"].attempts,
        Some(2),
        "a trap is retried like a failure"
    );

    // The next run gets a fresh instance: the trap did not break the plugin.
    let ok = env
        .run(
            &wf("steps:\n  - { id: s, plugin: demo, step: shout }\n"),
            json!({"text": "after"}),
        )
        .await;
    assert_eq!(ok.result, Some(json!({"text": "AFTER"})));
}

#[tokio::test]
async fn ctx_returns_its_context_and_its_helpers_reach_the_host() {
    let env = Env::new();
    let yaml = wf(
        "initial-state: { kept: 1 }\nsteps:\n  - { id: first, plugin: demo, step: shout }\n  \
         - { id: c, plugin: demo, step: ctx, config: { step: first } }\n",
    );
    let rec = env.run(&yaml, json!({"text": "hi"})).await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    let out = rec.result.clone().expect("a result");
    assert_eq!(
        out,
        json!({
            "step": "ctx",
            "run_id": rec.run_id,
            "workflow_id": "sdk",
            "step_path": "c",
            "attempt": 0,
            "input": {"text": "HI"},
            "config": {"step": "first"},
            "state": {"kept": 1},
            "resume": null,
            "foreach_index": null,
            "iteration": null,
            "init": {"text": "hi"},
            "aborted": false,
            "previous": {"text": "HI"}
        })
    );
    // set_state
    assert_eq!(rec.state, json!({"kept": 1, "ctx-attempt": 0}));
    // write, custom, log
    let events = env.events(&rec.run_id);
    let data = |kind: &str| -> Vec<Value> {
        find(&events, kind, Some("c"))
            .into_iter()
            .map(|e| e.data.clone())
            .collect()
    };
    assert_eq!(data("step-output"), [json!({"chunk": "c"})]);
    assert_eq!(
        data("step-custom"),
        [json!({"kind": "progress", "data": {"done": 1, "total": 1}})]
    );
    assert_eq!(
        data("log"),
        [json!({"level": "info", "message": "ctx ran as c"})]
    );
}

#[tokio::test]
async fn ctx_sees_its_foreach_index_and_loop_iteration() {
    let env = Env::new();
    let yaml = wf("steps:\n  - foreach: { id: each, do: { id: c, plugin: demo, step: ctx } }\n");
    let rec = env.run(&yaml, json!(["a", "b"])).await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    let items = rec.result.expect("a result");
    let seen: Vec<(Value, Value, Value)> = items
        .as_array()
        .expect("an array")
        .iter()
        .map(|o| {
            (
                o["foreach_index"].clone(),
                o["input"].clone(),
                o["iteration"].clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (json!(0), json!("a"), Value::Null),
            (json!(1), json!("b"), Value::Null)
        ]
    );

    let yaml = wf(
        "steps:\n  - loop: { id: l, do-until: '.output.iteration >= 2', do: { id: c, plugin: demo, step: ctx } }\n",
    );
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    let out = rec.result.expect("a result");
    assert_eq!(out["iteration"], json!(2), "{out}");
    assert_eq!(out["foreach_index"], Value::Null);
}

#[tokio::test]
async fn count_words_runs_as_a_tool_entry() {
    let env = Env::new();
    let yaml = wf(
        "steps:\n  - { id: n, plugin: demo, tool: count-words, input: '{text: .init.sentence}' }\n",
    );
    let rec = env
        .run(&yaml, json!({"sentence": "the quick  brown fox"}))
        .await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    assert_eq!(rec.result, Some(json!({"words": 4})));
    assert_eq!(
        rec.steps["n"].input.as_deref(),
        Some(&json!({"text": "the quick  brown fox"}))
    );
    let events = env.events(&rec.run_id);
    let logs: Vec<&Value> = find(&events, "log", Some("n"))
        .into_iter()
        .map(|e| &e.data["level"])
        .collect();
    assert_eq!(logs, [&json!("debug")], "the tool's log line");
}
