//! A loaded plugin: its description, its pre-instantiated component per engine, and its
//! invocations (each in a fresh store and instance, see [`invoke`]).

mod invoke;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::OnceCell;

use super::abort::AbortCause;
use super::bindings::weft::plugin::types;
use super::describe::{PluginExports, ToolCall, ToolInfo, TraceEvents, parse_description};
use super::engine::EngineKind;
use super::error::{PluginError, one_line};
use super::events::PanicReport;
use super::outcome::{Ended, Observed, Subject, bad_patch_failure, guest_failure};
use super::sandbox::Sandbox;
use super::shared::HostShared;
use super::variant::Variant;
use crate::engine::invocation::{InvocationResult, StepCall, StepFailure};
use crate::executor::{Invocation, NoRun, StepInfo};
use invoke::{Call, Ret, step_context, was_stopped};

/// A loaded plugin. Cheap to share (`Arc`); every method takes `&self` and may run concurrently.
pub struct Plugin {
    shared: Arc<HostShared>,
    digest: String,
    origin: String,
    wasm: Arc<[u8]>,
    main: Arc<Variant>,
    on_demand: OnceCell<Arc<Variant>>,
    fuel: OnceCell<Arc<Variant>>,
    steps: Vec<StepInfo>,
    tools: Vec<ToolInfo>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("digest", &self.digest)
            .field("origin", &self.origin)
            .field(
                "steps",
                &self.steps.iter().map(|s| &s.name).collect::<Vec<_>>(),
            )
            .field(
                "tools",
                &self.tools.iter().map(|t| &t.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Plugin {
    /// Compiles (or loads from the cache), links and describes a plugin.
    pub(crate) async fn load(
        shared: Arc<HostShared>,
        digest: String,
        wasm: Arc<[u8]>,
        origin: String,
    ) -> Result<Arc<Self>, PluginError> {
        let main = {
            let shared = shared.clone();
            let digest = digest.clone();
            let wasm = wasm.clone();
            let origin = origin.clone();
            tokio::task::spawn_blocking(move || {
                let rt = &shared.engines.main;
                let component = shared.component_blocking(rt, &digest, &wasm, &origin)?;
                Variant::new(rt, &component, &origin)
            })
            .await
            .map_err(|e| PluginError::Internal {
                message: format!("the compile task failed: {e}"),
            })??
        };
        let mut plugin = Self {
            shared,
            digest,
            origin,
            wasm,
            main: Arc::new(main),
            on_demand: OnceCell::new(),
            fuel: OnceCell::new(),
            steps: Vec::new(),
            tools: Vec::new(),
        };
        let (steps, tools) = plugin.describe().await?;
        plugin.steps = steps;
        plugin.tools = tools;
        Ok(Arc::new(plugin))
    }

    /// The sha256 of the component, in hex.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The steps the plugin describes (empty when it exports no steps).
    pub fn steps(&self) -> &[StepInfo] {
        &self.steps
    }

    /// The tools the plugin describes (empty when it exports no tools).
    pub fn tools(&self) -> &[ToolInfo] {
        &self.tools
    }

    /// A step by name.
    pub fn step(&self, name: &str) -> Option<&StepInfo> {
        self.steps.iter().find(|s| s.name == name)
    }

    /// A tool by name.
    pub fn tool(&self, name: &str) -> Option<&ToolInfo> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// Which interfaces the plugin exports.
    pub fn exports(&self) -> PluginExports {
        PluginExports {
            steps: self.main.steps.is_some(),
            tools: self.main.tools.is_some(),
        }
    }

    /// Makes sure the engine `sandbox` needs has this plugin compiled (the fuel-metering engine
    /// or the on-demand one for memory above the pool's slot size), so the first invocation
    /// does not wait for it. Optional: invocations do it on first use.
    pub async fn prepare(&self, sandbox: &Sandbox) -> Result<(), PluginError> {
        self.variant(self.kind_for(sandbox)).await.map(|_| ())
    }

    /// Runs step `step` once (S12): a fresh instance in a fresh store with WASI from `sandbox`.
    ///
    /// Never panics and never returns an error: every way the guest can fail becomes a
    /// [`StepFailure`] in the result (S14, S83). Patches are returned only with an outcome.
    pub async fn execute(
        &self,
        step: &str,
        call: &StepCall,
        sandbox: &Sandbox,
        io: Invocation,
    ) -> InvocationResult {
        let what = format!("step `{step}`");
        if self.main.steps.is_none() || self.step(step).is_none() {
            return InvocationResult {
                outcome: Err(self.unknown("step", step)),
                patches: Vec::new(),
            };
        }
        let ctx = step_context(call);
        let call = Call::Execute {
            name: step.to_string(),
            ctx,
        };
        let subject = self.subject(&what, sandbox, io.deadline);
        let observed = self.invoke(sandbox, io, call).await;
        let Observed {
            ret,
            abort,
            memory_denied,
            output_limit,
            panic,
            bad_patch,
            patches,
        } = observed;
        let stopped = was_stopped(&ret);
        let outcome = if let Some(cause) = abort {
            Err(subject.aborted(cause, stopped))
        } else {
            match ret {
                Ok(Ret::Execute(Ok(outcome))) => match bad_patch {
                    Some(why) => Err(bad_patch_failure(&what, &why)),
                    None => subject.outcome(outcome),
                },
                Ok(Ret::Execute(Err(failure))) => Err(guest_failure(failure)),
                Ok(_) => Err(StepFailure::new(
                    "trap",
                    "internal error: wrong call result",
                )),
                Err(Ended::Setup(failure)) => Err(*failure),
                Err(Ended::Stopped) => Err(subject.aborted(AbortCause::Timeout, true)),
                Err(Ended::Error(err)) => Err(self.guest_error(
                    &subject,
                    &err,
                    output_limit.as_deref(),
                    memory_denied,
                    panic.as_ref(),
                )),
            }
        };
        let patches = if outcome.is_ok() { patches } else { Vec::new() };
        InvocationResult { outcome, patches }
    }

    /// Calls tool `tool` once, in a fresh instance; its result JSON, or why it failed.
    pub async fn call_tool(
        &self,
        tool: &str,
        call: ToolCall,
        sandbox: &Sandbox,
        io: Invocation,
    ) -> Result<Value, StepFailure> {
        let what = format!("tool `{tool}`");
        if self.main.tools.is_none() || self.tool(tool).is_none() {
            return Err(self.unknown("tool", tool));
        }
        let call = Call::Tool {
            name: tool.to_string(),
            call: types::ToolCall {
                run_id: call.run_id,
                call_id: call.call_id,
                args: call.args.to_string(),
                config: call.config.to_string(),
            },
        };
        let subject = self.subject(&what, sandbox, io.deadline);
        let observed = self.invoke(sandbox, io, call).await;
        let stopped = was_stopped(&observed.ret);
        if let Some(cause) = observed.abort {
            return Err(subject.aborted(cause, stopped));
        }
        match observed.ret {
            Ok(Ret::Tool(Ok(text))) => subject.json("result", &text),
            Ok(Ret::Tool(Err(failure))) => Err(guest_failure(failure)),
            Ok(_) => Err(StepFailure::new(
                "trap",
                "internal error: wrong call result",
            )),
            Err(Ended::Setup(failure)) => Err(*failure),
            Err(Ended::Stopped) => Err(subject.aborted(AbortCause::Timeout, true)),
            Err(Ended::Error(err)) => Err(self.guest_error(
                &subject,
                &err,
                observed.output_limit.as_deref(),
                observed.memory_denied,
                observed.panic.as_ref(),
            )),
        }
    }

    fn unknown(&self, kind: &str, name: &str) -> StepFailure {
        let known: Vec<&str> = if kind == "step" {
            self.steps.iter().map(|s| s.name.as_str()).collect()
        } else {
            self.tools.iter().map(|t| t.name.as_str()).collect()
        };
        let known = if known.is_empty() {
            format!("it exports no {kind}s")
        } else {
            format!("it has: {}", known.join(", "))
        };
        StepFailure::new(
            format!("unknown-{kind}"),
            format!("{} has no {kind} `{name}`; {known}", self.origin),
        )
        .not_retryable()
    }

    fn subject<'a>(
        &self,
        what: &'a str,
        sandbox: &Sandbox,
        deadline: Option<Duration>,
    ) -> Subject<'a> {
        Subject {
            what,
            memory_mib: sandbox.limits.memory_mib(),
            max_output_bytes: sandbox.limits.max_output_bytes(),
            max_output_mib: sandbox.limits.max_output_mib(),
            fuel: sandbox.limits.fuel,
            deadline: deadline.or_else(|| sandbox.limits.timeout_ms.map(Duration::from_millis)),
            grace: self.shared.config.abort_grace,
            timeout_hint: if what == "describe" {
                ""
            } else {
                "; raise timeout-ms (or limits.timeout-ms) in the workflow file"
            },
        }
    }

    /// The failure of an error out of wasmtime. Records and events get its one-line reason
    /// (S84); the panic's location, the trap and the whole error chain with the guest's
    /// backtrace go to the host's log only.
    fn guest_error(
        &self,
        subject: &Subject<'_>,
        err: &wasmtime::Error,
        output_limit: Option<&str>,
        memory_denied: bool,
        panic: Option<&PanicReport>,
    ) -> StepFailure {
        if let Some(report) = panic {
            tracing::warn!(
                plugin = %self.origin,
                call = subject.what,
                location = report.location.as_deref().unwrap_or("unknown"),
                trap = %one_line(err),
                "guest panicked: {}",
                report.message.as_deref().unwrap_or("")
            );
        }
        tracing::debug!(plugin = %self.origin, call = subject.what, "guest error: {err:?}");
        subject.error(err, output_limit, memory_denied, panic)
    }

    /// Calls `describe` of each exported interface in one fresh instance, nothing granted; its
    /// memory comes from the host's guest memory budget like any invocation's.
    async fn describe(&self) -> Result<(Vec<StepInfo>, Vec<ToolInfo>), PluginError> {
        let sink = Arc::new(TraceEvents {
            origin: self.origin.clone(),
        });
        let io = Invocation::new(sink, Arc::new(NoRun))
            .with_deadline(Some(self.shared.config.describe_timeout));
        let mut sandbox = Sandbox::default();
        // The default memory, or the whole guest memory budget when that is smaller, so a
        // plugin loads under any budget (its invocations ask for their own `memory-mib`).
        sandbox.limits.memory_mib = Some(
            sandbox
                .limits
                .memory_mib()
                .min(self.shared.budget.total_mib()),
        );
        let subject = self.subject("describe", &sandbox, io.deadline);
        let observed = self.invoke(&sandbox, io, Call::Describe).await;
        let failed = |message: String| PluginError::Describe {
            origin: self.origin.clone(),
            message,
        };
        let stopped = was_stopped(&observed.ret);
        if let Some(cause) = observed.abort {
            return Err(failed(subject.aborted(cause, stopped).message));
        }
        let (raw_steps, raw_tools) = match observed.ret {
            Ok(Ret::Describe { steps, tools }) => (steps, tools),
            Ok(_) => return Err(failed("internal error: wrong call result".into())),
            Err(Ended::Setup(f)) => return Err(failed(f.message.clone())),
            Err(Ended::Stopped) => return Err(failed("stopped".into())),
            Err(Ended::Error(err)) => {
                let f = self.guest_error(
                    &subject,
                    &err,
                    observed.output_limit.as_deref(),
                    observed.memory_denied,
                    observed.panic.as_ref(),
                );
                return Err(failed(format!("{} ({})", f.message, f.code)));
            }
        };
        parse_description(&self.origin, raw_steps, raw_tools)
    }

    /// The pre-instantiated component for `kind`, made on first use.
    async fn variant(&self, kind: EngineKind) -> Result<Arc<Variant>, PluginError> {
        let cell = match kind {
            EngineKind::Pooled => return Ok(self.main.clone()),
            _ if kind == self.main.kind => return Ok(self.main.clone()),
            EngineKind::OnDemand => &self.on_demand,
            EngineKind::Fuel => &self.fuel,
        };
        let variant = cell
            .get_or_try_init(|| async {
                let shared = self.shared.clone();
                let digest = self.digest.clone();
                let wasm = self.wasm.clone();
                let origin = self.origin.clone();
                let main = self.main.pre.component().clone();
                tokio::task::spawn_blocking(move || {
                    let rt = shared.engines.get(kind, &shared.config)?;
                    // Same fingerprint as the main engine: the compiled code moves over as is.
                    let reused = (rt.fingerprint == shared.engines.main.fingerprint)
                        .then(|| main.serialize())
                        .and_then(Result::ok)
                        .and_then(|bytes| super::cache::deserialize_own(&rt.engine, &bytes).ok());
                    let component = match reused {
                        Some(component) => component,
                        None => shared.component_blocking(rt, &digest, &wasm, &origin)?,
                    };
                    Variant::new(rt, &component, &origin).map(Arc::new)
                })
                .await
                .map_err(|e| PluginError::Internal {
                    message: format!("the compile task failed: {e}"),
                })?
            })
            .await?;
        Ok(variant.clone())
    }

    /// Which engine a sandbox needs.
    fn kind_for(&self, sandbox: &Sandbox) -> EngineKind {
        if sandbox.limits.fuel.is_some() {
            EngineKind::Fuel
        } else if sandbox.limits.memory_mib() > self.shared.config.max_memory_mib {
            EngineKind::OnDemand
        } else {
            self.main.kind
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn plugin_and_host_are_shareable() {
        assert_send_sync::<Plugin>();
        assert_send_sync::<crate::plugin::PluginHost>();
    }
}
