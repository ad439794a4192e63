//! Agents (S123–S126) against the scripted model double over loopback: real tool components
//! in real wasmtime, approval across a restart of the host, streaming, and workflows offered
//! as tools answered by their first yield.

use serde_json::{Value, json};
use weft::{ResumeRequest, RunStatus};

use crate::cli::Home;
use crate::common::{Env, model_double};

/// An agent over model `m` at `base` (OpenAI chat) with the `tools` plugin's two tools.
fn calculator(base: &str) -> String {
    calculator_on("openai-chat", &format!("{base}/v1"))
}

/// [`calculator`] over the protocol `api` at `base_url`.
fn calculator_on(api: &str, base_url: &str) -> String {
    format!(
        r#"
id: assistant
models:
  m: {{ api: {api}, base-url: "{base_url}", model: scripted }}
plugins:
  calc: {{ wasm: "{{tools}}" }}
steps:
  - agent:
      id: helper
      model: m
      instructions: You add numbers.
      tools:
        - {{ plugin: calc, tool: add }}
        - {{ plugin: calc, tool: delete-everything }}
      input: '{{prompt: .input}}'
"#
    )
}

/// Two parallel additions, then a call that needs approval, then the answer.
const ROUNDS: &str = r#"
conversations:
  - match: "What is 2+3 and 20+30?"
    turns:
      - tool_calls:
          - { id: call_a, name: add, arguments: { a: 2, b: 3 } }
          - { id: call_b, name: add, arguments: { a: 20, b: 30 } }
        usage: { input_tokens: 10, output_tokens: 5 }
      - text: "Cleaning up."
        tool_calls:
          - { id: call_c, name: delete-everything, arguments: {} }
        usage: { input_tokens: 20, output_tokens: 6 }
      - text: "They are 5 and 50."
        usage: { input_tokens: 30, output_tokens: 7 }
"#;

