//! SEMANTICS.md rules for block entries: parallel, branch, foreach, loop, sleep, map and nested
//! workflows, with bail and tripwire from depth. Each test is named after its rules.

use serde_json::{Value, json};
use weft::{RunStatus, StepStatus};

use crate::common::{Env, kinds};
use crate::rules::{error, find, js, kind, req, resume, settle, start, until_event, wf};

/// The outputs of `events` of type `k` at `path`, as their `data`.
fn data(events: &[weft::StoredEvent], k: &str, path: &str) -> Vec<Value> {
    find(events, k, Some(path))
        .iter()
        .map(|e| e.data.clone())
        .collect()
}

/// Index of the first event of type `k` at `path` (`""`: run events).
fn pos(events: &[weft::StoredEvent], k: &str, path: &str) -> usize {
    events
        .iter()
        .position(|e| kind(e) == k && e.path.as_deref().unwrap_or("") == path)
        .unwrap_or_else(|| panic!("no {k} at {path}"))
}

// ---------------------------------------------------------------------------------------------
// 3. Parallel

#[tokio::test]
async fn s3_s18_s90_parallel_arms_start_at_once_with_the_block_input_and_output_by_arm_id() {
    let env = Env::new();
    let yaml = wf(r#"
initial-state: { v: 0 }
steps:
  - parallel:
      id: p
      steps:
        - { id: a, plugin: kit, step: inc }
        - { id: w, plugin: kit, step: set-state, config: { patches: [ { v: 1 } ] } }
        - { id: c, plugin: kit, step: context }
  - { id: z, plugin: kit, step: echo }
"#);
    let rec = env.run(&yaml, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Success);
    let out = rec.steps["p"].output.as_deref().cloned().expect("p output");
    assert_eq!(out["a"], json!({"n": 1}));
    assert_eq!(out["w"], json!({"n": 0}));
    assert_eq!(out["c"]["input"], json!({"n": 0}));
    assert_eq!(out["c"]["step_path"], "p.c");
    assert_eq!(
        out["c"]["state"],
        json!({"v": 0}),
        "S18: the state as it stood when the arm started"
    );
    assert_eq!(out.as_object().map(|o| o.len()), Some(3));
    assert_eq!(rec.steps["z"].input.as_deref(), Some(&out));
    assert_eq!(rec.result, Some(out));
    assert_eq!(rec.state, json!({"v": 1}));
    for (path, r) in &rec.steps {
        assert!(
            r.started_at.is_some() && r.ended_at.is_some(),
            "S109: {path}"
        );
    }
    for arm in ["p.a", "p.w", "p.c"] {
        assert_eq!(
            rec.steps[arm].input.as_deref(),
            Some(&json!({"n": 0})),
            "{arm}"
        );
    }
    let events = env.events(&rec.run_id);
    let started = pos(&events, "step-started", "p");
    let ended = pos(&events, "step-succeeded", "p");
    for (i, e) in events.iter().enumerate() {
        if e.path.as_deref().is_some_and(|p| p.starts_with("p.")) {
            assert!(
                started < i && i < ended,
                "S90: {:?} outside its block",
                kinds(&events)
            );
        }
    }
}

#[tokio::test]
async fn s19_s85_the_first_failed_arm_in_declaration_order_wins_and_siblings_run_to_their_end() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - parallel:
      id: p
      steps:
        - { id: ok1, plugin: kit, step: inc }
        - { id: f1, plugin: kit, step: fail, config: { code: first }, retry: { attempts: 3, delay-ms: 5 } }
        - { id: f2, plugin: kit, step: fail, config: { code: second } }
        - { id: ok2, plugin: kit, step: inc }
  - { id: z, plugin: kit, step: echo }
"#);
    let rec = env.run(&yaml, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    assert_eq!(error(&rec).code, "first");
    assert_eq!(error(&rec).step, "p.f1");
    assert_eq!(rec.steps["p.f1"].attempts, Some(3));
    assert_eq!(rec.steps["p.ok1"].output.as_deref(), Some(&json!({"n": 1})));
    assert_eq!(rec.steps["p.ok2"].output.as_deref(), Some(&json!({"n": 1})));
    assert_eq!(rec.steps["p.f2"].status, StepStatus::Failed);
    assert_eq!(rec.steps["p"].status, StepStatus::Failed);
    assert_eq!(
        rec.steps["p"].error, rec.error,
        "S85: passed upward unchanged"
    );
    assert!(!rec.steps.contains_key("z"));
    let events = env.events(&rec.run_id);
    assert_eq!(
        data(&events, "step-failed", "p"),
        [json!({"error": rec.error})]
    );
}

#[tokio::test]
async fn s19_s82_a_tripwire_outranks_a_failed_sibling() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - parallel:
      id: p
      steps:
        - { id: f, plugin: kit, step: fail }
        - { id: t, plugin: kit, step: tripwire, config: { reason: stop } }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Tripwire);
    assert_eq!(
        rec.tripwire.as_ref().map(|t| t.reason.as_str()),
        Some("stop")
    );
    assert!(rec.error.is_none());
    assert_eq!(rec.steps["p.f"].status, StepStatus::Failed);
    let events = env.events(&rec.run_id);
    assert_eq!(events.last().map(kind).as_deref(), Some("run-tripwire"));
}

#[tokio::test]
async fn s79_s81_a_bail_in_a_parallel_lets_siblings_end_and_a_failed_sibling_outranks_it() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - parallel:
      id: p
      steps:
        - { id: b, plugin: kit, step: bail, config: { value: early } }
        - { id: slow, plugin: kit, step: fail, config: { succeed-on-attempt: 2 }, retry: { attempts: 3, delay-ms: 5 } }
  - { id: z, plugin: kit, step: echo }
"#);
    let rec = env.run(&yaml, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(rec.result, Some(json!("early")));
    assert_eq!(
        rec.steps["p.slow"].status,
        StepStatus::Success,
        "S79: running siblings end"
    );
    assert_eq!(
        rec.steps["p.slow"].attempts,
        Some(3),
        "S79: its retries still run"
    );
    assert_eq!(rec.steps["p"].status, StepStatus::Success);
    assert_eq!(rec.steps["p"].output.as_deref(), Some(&json!("early")));
    assert_eq!(rec.steps["p.b"].bail, Some(true));
    assert!(!rec.steps.contains_key("z"));

    let yaml = wf(r#"
steps:
  - parallel:
      id: p
      steps:
        - { id: b, plugin: kit, step: bail, config: { value: early } }
        - { id: f, plugin: kit, step: fail, config: { code: worse }, retry: { attempts: 2, delay-ms: 5 } }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(
        rec.status,
        RunStatus::Failed,
        "S81: a failure outranks the bail"
    );
    assert_eq!(error(&rec).code, "worse");
}

#[tokio::test]
async fn s20_s71_s90_a_suspended_parallel_keeps_its_succeeded_arms_and_succeeds_once_resumed() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - parallel:
      id: p
      steps:
        - { id: a, plugin: kit, step: inc }
        - { id: s, plugin: kit, step: suspend, config: { payload: { q: 1 } } }
  - { id: z, plugin: kit, step: echo }
"#);
    let rec = env.run(&yaml, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Suspended);
    assert_eq!(rec.steps["p.a"].output.as_deref(), Some(&json!({"n": 1})));
    assert!(!rec.steps.contains_key("z"));
    let id = rec.run_id.clone();
    let n = env.events(&id).len();
    let rec = resume(&env, &id, req(Some("p.s"), None, None, json!({"ok": true})))
        .await
        .expect("resume");
    assert_eq!(rec.status, RunStatus::Success);
    let expected = json!({"a": {"n": 1}, "s": {"resumed": {"ok": true}, "payload": {"q": 1}, "input": {"n": 0}}});
    assert_eq!(rec.steps["p"].output.as_deref(), Some(&expected.clone()));
    assert_eq!(rec.result, Some(expected));
    let events = env.events(&id);
    assert_eq!(
        kinds(&events[n..]),
        [
            "run-resumed",
            "step-started:p.s",
            "step-succeeded:p.s",
            "step-succeeded:p",
            "step-started:z",
            "step-succeeded:z",
            "run-succeeded"
        ],
        "S90: the block emits nothing when it resumes"
    );
    assert_eq!(
        find(&events, "step-started", Some("p.a")).len(),
        1,
        "S20: never runs again"
    );
}

