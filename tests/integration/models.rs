//! Model steps (S122) against the scripted model double over loopback, speaking the real
//! OpenAI and Anthropic streaming protocols with their quirks; a provider's `retry-after`
//! waited for by the run (S121).

use serde_json::{Value, json};
use weft::{EventKind, RunStatus};

use crate::common::{Env, model_double};

/// A workflow asking `model` (of `api`, at `base`) with `input`.
fn asking(api: &str, base: &str, input: &str, retry: &str) -> String {
    format!(
        r#"
id: asking
models:
  m: {{ api: {api}, base-url: "{base}/v1", model: scripted{retry} }}
steps:
  - {{ id: ask, model: m, input: '{input}' }}
"#
    )
}

const SUM: &str = r#"
conversations:
  - match: "What is 2+3?"
    turns:
      - text: "Let me add them with care."
        tool_calls:
          - { id: call_1, name: add, arguments: { a: 2, b: 3 } }
          - { id: call_2, name: add, arguments: { a: 20, b: 30 } }
        usage: { input_tokens: 12, output_tokens: 7 }
        quirks: [QUIRKS]
"#;

/// The text pieces and tool-call fragments the step wrote while it ran.
fn streamed(env: &Env, run: &str) -> (Vec<String>, Vec<Value>) {
    let mut text = Vec::new();
    let mut calls = Vec::new();
    for e in env.events(run) {
        if e.kind == EventKind::StepOutput {
            if let Some(t) = e.data["text"].as_str() {
                text.push(t.to_owned());
            }
            if !e.data["tool_call"].is_null() {
                calls.push(e.data["tool_call"].clone());
            }
        }
    }
    (text, calls)
}

async fn ask_sum(api: &str, quirks: &str) {
    let base = model_double(&SUM.replace("QUIRKS", quirks)).await;
    let env = Env::new();
    let rec = env
        .run(
            &asking(api, &base, "{prompt: .input.q}", ""),
            json!({ "q": "What is 2+3?" }),
        )
        .await;
    assert_eq!(rec.status, RunStatus::Success, "{api} {quirks}: {rec:?}");
    let out = rec.result.expect("an output");
    assert_eq!(out["text"], "Let me add them with care.", "{api} {quirks}");
    assert_eq!(
        out["tool_calls"],
        json!([
            { "id": "call_1", "name": "add", "arguments": { "a": 2, "b": 3 } },
            { "id": "call_2", "name": "add", "arguments": { "a": 20, "b": 30 } }
        ]),
        "{api} {quirks}"
    );
    assert_eq!(
        out["usage"],
        json!({ "input_tokens": 12, "output_tokens": 7 }),
        "{api} {quirks}"
    );
    assert_eq!(out["finish"], "tool_calls");
    assert_eq!(out["message"]["role"], "assistant");
    let (text, calls) = streamed(&env, &rec.run_id);
    assert!(
        text.len() > 1,
        "the text arrived in pieces while the call ran: {text:?}"
    );
    assert_eq!(text.concat(), "Let me add them with care.");
    assert!(
        calls.iter().any(|c| c["index"] == 1),
        "tool-call fragments reached watchers: {calls:?}"
    );
}

#[tokio::test]
async fn s122_an_openai_model_step_streams_and_returns_text_parallel_tool_calls_and_usage() {
    ask_sum("openai-chat", "").await;
}

#[tokio::test]
async fn s122_openai_stream_quirks_do_not_change_the_reply() {
    for quirks in [
        "missing_index",
        "repeat_id",
        "repeat_id, missing_index",
        "choices_null_usage",
        "split_frames, keepalive",
    ] {
        ask_sum("openai-chat", quirks).await;
    }
}

#[tokio::test]
async fn s122_an_anthropic_model_step_assembles_tool_use_input_from_json_deltas() {
    ask_sum("anthropic-messages", "").await;
    ask_sum("anthropic-messages", "split_frames, keepalive").await;
}

#[tokio::test]
async fn s121_a_429_is_waited_out_as_the_provider_asks_then_the_call_succeeds() {
    let base = model_double(
        r#"
conversations:
  - match: "hello"
    turns:
      - text: "Hi."
        status: 429
        retry_after_ms: 40
        fail_times: 1
        usage: { input_tokens: 1, output_tokens: 1 }
"#,
    )
    .await;
    let env = Env::new();
    let yaml = asking(
        "openai-chat",
        &base,
        "{prompt: .input}",
        ", retry: { attempts: 3, delay-ms: 1 }",
    );
    let rec = env.run(&yaml, json!("hello")).await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    assert_eq!(rec.steps["ask"].attempts, Some(2));
    let retrying: Vec<Value> = env
        .events(&rec.run_id)
        .into_iter()
        .filter(|e| e.kind == EventKind::StepRetrying)
        .map(|e| e.data)
        .collect();
    assert_eq!(retrying.len(), 1, "{retrying:?}");
    assert_eq!(
        retrying[0]["delay_ms"], 40,
        "the wait the provider asked for, not the policy's 1 ms"
    );
    assert_eq!(retrying[0]["error"]["code"], "rate-limited");
}

