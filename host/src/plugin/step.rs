//! A plugin behind the executor seam: [`PluginStep`] runs a component's steps and tools as any
//! [`StepExecutor`] runs a step, in the sandbox a workflow gives the plugin.

use std::sync::Arc;

use futures::future::BoxFuture;

use super::{Plugin, Sandbox, ToolCall};
use crate::engine::invocation::{InvocationResult, StepCall, StepOutcome};
use crate::engine::model::StepKind;
use crate::executor::{StepExecutor, StepRequest};

/// A plugin's steps, run in the sandbox a workflow gives the plugin.
pub(crate) struct PluginStep {
    plugin: Arc<Plugin>,
    sandbox: Arc<Sandbox>,
}

impl PluginStep {
    /// The steps of `plugin` under `sandbox`.
    pub(crate) fn new(plugin: Arc<Plugin>, sandbox: Arc<Sandbox>) -> Self {
        PluginStep { plugin, sandbox }
    }
}

impl StepExecutor for PluginStep {
    fn execute(&self, request: StepRequest) -> BoxFuture<'_, InvocationResult> {
        // A deadline of `None` falls back to the sandbox's `limits.timeout-ms` in the plugin.
        Box::pin(async move {
            match request.kind {
                StepKind::Step => {
                    self.plugin
                        .execute(&request.step, &request.call, &self.sandbox, request.io)
                        .await
                }
                StepKind::Tool => {
                    let call = &request.call;
                    let tool_call = ToolCall {
                        run_id: call.run_id.clone(),
                        call_id: call_id(call),
                        args: serde_json::Value::clone(&call.input),
                        config: serde_json::Value::clone(&call.config),
                    };
                    let outcome = self
                        .plugin
                        .call_tool(&request.step, tool_call, &self.sandbox, request.io)
                        .await
                        .map(StepOutcome::Done);
                    InvocationResult {
                        outcome,
                        patches: Vec::new(),
                    }
                }
            }
        })
    }
}

/// The `call-id` a tool entry's invocation gives its tool: the entry's path, with its foreach
/// item and loop iteration, the same for every attempt, so a tool can recognise a retry of a
/// call it has seen (S120).
fn call_id(call: &StepCall) -> String {
    let mut id = call.step_path.clone();
    if let Some(i) = call.foreach_index {
        id.push_str(&format!("#{i}"));
    }
    if let Some(n) = call.iteration {
        id.push_str(&format!("@{n}"));
    }
    id
}