#[tokio::test]
async fn s65_the_run_suspends_only_once_no_invocation_retry_wait_or_sleep_is_pending() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - parallel:
      id: p
      steps:
        - { id: s, plugin: kit, step: suspend }
        - { id: r, plugin: kit, step: fail, config: { succeed-on-attempt: 1 }, retry: { attempts: 2, delay-ms: 10 } }
        - sleep: { id: nap, ms: 10 }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Suspended);
    assert_eq!(rec.steps["p.r"].status, StepStatus::Success);
    assert_eq!(rec.steps["p.nap"].status, StepStatus::Success);
    let events = env.events(&rec.run_id);
    assert_eq!(find(&events, "run-suspended", None).len(), 1);
    let suspended = pos(&events, "run-suspended", "");
    assert_eq!(suspended, events.len() - 1);
    assert!(pos(&events, "step-succeeded", "p.r") < suspended);
    assert!(pos(&events, "step-succeeded", "p.nap") < suspended);
}

#[tokio::test]
async fn s66_suspended_steps_are_listed_in_workflow_order_depth_first() {
    let env = Env::new();
    env.file(
        "child.yaml",
        r#"
id: child
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: s, plugin: kit, step: suspend }
"#,
    );
    let yaml = wf(r#"
steps:
  - parallel:
      id: p
      steps:
        - workflow: { id: w, file: child.yaml }
        - { id: t, plugin: kit, step: suspend }
        - foreach: { id: f, concurrency: 2, do: { id: u, plugin: kit, step: suspend } }
"#);
    let rec = env.run(&yaml, json!([1, 2])).await;
    assert_eq!(rec.status, RunStatus::Suspended);
    let order: Vec<(String, Option<u32>)> = rec
        .suspended
        .iter()
        .flatten()
        .map(|s| (s.path.clone(), s.foreach_index))
        .collect();
    assert_eq!(
        order,
        [
            ("p.w.s".to_owned(), None),
            ("p.t".to_owned(), None),
            ("p.f.u".to_owned(), Some(0)),
            ("p.f.u".to_owned(), Some(1))
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// 3. Branch

#[tokio::test]
async fn s21_s22_every_arm_whose_test_holds_runs_and_the_others_are_skipped_without_events() {
    let env = Env::new();
    let yaml = wf(r#"
initial-state: { go: "yes" }
steps:
  - branch:
      id: r
      arms:
        - { when: '.input.n > 0', do: { id: pos, plugin: kit, step: inc } }
        - { when: '.input.n > 5', do: { id: big, plugin: kit, step: inc } }
        - { when: '0', do: { id: zero, plugin: kit, step: echo } }
        - { when: 'null', do: { id: nil, plugin: kit, step: echo } }
        - { when: 'false', do: { id: no, plugin: kit, step: echo } }
        - { when: '.state.go', do: { id: st, plugin: kit, step: echo } }
  - { id: z, plugin: kit, step: echo }
"#);
    let rec = env.run(&yaml, json!({"n": 1})).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(
        rec.result,
        Some(json!({"pos": {"n": 2}, "zero": {"n": 1}, "st": {"n": 1}}))
    );
    for skipped in ["r.big", "r.nil", "r.no"] {
        assert_eq!(rec.steps[skipped].status, StepStatus::Skipped, "{skipped}");
        assert!(rec.steps[skipped].input.is_none());
    }
    let events = env.events(&rec.run_id);
    assert!(
        events
            .iter()
            .all(|e| !matches!(e.path.as_deref(), Some("r.big" | "r.nil" | "r.no"))),
        "S22: skipped arms emit nothing"
    );
}

#[tokio::test]
async fn s22_when_no_test_holds_the_branch_outputs_an_empty_object_and_the_run_goes_on() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - branch:
      id: r
      arms:
        - { when: '.input.n > 5', do: { id: big, plugin: kit, step: inc } }
  - { id: z, plugin: kit, step: context }
"#);
    let rec = env.run(&yaml, json!({"n": 1})).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(rec.steps["r"].output.as_deref(), Some(&json!({})));
    assert_eq!(rec.steps["z"].input.as_deref(), Some(&json!({})));
    assert_eq!(rec.steps["r.big"].status, StepStatus::Skipped);
}

#[tokio::test]
async fn s23_s85_a_when_that_raises_fails_the_branch_naming_the_arm_and_no_arm_runs() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - branch:
      id: r
      arms:
        - { when: 'true', do: { id: fine, plugin: kit, step: inc } }
        - { when: '.input.a.b > 3', do: { id: broken, plugin: kit, step: echo } }
"#);
    let rec = env.run(&yaml, json!({"a": "text", "n": 1})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    let e = error(&rec);
    assert_eq!(e.code, "expression-error");
    assert_eq!(e.step, "r", "S85: the block's own path");
    assert!(e.message.contains("broken"), "names the arm: {}", e.message);
    assert!(!rec.steps.contains_key("r.fine"), "no arm runs");
    assert!(!rec.steps.contains_key("r.broken"));

    let yaml = wf(r#"
steps:
  - branch:
      id: r
      arms:
        - { when: 'true', do: { id: fine, plugin: kit, step: inc } }
        - { when: 'try (.input.a.b > 3) catch false', do: { id: broken, plugin: kit, step: echo } }
"#);
    let rec = env.run(&yaml, json!({"a": "text", "n": 1})).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(rec.result, Some(json!({"fine": {"n": 2}})));
    assert_eq!(rec.steps["r.broken"].status, StepStatus::Skipped);
}

#[tokio::test]
async fn s6_s107_a_list_arm_has_its_own_record_and_its_entries_sit_under_it() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - branch:
      id: route
      arms:
        - id: taken
          when: 'true'
          do:
            - { id: one, plugin: kit, step: inc }
            - { id: two, plugin: kit, step: inc }
        - id: other
          when: 'false'
          do:
            - { id: three, plugin: kit, step: inc }
"#);
    let rec = env.run(&yaml, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(rec.result, Some(json!({"taken": {"n": 2}})));
    assert_eq!(rec.steps["route.taken"].status, StepStatus::Success);
    assert_eq!(
        rec.steps["route.taken"].input.as_deref(),
        Some(&json!({"n": 0}))
    );
    assert_eq!(
        rec.steps["route.taken"].output.as_deref(),
        Some(&json!({"n": 2}))
    );
    assert_eq!(
        rec.steps["route.taken.one"].output.as_deref(),
        Some(&json!({"n": 1}))
    );
    assert_eq!(
        rec.steps["route.taken.two"].input.as_deref(),
        Some(&json!({"n": 1}))
    );
    assert_eq!(rec.steps["route.other"].status, StepStatus::Skipped);
    assert!(!rec.steps.contains_key("route.other.three"));
    let events = env.events(&rec.run_id);
    assert!(
        pos(&events, "step-started", "route.taken")
            < pos(&events, "step-started", "route.taken.one")
    );
    assert!(
        pos(&events, "step-succeeded", "route.taken.two")
            < pos(&events, "step-succeeded", "route.taken")
    );
}

#[tokio::test]
async fn s24_s71_branch_tests_stay_decided_when_the_run_is_resumed() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - branch:
      id: r
      arms:
        - id: first
          when: '.state.flag == null'
          do:
            - { id: set, plugin: kit, step: set-state, config: { patches: [ { flag: true } ] } }
            - { id: wait, plugin: kit, step: suspend }
        - { when: '.state.flag == true', do: { id: late, plugin: kit, step: echo } }
"#);
    let rec = env.run(&yaml, json!({"n": 1})).await;
    assert_eq!(rec.status, RunStatus::Suspended);
    assert_eq!(rec.state, json!({"flag": true}));
    let rec = resume(&env, &rec.run_id, req(None, None, None, json!({})))
        .await
        .expect("resume");
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(
        rec.steps["r.late"].status,
        StepStatus::Skipped,
        "S24: not re-tested"
    );
    let out = rec.result.expect("result");
    assert_eq!(
        out.as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["first".to_owned()])
    );
    assert_eq!(
        find(
            &env.events(&rec.run_id),
            "step-started",
            Some("r.first.set")
        )
        .len(),
        1
    );
}

// ---------------------------------------------------------------------------------------------
// 4. Foreach

#[tokio::test]
async fn s25_s85_a_foreach_input_that_is_not_an_array_fails_with_not_an_array() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - foreach: { id: f, do: { id: inc, plugin: kit, step: inc } }
"#);
    let rec = env.run(&yaml, json!({"n": 1})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    assert_eq!(error(&rec).code, "not-an-array");
    assert_eq!(error(&rec).step, "f");
    assert!(error(&rec).foreach_index.is_none());
    assert!(!rec.steps.contains_key("f.inc"));
    assert_eq!(
        kinds(&env.events(&rec.run_id)),
        [
            "run-started",
            "step-started:f",
            "step-failed:f",
            "run-failed"
        ]
    );
}

#[tokio::test]
async fn s25_an_empty_foreach_succeeds_with_an_empty_array_and_the_body_never_runs() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - foreach: { id: f, do: { id: inc, plugin: kit, step: inc } }
  - { id: z, plugin: kit, step: echo }
"#);
    let rec = env.run(&yaml, json!([])).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(rec.steps["f"].output.as_deref(), Some(&json!([])));
    assert_eq!(rec.result, Some(json!([])));
    assert!(!rec.steps.contains_key("f.inc"));
    let events = env.events(&rec.run_id);
    assert!(find(&events, "step-progress", None).is_empty());
}

#[tokio::test]
async fn s12_s26_s27_s31_s92_items_run_one_at_a_time_in_index_order_with_progress_events() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - foreach: { id: f, do: { id: c, plugin: kit, step: context } }
"#);
    let input = json!([{"a": 0}, {"a": 1}, {"a": 2}]);
    let rec = env.run(&yaml, input.clone()).await;
    assert_eq!(rec.status, RunStatus::Success);
    let out = rec.result.clone().expect("result");
    for i in 0..3 {
        assert_eq!(out[i]["foreach_index"], json!(i));
        assert_eq!(out[i]["input"], input[i]);
        assert_eq!(out[i]["step_path"], "f.c");
        assert_eq!(out[i]["iteration"], Value::Null);
    }
    let f = &rec.steps["f"];
    assert_eq!(f.input.as_deref(), Some(&input.clone()), "S31");
    assert_eq!(f.output.as_deref(), Some(&out.clone()), "S31");
    let items: Vec<Value> = rec.steps["f.c"].items.iter().flatten().map(js).collect();
    let expected: Vec<Value> = (0..3)
        .map(|i| json!({"index": i, "status": "success", "input": input[i], "output": out[i], "attempts": 1}))
        .collect();
    assert_eq!(items, expected, "S31");
    let events = env.events(&rec.run_id);
    assert_eq!(
        kinds(&events),
        [
            "run-started",
            "step-started:f",
            "step-progress:f",
            "step-progress:f",
            "step-progress:f",
            "step-succeeded:f",
            "run-succeeded"
        ],
        "S92: nothing inside an item emits step-started/succeeded"
    );
    let progress = data(&events, "step-progress", "f");
    for (i, p) in progress.iter().enumerate() {
        assert_eq!(
            p,
            &json!({"index": i, "status": "success", "done": i + 1, "total": 3, "output": out[i]})
        );
    }
}

