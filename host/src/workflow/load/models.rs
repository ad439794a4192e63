//! Models (S122): the models a file declares under `models:`, checked and added to the graph
//! the first time an entry names one, and what a call of a model takes (its input and config
//! schemas).

use serde_json::json;
use serde_saphyr::Spanned;

use super::retry::check_retry;
use super::{Builder, FileCx, line, quoted};
use crate::engine::model::{ModelApi, ModelDef};
use crate::executor::StepInfo;
use crate::workflow::WorkflowError;

impl Builder<'_> {
    /// The graph's key of the model `name` of this file, its declaration checked and the model
    /// added to the graph the first time (S122).
    pub(super) fn model_key(
        &mut self,
        name: &Spanned<String>,
        fcx: &FileCx,
    ) -> Result<String, WorkflowError> {
        let Some(declared) = fcx.parsed.raw.models.get(&name.value) else {
            let names: Vec<&str> = fcx.parsed.raw.models.keys().map(String::as_str).collect();
            return Err(WorkflowError::at(
                fcx.path,
                line(&name.referenced),
                format!(
                    "model `{}` is not declared (declared: {})",
                    name.value,
                    if names.is_empty() {
                        "none".into()
                    } else {
                        quoted(&names)
                    }
                ),
                "declare it under `models:` (WORKFLOW-FORMAT.md §1)",
            ));
        };
        let key = format!("{}/{}", fcx.file, name.value);
        if self.graph.models.contains_key(&key) {
            return Ok(key);
        }
        let raw = &declared.value;
        let at = |s: &Spanned<String>| line(&s.referenced);
        let api = match raw.api.value.as_str() {
            "openai-chat" => ModelApi::OpenaiChat,
            "anthropic-messages" => ModelApi::AnthropicMessages,
            other => {
                return Err(WorkflowError::at(
                    fcx.path,
                    at(&raw.api),
                    format!(
                        "model `{}`: api `{other}` is not one weft speaks",
                        name.value
                    ),
                    "use `openai-chat` (OpenAI and compatible servers) or `anthropic-messages`",
                ));
            }
        };
        let base = raw.base_url.value.trim();
        if !(base.starts_with("http://") || base.starts_with("https://")) || base.len() < 10 {
            return Err(WorkflowError::at(
                fcx.path,
                at(&raw.base_url),
                format!(
                    "model `{}`: base-url `{base}` is not an http(s) URL",
                    name.value
                ),
                "give the API's base, e.g. `https://api.openai.com/v1`",
            ));
        }
        if let Some(var) = &raw.api_key_env
            && (var.is_empty() || var.contains(['=', '\0']))
        {
            return Err(WorkflowError::at(
                fcx.path,
                line(&declared.referenced),
                format!(
                    "model `{}`: api-key-env `{var}` is no variable name",
                    name.value
                ),
                "name the environment variable that holds the key, e.g. OPENAI_API_KEY",
            ));
        }
        if let Some(r) = &raw.retry {
            check_retry(fcx.path, r)?;
        }
        self.graph.models.insert(
            key.clone(),
            ModelDef {
                api,
                base_url: base.to_owned(),
                model: raw.model.clone(),
                api_key_env: raw.api_key_env.clone(),
                headers: raw
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            },
        );
        Ok(key)
    }
}

/// What a model step declares: its input (`{prompt}` or `{messages}`, with `system` and
/// `tools`) and its config (`max-tokens`, `temperature`).
pub(super) fn model_info(key: &str) -> StepInfo {
    let message = json!({
        "type": "object",
        "required": ["role"],
        "properties": {
            "role": { "enum": ["system", "user", "assistant", "tool"] },
            "content": { "type": ["string", "null"] },
            "tool_calls": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["id", "name", "arguments"],
                    "properties": { "id": { "type": "string" }, "name": { "type": "string" } }
                }
            },
            "tool_call_id": { "type": "string" }
        },
        "additionalProperties": false
    });
    StepInfo {
        name: key.to_owned(),
        description: "a call of a model".into(),
        input_schema: Some(json!({
            "type": "object",
            "properties": {
                "prompt": { "type": "string" },
                "messages": { "type": "array", "minItems": 1, "items": message },
                "system": { "type": "string" },
                "tools": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "input_schema"],
                        "properties": {
                            "name": { "type": "string" },
                            "description": { "type": "string" },
                            "input_schema": { "type": "object" }
                        },
                        "additionalProperties": false
                    }
                }
            },
            "oneOf": [
                { "required": ["prompt"], "not": { "required": ["messages"] } },
                { "required": ["messages"], "not": { "required": ["prompt"] } }
            ],
            "additionalProperties": false
        })),
        output_schema: None,
        suspend_schema: None,
        resume_schema: None,
        config_schema: Some(json!({
            "type": "object",
            "properties": {
                "max-tokens": { "type": "integer", "minimum": 1 },
                "temperature": { "type": "number", "minimum": 0 }
            },
            "additionalProperties": false
        })),
    }
}
