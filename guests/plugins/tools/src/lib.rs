//! An example tool plugin (world `tool-plugin`): tools `add`, `delete-everything`, `read-file`
//! (reads a UTF-8 file under the granted directory `/data`) and `check-text` (a guardrail: a
//! tripwire when the text holds a forbidden word).

wit_bindgen::generate!({
    path: "../../../wit",
    world: "tool-plugin",
});

use std::path::{Component, Path, PathBuf};

use exports::weft::plugin::tools::{Failure, Guest, ToolCall, ToolInfo};
use serde_json::{Value, json};
use weft::plugin::types::Tripwire;

/// The JSON Schema dialect of every schema here.
const SCHEMA: &str = "https://json-schema.org/draft/2020-12/schema";
/// The guest directory `read-file` reads under; the workflow grants it (read-only will do).
const DATA_DIR: &str = "/data";
/// The largest file `read-file` hands back, in bytes: its text goes to a model.
const MAX_FILE_BYTES: u64 = 1 << 20;
/// The words `check-text` refuses when neither its config nor its arguments name any.
const DEFAULT_FORBIDDEN: &[&str] = &["forbidden"];

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
            ToolInfo {
                name: "read-file".to_string(),
                description: "Reads a UTF-8 text file under /data (an absolute path under /data, \
                              or a path relative to it) and returns its text."
                    .to_string(),
                input_schema: json!({
                    "$schema": SCHEMA,
                    "type": "object",
                    "required": ["path"],
                    "properties": {"path": {"type": "string", "minLength": 1}}
                })
                .to_string(),
                output_schema: Some(
                    json!({
                        "$schema": SCHEMA,
                        "type": "object",
                        "required": ["text"],
                        "properties": {"text": {"type": "string"}}
                    })
                    .to_string(),
                ),
                needs_approval: false,
            },
            ToolInfo {
                name: "check-text".to_string(),
                description: "Checks a text before it is used: returns {ok: true}, or stops the \
                              run (a tripwire) when the text contains a forbidden word (config \
                              or argument `words`, default [\"forbidden\"])."
                    .to_string(),
                input_schema: json!({
                    "$schema": SCHEMA,
                    "type": "object",
                    "required": ["text"],
                    "properties": {
                        "text": {"type": "string"},
                        "words": {"type": "array", "items": {"type": "string"}}
                    }
                })
                .to_string(),
                output_schema: Some(
                    json!({
                        "$schema": SCHEMA,
                        "type": "object",
                        "required": ["ok"],
                        "properties": {"ok": {"const": true}}
                    })
                    .to_string(),
                ),
                needs_approval: false,
            },
        ]
    }

    fn call(name: String, call: ToolCall) -> Result<String, Failure> {
        match name.as_str() {
            "add" => {
                let args = arguments(&call)?;
                let a = args.get("a").filter(|v| v.is_number());
                let b = args.get("b").filter(|v| v.is_number());
                let (Some(a), Some(b)) = (a, b) else {
                    return Err(failure("invalid-input", "a and b must be numbers"));
                };
                Ok(json!({"sum": add(a, b)}).to_string())
            }
            "delete-everything" => Ok(json!({"deleted": true}).to_string()),
            "read-file" => {
                let args = arguments(&call)?;
                let Some(path) = args.get("path").and_then(Value::as_str) else {
                    return Err(failure("invalid-input", "path must be a string"));
                };
                Ok(json!({"text": read_file(path)?}).to_string())
            }
            "check-text" => {
                let args = arguments(&call)?;
                let config: Value = serde_json::from_str(&call.config).unwrap_or(Value::Null);
                check_text(&args, &config)?;
                Ok(json!({"ok": true}).to_string())
            }
            other => Err(failure("unknown-tool", &format!("no tool named {other:?}"))),
        }
    }
}

/// The call's arguments, parsed.
fn arguments(call: &ToolCall) -> Result<Value, Failure> {
    serde_json::from_str(&call.args)
        .map_err(|e| failure("invalid-input", &format!("the arguments are not JSON: {e}")))
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

/// The text of the file at `path` under [`DATA_DIR`]: `denied` for a path outside it or with
/// `..`, `not-found` for a missing file, `not-text` for one that is not UTF-8.
fn read_file(path: &str) -> Result<String, Failure> {
    let full = data_path(path).ok_or_else(|| {
        failure(
            "denied",
            &format!("{path:?} is not a path under {DATA_DIR} (without `..`)"),
        )
    })?;
    let shown = full.display();
    let io = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::NotFound => failure("not-found", &format!("no file {shown}")),
        _ => failure("io-error", &format!("cannot read {shown}: {e}")),
    };
    let meta = std::fs::metadata(&full).map_err(io)?;
    if !meta.is_file() {
        return Err(failure("not-found", &format!("{shown} is not a file")));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(failure(
            "too-large",
            &format!(
                "{shown} has {} bytes; at most {MAX_FILE_BYTES} are read",
                meta.len()
            ),
        ));
    }
    let bytes = std::fs::read(&full).map_err(io)?;
    String::from_utf8(bytes).map_err(|_| failure("not-text", &format!("{shown} is not UTF-8")))
}

/// `path` as an absolute path under [`DATA_DIR`] (a relative path is taken from it); none
/// when it has a `..` or lies elsewhere.
fn data_path(path: &str) -> Option<PathBuf> {
    let given = Path::new(path);
    if given
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)))
    {
        return None;
    }
    let full = if given.is_absolute() {
        given.to_path_buf()
    } else {
        Path::new(DATA_DIR).join(given)
    };
    full.starts_with(DATA_DIR).then_some(full)
}

/// Trips when `args.text` holds, as a whole word and ignoring case, one of the forbidden
/// words: those of `config.words` and `args.words`, else [`DEFAULT_FORBIDDEN`].
fn check_text(args: &Value, config: &Value) -> Result<(), Failure> {
    let Some(text) = args.get("text").and_then(Value::as_str) else {
        return Err(failure("invalid-input", "text must be a string"));
    };
    let mut words: Vec<String> = [config, args]
        .iter()
        .filter_map(|v| v.get("words").and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_lowercase)
        .collect();
    if words.is_empty() {
        words = DEFAULT_FORBIDDEN.iter().map(|w| w.to_string()).collect();
    }
    let found = text
        .split(|c: char| !c.is_alphanumeric() && c != '-' && c != '_')
        .map(str::to_lowercase)
        .find(|w| words.contains(w));
    let Some(word) = found else {
        return Ok(());
    };
    Err(Failure {
        message: format!("the text contains the forbidden word {word:?}"),
        code: Some("tripwire".to_string()),
        retryable: false,
        details: None,
        tripwire: Some(Tripwire {
            reason: format!("forbidden word {word:?}"),
            retry: true,
            metadata: Some(json!({"word": word}).to_string()),
            processor_id: Some("check-text".to_string()),
        }),
    })
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