#[tokio::test]
async fn s27_with_concurrency_the_output_keeps_index_order_whatever_the_finishing_order() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - foreach:
      id: f
      concurrency: 3
      do:
        - branch:
            id: b
            arms:
              - { when: '.input.slow', do: { sleep: { id: nap, ms: 30 } } }
              - { when: 'true', do: { id: pass, plugin: kit, step: echo } }
        - { id: c, plugin: kit, step: context }
"#);
    let input = json!([{"slow": true, "k": 0}, {"slow": false, "k": 1}, {"slow": false, "k": 2}]);
    let rec = env.run(&yaml, input.clone()).await;
    assert_eq!(rec.status, RunStatus::Success);
    let out = rec.result.expect("result");
    for i in 0..3 {
        assert_eq!(out[i]["foreach_index"], json!(i));
        assert_eq!(out[i]["input"]["pass"], input[i]);
    }
}

#[tokio::test]
async fn s26_s29_s92_foreach_concurrency_one_holds_slot_while_suspended() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - foreach: { id: f, do: { id: s, plugin: kit, step: suspend } }
"#);
    let mut rec = env.run(&yaml, json!([10, 11, 12])).await;
    let id = rec.run_id.clone();
    for i in 0..3u32 {
        assert_eq!(rec.status, RunStatus::Suspended);
        assert_eq!(
            js(&rec.suspended),
            json!([{"path": "f.s", "labels": [], "payload": 10 + i, "foreach_index": i}]),
            "only item {i} is in progress"
        );
        let items = rec.steps["f.s"].items.clone().expect("items");
        assert_eq!(
            items.len(),
            i as usize + 1,
            "S26: the next item waits for the slot"
        );
        assert_eq!(items[i as usize].status, StepStatus::Suspended);
        let before = env.events(&id).len();
        rec = resume(&env, &id, req(None, None, None, json!({"i": i})))
            .await
            .expect("resume");
        let events = env.events(&id);
        assert_eq!(
            events[before].data,
            json!({"path": "f.s", "foreach_indexes": [i], "data": {"i": i}})
        );
    }
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(
        rec.result,
        Some(json!([
            {"resumed": {"i": 0}, "payload": 10, "input": 10},
            {"resumed": {"i": 1}, "payload": 11, "input": 11},
            {"resumed": {"i": 2}, "payload": 12, "input": 12}
        ]))
    );
    let progress: Vec<(Value, Value, Value)> = data(&env.events(&id), "step-progress", "f")
        .iter()
        .map(|p| (p["index"].clone(), p["status"].clone(), p["done"].clone()))
        .collect();
    assert_eq!(
        progress,
        [
            (json!(0), json!("suspended"), json!(0)),
            (json!(0), json!("success"), json!(1)),
            (json!(1), json!("suspended"), json!(1)),
            (json!(1), json!("success"), json!(2)),
            (json!(2), json!("suspended"), json!(2)),
            (json!(2), json!("success"), json!(3)),
        ]
    );
}

#[tokio::test]
async fn s26_s29_s68_s69_s117_suspended_items_are_resumed_by_index_or_together_and_free_their_slots()
 {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - foreach:
      id: f
      concurrency: 2
      do: { id: s, plugin: kit, step: suspend, config: { labels: [item] } }
"#);
    let rec = env.run(&yaml, json!([10, 11, 12])).await;
    assert_eq!(rec.status, RunStatus::Suspended);
    let id = rec.run_id.clone();
    assert_eq!(
        js(&rec.suspended),
        json!([
            {"path": "f.s", "labels": ["item"], "payload": 10, "foreach_index": 0},
            {"path": "f.s", "labels": ["item"], "payload": 11, "foreach_index": 1}
        ])
    );
    assert_eq!(
        rec.steps["f.s"].items.as_ref().map(Vec::len),
        Some(2),
        "S26: two slots"
    );
    let before = env.events(&id);
    let err = resume(&env, &id, req(Some("f.s"), None, Some(5), json!({})))
        .await
        .expect_err("refused");
    assert_eq!(err, "item 5 of f.s is not suspended; suspended items: 0, 1");
    assert_eq!(env.events(&id), before);

    let rec = resume(&env, &id, req(None, None, Some(1), json!({"k": 1})))
        .await
        .expect("resume item 1");
    assert_eq!(rec.status, RunStatus::Suspended);
    let left: Vec<Option<u32>> = rec
        .suspended
        .iter()
        .flatten()
        .map(|s| s.foreach_index)
        .collect();
    assert_eq!(
        left,
        [Some(0), Some(2)],
        "S29: the freed slot started item 2"
    );
    let n = env.events(&id).len();
    let rec = resume(&env, &id, req(None, Some("item"), None, json!({"k": 2})))
        .await
        .expect("resume both");
    assert_eq!(rec.status, RunStatus::Success);
    let events = env.events(&id);
    assert_eq!(
        events[n].data,
        json!({"path": "f.s", "foreach_indexes": [0, 2], "data": {"k": 2}}),
        "S68: items of one foreach are resumed together with the same data"
    );
    assert_eq!(
        rec.result,
        Some(json!([
            {"resumed": {"k": 2}, "payload": 10, "input": 10},
            {"resumed": {"k": 1}, "payload": 11, "input": 11},
            {"resumed": {"k": 2}, "payload": 12, "input": 12}
        ]))
    );
    let items = rec.steps["f.s"].items.clone().expect("items");
    assert!(
        items
            .iter()
            .all(|i| i.status == StepStatus::Success && i.attempts == 1)
    );
}

#[tokio::test]
async fn s28_s31_s92_a_failed_item_stops_new_items_and_fails_the_foreach_naming_its_index() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - foreach: { id: f, do: { id: inc, plugin: kit, step: inc } }
"#);
    let rec = env
        .run(&yaml, json!([{"n": 1}, {"n": "x"}, {"n": 3}]))
        .await;
    assert_eq!(rec.status, RunStatus::Failed);
    let e = error(&rec).clone();
    assert_eq!(e.code, "invalid-input");
    assert_eq!(e.step, "f.inc");
    assert_eq!(e.foreach_index, Some(1));
    assert_eq!(rec.steps["f"].error.as_ref(), Some(&e));
    let items = rec.steps["f.inc"].items.clone().expect("items");
    assert_eq!(
        items.iter().map(|i| i.index).collect::<Vec<_>>(),
        [0, 1],
        "item 2 never starts"
    );
    assert_eq!(items[0].status, StepStatus::Success);
    assert_eq!(items[1].status, StepStatus::Failed);
    assert_eq!(items[1].error.as_ref(), Some(&e));
    assert_eq!(items[1].attempts, 0);
    let events = env.events(&rec.run_id);
    assert_eq!(
        data(&events, "step-progress", "f"),
        [
            json!({"index": 0, "status": "success", "done": 1, "total": 3, "output": {"n": 2}}),
            json!({"index": 1, "status": "failed", "done": 1, "total": 3, "error": e}),
        ]
    );
}

