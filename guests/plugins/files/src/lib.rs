//! An example filesystem plugin: step `read-dir` reads the regular files of a granted directory.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "step-plugin",
});

use exports::weft::plugin::steps::{Failure, Guest, Outcome, StepContext, StepInfo};
use serde_json::{Value, json};

/// The JSON Schema dialect of every schema here.
const SCHEMA: &str = "https://json-schema.org/draft/2020-12/schema";
/// The default of config.dir.
const DEFAULT_DIR: &str = "/data";

struct Files;

impl Guest for Files {
    fn describe() -> Vec<StepInfo> {
        vec![StepInfo {
            name: "read-dir".to_string(),
            description: "Lists config.dir and reads each regular file in it as UTF-8 (text is \
                          null when a file is not UTF-8); returns {files: [{name, bytes, text}]} \
                          sorted by name."
                .to_string(),
            input_schema: None,
            output_schema: Some(
                json!({
                    "$schema": SCHEMA,
                    "type": "object",
                    "required": ["files"],
                    "properties": {
                        "files": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["name", "bytes", "text"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "bytes": {"type": "integer", "minimum": 0},
                                    "text": {"type": ["string", "null"]}
                                }
                            }
                        }
                    }
                })
                .to_string(),
            ),
            suspend_schema: None,
            resume_schema: None,
            config_schema: Some(
                json!({
                    "$schema": SCHEMA,
                    "type": "object",
                    "properties": {"dir": {"type": "string", "default": DEFAULT_DIR}}
                })
                .to_string(),
            ),
        }]
    }

    fn execute(name: String, ctx: StepContext) -> Result<Outcome, Failure> {
        if name != "read-dir" {
            return Err(failure(
                "unknown-step",
                &format!("no step named {name:?}"),
                false,
            ));
        }
        let config: Value = serde_json::from_str(&ctx.config).map_err(|e| {
            failure(
                "invalid-config",
                &format!("the config is not JSON: {e}"),
                false,
            )
        })?;
        let dir = match config.get("dir") {
            None | Some(Value::Null) => DEFAULT_DIR,
            Some(Value::String(d)) => d.as_str(),
            Some(_) => {
                return Err(failure(
                    "invalid-config",
                    "config.dir must be a string",
                    false,
                ));
            }
        };
        let files = read_dir(dir).map_err(|e| failure("io-error", &e, true))?;
        Ok(Outcome::Done(json!({"files": files}).to_string()))
    }
}

fn read_dir(dir: &str) -> Result<Vec<Value>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot list {dir}: {e}"))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot list {dir}: {e}"))?;
        let path = entry.path();
        let is_file = entry
            .file_type()
            .map_err(|e| format!("cannot stat {}: {e}", path.display()))?
            .is_file();
        if !is_file {
            continue;
        }
        let bytes =
            std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let size = bytes.len();
        let text = String::from_utf8(bytes).ok();
        files.push((entry.file_name().to_string_lossy().into_owned(), size, text));
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files
        .into_iter()
        .map(|(name, bytes, text)| json!({"name": name, "bytes": bytes, "text": text}))
        .collect())
}

fn failure(code: &str, message: &str, retryable: bool) -> Failure {
    Failure {
        message: message.to_string(),
        code: Some(code.to_string()),
        retryable,
        details: None,
        tripwire: None,
    }
}

export!(Files);
