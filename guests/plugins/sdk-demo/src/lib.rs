//! A plugin written with the Rust SDK (`weft-plugin`, in `sdk/rust`) rather than with
//! wit-bindgen directly: steps `shout`, `ask`, `guard`, `boom`, `ctx` and the tool
//! `count-words`. weft's tests (`tests/integration/guest_sdk.rs`) run each through a workflow.

use serde::{Deserialize, Serialize};
use weft_plugin::json::Value;
use weft_plugin::{Context, Failure, Level, Outcome, ToolContext, export_plugin, json, step, tool};

/// The JSON Schema dialect of every schema here.
const SCHEMA: &str = "https://json-schema.org/draft/2020-12/schema";

/// The word `guard` refuses.
const FORBIDDEN: &str = "forbidden";

/// The input of `shout` and `guard`, and the arguments of `count-words`.
#[derive(Debug, Deserialize)]
struct Text {
    text: String,
}

/// The output of `shout`.
#[derive(Debug, Serialize)]
struct Shouted {
    text: String,
}

/// The config of `ask`.
#[derive(Debug, Deserialize)]
struct AskConfig {
    /// The labels the suspension can be resumed by.
    #[serde(default = "default_labels")]
    labels: Vec<String>,
}

fn default_labels() -> Vec<String> {
    vec!["answer".to_string()]
}

/// The result of `count-words`.
#[derive(Debug, Serialize)]
struct WordCount {
    words: usize,
}

/// `{text}` -> `{text}` upper-cased.
fn shout(input: Text, _ctx: &Context) -> Result<Shouted, Failure> {
    Ok(Shouted {
        text: input.text.to_uppercase(),
    })
}

/// Suspends with `{question: <input>}` and the labels of config.labels (default `answer`);
/// resumed, returns the resume data.
fn ask(input: Value, ctx: &Context) -> Result<Outcome, Failure> {
    match ctx.resume() {
        None => {
            let config: AskConfig = ctx.config_as()?;
            Ok(Outcome::suspend(json!({"question": input})).labels(config.labels))
        }
        Some(resume) => Ok(Outcome::Done(resume.data().clone())),
    }
}

/// A guardrail: a tripwire when `text` contains "forbidden" (any case), else the input.
fn guard(input: Text, _ctx: &Context) -> Result<Value, Failure> {
    if input.text.to_lowercase().contains(FORBIDDEN) {
        return Err(
            Failure::tripwire(format!("the text contains {FORBIDDEN:?}"))
                .metadata(json!({"word": FORBIDDEN}))
                .processor("guard"),
        );
    }
    Ok(json!({"text": input.text}))
}

/// Panics, to show what a panic becomes.
fn boom(_input: Value, _ctx: &Context) -> Result<Value, Failure> {
    panic!("boom: sdk-demo panicked on purpose")
}

/// Uses every helper (a chunk, a progress event, a log line, a state patch) and returns the
/// context: its fields, the workflow's input, `aborted`, and the result of the step named by
/// config.step.
fn context(input: Value, ctx: &Context) -> Result<Value, Failure> {
    ctx.write(json!({"chunk": ctx.step_path()}));
    ctx.custom("progress", json!({"done": 1, "total": 1}));
    ctx.log(Level::Info, format!("ctx ran as {}", ctx.step_path()));
    ctx.set_state(json!({"ctx-attempt": ctx.attempt()}));
    let previous = ctx
        .config()
        .get("step")
        .and_then(Value::as_str)
        .and_then(|step| ctx.step_result(step));
    let resume = ctx
        .resume()
        .map(|r| json!({"data": r.data(), "suspend_payload": r.suspend_payload()}));
    Ok(json!({
        "step": ctx.step(),
        "run_id": ctx.run_id(),
        "workflow_id": ctx.workflow_id(),
        "step_path": ctx.step_path(),
        "attempt": ctx.attempt(),
        "input": input,
        "config": ctx.config(),
        "state": ctx.state(),
        "resume": resume,
        "foreach_index": ctx.foreach_index(),
        "iteration": ctx.iteration(),
        "init": ctx.init_data(),
        "aborted": ctx.aborted(),
        "previous": previous,
    }))
}

/// Counts the whitespace-separated words of `text`.
fn count_words(args: Text, ctx: &ToolContext) -> Result<WordCount, Failure> {
    ctx.log(Level::Debug, format!("counting for call {}", ctx.call_id()));
    Ok(WordCount {
        words: args.text.split_whitespace().count(),
    })
}

/// The schema of `{text: string}`.
fn text_schema() -> Value {
    json!({
        "$schema": SCHEMA,
        "type": "object",
        "required": ["text"],
        "properties": {"text": {"type": "string"}}
    })
}

export_plugin! {
    steps: [
        step("shout", shout)
            .describe("Upper-cases {text}.")
            .input_schema(text_schema())
            .output_schema(text_schema()),
        step("ask", ask)
            .describe(
                "Suspends with {question: <input>} and the labels of config.labels (default \
                 [\"answer\"]); resumed, returns the resume data.",
            )
            .config_schema(json!({
                "$schema": SCHEMA,
                "type": "object",
                "properties": {"labels": {"type": "array", "items": {"type": "string"}}}
            }))
            .suspend_schema(json!({
                "$schema": SCHEMA,
                "type": "object",
                "required": ["question"]
            })),
        step("guard", guard)
            .describe("A tripwire when {text} contains \"forbidden\"; else {text}.")
            .input_schema(text_schema()),
        step("boom", boom).describe("Panics."),
        step("ctx", context).describe(
            "Writes a chunk, a progress event, a log line and the state key ctx-attempt; \
             returns the context's fields, init, aborted and previous (the result of the step \
             config.step).",
        ),
    ],
    tools: [
        tool("count-words", count_words)
            .describe("Counts the words of {text}.")
            .input_schema(text_schema())
            .output_schema(json!({
                "$schema": SCHEMA,
                "type": "object",
                "required": ["words"],
                "properties": {"words": {"type": "integer"}}
            })),
    ],
}