#[tokio::test]
async fn s19_s28_the_lowest_failed_index_wins_and_items_in_progress_run_to_their_end() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - foreach:
      id: f
      concurrency: 3
      do:
        - branch:
            id: b
            arms:
              - { when: '.input.slow', do: { sleep: { id: nap, ms: 20 } } }
              - { when: 'true', do: { id: pass, plugin: kit, step: echo } }
        - map: { id: m, expr: '.input.pass' }
        - { id: inc, plugin: kit, step: inc }
"#);
    let input = json!([{"n": 1, "slow": true}, {"n": "x", "slow": true}, {"n": "y"}, {"n": 4}]);
    let rec = env.run(&yaml, input).await;
    assert_eq!(rec.status, RunStatus::Failed);
    assert_eq!(
        error(&rec).foreach_index,
        Some(1),
        "the lowest index, not the first in time"
    );
    assert_eq!(error(&rec).step, "f.inc");
    let items = rec.steps["f.inc"].items.clone().expect("items");
    assert_eq!(
        items
            .iter()
            .map(|i| (i.index, i.status))
            .collect::<Vec<_>>(),
        [
            (0, StepStatus::Success),
            (1, StepStatus::Failed),
            (2, StepStatus::Failed)
        ]
    );
    assert!(
        rec.steps["f.m"]
            .items
            .iter()
            .flatten()
            .all(|i| i.index != 3),
        "item 3 never starts"
    );
}

#[tokio::test]
async fn s19_s74_a_failed_item_cancels_a_suspended_item_and_the_foreach_fails() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - foreach:
      id: f
      concurrency: 2
      do:
        - { id: inc, plugin: kit, step: inc }
        - { id: s, plugin: kit, step: suspend }
"#);
    let rec = env.run(&yaml, json!([{"n": 1}, {"n": "x"}])).await;
    assert_eq!(rec.status, RunStatus::Failed);
    assert_eq!(error(&rec).foreach_index, Some(1));
    assert_eq!(error(&rec).step, "f.inc");
    let s_items = rec.steps["f.s"].items.clone().expect("items");
    assert_eq!(
        s_items
            .iter()
            .map(|i| (i.index, i.status))
            .collect::<Vec<_>>(),
        [(0, StepStatus::Cancelled)],
        "S74"
    );
    assert_eq!(rec.steps["f.s"].status, StepStatus::Cancelled);
    assert!(rec.suspended.is_none());
    let events = env.events(&rec.run_id);
    assert!(find(&events, "run-suspended", None).is_empty());
}

#[tokio::test]
async fn s22_s31_an_arm_skipped_in_one_item_keeps_the_items_of_the_items_that_took_it() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - foreach:
      id: f
      do:
        - branch:
            id: b
            arms:
              - { when: '.input.go', do: { id: e, plugin: kit, step: echo } }
"#);
    let rec = env.run(&yaml, json!([{"go": true}, {"go": false}])).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(rec.result, Some(json!([{"e": {"go": true}}, {}])));
    let e = &rec.steps["f.b.e"];
    let items: Vec<Value> = e.items.iter().flatten().map(js).collect();
    assert_eq!(
        items.first(),
        Some(
            &json!({"index": 0, "status": "success", "input": {"go": true}, "output": {"go": true}, "attempts": 1})
        ),
        "S31: item 0 ran the step: {}",
        js(e)
    );
    assert!(e.started_at.is_some(), "S109: {}", js(e));
}

#[tokio::test]
async fn s76_a_cancel_aborts_running_items_and_starts_no_new_item() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - foreach: { id: f, concurrency: 2, do: { id: w, plugin: kit, step: wait-abort } }
  - { id: z, plugin: kit, step: echo }
"#);
    let id = start(&env, &yaml, json!([1, 2, 3])).await;
    let mut rx = env.rt.watch(&id, 1).expect("watch");
    until_event(&mut rx, "step-started", Some("f")).await;
    env.rt.cancel(&id).await.expect("cancel accepted");
    let rec = settle(&env, &id).await;
    assert_eq!(rec.status, RunStatus::Cancelled);
    let items = rec.steps["f.w"].items.clone().expect("items");
    assert_eq!(
        items
            .iter()
            .map(|i| (i.index, i.status))
            .collect::<Vec<_>>(),
        [(0, StepStatus::Cancelled), (1, StepStatus::Cancelled)],
        "item 2 never starts"
    );
    assert!(items.iter().all(|i| i.output.is_none()), "S77: discarded");
    assert!(!rec.steps.contains_key("z"));
    let events = env.events(&id);
    assert!(find(&events, "step-progress", None).is_empty());
    assert_eq!(events.last().map(kind).as_deref(), Some("run-cancelled"));
}

#[tokio::test]
async fn s30_each_item_sees_the_state_as_it_stood_when_the_item_started() {
    let env = Env::new();
    let body = r#"
initial-state: { seen: false }
steps:
  - foreach:
      id: f
      concurrency: CONC
      do:
        - { id: c, plugin: kit, step: context }
        - { id: w, plugin: kit, step: set-state, config: { patches: [ { seen: true } ] } }
"#;
    let rec = env
        .run(&wf(&body.replace("CONC", "1")), json!([1, 2]))
        .await;
    assert_eq!(rec.status, RunStatus::Success);
    let out = rec.result.expect("result");
    assert_eq!(out[0]["state"], json!({"seen": false}));
    assert_eq!(
        out[1]["state"],
        json!({"seen": true}),
        "concurrency 1: item 1 sees item 0's patch"
    );

    let rec = env
        .run(&wf(&body.replace("CONC", "2")), json!([1, 2]))
        .await;
    let out = rec.result.expect("result");
    assert_eq!(out[0]["state"], json!({"seen": false}));
    assert_eq!(
        out[1]["state"],
        json!({"seen": false}),
        "both items started before any patch"
    );
    assert_eq!(rec.state, json!({"seen": true}));
}

#[tokio::test]
async fn s31_s53_s92_s93_every_item_has_a_full_retry_budget_and_its_events_carry_the_index() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - foreach:
      id: f
      concurrency: 2
      do:
        - { id: r, plugin: kit, step: fail, config: { succeed-on-attempt: 1 }, retry: { attempts: 2, delay-ms: 1 } }
        - { id: e, plugin: kit, step: emit }
"#);
    let rec = env.run(&yaml, json!([1, 2])).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(rec.result, Some(json!([1, 2])));
    let items: Vec<Value> = rec.steps["f.r"].items.iter().flatten().map(js).collect();
    assert_eq!(
        items,
        [
            json!({"index": 0, "status": "success", "input": 1, "output": 1, "attempts": 2}),
            json!({"index": 1, "status": "success", "input": 2, "output": 2, "attempts": 2}),
        ]
    );
    let events = env.events(&rec.run_id);
    let inner: Vec<_> = events
        .iter()
        .filter(|e| e.path.as_deref().is_some_and(|p| p.starts_with("f.")))
        .collect();
    assert!(!inner.is_empty());
    for e in &inner {
        assert!(
            e.foreach_index.is_some(),
            "S92: {} carries foreach_index",
            kind(e)
        );
        assert!(
            ["step-retrying", "step-output", "step-custom", "log"].contains(&kind(e).as_str()),
            "S92: {} inside an item",
            kind(e)
        );
    }
    let mut retried: Vec<u32> = find(&events, "step-retrying", Some("f.r"))
        .iter()
        .filter_map(|e| e.foreach_index)
        .collect();
    retried.sort_unstable();
    assert_eq!(retried, [0, 1]);
    let logs: Vec<(Option<u32>, Value)> = find(&events, "log", Some("f.e"))
        .iter()
        .filter(|e| e.data["message"] == "hello from emit")
        .map(|e| (e.foreach_index, e.data.clone()))
        .collect();
    assert_eq!(logs.len(), 2);
}

#[tokio::test]
async fn s9_inside_an_item_body_steps_resolve_to_that_items_results_and_outside_to_nothing() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - foreach:
      id: f
      concurrency: 2
      do:
        - { id: i, plugin: kit, step: inc }
        - { id: r, plugin: kit, step: step-result, config: { step: i } }
        - map: { id: m, expr: '{mine: .steps.i, by_path: .steps["f.i"], r: .input.result}' }
  - { id: after, plugin: kit, step: step-result, config: { step: i } }
  - map: { id: outside, expr: '{i: .steps.i, fi: .steps["f.i"], f: .steps.f}' }
