//! An example "text toolkit" plugin: small steps that transform text.
//!
//! Steps: `upper`, `words`, `reverse`, `template`, `stats`.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "step-plugin",
});

use exports::weft::plugin::steps::{Failure, Guest, Outcome, StepContext, StepInfo};
use serde_json::{Map, Value, json};

/// The default template of the `template` step.
const DEFAULT_TEMPLATE: &str = "Hello, {name}!";

struct Text;

impl Guest for Text {
    fn describe() -> Vec<StepInfo> {
        let text_input = json!({
            "$schema": SCHEMA,
            "type": "object",
            "required": ["text"],
            "properties": {"text": {"type": "string"}}
        });
        let text_output = json!({
            "$schema": SCHEMA,
            "type": "object",
            "required": ["text"],
            "properties": {"text": {"type": "string"}}
        });
        vec![
            step(
                "upper",
                "Uppercases the input text.",
                &text_input,
                &text_output,
                None,
            ),
            step(
                "words",
                "Splits the input text into words on whitespace.",
                &text_input,
                &json!({
                    "$schema": SCHEMA,
                    "type": "object",
                    "required": ["text", "words", "count"],
                    "properties": {
                        "text": {"type": "string"},
                        "words": {"type": "array", "items": {"type": "string"}},
                        "count": {"type": "integer", "minimum": 0}
                    }
                }),
                None,
            ),
            step(
                "reverse",
                "Reverses the characters of the input text.",
                &text_input,
                &text_output,
                None,
            ),
            step(
                "template",
                "Fills the configured template: each {key} is replaced by the input's value for key \
                 (strings as they are, other values as JSON). Unknown keys are left as they are.",
                &json!({"$schema": SCHEMA, "type": "object"}),
                &text_output,
                Some(&json!({
                    "$schema": SCHEMA,
                    "type": "object",
                    "properties": {
                        "template": {"type": "string", "default": DEFAULT_TEMPLATE}
                    }
                })),
            ),
            step(
                "stats",
                "Counts the characters, words and lines of the input text.",
                &text_input,
                &json!({
                    "$schema": SCHEMA,
                    "type": "object",
                    "required": ["chars", "words", "lines"],
                    "properties": {
                        "chars": {"type": "integer", "minimum": 0},
                        "words": {"type": "integer", "minimum": 0},
                        "lines": {"type": "integer", "minimum": 0}
                    }
                }),
                None,
            ),
        ]
    }

    fn execute(name: String, ctx: StepContext) -> Result<Outcome, Failure> {
        let input = parse(&ctx.input, "input")?;
        let output = match name.as_str() {
            "upper" => json!({"text": text_of(&input)?.to_uppercase()}),
            "words" => {
                let text = text_of(&input)?;
                let words: Vec<&str> = text.split_whitespace().collect();
                json!({"text": text, "count": words.len(), "words": words})
            }
            "reverse" => json!({"text": text_of(&input)?.chars().rev().collect::<String>()}),
            "template" => {
                let config = parse(&ctx.config, "config")?;
                let template = match config.get("template") {
                    None | Some(Value::Null) => DEFAULT_TEMPLATE,
                    Some(Value::String(t)) => t.as_str(),
                    Some(_) => {
                        return Err(failure(
                            "invalid-config",
                            "config.template must be a string",
                        ));
                    }
                };
                let Value::Object(values) = &input else {
                    return Err(failure("invalid-input", "the input must be a JSON object"));
                };
                json!({"text": fill(template, values)})
            }
            "stats" => {
                let text = text_of(&input)?;
                json!({
                    "chars": text.chars().count(),
                    "words": text.split_whitespace().count(),
                    "lines": text.lines().count()
                })
            }
            other => return Err(failure("unknown-step", &format!("no step named {other:?}"))),
        };
        Ok(Outcome::Done(output.to_string()))
    }
}

/// The JSON Schema dialect of every schema here.
const SCHEMA: &str = "https://json-schema.org/draft/2020-12/schema";

fn step(
    name: &str,
    description: &str,
    input: &Value,
    output: &Value,
    config: Option<&Value>,
) -> StepInfo {
    StepInfo {
        name: name.to_string(),
        description: description.to_string(),
        input_schema: Some(input.to_string()),
        output_schema: Some(output.to_string()),
        suspend_schema: None,
        resume_schema: None,
        config_schema: config.map(Value::to_string),
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

fn parse(text: &str, what: &str) -> Result<Value, Failure> {
    serde_json::from_str(text).map_err(|e| {
        failure(
            &format!("invalid-{what}"),
            &format!("the {what} is not JSON: {e}"),
        )
    })
}

fn text_of(input: &Value) -> Result<&str, Failure> {
    input.get("text").and_then(Value::as_str).ok_or_else(|| {
        failure(
            "invalid-input",
            "the input must be an object with a string field \"text\"",
        )
    })
}

/// Replaces each `{key}` of `template` whose key is in `values`.
fn fill(template: &str, values: &Map<String, Value>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            out.push_str(&rest[open..]);
            return out;
        };
        let key = &after[..close];
        match values.get(key) {
            Some(Value::String(s)) => out.push_str(s),
            Some(other) => out.push_str(&other.to_string()),
            None => {
                // Not a placeholder we know: keep the brace and scan on from the next character,
                // so "{{name}" still fills the inner "{name}".
                out.push('{');
                rest = after;
                continue;
            }
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

export!(Text);
