//! The plugin host's own guarantees through real runs: what a guest panic leaves in records and
//! events (S84), components the host refuses and why, cached native code a guest cannot forge,
//! and grants that would expose the home.

use serde_json::{Value, json};
use weft::driver::RunRecord;
use weft::engine::{EventKind, RunStatus};

use crate::common::Env;

/// A one-step workflow running step `step` of the hostile plugin, the plugin entry extended with
/// `plugin` (e.g. `grants`).
fn hostile(step: &str, plugin: Value) -> String {
    let mut entry = json!({"wasm": "{hostile}"});
    if let (Some(entry), Value::Object(extra)) = (entry.as_object_mut(), plugin) {
        entry.extend(extra);
    }
    json!({"id": "hostile", "plugins": {"h": entry}, "steps": [{"id": "h", "plugin": "h", "step": step}]})
        .to_string()
}

/// S84: a message holds the one-line reason only: no source location, no trap text, no
/// backtrace, one line.
fn assert_reason_only(message: &str) {
    assert!(!message.contains("src/"), "a source location: {message:?}");
    assert!(!message.contains("wasm trap"), "the trap text: {message:?}");
    assert!(!message.contains("backtrace"), "a backtrace: {message:?}");
    assert!(!message.contains('\n'), "not one line: {message:?}");
}

#[tokio::test]
async fn s84_a_guest_panic_is_recorded_as_its_one_line_reason() {
    let env = Env::new();
    let rec: RunRecord = env.run(&hostile("panic", json!({})), json!({})).await;
    assert_eq!(rec.status, RunStatus::Failed, "{rec:#?}");
    let err = rec.error.clone().expect("a failed run has an error");
    assert_eq!(err.code, "trap");
    assert_eq!(err.message, "plugin panicked: boom");
    assert_eq!(rec.steps["h"].error.as_ref(), Some(&err));

    let events = env.events(&rec.run_id);
    let failed: Vec<&Value> = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::StepFailed | EventKind::RunFailed))
        .map(|e| &e.data["error"]["message"])
        .collect();
    assert_eq!(failed.len(), 2, "{events:?}");
    for message in failed {
        let message = message.as_str().expect("a message");
        assert_reason_only(message);
        assert_eq!(message, "plugin panicked: boom");
    }
}