"#);
    let rec = env.run(&yaml, json!([{"n": 1}, {"n": 10}])).await;
    assert_eq!(rec.status, RunStatus::Success);
    let f = json!([
        {"mine": {"n": 2}, "by_path": {"n": 2}, "r": {"n": 2}},
        {"mine": {"n": 11}, "by_path": {"n": 11}, "r": {"n": 11}}
    ]);
    assert_eq!(rec.steps["f"].output.as_deref(), Some(&f.clone()));
    assert_eq!(
        rec.steps["after"]
            .output
            .as_ref()
            .map(|o| o["result"].clone()),
        Some(Value::Null)
    );
    assert_eq!(rec.result, Some(json!({"i": null, "fi": null, "f": f})));
}

// ---------------------------------------------------------------------------------------------
// 5. Loops

#[tokio::test]
async fn s32_s33_s36_s93_iterations_feed_each_other_and_the_loop_outputs_the_last() {
    let env = Env::new();
    for test in ["do-until: '.output.n >= 3'", "do-while: '.output.n < 3'"] {
        let yaml = wf(&format!(
            r#"
steps:
  - loop:
      id: l
      {test}
      do: {{ id: inc, plugin: kit, step: inc }}
"#
        ));
        let rec = env.run(&yaml, json!({"n": 0})).await;
        assert_eq!(rec.status, RunStatus::Success, "{test}");
        assert_eq!(rec.result, Some(json!({"n": 3})));
        assert_eq!(rec.steps["l"].input.as_deref(), Some(&json!({"n": 0})));
        assert_eq!(rec.steps["l"].output.as_deref(), Some(&json!({"n": 3})));
        let inc = &rec.steps["l.inc"];
        assert_eq!(inc.iteration, Some(3), "S36: the latest iteration");
        assert_eq!(inc.input.as_deref(), Some(&json!({"n": 2})));
        let events = env.events(&rec.run_id);
        let iterations: Vec<Option<u32>> = find(&events, "step-started", Some("l.inc"))
            .iter()
            .map(|e| e.iteration)
            .collect();
        assert_eq!(iterations, [Some(1), Some(2), Some(3)], "S93");
        assert!(
            find(&events, "step-started", Some("l"))[0]
                .iteration
                .is_none()
        );
    }
    let yaml = wf(r#"
steps:
  - loop: { id: l, do-while: 'false', do: { id: inc, plugin: kit, step: inc } }
"#);
    let rec = env.run(&yaml, json!({"n": 10})).await;
    assert_eq!(
        rec.result,
        Some(json!({"n": 11})),
        "S33: the body runs at least once"
    );
}

#[tokio::test]
async fn s32_the_loop_test_sees_output_iteration_input_and_state() {
    let env = Env::new();
    let yaml = wf(r#"
initial-state: { k: 1 }
steps:
  - loop:
      id: l
      do-until: '.iteration == 4 and .input.n == 0 and .state.k == 1 and .output.n == 4'
      max-iterations: 10
      do: { id: inc, plugin: kit, step: inc }
"#);
    let rec = env.run(&yaml, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Success, "{:?}", rec.error);
    assert_eq!(rec.result, Some(json!({"n": 4})));
}

#[tokio::test]
async fn s34_s85_max_iterations_fails_the_loop_before_the_next_iteration_starts() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - loop: { id: l, do-while: 'true', max-iterations: 2, do: { id: inc, plugin: kit, step: inc } }
"#);
    let rec = env.run(&yaml, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    assert_eq!(error(&rec).code, "max-iterations");
    assert_eq!(error(&rec).step, "l");
    assert_eq!(rec.steps["l.inc"].iteration, Some(2));
    assert_eq!(rec.steps["l.inc"].output.as_deref(), Some(&json!({"n": 2})));
    assert_eq!(
        find(&env.events(&rec.run_id), "step-started", Some("l.inc")).len(),
        2
    );
}

#[tokio::test]
async fn s34_without_max_iterations_a_loop_has_no_cap() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - loop: { id: l, do-until: '.output >= 10005', do: { map: { id: m, expr: '.input + 1' } } }
"#);
    let rec = env.run(&yaml, json!(0)).await;
    assert_eq!(rec.status, RunStatus::Success, "{:?}", rec.error);
    assert_eq!(rec.result, Some(json!(10005)));
    assert_eq!(rec.steps["l.m"].iteration, Some(10005));
}

#[tokio::test]
async fn s35_s79_a_failed_or_bailing_body_ends_the_loop_without_evaluating_the_test() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - loop: { id: l, do-until: 'error("the test ran")', do: { id: inc, plugin: kit, step: inc } }
"#);
    let rec = env.run(&yaml, json!({"n": "x"})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    assert_eq!(error(&rec).code, "invalid-input");
    assert_eq!(error(&rec).iteration, Some(1));

    let yaml = wf(r#"
steps:
  - loop: { id: l, do-until: 'error("the test ran")', do: { id: b, plugin: kit, step: bail, config: { value: out } } }
  - { id: z, plugin: kit, step: echo }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Success, "{:?}", rec.error);
    assert_eq!(rec.result, Some(json!("out")));
    assert_eq!(rec.steps["l"].output.as_deref(), Some(&json!("out")));
    assert!(!rec.steps.contains_key("z"));
}

#[tokio::test]
async fn s35_a_test_error_fails_with_expression_error_and_a_body_failure_names_its_iteration() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - loop: { id: l, do-until: '.output.n.x', do: { id: inc, plugin: kit, step: inc } }
"#);
    let rec = env.run(&yaml, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    assert_eq!(error(&rec).code, "expression-error");
    assert_eq!(error(&rec).step, "l");

    let yaml = wf(r#"
steps:
  - loop:
      id: l
      do-until: '.output.n > 100'
      do:
        - map: { id: m, expr: 'if .input.n >= 2 then {n: "x"} else .input end' }
        - { id: inc, plugin: kit, step: inc }
"#);
    let rec = env.run(&yaml, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    let e = error(&rec);
    assert_eq!(e.code, "invalid-input");
    assert_eq!(e.step, "l.inc");
    assert_eq!(e.iteration, Some(3));
    assert_eq!(rec.steps["l"].error.as_ref(), Some(e));
    assert_eq!(rec.steps["l.inc"].iteration, Some(3));
}

#[tokio::test]
async fn s12_s36_s71_s72_a_suspended_iteration_continues_on_resume_and_resume_is_not_carried_on() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - loop:
      id: l
      do-until: '.iteration >= 2'
      do:
        - { id: c, plugin: kit, step: context }
        - { id: s, plugin: kit, step: suspend, config: { payload: { p: 1 } } }
"#);
    let rec = env.run(&yaml, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Suspended);
    let id = rec.run_id.clone();
    assert_eq!(rec.steps["l.s"].iteration, Some(1));
    assert_eq!(
        rec.steps["l.c"]
            .output
            .as_ref()
            .map(|o| o["iteration"].clone()),
        Some(json!(1))
    );
    let rec = resume(&env, &id, req(Some("l.s"), None, None, json!({"r": 1})))
        .await
        .expect("resume 1");
    assert_eq!(
        rec.status,
        RunStatus::Suspended,
        "S72: iteration 2 suspends afresh"
    );
    assert_eq!(rec.steps["l.s"].iteration, Some(2));
    let c2 = rec.steps["l.c"]
        .output
        .as_deref()
        .cloned()
        .expect("c output");
    assert_eq!(c2["iteration"], json!(2));
    assert_eq!(c2["resume"], Value::Null);
    assert_eq!(
        c2["input"]["resumed"],
        json!({"r": 1}),
        "S33: iteration 1's output"
    );
    let rec = resume(&env, &id, req(Some("l"), None, None, json!({"r": 2})))
        .await
        .expect("resume 2");
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(
        rec.result,
        Some(json!({"resumed": {"r": 2}, "payload": {"p": 1}, "input": c2}))
    );
    let events = env.events(&id);
    let c_started: Vec<Option<u32>> = find(&events, "step-started", Some("l.c"))
        .iter()
        .map(|e| e.iteration)
        .collect();
    assert_eq!(
        c_started,
        [Some(1), Some(2)],
        "S71: c never runs again within its iteration"
    );
    let s_started: Vec<(Option<u32>, Value)> = find(&events, "step-started", Some("l.s"))
        .iter()
        .map(|e| {
            (
                e.iteration,
                e.data.get("resume").cloned().unwrap_or(Value::Null),
            )
        })
        .collect();
    assert_eq!(
        s_started,
        [
            (Some(1), Value::Null),
            (Some(1), json!(true)),
            (Some(2), Value::Null),
            (Some(2), json!(true))
        ]
    );
}

#[tokio::test]
async fn s9_inside_and_after_a_loop_a_body_step_resolves_to_its_latest_iteration() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - loop:
      id: l
      do-until: '.output.n >= 3'
      do:
        - { id: i, plugin: kit, step: inc }
        - map: { id: m, expr: '.steps.i' }
  - { id: after, plugin: kit, step: step-result, config: { step: i } }
"#);
    let rec = env.run(&yaml, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(rec.steps["l"].output.as_deref(), Some(&json!({"n": 3})));
    assert_eq!(
        rec.result.as_ref().map(|r| r["result"].clone()),
        Some(json!({"n": 3}))
    );
}

// ---------------------------------------------------------------------------------------------
// 6. Sleep

#[tokio::test]
async fn s37_s38_s90_a_sleep_waits_and_passes_its_input_on() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - sleep: { id: nap, ms: 5 }
  - { id: z, plugin: kit, step: echo }
"#);
    let rec = env.run(&yaml, json!({"a": 1})).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(rec.steps["nap"].output.as_deref(), Some(&json!({"a": 1})));
    assert_eq!(rec.steps["nap"].status, StepStatus::Success);
    assert!(rec.steps["nap"].started_at.is_some() && rec.steps["nap"].ended_at.is_some());
    assert_eq!(rec.result, Some(json!({"a": 1})));
    let events = env.events(&rec.run_id);
    assert_eq!(
        kinds(&events),
        [
            "run-started",
            "step-started:nap",
            "step-waiting:nap",
            "step-succeeded:nap",
            "step-started:z",
            "step-succeeded:z",
            "run-succeeded"
        ]
    );
    let until = events[2].data["until"].as_str().expect("until");
    assert!(
        chrono::DateTime::parse_from_rfc3339(until).is_ok(),
        "{until}"
    );
    assert_eq!(events[3].data, json!({"output": {"a": 1}}));
}

#[tokio::test]
async fn s38_s39_s76_a_waiting_sleep_is_recorded_waiting_and_a_cancel_ends_it_at_once() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - sleep: { id: nap, ms: 600000 }
  - { id: z, plugin: kit, step: echo }
"#);
    let id = start(&env, &yaml, json!({})).await;
    let mut rx = env.rt.watch(&id, 1).expect("watch");
    until_event(&mut rx, "step-waiting", Some("nap")).await;
    let rec = env.rt.show(&id).await.expect("show");
    assert_eq!(rec.status, RunStatus::Running);
    assert_eq!(rec.steps["nap"].status, StepStatus::Waiting);
    env.rt.cancel(&id).await.expect("cancel accepted");
    let rec = settle(&env, &id).await;
    assert_eq!(rec.status, RunStatus::Cancelled);
    assert_eq!(rec.steps["nap"].status, StepStatus::Cancelled);
    assert!(!rec.steps.contains_key("z"));
    let events = env.events(&id);
    assert_eq!(
        kinds(&events),
        [
            "run-started",
            "step-started:nap",
            "step-waiting:nap",
            "step-cancelled:nap",
            "run-cancelled"
        ]
    );
}

