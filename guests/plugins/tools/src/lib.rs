//! An example tool plugin (world `tool-plugin`): tools `add` and `delete-everything`.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "tool-plugin",
});

use exports::weft::plugin::tools::{Failure, Guest, ToolCall, ToolInfo};
use serde_json::{Value, json};

/// The JSON Schema dialect of every schema here.
const SCHEMA: &str = "https://json-schema.org/draft/2020-12/schema";

struct Tools;

impl Guest for Tools {
    fn describe() -> Vec<ToolInfo> {
        vec![
            ToolInfo {
                name: "add".to_string(),
                description: "Adds two numbers.".to_string(),
                input_schema: json!({
                    "$schema": SCHEMA,
                    "type": "object",
                    "required": ["a", "b"],
                    "properties": {"a": {"type": "number"}, "b": {"type": "number"}}
                })
                .to_string(),
                output_schema: Some(
                    json!({
                        "$schema": SCHEMA,
                        "type": "object",
                        "required": ["sum"],
                        "properties": {"sum": {"type": "number"}}
                    })
                    .to_string(),
                ),
                needs_approval: false,
            },
            ToolInfo {
                name: "delete-everything".to_string(),
                description: "Pretends to delete everything. A person must approve each call."
                    .to_string(),
                input_schema: json!({"$schema": SCHEMA, "type": "object"}).to_string(),
                output_schema: Some(
                    json!({
                        "$schema": SCHEMA,
                        "type": "object",
                        "required": ["deleted"],
                        "properties": {"deleted": {"type": "boolean"}}
                    })
                    .to_string(),
                ),
                needs_approval: true,
            },
        ]
    }

    fn call(name: String, call: ToolCall) -> Result<String, Failure> {
        match name.as_str() {
            "add" => {
                let args: Value = serde_json::from_str(&call.args).map_err(|e| {
                    failure("invalid-input", &format!("the arguments are not JSON: {e}"))
                })?;
                let a = args.get("a").filter(|v| v.is_number());
                let b = args.get("b").filter(|v| v.is_number());
                let (Some(a), Some(b)) = (a, b) else {
                    return Err(failure("invalid-input", "a and b must be numbers"));
                };
                Ok(json!({"sum": add(a, b)}).to_string())
            }
            "delete-everything" => Ok(json!({"deleted": true}).to_string()),
            other => Err(failure("unknown-tool", &format!("no tool named {other:?}"))),
        }
    }
}

/// Adds exactly when both are integers that fit, else as floats.
fn add(a: &Value, b: &Value) -> Value {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64())
        && let Some(sum) = x.checked_add(y)
    {
        return json!(sum);
    }
    json!(a.as_f64().unwrap_or(0.0) + b.as_f64().unwrap_or(0.0))
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

export!(Tools);