#[tokio::test]
async fn s122_refusals_say_what_to_do_and_an_unset_key_variable_fails_without_a_call() {
    let base = model_double(
        r#"
conversations:
  - match: "forbidden"
    turns:
      - text: "never"
        status: 400
"#,
    )
    .await;
    let env = Env::new();
    let rec = env
        .run(
            &asking("openai-chat", &base, "{prompt: .input}", ""),
            json!("forbidden"),
        )
        .await;
    assert_eq!(rec.status, RunStatus::Failed);
    let error = rec.error.expect("an error");
    assert_eq!(error.code, "model-refused");
    assert!(error.message.contains("answered 400"), "{}", error.message);

    let yaml = format!(
        r#"
id: keyed
models:
  m: {{ api: openai-chat, base-url: "{base}/v1", model: x, api-key-env: WEFT_TEST_UNSET_MODEL_KEY }}
steps:
  - {{ id: ask, model: m, input: '{{prompt: "hi"}}', retry: {{ attempts: 3 }} }}
"#
    );
    let rec = env.run(&yaml, json!({})).await;
    let error = rec.error.expect("an error");
    assert_eq!(error.code, "model-auth");
    assert!(
        error.message.contains("WEFT_TEST_UNSET_MODEL_KEY"),
        "{}",
        error.message
    );
    assert_eq!(rec.steps["ask"].attempts, Some(1), "not retried");
}

#[tokio::test]
async fn s122_an_input_that_is_no_conversation_fails_with_its_violations() {
    let env = Env::new();
    let yaml = asking("openai-chat", "http://127.0.0.1:9", "{prompt: 1}", "");
    let rec = env.run(&yaml, json!({})).await;
    let error = rec.error.expect("an error");
    assert_eq!(error.code, "invalid-input");
    assert_eq!(rec.steps["ask"].attempts, Some(0), "no call was made");
}

#[tokio::test]
async fn s122_files_naming_an_undeclared_model_or_a_bad_declaration_are_refused() {
    let env = Env::new();
    for (yaml, says) in [
        (
            "id: a\nsteps:\n  - { id: s, model: nope }\n",
            "model `nope` is not declared",
        ),
        (
            "id: a\nmodels:\n  m: { api: gemini, base-url: \"http://x/v1\", model: y }\nsteps:\n  - { id: s, model: m }\n",
            "api `gemini` is not one weft speaks",
        ),
        (
            "id: a\nmodels:\n  m: { api: openai-chat, base-url: \"ftp://x\", model: y }\nsteps:\n  - { id: s, model: m }\n",
            "is not an http(s) URL",
        ),
        (
            "id: a\nmodels:\n  m: { api: openai-chat, base-url: \"http://x/v1\", model: y }\nsteps:\n  - { id: s, model: m, config: { colour: red } }\n",
            "config",
        ),
    ] {
        let path = env.file("m.yaml", yaml);
        let Err(err) = env.rt.load_workflow(&path).await else {
            panic!("loaded: {yaml}");
        };
        assert!(err.to_string().contains(says), "{says}: {err}");
    }
}

// The double runs on the runtime's other thread while this one waits for the `weft` process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s122_the_api_key_is_sent_but_never_stored_in_records_or_events() {
    let base = model_double(
        r#"
conversations:
  - match: "hi"
    turns:
      - text: "Hello."
"#,
    )
    .await;
    let home = crate::torture::Home::new();
    let yaml = format!(
        r#"
id: keyed
models:
  m: {{ api: openai-chat, base-url: "{base}/v1", model: x, api-key-env: WEFT_TEST_MODEL_KEY }}
steps:
  - {{ id: ask, model: m, input: '{{prompt: "hi"}}' }}
"#
    );
    let file = home.file("keyed.yaml", &yaml);
    let mut cmd = crate::torture::weft(
        &home.home(),
        &[
            "run",
            file.to_str().expect("UTF-8"),
            "--json",
            "--run-id",
            "k1",
        ],
    );
    cmd.env("WEFT_TEST_MODEL_KEY", "sk-very-secret-0123");
    let out = crate::torture::Proc::start(cmd).finish();
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("Hello."), "{out:?}");
    let shown = crate::torture::run_weft(&home.home(), &["show", "k1", "--json"]);
    let watched = crate::torture::run_weft(&home.home(), &["watch", "k1"]);
    for text in [&out.stdout, &out.stderr, &shown.stdout, &watched.stdout] {
        assert!(!text.contains("sk-very-secret"), "the key leaked: {text}");
    }
    assert!(shown.stdout.contains("\"Hello.\""), "{shown:?}");
}
