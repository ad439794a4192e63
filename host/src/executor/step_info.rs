//! What a step declares about itself, whatever runs it: [`StepInfo`] (its name, description and
//! JSON Schemas), as a plugin's `describe` returns it or a native step is built with.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A step as the plugin describes it, schemas parsed; the default declares nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepInfo {
    /// Unique within the plugin.
    pub name: String,
    /// What the step does.
    pub description: String,
    /// JSON Schema of the input.
    pub input_schema: Option<Value>,
    /// JSON Schema of a `done` output.
    pub output_schema: Option<Value>,
    /// JSON Schema of a suspend payload.
    pub suspend_schema: Option<Value>,
    /// JSON Schema of resume data.
    pub resume_schema: Option<Value>,
    /// JSON Schema of the step's `config`.
    pub config_schema: Option<Value>,
}