#[tokio::test]
async fn s37_s115_a_sleep_until_a_past_instant_does_not_wait_and_a_future_one_waits_for_it() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - sleep: { id: nap, until: '"2000-01-01T00:00:00Z"' }
"#);
    let rec = env.run(&yaml, json!({"a": 1})).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(rec.result, Some(json!({"a": 1})));
    assert_eq!(
        kinds(&env.events(&rec.run_id)),
        [
            "run-started",
            "step-started:nap",
            "step-succeeded:nap",
            "run-succeeded"
        ],
        "S115: no step-waiting"
    );

    let yaml = wf(r#"
steps:
  - sleep: { id: nap, until: '.input.at' }
"#);
    let at = weft::internal::rfc3339(weft::Clock::now_ms(&weft::SystemClock) + 3_600_000);
    let id = start(&env, &yaml, json!({"at": at})).await;
    let mut rx = env.rt.watch(&id, 1).expect("watch");
    let waiting = until_event(&mut rx, "step-waiting", Some("nap")).await;
    assert_eq!(
        waiting.data,
        json!({"until": at}),
        "S38: the instant the expression gave"
    );
    assert_eq!(
        env.rt.show(&id).await.expect("show").steps["nap"].status,
        StepStatus::Waiting
    );
    env.rt.cancel(&id).await.expect("cancel accepted");
    assert_eq!(settle(&env, &id).await.status, RunStatus::Cancelled);
}

