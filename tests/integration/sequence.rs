//! A sequence of plugin steps: data flow, records, events.

use serde_json::json;
use weft::RunStatus;

use crate::common::{Env, kinds};

const INC3: &str = r#"
id: inc3
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: a, plugin: kit, step: inc }
  - { id: b, plugin: kit, step: inc }
  - { id: c, plugin: kit, step: inc }
"#;

#[tokio::test]
async fn s1_s2_s5_each_entry_gets_the_previous_output_and_the_last_is_the_result() {
    let env = Env::new();
    let rec = env.run(INC3, json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Success);
    assert_eq!(rec.result, Some(json!({"n": 3})));
    assert_eq!(rec.steps["b"].input.as_deref(), Some(&json!({"n": 1})));
    assert_eq!(rec.steps["c"].output.as_deref(), Some(&json!({"n": 3})));
}

#[tokio::test]
async fn s87_s88_s89_events_have_increasing_seq_and_one_closing_event() {
    let env = Env::new();
    let rec = env.run(INC3, json!({"n": 0})).await;
    let events = env.events(&rec.run_id);
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    assert_eq!(
        kinds(&events),
        [
            "run-started",
            "step-started:a",
            "step-succeeded:a",
            "step-started:b",
            "step-succeeded:b",
            "step-started:c",
            "step-succeeded:c",
            "run-succeeded"
        ]
    );
}
