//! What a plugin describes of itself (`describe` of `steps` and `tools`), checked and with its
//! JSON Schemas parsed.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::bindings::weft::plugin::types;
use super::error::PluginError;
use crate::executor::{EventSink, GuestEvent, StepInfo};

/// A tool as the plugin describes it, schemas parsed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInfo {
    /// Unique within the plugin; `[a-zA-Z0-9_-]`, at most 64 characters.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments.
    pub input_schema: Value,
    /// JSON Schema of the result.
    pub output_schema: Option<Value>,
    /// A person must approve each call.
    pub needs_approval: bool,
}

/// One call of a tool (`tool-call` in the WIT contract, JSON parsed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The run the call belongs to.
    pub run_id: String,
    /// Unique per call within the run.
    pub call_id: String,
    /// The arguments the model gave.
    pub args: Value,
    /// The tool's static configuration.
    pub config: Value,
}

/// Which of the plugin interfaces a component exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginExports {
    /// `weft:plugin/steps`.
    pub steps: bool,
    /// `weft:plugin/tools`.
    pub tools: bool,
}

/// Checks what `describe` returned (unique, well-formed names; schemas that are JSON) and parses
/// the schemas.
pub(crate) fn parse_description(
    origin: &str,
    raw_steps: Option<Vec<types::StepInfo>>,
    raw_tools: Option<Vec<types::ToolInfo>>,
) -> Result<(Vec<StepInfo>, Vec<ToolInfo>), PluginError> {
    let invalid = |message: String| PluginError::InvalidDescription {
        origin: origin.to_string(),
        message,
    };
    let mut steps = Vec::new();
    let mut seen = HashSet::new();
    for s in raw_steps.unwrap_or_default() {
        if !seen.insert(s.name.clone()) {
            return Err(invalid(format!("two steps are named `{}`", s.name)));
        }
        if s.name.is_empty() {
            return Err(invalid("a step has an empty name".into()));
        }
        let schema = |field: &str, text: Option<String>| -> Result<Option<Value>, PluginError> {
            text.map(|t| {
                serde_json::from_str(&t).map_err(|e| {
                    invalid(format!("step `{}`: {field} is not valid JSON: {e}", s.name))
                })
            })
            .transpose()
        };
        steps.push(StepInfo {
            input_schema: schema("input-schema", s.input_schema.clone())?,
            output_schema: schema("output-schema", s.output_schema.clone())?,
            suspend_schema: schema("suspend-schema", s.suspend_schema.clone())?,
            resume_schema: schema("resume-schema", s.resume_schema.clone())?,
            config_schema: schema("config-schema", s.config_schema.clone())?,
            name: s.name,
            description: s.description,
        });
    }
    let mut tools = Vec::new();
    let mut seen = HashSet::new();
    for t in raw_tools.unwrap_or_default() {
        if !seen.insert(t.name.clone()) {
            return Err(invalid(format!("two tools are named `{}`", t.name)));
        }
        let valid_name = !t.name.is_empty()
            && t.name.len() <= 64
            && t.name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid_name {
            return Err(invalid(format!(
                "tool name `{}` must be 1 to 64 characters of [a-zA-Z0-9_-]",
                t.name
            )));
        }
        let input_schema = serde_json::from_str(&t.input_schema).map_err(|e| {
            invalid(format!(
                "tool `{}`: input-schema is not valid JSON: {e}",
                t.name
            ))
        })?;
        let output_schema = t
            .output_schema
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| {
                invalid(format!(
                    "tool `{}`: output-schema is not valid JSON: {e}",
                    t.name
                ))
            })?;
        tools.push(ToolInfo {
            name: t.name,
            description: t.description,
            input_schema,
            output_schema,
            needs_approval: t.needs_approval,
        });
    }
    Ok((steps, tools))
}

/// Sends the events of `describe` to the host's diagnostic log.
pub(crate) struct TraceEvents {
    pub(crate) origin: String,
}

impl EventSink for TraceEvents {
    fn emit(&self, event: GuestEvent) {
        tracing::debug!(plugin = %self.origin, ?event, "event during describe");
    }
}
