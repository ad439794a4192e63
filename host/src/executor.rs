//! The seam between the driver and what runs a step: [`StepExecutor`].
//!
//! The core's [`Invoke`](crate::engine::Invoke) command says which step to run and with what;
//! the driver finds the step's executor (a plugin's from the [`PluginHost`](crate::plugin::PluginHost),
//! a native one from the runtime's registry) and hands it a [`StepRequest`]. What comes back is
//! the [`InvocationResult`] the driver feeds to the core as the step's end, whatever ran it.
//!
//! Implementations: [`PluginStep`] (a WebAssembly component's step in its sandbox) and
//! [`NativeStep`](crate::native::NativeStep) (a Rust closure); any other executor registered
//! by name with [`Runtime::register_executor`](crate::driver::Runtime::register_executor) is
//! used like a native step.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::engine::invocation::{InvocationResult, StepCall, StepFailure, StepOutcome};
use crate::engine::model::StepKind;
use crate::plugin::{AbortHandle, Invocation, Plugin, Sandbox, ToolCall};

/// Runs invocations of steps: one attempt per call.
///
/// An executor must end every invocation with a result: every way the step can fail is a
/// [`StepFailure`] in it, with the codes of S14 and S83.
/// It watches `request.io.abort` (a cancel, S77) and stops at `request.io.deadline` when it can
/// (S15). Patches (S16) go in the result, with its outcome.
pub trait StepExecutor: Send + Sync {
    /// Runs one invocation to its end.
    fn execute(&self, request: StepRequest) -> BoxFuture<'_, InvocationResult>;
}

/// One invocation, as the driver hands it to a [`StepExecutor`].
#[derive(Debug)]
pub struct StepRequest {
    /// The step's name within its executor: the plugin's step, or the name a native step is
    /// registered under.
    pub step: String,
    /// Whether `step` names a step or a tool (S120); native steps are always steps.
    pub kind: StepKind,
    /// The call: run, path, attempt, input, config, state and resumption (S12).
    pub call: StepCall,
    /// Where its events go, what it may read of its run (S8), how it is told to stop, and its
    /// deadline: the step's own `timeout-ms` (`None`: the executor's default, S15).
    pub io: Invocation,
}

/// A plugin's steps, run in the sandbox a workflow gives the plugin.
pub struct PluginStep {
    plugin: Arc<Plugin>,
    sandbox: Arc<Sandbox>,
}

impl PluginStep {
    /// The steps of `plugin` under `sandbox`.
    pub fn new(plugin: Arc<Plugin>, sandbox: Arc<Sandbox>) -> Self {
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

/// Runs `work`, an attempt of an executor whose future can simply be dropped, until it ends, its
/// `abort` fires (a `cancelled` failure, `cancelled` the message) or `deadline` passes (S15: the
/// abort gets reason `timeout`, and the attempt fails `timeout` with `late`, then ` N ms`).
pub(crate) async fn until_aborted<T>(
    work: impl Future<Output = Result<T, StepFailure>>,
    abort: &AbortHandle,
    deadline: Option<Duration>,
    cancelled: &str,
    late: &str,
) -> Result<T, StepFailure> {
    let past_deadline = async {
        match deadline {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = work => r,
        () = abort.aborted() => Err(StepFailure::new("cancelled", cancelled).not_retryable()),
        () = past_deadline => {
            abort.abort("timeout");
            let ms = deadline.map(|d| d.as_millis()).unwrap_or_default();
            Err(StepFailure::new("timeout", format!("{late} {ms} ms")))
        }
    }
}
