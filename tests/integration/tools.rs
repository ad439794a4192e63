//! `tool:` entries: a plugin's tool called like a step (S120), its input made by `input:`
//! (S119), in real components in real wasmtime.

use serde_json::json;
use weft::RunStatus;

use crate::common::{Env, kinds};

const ADD: &str = r#"
id: adder
plugins:
  calc: { wasm: "{tools}" }
  kit: { wasm: "{testkit}" }
steps:
  - { id: first, plugin: kit, step: inc }
  - id: total
    plugin: calc
    tool: add
    input: '{a: .steps.first.n, b: .init.extra}'
"#;

#[tokio::test]
async fn s119_s120_a_tool_entry_is_called_with_its_made_input_and_its_result_is_the_output() {
    let env = Env::new();
    let rec = env.run(ADD, json!({ "n": 1, "extra": 40 })).await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    assert_eq!(rec.result, Some(json!({ "sum": 42 })));
    let total = &rec.steps["total"];
    assert_eq!(total.input.as_deref(), Some(&json!({ "a": 2, "b": 40 })));
    assert_eq!(total.attempts, Some(1));
    let events = env.events(&rec.run_id);
    let k = kinds(&events);
    assert!(
        k.contains(&"step-started:total".to_owned())
            && k.contains(&"step-succeeded:total".to_owned()),
        "a tool entry is evented like a step: {k:?}"
    );
}

#[tokio::test]
async fn s120_arguments_that_break_the_tools_input_schema_fail_the_step_without_calling_it() {
    let env = Env::new();
    let yaml = r#"
id: bad-args
plugins:
  calc: { wasm: "{tools}" }
steps:
  - { id: total, plugin: calc, tool: add, input: '{a: 1}', retry: { attempts: 3, delay-ms: 1 } }
"#;
    let rec = env.run(yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    let error = rec.error.expect("an error");
    assert_eq!(
        (error.code.as_str(), error.step.as_str()),
        ("invalid-input", "total")
    );
    assert!(
        error.message.contains("step total: input"),
        "{}",
        error.message
    );
    assert_eq!(
        rec.steps["total"].attempts,
        Some(0),
        "the tool was never called"
    );
}

#[tokio::test]
async fn s120_a_file_naming_a_missing_tool_or_both_step_and_tool_is_refused_with_the_fix() {
    let env = Env::new();
    let missing = env.file(
        "missing.yaml",
        r#"
id: missing
plugins:
  calc: { wasm: "{tools}" }
steps:
  - { id: t, plugin: calc, tool: multiply }
"#,
    );
    let Err(err) = env.rt.load_workflow(&missing).await else {
        panic!("missing loaded");
    };
    let text = err.to_string();
    assert!(
        text.contains("plugin `calc` has no tool `multiply` (it has: add, delete-everything, read-file, check-text)"),
        "{text}"
    );
    let both = env.file(
        "both.yaml",
        r#"
id: both
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: t, plugin: kit, step: inc, tool: add }
"#,
    );
    let Err(err) = env.rt.load_workflow(&both).await else {
        panic!("both loaded");
    };
    assert!(
        err.to_string().contains("has both `step:` and `tool:`"),
        "{err}"
    );
    let bad_expr = env.file(
        "expr.yaml",
        r#"
id: expr
plugins:
  calc: { wasm: "{tools}" }
steps:
  - { id: t, plugin: calc, tool: add, input: '{a: ' }
"#,
    );
    let Err(err) = env.rt.load_workflow(&bad_expr).await else {
        panic!("bad_expr loaded");
    };
    assert!(err.to_string().contains("step t: input"), "{err}");
}

#[tokio::test]
async fn s120_tool_entries_run_in_foreach_items_each_with_its_own_arguments() {
    let env = Env::new();
    let yaml = r#"
id: sums
plugins:
  calc: { wasm: "{tools}" }
steps:
  - foreach:
      id: each
      concurrency: 3
      do: { id: add, plugin: calc, tool: add, input: '{a: .input, b: 100}' }
"#;
    let rec = env.run(yaml, json!([1, 2, 3, 4])).await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    assert_eq!(
        rec.result,
        Some(json!([{ "sum": 101 }, { "sum": 102 }, { "sum": 103 }, { "sum": 104 }]))
    );
}