fn approve(label: &str, data: Value) -> ResumeRequest {
    ResumeRequest {
        step: None,
        label: Some(label.into()),
        foreach_index: None,
        data,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s123_s124_an_agent_calls_sandboxed_tools_waits_for_approval_across_processes_and_answers()
{
    let base = model_double(ROUNDS).await;
    let home = Home::new();
    let path = home.file("agent.yaml", &calculator(&base));
    let path = path.to_string_lossy();
    let input = r#""What is 2+3 and 20+30?""#;
    let args = [
        "run", &*path, "--input", input, "--run-id", "agent-1", "--json",
    ];
    // The double serves on this runtime's other worker while `weft` runs.
    let run = tokio::task::block_in_place(|| home.weft(&args));
    assert_eq!(run.code, 3, "suspended for approval: {run:?}");
    let rec: Value = serde_json::from_str(&run.stdout).expect("a record");
    // Both additions ran in their sandbox, each its own step; the deletion waits for a person.
    assert_eq!(
        rec["steps"]["helper.tool-call_a"]["output"],
        json!({"sum": 5})
    );
    assert_eq!(
        rec["steps"]["helper.tool-call_b"]["output"],
        json!({"sum": 50})
    );
    let waiting = &rec["steps"]["helper.tool-call_c"];
    assert_eq!(waiting["status"], "suspended");
    assert_eq!(waiting["labels"], json!(["call_c"]));
    assert_eq!(
        waiting["suspend_payload"],
        json!({"tool": "delete-everything", "arguments": {}})
    );
    assert_eq!(rec["suspended"][0]["labels"], json!(["call_c"]));

    // Another process resumes the approval; the model's last text streams on its stderr.
    let resume = tokio::task::block_in_place(|| {
        home.weft(&[
            "resume",
            "agent-1",
            "--label",
            "call_c",
            "--data",
            r#"{"approved": true}"#,
            "--json",
        ])
    });
    assert_eq!(resume.code, 0, "{resume:?}");
    assert!(
        resume
            .stderr
            .lines()
            .any(|l| l.ends_with("helper.model-3: They are 5 and 50.")),
        "the text on one line as it streamed: {}",
        resume.stderr
    );
    let rec: Value = serde_json::from_str(&resume.stdout).expect("a record");
    assert_eq!(rec["status"], "success");
    let out = &rec["result"];
    assert_eq!(out["text"], "They are 5 and 50.");
    assert_eq!(
        out["usage"],
        json!({"input_tokens": 60, "output_tokens": 18})
    );
    assert_eq!(out["steps"].as_array().map(Vec::len), Some(3));
    assert_eq!(
        rec["steps"]["helper.tool-call_c"]["output"],
        json!({"deleted": true})
    );
    assert_eq!(
        rec["steps"]["helper.tool-call_c"]["resume_data"],
        json!({"approved": true})
    );
    for model in ["helper.model-1", "helper.model-2", "helper.model-3"] {
        assert_eq!(rec["steps"][model]["attempts"], 1, "{model}: one call each");
    }
}

#[tokio::test]
async fn s124_a_refused_call_is_told_to_the_model_with_the_reason() {
    let script = r#"
conversations:
  - match: "wipe it"
    turns:
      - tool_calls:
          - { id: call_x, name: delete-everything, arguments: {} }
      - text: "Understood, nothing deleted."
"#;
    let base = model_double(script).await;
    let env = Env::new();
    let rec = env.run(&calculator(&base), json!("wipe it")).await;
    assert_eq!(rec.status, RunStatus::Suspended);
    env.rt
        .resume(
            &rec.run_id,
            approve("call_x", json!({"approved": false, "reason": "not today"})),
        )
        .await
        .expect("resume");
    let rec = env.rt.wait(&rec.run_id).await.expect("wait");
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    let out = rec.result.expect("an output");
    assert_eq!(out["messages"][2]["role"], "tool");
    assert_eq!(
        out["messages"][2]["content"],
        r#"{"approved":false,"reason":"not today"}"#
    );
    assert_eq!(
        rec.steps["helper.tool-call_x"].output.as_deref(),
        Some(&json!({"approved": false, "reason": "not today"}))
    );
}

/// An agent offering the workflow `child.yaml` as the tool `child`.
fn dispatcher(base: &str) -> String {
    format!(
        r#"
id: dispatcher
models:
  m: {{ api: openai-chat, base-url: "{base}/v1", model: scripted }}
steps:
  - agent:
      id: boss
      model: m
      tools:
        - {{ workflow: {{ id: child, file: child.yaml }}, description: "Does the child's work." }}
"#
    )
}

/// The model calls `child` twice at once, then answers.
const TWICE: &str = r#"
conversations:
  - match: "go"
    turns:
      - tool_calls:
          - { id: first, name: child, arguments: { n: 1 } }
          - { id: second, name: child, arguments: { n: 2 } }
      - text: "dispatched"
"#;

/// Runs the dispatcher with `child` as the child workflow; the tool results of both calls.
async fn dispatch(env: &Env, child: &str) -> (Vec<Value>, String) {
    let base = model_double(TWICE).await;
    env.file("child.yaml", child);
    let rec = env.run(&dispatcher(&base), json!("go")).await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    let results = ["boss.tool-first", "boss.tool-second"]
        .iter()
        .map(|p| rec.steps[*p].output.as_deref().cloned().expect("a result"))
        .collect();
    (results, rec.run_id)
}

#[tokio::test]
async fn s125_a_workflow_tool_answers_with_the_childs_end_and_each_call_has_its_own_child() {
    let env = Env::new();
    let child = r#"
id: child
input-schema: { type: object, required: [n] }
steps:
  - map: { id: double, expr: '{twice: (.input.n * 2)}' }
"#;
    let (results, parent) = dispatch(&env, child).await;
    let ids: Vec<&str> = results
        .iter()
        .filter_map(|r| r["run_id"].as_str())
        .collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1], "each dispatch carries only its own child");
    for (n, r) in results.iter().enumerate() {
        assert_eq!(r["status"], "success");
        assert_eq!(r["yield"]["kind"], "ended");
        assert_eq!(r["yield"]["result"], json!({"twice": (n as i64 + 1) * 2}));
        let child = env
            .rt
            .show(r["run_id"].as_str().unwrap_or_default())
            .await
            .expect("the child is a run");
        assert_eq!(child.status, RunStatus::Success);
        assert!(
            r["run_id"]
                .as_str()
                .is_some_and(|id| id.starts_with(&parent))
        );
    }
}

