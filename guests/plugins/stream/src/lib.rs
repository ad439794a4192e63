//! An example streaming plugin: step `stream` emits each word of the input as a chunk, with a
//! progress event after each.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "step-plugin",
});

use exports::weft::plugin::steps::{Failure, Guest, Outcome, StepContext, StepInfo};
use serde_json::{Value, json};
use weft::plugin::writer;

/// The JSON Schema dialect of every schema here.
const SCHEMA: &str = "https://json-schema.org/draft/2020-12/schema";

struct Stream;

impl Guest for Stream {
    fn describe() -> Vec<StepInfo> {
        vec![StepInfo {
            name: "stream".to_string(),
            description: "Writes each word of input.text as a JSON string chunk, followed by a \
                          \"progress\" event {done, total}; returns {chunks}."
                .to_string(),
            input_schema: Some(
                json!({
                    "$schema": SCHEMA,
                    "type": "object",
                    "required": ["text"],
                    "properties": {"text": {"type": "string"}}
                })
                .to_string(),
            ),
            output_schema: Some(
                json!({
                    "$schema": SCHEMA,
                    "type": "object",
                    "required": ["chunks"],
                    "properties": {"chunks": {"type": "integer", "minimum": 0}}
                })
                .to_string(),
            ),
            suspend_schema: None,
            resume_schema: None,
            config_schema: None,
        }]
    }

    fn execute(name: String, ctx: StepContext) -> Result<Outcome, Failure> {
        if name != "stream" {
            return Err(failure("unknown-step", &format!("no step named {name:?}")));
        }
        let input: Value = serde_json::from_str(&ctx.input)
            .map_err(|e| failure("invalid-input", &format!("the input is not JSON: {e}")))?;
        let text = input.get("text").and_then(Value::as_str).ok_or_else(|| {
            failure(
                "invalid-input",
                "the input must be an object with a string field \"text\"",
            )
        })?;
        let words: Vec<&str> = text.split_whitespace().collect();
        let total = words.len();
        for (i, word) in words.iter().enumerate() {
            writer::write(&Value::from(*word).to_string());
            writer::custom(
                "progress",
                &json!({"done": i + 1, "total": total}).to_string(),
            );
        }
        Ok(Outcome::Done(json!({"chunks": total}).to_string()))
    }
}

/// A failure that retrying cannot fix.
fn failure(code: &str, message: &str) -> Failure {
    Failure {
        message: message.to_string(),
        code: Some(code.to_string()),
        retryable: false,
        details: None,
        tripwire: None,
    }
}

export!(Stream);
