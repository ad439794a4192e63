//! The core's contract where it fell short: the status of a `workflow:` entry while an inner
//! step is suspended (S45), and the `step-cancelled` event for every execution a cancel ends
//! (S74, S76–S78).

use serde_json::json;
use weft::{RunStatus, StepStatus};

use crate::common::Env;
use crate::rules::{find, kind, req, settle, start, until_event, wf};

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
        .resume(&id, req(Some("outer"), None, None, json!({})))
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

/// The paths of the `step-cancelled` events, in order.
fn cancelled_paths(events: &[weft::StoredEvent]) -> Vec<String> {
    find(events, "step-cancelled", None)
        .iter()
        .filter_map(|e| e.path.clone())
        .collect()
}

#[tokio::test]
async fn s76_cancelling_a_suspended_run_emits_step_cancelled_for_every_cancelled_record_before_run_cancelled()
 {
    let env = Env::new();
    let yaml = nested_files(&env);
    let id = start(&env, &yaml, json!({})).await;
    assert_eq!(settle(&env, &id).await.status, RunStatus::Suspended);
    env.rt.cancel(&id).await.expect("cancel accepted");
    let rec = settle(&env, &id).await;
    assert_eq!(rec.status, RunStatus::Cancelled);
    let events = env.events(&id);
    let cancelled: Vec<String> = rec
        .steps
        .iter()
        .filter(|(_, r)| r.status == StepStatus::Cancelled)
        .map(|(p, _)| p.clone())
        .collect();
    assert_eq!(cancelled, ["outer", "outer.inner", "outer.inner.s"]);
    assert_eq!(
        cancelled_paths(&events),
        ["outer.inner.s", "outer.inner", "outer"],
        "innermost first, as blocks close after their children (S90)"
    );
    let first = events
        .iter()
        .position(|e| kind(e) == "step-cancelled")
        .expect("step-cancelled");
    assert!(
        events[first..events.len() - 1]
            .iter()
            .all(|e| kind(e) == "step-cancelled")
    );
    assert_eq!(events.last().map(kind).as_deref(), Some("run-cancelled"));
}

#[tokio::test]
async fn s76_s77_cancelling_running_steps_emits_step_cancelled_with_their_item_and_iteration() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - loop:
      id: l
      do-until: 'true'
      do:
        foreach: { id: f, concurrency: 2, do: { id: w, plugin: kit, step: wait-abort } }
"#);
    let id = start(&env, &yaml, json!([1, 2, 3])).await;
    let mut rx = env.rt.watch(&id, 1).expect("watch");
    // Both items' invocations are under way once the foreach has started them.
    until_event(&mut rx, "step-started", Some("l.f")).await;
    env.rt.cancel(&id).await.expect("cancel accepted");
    let rec = settle(&env, &id).await;
    assert_eq!(rec.status, RunStatus::Cancelled);
    let events = env.events(&id);
    let items: Vec<(Option<String>, Option<u32>, Option<u32>)> =
        find(&events, "step-cancelled", None)
            .iter()
            .map(|e| (e.path.clone(), e.foreach_index, e.iteration))
            .collect();
    let w = |i| (Some("l.f.w".to_owned()), Some(i), Some(1));
    let mut cancelled_items: Vec<_> = items
        .iter()
        .filter(|(p, ..)| p.as_deref() == Some("l.f.w"))
        .cloned()
        .collect();
    cancelled_items.sort();
    assert_eq!(cancelled_items, [w(0), w(1)]);
    assert!(items.contains(&(Some("l.f".into()), None, Some(1))));
    assert!(items.contains(&(Some("l".into()), None, None)));
    for path in ["l", "l.f"] {
        assert_eq!(rec.steps[path].status, StepStatus::Cancelled, "{path}");
    }
    let statuses: Vec<_> = rec.steps["l.f.w"]
        .items
        .iter()
        .flatten()
        .map(|i| (i.index, i.status))
        .collect();
    assert_eq!(
        statuses,
        [(0, StepStatus::Cancelled), (1, StepStatus::Cancelled)]
    );
    assert_eq!(events.last().map(kind).as_deref(), Some("run-cancelled"));
}