#[tokio::test]
async fn s125_a_workflow_tool_answers_with_the_childs_first_chunk_or_suspension_and_the_child_goes_on()
 {
    let env = Env::new();
    let writes = r#"
id: child
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: talk, plugin: kit, step: emit, config: { chunks: [{"hello": 1}] } }
"#;
    let (results, _) = dispatch(&env, writes).await;
    for r in &results {
        assert_eq!(r["yield"]["kind"], "output", "{r}");
        assert_eq!(r["yield"]["path"], "talk");
        assert_eq!(r["yield"]["data"], json!({"hello": 1}));
        let id = r["run_id"].as_str().unwrap_or_default();
        let child = env.rt.wait(id).await.expect("the child goes on");
        assert_eq!(child.status, RunStatus::Success);
    }

    let env = Env::new();
    let waits = r#"
id: child
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: ask, plugin: kit, step: suspend, config: { payload: { question: "ok?" }, labels: [review] } }
"#;
    let (results, _) = dispatch(&env, waits).await;
    for r in &results {
        assert_eq!(r["status"], "suspended", "{r}");
        assert_eq!(r["yield"]["kind"], "suspended");
        assert_eq!(r["yield"]["suspended"][0]["labels"], json!(["review"]));
        assert_eq!(
            r["yield"]["suspended"][0]["payload"],
            json!({"question": "ok?"})
        );
        // The child is resumed by its reference, on its own.
        let id = r["run_id"].as_str().unwrap_or_default();
        env.rt
            .resume(id, approve("review", json!({"fine": true})))
            .await
            .expect("resume the child");
        let child = env.rt.wait(id).await.expect("wait");
        assert_eq!(child.status, RunStatus::Success, "{child:?}");
    }
}

/// Two rounds of tool calls, the first a parallel pair, then the answer: no approval.
const PLAIN: &str = r#"
conversations:
  - match: "Add 2+3, 20+30, then 5+50."
    turns:
      - text: "First the pair."
        tool_calls:
          - { id: call_a, name: add, arguments: { a: 2, b: 3 } }
          - { id: call_b, name: add, arguments: { a: 20, b: 30 } }
        usage: { input_tokens: 10, output_tokens: 5 }
      - text: "Now the sum."
        tool_calls:
          - { id: call_c, name: add, arguments: { a: 5, b: 50 } }
        usage: { input_tokens: 20, output_tokens: 6 }
      - text: "It is 55."
        usage: { input_tokens: 30, output_tokens: 7 }
"#;