#[tokio::test]
async fn s39_an_until_that_errors_or_is_not_rfc3339_fails_the_sleep_with_expression_error() {
    let env = Env::new();
    for until in ["'.input.n'", "'\"tomorrow\"'", "'.input.s.x'"] {
        let yaml = wf(&format!(
            "steps:\n  - sleep: {{ id: nap, until: {until} }}\n"
        ));
        let rec = env.run(&yaml, json!({"n": 5, "s": "text"})).await;
        assert_eq!(rec.status, RunStatus::Failed, "{until}");
        assert_eq!(error(&rec).code, "expression-error", "{until}");
        assert_eq!(error(&rec).step, "nap");
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Map

#[tokio::test]
async fn s40_a_map_yields_its_expression_value_and_is_recorded_and_evented_like_a_step() {
    let env = Env::new();
    let yaml = wf(r#"
initial-state: { k: 1 }
steps:
  - { id: a, plugin: kit, step: inc }
  - map: { id: m, expr: '{total: (.input.n * 2), a: .steps.a, init: .init, st: .state}' }
"#);
    let rec = env.run(&yaml, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Success);
    let out = json!({"total": 2, "a": {"n": 1}, "init": {"n": 0}, "st": {"k": 1}});
    assert_eq!(rec.result, Some(out.clone()));
    assert_eq!(rec.steps["m"].input.as_deref(), Some(&json!({"n": 1})));
    assert_eq!(rec.steps["m"].status, StepStatus::Success);
    let events = env.events(&rec.run_id);
    assert_eq!(
        data(&events, "step-started", "m"),
        [json!({"input": {"n": 1}})]
    );
    assert_eq!(
        data(&events, "step-succeeded", "m"),
        [json!({"output": out})]
    );
}

#[tokio::test]
async fn s40_s85_a_map_with_an_error_no_value_or_several_values_fails_with_expression_error() {
    let env = Env::new();
    for expr in [".input.n.x", "empty", ".input.list[]"] {
        let yaml = wf(&format!("steps:\n  - map: {{ id: m, expr: '{expr}' }}\n"));
        let rec = env.run(&yaml, json!({"n": 1, "list": [1, 2]})).await;
        assert_eq!(rec.status, RunStatus::Failed, "{expr}");
        assert_eq!(error(&rec).code, "expression-error", "{expr}");
        assert_eq!(error(&rec).step, "m");
        assert_eq!(rec.steps["m"].status, StepStatus::Failed);
        let events = env.events(&rec.run_id);
        assert_eq!(
            kinds(&events),
            [
                "run-started",
                "step-started:m",
                "step-failed:m",
                "run-failed"
            ]
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 8. Nested workflows

const CHILD: &str = r#"
id: child
input-schema:
  type: object
  required: ["n"]
  properties: { "n": { type: number }, tag: { type: string, default: kid } }
retry: { attempts: 2, delay-ms: 1 }
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: c, plugin: kit, step: context }
  - { id: flaky, plugin: kit, step: fail, config: { succeed-on-attempt: 1 } }
"#;

#[tokio::test]
async fn s6_s41_s42_s57_s93_a_nested_workflow_runs_as_one_entry_with_its_records_under_its_path() {
    let env = Env::new();
    env.file("child.yaml", CHILD);
    let yaml = wf(r#"
steps:
  - { id: a, plugin: kit, step: inc }
  - workflow: { id: outer, file: child.yaml }
  - { id: z, plugin: kit, step: echo }
"#);
    let rec = env.run(&yaml, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Success, "{:?}", rec.error);
    let c = rec.steps["outer.c"]
        .output
        .as_deref()
        .cloned()
        .expect("outer.c");
    assert_eq!(c["run_id"], json!(rec.run_id), "S41: same run");
    assert_eq!(c["workflow_id"], "child", "S42");
    assert_eq!(c["step_path"], "outer.c");
    assert_eq!(
        c["input"],
        json!({"n": 1, "tag": "kid"}),
        "S57: nested input defaults"
    );
    assert_eq!(rec.steps["outer"].input.as_deref(), Some(&json!({"n": 1})));
    assert_eq!(
        rec.steps["outer"].output.as_deref(),
        Some(&c),
        "S41: the nested result"
    );
    assert_eq!(
        rec.steps["outer.flaky"].attempts,
        Some(2),
        "S42: the child's retry default"
    );
    assert_eq!(rec.result, Some(c));
    let events = env.events(&rec.run_id);
    assert_eq!(
        kinds(&events),
        [
            "run-started",
            "step-started:a",
            "step-succeeded:a",
            "step-started:outer",
            "step-started:outer.c",
            "step-succeeded:outer.c",
            "step-started:outer.flaky",
            "step-retrying:outer.flaky",
            "step-succeeded:outer.flaky",
            "step-succeeded:outer",
            "step-started:z",
            "step-succeeded:z",
            "run-succeeded"
        ]
    );
}

#[tokio::test]
async fn s42_a_files_retry_default_applies_only_to_its_own_steps() {
    let env = Env::new();
    env.file("child.yaml", CHILD);
    let yaml = wf(r#"
steps:
  - workflow: { id: outer, file: child.yaml }
  - { id: p, plugin: kit, step: fail, config: { succeed-on-attempt: 1 } }
"#);
    let rec = env.run(&yaml, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    assert_eq!(error(&rec).step, "p");
    assert_eq!(rec.steps["p"].attempts, Some(1));
    assert_eq!(rec.steps["outer.flaky"].attempts, Some(2));
}

#[tokio::test]
async fn s44_a_workflow_entry_is_never_retried_as_a_whole() {
    let env = Env::new();
    env.file(
        "child.yaml",
        r#"
id: child
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: a, plugin: kit, step: echo }
  - { id: f, plugin: kit, step: fail }
"#,
    );
    let yaml = wf(r#"
retry: { attempts: 3, delay-ms: 1 }
steps:
  - workflow: { id: outer, file: child.yaml }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    assert_eq!(
        rec.steps["outer.f"].attempts,
        Some(1),
        "S42: the parent's default is not the child's"
    );
    let events = env.events(&rec.run_id);
    assert_eq!(find(&events, "step-started", Some("outer")).len(), 1);
    assert_eq!(find(&events, "step-started", Some("outer.a")).len(), 1);
    assert!(find(&events, "step-retrying", None).is_empty());
}

#[tokio::test]
async fn s41_s63_s85_a_nested_input_breaking_its_schema_fails_the_entry_with_invalid_input() {
    let env = Env::new();
    env.file("child.yaml", CHILD);
    let yaml = wf(r#"
steps:
  - workflow: { id: outer, file: child.yaml }
"#);
    let rec = env.run(&yaml, json!({"n": "x"})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    let e = error(&rec);
    assert_eq!(e.code, "invalid-input");
    assert_eq!(e.step, "outer");
    assert_eq!(
        e.details.as_ref().expect("details")["violations"][0]["path"],
        "/n"
    );
    assert!(!rec.steps.contains_key("outer.c"));
}

#[tokio::test]
async fn s42_a_file_that_names_itself_directly_or_through_others_is_refused() {
    let env = Env::new();
    let own = env.file(
        "self.yaml",
        &wf("steps:\n  - workflow: { id: again, file: self.yaml }\n"),
    );
    assert!(weft::load_workflow(&own, env.rt.host()).await.is_err());
    env.file(
        "b.yaml",
        "id: b\nsteps:\n  - workflow: { id: back, file: a.yaml }\n",
    );
    let a = env.file(
        "a.yaml",
        "id: a\nsteps:\n  - workflow: { id: on, file: b.yaml }\n",
    );
    let err = weft::load_workflow(&a, env.rt.host())
        .await
        .err()
        .expect("refused");
    assert!(err.message.contains("names itself"), "{err}");
}

#[tokio::test]
async fn s43_nested_state_starts_from_its_initial_state_under_the_parents_and_written_keys_merge_back()
 {
    let env = Env::new();
    env.file(
        "child.yaml",
        r#"
id: child
initial-state: { a: 1, b: 1 }
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: c, plugin: kit, step: context }
  - { id: w, plugin: kit, step: set-state, config: { patches: [ { c: 3 } ] } }
"#,
    );
    let yaml = wf(r#"
initial-state: { b: 2, p: 0 }
steps:
  - workflow: { id: outer, file: child.yaml }
  - { id: after, plugin: kit, step: context }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(
        rec.steps["outer.c"]
            .output
            .as_ref()
            .map(|o| o["state"].clone()),
        Some(json!({"a": 1, "b": 2, "p": 0})),
        "the parent wins per key"
    );
    assert_eq!(
        rec.result.as_ref().map(|o| o["state"].clone()),
        Some(json!({"b": 2, "p": 0, "c": 3}))
    );
    assert_eq!(
        rec.state,
        json!({"b": 2, "p": 0, "c": 3}),
        "only written keys merge back"
    );
}

#[tokio::test]
async fn s43_s44_s85_an_inner_failure_drops_the_nested_patches_and_fails_the_entry_with_the_same_error()
 {
    let env = Env::new();
    env.file(
        "child.yaml",
        r#"
id: child
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: w, plugin: kit, step: set-state, config: { patches: [ { c: 3 } ] } }
  - { id: f, plugin: kit, step: fail, config: { code: inner, retryable: false } }
"#,
    );
    let yaml = wf(r#"
initial-state: { p: 0 }
steps:
  - workflow: { id: outer, file: child.yaml }
  - { id: z, plugin: kit, step: echo }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Failed);
    let e = error(&rec);
    assert_eq!(e.code, "inner");
    assert_eq!(e.step, "outer.f", "S44: the inner step's full path");
    assert_eq!(rec.steps["outer"].error.as_ref(), Some(e));
    assert_eq!(rec.steps["outer.f"].error.as_ref(), Some(e));
    assert_eq!(rec.state, json!({"p": 0}), "S43: dropped");
    assert!(!rec.steps.contains_key("z"));
}

#[tokio::test]
async fn s44_s82_an_inner_tripwire_ends_the_whole_run_tripwire() {
    let env = Env::new();
    env.file(
        "child.yaml",
        r#"
id: child
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: g, plugin: kit, step: tripwire, config: { reason: deep, processor-id: inner } }
"#,
    );
    let yaml = wf(r#"
steps:
  - workflow: { id: outer, file: child.yaml }
  - { id: z, plugin: kit, step: echo }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Tripwire);
    assert_eq!(
        js(&rec.tripwire),
        json!({"reason": "deep", "retry": false, "metadata": null, "processor_id": "inner"})
    );
    assert!(rec.error.is_none());
    assert!(!rec.steps.contains_key("z"));
    assert_eq!(
        env.events(&rec.run_id).last().map(kind).as_deref(),
        Some("run-tripwire")
    );
}

#[tokio::test]
async fn s45_s66_an_inner_suspension_at_any_depth_is_resumed_by_prefix_or_label_and_continues_inside()
 {
    let env = Env::new();
    env.file(
        "leaf.yaml",
        r#"
id: leaf
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: a, plugin: kit, step: inc }
  - { id: s, plugin: kit, step: suspend, config: { labels: [deep] } }
  - { id: e, plugin: kit, step: echo }
"#,
    );
    env.file(
        "mid.yaml",
        r#"
id: mid
steps:
  - workflow: { id: inner, file: leaf.yaml }
"#,
    );
    let yaml = wf(r#"
steps:
  - workflow: { id: outer, file: mid.yaml }
  - { id: z, plugin: kit, step: echo }
"#);
    for request in [
        req(Some("outer"), None, None, json!({"go": 1})),
        req(None, Some("deep"), None, json!({"go": 1})),
        req(Some("outer.inner.s"), None, None, json!({"go": 1})),
    ] {
        let rec = env.run(&yaml, json!({"n": 0})).await;
        assert_eq!(rec.status, RunStatus::Suspended);
        assert_eq!(
            js(&rec.suspended),
            json!([{"path": "outer.inner.s", "labels": ["deep"], "payload": {"n": 1}, "foreach_index": null}])
        );
        assert!(!rec.steps.contains_key("z"));
        let id = rec.run_id.clone();
        let rec = resume(&env, &id, request).await.expect("resumed");
        assert_eq!(rec.status, RunStatus::Success);
        let expected = json!({"resumed": {"go": 1}, "payload": {"n": 1}, "input": {"n": 1}});
        assert_eq!(
            rec.steps["outer"].output.as_deref(),
            Some(&expected.clone())
        );
        assert_eq!(rec.result, Some(expected));
        let events = env.events(&id);
        assert_eq!(
            find(&events, "step-started", Some("outer.inner.a")).len(),
            1,
            "S45: never again"
        );
        assert_eq!(find(&events, "step-started", Some("outer")).len(), 1);
    }
}

#[tokio::test]
async fn s8_a_nested_file_sees_only_its_own_steps_and_input_and_its_parent_sees_it_whole() {
    let env = Env::new();
    env.file(
        "child.yaml",
        r#"
id: child
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: r, plugin: kit, step: step-result, config: { step: a } }
  - { id: own, plugin: kit, step: step-result, config: { step: r } }
  - { id: own-path, plugin: kit, step: step-result, config: { step: outer.r } }
  - map: { id: m, expr: '{a: .steps.a, r: .steps.r.init, init: .init}' }
"#,
    );
    let yaml = wf(r#"
steps:
  - { id: a, plugin: kit, step: inc }
  - workflow: { id: outer, file: child.yaml }
  - { id: whole, plugin: kit, step: step-result, config: { step: outer } }
  - { id: inside, plugin: kit, step: step-result, config: { step: outer.r } }
"#);
    let rec = env.run(&yaml, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Success);
    let nested_init = json!({"n": 1});
    assert_eq!(
        rec.steps["outer.r"].output.as_deref(),
        Some(&json!({"init": nested_init, "result": null})),
        "not the parent's a"
    );
    assert_eq!(
        rec.steps["outer.own"]
            .output
            .as_ref()
            .map(|o| o["result"].clone()),
        rec.steps["outer.r"].output.as_deref().cloned()
    );
    assert_eq!(
        rec.steps["outer.own-path"]
            .output
            .as_ref()
            .map(|o| o["result"].clone()),
        rec.steps["outer.r"].output.as_deref().cloned(),
        "by path too"
    );
    let m = json!({"a": null, "r": nested_init, "init": nested_init});
    assert_eq!(rec.steps["outer.m"].output.as_deref(), Some(&m.clone()));
    assert_eq!(
        rec.steps["whole"].output.as_deref(),
        Some(&json!({"init": {"n": 0}, "result": m}))
    );
    assert_eq!(
        rec.result,
        Some(json!({"init": {"n": 0}, "result": null})),
        "never the steps inside another file"
    );
}

#[tokio::test]
async fn s116_foreach_index_and_iteration_reach_steps_inside_nested_workflows() {
    let env = Env::new();
    env.file(
        "child.yaml",
        r#"
id: child
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: c, plugin: kit, step: context }
"#,
    );
    let yaml = wf(r#"
steps:
  - foreach: { id: f, concurrency: 2, do: { workflow: { id: w, file: child.yaml } } }
"#);
    let rec = env.run(&yaml, json!([{"k": 0}, {"k": 1}])).await;
    assert_eq!(rec.status, RunStatus::Success);
    let out = rec.result.expect("result");
    for i in 0..2 {
        assert_eq!(out[i]["foreach_index"], json!(i));
        assert_eq!(out[i]["step_path"], "f.w.c");
        assert_eq!(out[i]["workflow_id"], "child");
    }
    let yaml = wf(r#"
steps:
  - loop: { id: l, do-until: '.iteration >= 2', do: { workflow: { id: w, file: child.yaml } } }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Success);
    let out = rec.result.expect("result");
    assert_eq!(out["iteration"], json!(2));
    assert_eq!(out["input"]["iteration"], json!(1));

    let yaml = wf(r#"
steps:
  - foreach:
      id: f
      do: { loop: { id: l, do-until: '.iteration >= 2', do: { workflow: { id: w, file: child.yaml } } } }
"#);
    let rec = env.run(&yaml, json!([{"k": 0}, {"k": 1}])).await;
    assert_eq!(rec.status, RunStatus::Success);
    let out = rec.result.expect("result");
    for i in 0..2 {
        assert_eq!(
            (out[i]["foreach_index"].clone(), out[i]["iteration"].clone()),
            (json!(i), json!(2))
        );
        assert_eq!(out[i]["step_path"], "f.l.w.c");
    }
}

// ---------------------------------------------------------------------------------------------
// 14. Bail; 15. Tripwire from depth

#[tokio::test]
async fn s79_s80_a_bail_in_a_nested_workflow_ends_only_that_workflow() {
    let env = Env::new();
    env.file(
        "child.yaml",
        r#"
id: child
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: b, plugin: kit, step: bail, config: { value: { from: child } } }
  - { id: never, plugin: kit, step: echo }
"#,
    );
    let yaml = wf(r#"
steps:
  - workflow: { id: outer, file: child.yaml }
  - { id: z, plugin: kit, step: context }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(
        rec.steps["outer"].output.as_deref(),
        Some(&json!({"from": "child"}))
    );
    assert_eq!(rec.steps["outer"].status, StepStatus::Success);
    assert_eq!(rec.steps["outer.b"].bail, Some(true));
    assert!(!rec.steps.contains_key("outer.never"));
    assert_eq!(
        rec.result.as_ref().map(|r| r["input"].clone()),
        Some(json!({"from": "child"})),
        "the parent goes on"
    );
}

#[tokio::test]
async fn s79_a_bail_inside_a_foreach_item_stops_further_items_and_ends_the_file_with_its_value() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - foreach:
      id: f
      do:
        - branch:
            id: b
            arms:
              - { when: '.input == 2', do: { id: stop, plugin: kit, step: bail, config: { value: stopped } } }
  - { id: z, plugin: kit, step: echo }
"#);
    let rec = env.run(&yaml, json!([1, 2, 3])).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(rec.result, Some(json!("stopped")));
    assert_eq!(rec.steps["f"].output.as_deref(), Some(&json!("stopped")));
    assert_eq!(
        rec.steps["f.b"].items.as_ref().map(Vec::len),
        Some(2),
        "item 2 never starts"
    );
    assert!(!rec.steps.contains_key("z"));
}

#[tokio::test]
async fn s82_a_tripwire_in_a_foreach_item_or_a_loop_iteration_ends_the_run_tripwire() {
    let env = Env::new();
    let yaml = wf(r#"
steps:
  - foreach:
      id: f
      concurrency: 2
      do: { id: g, plugin: kit, step: tripwire, config: { reason: item, metadata: { m: 1 } } }
  - { id: z, plugin: kit, step: echo }
"#);
    let rec = env.run(&yaml, json!([1, 2])).await;
    assert_eq!(rec.status, RunStatus::Tripwire);
    assert_eq!(
        js(&rec.tripwire),
        json!({"reason": "item", "retry": false, "metadata": {"m": 1}, "processor_id": null})
    );
    assert!(rec.error.is_none());
    assert!(!rec.steps.contains_key("z"));
    let events = env.events(&rec.run_id);
    assert_eq!(events.last().map(kind).as_deref(), Some("run-tripwire"));
    assert!(
        find(&events, "step-progress", Some("f"))
            .iter()
            .all(|p| p.data["status"] == "failed")
    );

    let yaml = wf(r#"
steps:
  - loop: { id: l, do-while: 'true', do: { id: g, plugin: kit, step: tripwire, config: { reason: loop } } }
"#);
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Tripwire);
    assert_eq!(
        rec.tripwire.as_ref().map(|t| t.reason.as_str()),
        Some("loop")
    );
    assert_eq!(rec.steps["l.g"].iteration, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s26_s91_steps_run_on_their_runs_own_task_keep_their_chunks_before_their_ends() {
    // `own_task_above: 0`: every invocation of every run runs on its run's own task, as it
    // does by default once more runs have steps in flight than there are worker threads.
    let env = Env::with_config(crate::common::config().with_own_task_above(0));
    let yaml = wf(r#"
steps:
  - foreach:
      id: f
      concurrency: 3
      do:
        - { id: e, plugin: kit, step: emit, config: { chunks: [1, 2, 3] } }
        - { id: d, plugin: kit, step: double }
"#);
    let path = env.file("workflow.yaml", &yaml);
    let w = env.load(&path).await;
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(
            env.rt
                .start(&w, json!([1, 2, 3, 4, 5, 6]), None)
                .await
                .expect("start"),
        );
    }
    for id in &ids {
        let rec = env.rt.wait(id).await.expect("wait");
        assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
        assert_eq!(rec.result, Some(json!([2, 4, 6, 8, 10, 12])));
        let events = env.events(id);
        for i in 0..6u32 {
            let chunks: Vec<(usize, Value)> = events
                .iter()
                .enumerate()
                .filter(|(_, e)| {
                    kind(e) == "step-output"
                        && e.path.as_deref() == Some("f.e")
                        && e.foreach_index == Some(i)
                })
                .map(|(at, e)| (at, e.data.clone()))
                .collect();
            let data: Vec<&Value> = chunks.iter().map(|(_, d)| d).collect();
            assert_eq!(data, [&json!(1), &json!(2), &json!(3), &json!("last")]);
            let ended = events
                .iter()
                .position(|e| {
                    kind(e) == "step-progress"
                        && e.data["index"] == json!(i)
                        && e.data["status"] == "success"
                })
                .expect("the item's end");
            assert!(
                chunks.iter().all(|(at, _)| *at < ended),
                "S91: item {i}'s chunks are stored before its end"
            );
        }
    }
    let text = env.rt.metrics().expect("metrics");
    assert!(
        text.lines().any(|l| l == "weft_steps_on_run_task_total 48"),
        "all 48 steps ran on their runs' tasks: {text}"
    );
}
