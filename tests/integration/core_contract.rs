//! The core's contract where it fell short: the status of a `workflow:` entry while an inner
//! step is suspended (S45), and the `step-cancelled` event for every execution a cancel ends
//! (S74, S76–S78).

use serde_json::json;
use weft::engine::{RunStatus, StepStatus};

use crate::common::Env;
use crate::rules::{req, settle, start, until_event, wf};

/// `outer` runs `mid.yaml`, which runs `leaf.yaml` as `inner`: a suspension, then a step that
/// runs until it is aborted.
fn nested_files(env: &Env) -> String {
    env.file(
        "leaf.yaml",
        r#"
id: leaf
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: s, plugin: kit, step: suspend }
  - { id: w, plugin: kit, step: wait-abort }
"#,
    );
    env.file(
        "mid.yaml",
        "id: mid\nsteps:\n  - workflow: { id: inner, file: leaf.yaml }\n",
    );
    wf("steps:\n  - workflow: { id: outer, file: mid.yaml }\n")
}

#[tokio::test]
async fn s45_every_enclosing_workflow_entry_is_suspended_while_its_inner_step_is_and_running_once_resumed()
 {
    let env = Env::new();
    let yaml = nested_files(&env);
    let id = start(&env, &yaml, json!({})).await;
    let rec = settle(&env, &id).await;
    assert_eq!(rec.status, RunStatus::Suspended);
    for path in ["outer", "outer.inner", "outer.inner.s"] {
        assert_eq!(rec.steps[path].status, StepStatus::Suspended, "{path}");
    }
    let mut rx = env.rt.watch(&id, 1).expect("watch");
    env.rt
        .resume(&id, req(Some("outer"), None, None, json!({})), false)
        .await
        .expect("resume accepted");
    until_event(&mut rx, "step-started", Some("outer.inner.w")).await;
    let rec = env.rt.show(&id).await.expect("show");
    assert_eq!(rec.status, RunStatus::Running);
    for path in ["outer", "outer.inner"] {
        assert_eq!(rec.steps[path].status, StepStatus::Running, "{path}");
    }
    assert_eq!(rec.steps["outer.inner.s"].status, StepStatus::Success);
    env.rt.cancel(&id).await.expect("cancel accepted");
    assert_eq!(settle(&env, &id).await.status, RunStatus::Cancelled);
}