/// Checks a finished run of [`PLAIN`]: one result, each call recorded once, exact usage.
fn check_plain(rec: &Value, context: &str) {
    assert_eq!(rec["status"], "success", "{context}: {rec}");
    let out = &rec["result"];
    assert_eq!(out["text"], "It is 55.", "{context}");
    assert_eq!(
        out["usage"],
        json!({"input_tokens": 60, "output_tokens": 18}),
        "{context}: each model call counted once"
    );
    let roles: Vec<&str> = out["messages"]
        .as_array()
        .map(|m| m.iter().filter_map(|m| m["role"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "tool",
            "assistant",
            "tool",
            "assistant"
        ],
        "{context}: no reply or result twice in the conversation"
    );
    let sums: Vec<&Value> = ["call_a", "call_b", "call_c"]
        .iter()
        .map(|c| &rec["steps"][format!("helper.tool-{c}")]["output"]["sum"])
        .collect();
    assert_eq!(sums, [&json!(5), &json!(50), &json!(55)], "{context}");
    let calls = rec["steps"]
        .as_object()
        .map(|s| s.keys().filter(|k| k.starts_with("helper.")).count())
        .unwrap_or_default();
    assert_eq!(
        calls, 6,
        "{context}: three model calls and three tool calls"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s123_s102_a_host_killed_at_every_checkpoint_of_an_agent_run_finishes_it_after_recovery() {
    use crate::torture::{Home, run_weft};
    let base = model_double(PLAIN).await;
    let input = r#""Add 2+3, 20+30, then 5+50.""#;
    // The host aborts right after its n-th durable commit, for n = 1, 2, ... until a run gets
    // through whole; each time another process recovers the run and finishes it.
    let mut crashes = 0;
    for n in 1.. {
        let home = Home::new();
        let file = home.file("agent.yaml", &calculator(&base));
        let file = file.to_string_lossy().into_owned();
        let n_text = n.to_string();
        let (first, record) = tokio::task::block_in_place(|| {
            let first = run_weft(
                &home.home(),
                &[
                    "--crash-after-commits",
                    &n_text,
                    "run",
                    &file,
                    "--input",
                    input,
                    "--run-id",
                    "a",
                    "--json",
                ],
            );
            if first.code == 0 {
                return (first, None);
            }
            // Recovered, unless the crash came after the run's last commit.
            let recovered = run_weft(&home.home(), &["resume", "a"]);
            assert!(
                recovered.code == 0 || recovered.stderr.contains("(status: success)"),
                "crashed after commit {n}: {recovered:?}"
            );
            (
                first,
                Some(run_weft(&home.home(), &["show", "a", "--json"])),
            )
        });
        let Some(recovered) = record else {
            check_plain(
                &serde_json::from_str(&first.stdout).expect("a record"),
                "no crash",
            );
            break;
        };
        assert!(
            first.stderr.contains(&format!("crashing after commit {n}")),
            "{first:?}"
        );
        crashes += 1;
        check_plain(
            &serde_json::from_str(&recovered.stdout).expect("a record"),
            &format!("crashed after commit {n}"),
        );
    }
    // A model call reaches out of weft, so the transition issuing it is synced before it
    // starts, and so is the run's end; the tool calls between are contained and may share
    // the next sync (S100).
    assert!(
        crashes >= 4,
        "an agent run of three model calls commits before each of them and at its end"
    );
}

#[tokio::test]
async fn s123_s87_the_streamed_text_is_stored_and_replayed_from_any_seq_without_gap_or_duplicate() {
    let base = model_double(PLAIN).await;
    let env = Env::new();
    let rec = env
        .run(&calculator(&base), json!("Add 2+3, 20+30, then 5+50."))
        .await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    let all = env.events(&rec.run_id);
    let pieces = all
        .iter()
        .filter(|e| e.path.as_deref() == Some("helper.model-3") && !e.data["text"].is_null())
        .count();
    assert!(pieces > 1, "the last reply streamed in pieces");
    for from in 1..=all.len() as u64 + 1 {
        let mut rx = env.rt.watch(&rec.run_id, from).expect("watch");
        let mut seqs = Vec::new();
        while let Ok(e) = rx.try_recv() {
            seqs.push(e.seq);
        }
        let want: Vec<u64> = all.iter().map(|e| e.seq).filter(|s| *s >= from).collect();
        assert_eq!(seqs, want, "from seq {from}");
    }
}

#[tokio::test]
async fn s123_an_agent_speaks_anthropic_messages_tool_results_included() {
    let base = model_double(PLAIN).await;
    let env = Env::new();
    let rec = env
        .run(
            &calculator_on("anthropic-messages", &format!("{base}/v1")),
            json!("Add 2+3, 20+30, then 5+50."),
        )
        .await;
    let record = serde_json::to_value(&rec).expect("a record");
    check_plain(&record, "anthropic");
}

#[tokio::test]
async fn s123_s82_a_tools_tripwire_ends_the_agent_run_tripwire_with_the_tools_reason() {
    let script = r#"
conversations:
  - match: "say something"
    turns:
      - tool_calls:
          - { id: call_check, name: check-text, arguments: { text: "a forbidden plan" } }
          - { id: call_add, name: add, arguments: { a: 1, b: 1 } }
      - text: "never reached"
"#;
    let base = model_double(script).await;
    let env = Env::new();
    let yaml = calculator(&base).replace(
        "        - { plugin: calc, tool: delete-everything }",
        "        - { plugin: calc, tool: check-text }",
    );
    let rec = env.run(&yaml, json!("say something")).await;
    assert_eq!(rec.status, RunStatus::Tripwire, "{rec:?}");
    let tripwire = rec.tripwire.expect("a tripwire");
    assert_eq!(tripwire.reason, r#"forbidden word "forbidden""#);
    assert_eq!(tripwire.metadata, json!({"word": "forbidden"}));
    assert_eq!(tripwire.processor_id.as_deref(), Some("check-text"));
    assert_eq!(
        rec.steps["helper.tool-call_add"].output.as_deref(),
        Some(&json!({"sum": 2})),
        "the other call of the reply ended first"
    );
    assert!(
        !rec.steps.contains_key("helper.model-2"),
        "no model call after"
    );
}

#[tokio::test]
async fn s94_an_agent_is_rerun_whole_with_none_of_its_earlier_calls() {
    let base = model_double(PLAIN).await;
    let env = Env::new();
    let source = env
        .run(&calculator(&base), json!("Add 2+3, 20+30, then 5+50."))
        .await;
    assert_eq!(source.status, RunStatus::Success);
    let id = env
        .rt
        .rerun(&source.run_id, "helper", None, None, Some("again".into()))
        .await
        .expect("rerun");
    let rec = env.rt.wait(&id).await.expect("wait");
    check_plain(&serde_json::to_value(&rec).expect("a record"), "rerun");
    let events = env.events(&id);
    let started = events
        .iter()
        .filter(|e| {
            e.kind == weft::EventKind::StepStarted && e.path.as_deref() == Some("helper.model-1")
        })
        .count();
    assert_eq!(started, 1, "the rerun called the model afresh, once");
}

#[tokio::test]
async fn s123_a_reply_with_many_tool_calls_has_at_most_max_parallel_tools_in_flight() {
    let calls: Vec<String> = (1..=12)
        .map(|i| {
            format!("          - {{ id: call_{i}, name: add, arguments: {{ a: {i}, b: 1 }} }}")
        })
        .collect();
    let script = format!(
        "conversations:\n  - match: \"add them all\"\n    turns:\n      - tool_calls:\n{}\n      - text: \"done\"\n",
        calls.join("\n")
    );
    let base = model_double(&script).await;
    let env = Env::new();
    let yaml = calculator(&base).replace(
        "      input: '{prompt: .input}'",
        "      max-parallel-tools: 3\n      input: '{prompt: .input}'",
    );
    let rec = env.run(&yaml, json!("add them all")).await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    let mut in_flight = 0;
    let mut most = 0;
    let mut started = Vec::new();
    for e in env.events(&rec.run_id) {
        let Some(path) = e.path.as_deref().filter(|p| p.starts_with("helper.tool-")) else {
            continue;
        };
        match e.kind {
            weft::EventKind::StepStarted => {
                in_flight += 1;
                started.push(path.to_owned());
            }
            weft::EventKind::StepSucceeded | weft::EventKind::StepFailed => in_flight -= 1,
            _ => {}
        }
        most = most.max(in_flight);
    }
    assert_eq!(most, 3, "three calls of the reply in flight at most");
    let expected: Vec<String> = (1..=12).map(|i| format!("helper.tool-call_{i}")).collect();
    assert_eq!(started, expected, "started in the reply's order");
    for (i, path) in expected.iter().enumerate() {
        assert_eq!(
            rec.steps[path.as_str()].output.as_deref(),
            Some(&json!({"sum": i + 2}))
        );
    }

    for bad in ["0", "1001"] {
        let path = env.file(
            "bad.yaml",
            &calculator(&base).replace(
                "      input: '{prompt: .input}'",
                &format!("      max-parallel-tools: {bad}\n      input: '{{prompt: .input}}'"),
            ),
        );
        let err = weft::load_workflow(&path, env.rt.host())
            .await
            .err()
            .expect("refused at load");
        let text = err.to_string();
        assert!(
            text.contains(&format!("max-parallel-tools {bad} is out of range"))
                && text.contains("use 1 to 1000"),
            "{text}"
        );
    }
}
