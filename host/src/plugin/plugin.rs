//! A loaded plugin: its description, its pre-instantiated component per engine, and the
//! invocations (fresh store and instance each).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::OnceCell;
use wasmtime::component::{Component, Instance, InstancePre};
use wasmtime::{Store, UpdateDeadline};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};
use wasmtime_wasi_http::WasiHttpCtx;

use super::bindings::exports::weft::plugin::{steps, tools};
use super::bindings::weft::plugin::types;
use super::error::{PluginError, one_line};
use super::host::{EngineKind, Runtime, Shared};
use super::io::{EventSink, GuestEvent, Invocation, NoRun};
use super::outcome::{Ended, Observed, Subject, bad_patch_failure, guest_failure};
use super::sandbox::{DirMode, HostPattern, Sandbox};
use super::state::{AbortView, Emitter, HttpGate, LineStream, MemoryLimiter, Stdio, StoreState};
use crate::engine::invocation::{InvocationResult, StepCall, StepFailure};

/// The interface names a plugin exports.
const STEPS_EXPORT: &str = "weft:plugin/steps@0.1.0";
const TOOLS_EXPORT: &str = "weft:plugin/tools@0.1.0";

/// A step as the plugin describes it, schemas parsed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

/// A component pre-instantiated on one engine.
struct Variant {
    kind: EngineKind,
    pre: InstancePre<StoreState>,
    steps: Option<steps::GuestIndices>,
    tools: Option<tools::GuestIndices>,
}

impl Variant {
    fn new(rt: &Runtime, component: &Component, origin: &str) -> Result<Self, PluginError> {
        let has_steps = component.get_export_index(None, STEPS_EXPORT).is_some();
        let has_tools = component.get_export_index(None, TOOLS_EXPORT).is_some();
        if !has_steps && !has_tools {
            let names: Vec<String> = component
                .component_type()
                .exports(&rt.engine)
                .map(|(name, _)| name.to_string())
                .collect();
            return Err(PluginError::NotAPlugin {
                origin: origin.to_string(),
                exports: if names.is_empty() {
                    "nothing".into()
                } else {
                    names.join(", ")
                },
            });
        }
        let pre = rt
            .linker
            .instantiate_pre(component)
            .map_err(|e| PluginError::Link {
                origin: origin.to_string(),
                message: one_line(&e),
            })?;
        let link = |e: wasmtime::Error| PluginError::Link {
            origin: origin.to_string(),
            message: one_line(&e),
        };
        let steps = if has_steps {
            Some(steps::GuestIndices::new(&pre).map_err(link)?)
        } else {
            None
        };
        let tools = if has_tools {
            Some(tools::GuestIndices::new(&pre).map_err(link)?)
        } else {
            None
        };
        Ok(Self {
            kind: rt.kind,
            pre,
            steps,
            tools,
        })
    }
}

/// What one guest call is.
enum Call {
    Describe,
    Execute {
        name: String,
        ctx: types::StepContext,
    },
    Tool {
        name: String,
        call: types::ToolCall,
    },
}

/// What a guest call returned.
enum Ret {
    Describe {
        steps: Option<Vec<types::StepInfo>>,
        tools: Option<Vec<types::ToolInfo>>,
    },
    Execute(Result<types::Outcome, types::Failure>),
    Tool(Result<String, types::Failure>),
}

/// A loaded plugin. Cheap to share (`Arc`); every method takes `&self` and may run concurrently.
pub struct Plugin {
    shared: Arc<Shared>,
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
        shared: Arc<Shared>,
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
                Err(Ended::Stopped) => {
                    Err(subject.aborted(super::state::AbortCause::Timeout, true))
                }
                Err(Ended::Error(err)) => {
                    tracing::debug!(plugin = %self.origin, %step, "guest error: {err:?}");
                    Err(subject.error(
                        &err,
                        output_limit.as_deref(),
                        memory_denied,
                        panic.as_deref(),
                    ))
                }
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
            Err(Ended::Stopped) => Err(subject.aborted(super::state::AbortCause::Timeout, true)),
            Err(Ended::Error(err)) => {
                tracing::debug!(plugin = %self.origin, %tool, "guest error: {err:?}");
                Err(subject.error(
                    &err,
                    observed.output_limit.as_deref(),
                    observed.memory_denied,
                    observed.panic.as_deref(),
                ))
            }
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

    /// Calls `describe` of each exported interface in one fresh instance, nothing granted.
    async fn describe(&self) -> Result<(Vec<StepInfo>, Vec<ToolInfo>), PluginError> {
        let sink = Arc::new(TraceEvents {
            origin: self.origin.clone(),
        });
        let io = Invocation::new(sink, Arc::new(NoRun))
            .with_deadline(Some(self.shared.config.describe_timeout));
        let sandbox = Sandbox::default();
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
                let f = subject.error(
                    &err,
                    observed.output_limit.as_deref(),
                    observed.memory_denied,
                    observed.panic.as_deref(),
                );
                return Err(failed(format!("{} ({})", f.message, f.code)));
            }
        };
        let invalid = |message: String| PluginError::InvalidDescription {
            origin: self.origin.clone(),
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
            let schema =
                |field: &str, text: Option<String>| -> Result<Option<Value>, PluginError> {
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

    /// One guest call in a fresh store and instance, under the sandbox's limits, the deadline
    /// and the abort handle.
    async fn invoke(&self, sandbox: &Sandbox, io: Invocation, call: Call) -> Observed<Ret> {
        // Compiling for another engine (first fuel-metered call) does not count against the
        // deadline; everything from here on does.
        let prepared = self.variant(self.kind_for(sandbox)).await;
        let start = Instant::now();
        // S15: the step's timeout (given by the caller), else the plugin's limits.timeout-ms.
        let deadline = io
            .deadline
            .or_else(|| sandbox.limits.timeout_ms.map(Duration::from_millis));
        let view = AbortView {
            handle: io.abort.clone(),
            deadline_at: deadline.and_then(|d| start.checked_add(d)),
            grace: self.shared.config.abort_grace,
        };
        let limits = &sandbox.limits;
        let out = Arc::new(Emitter::new(
            io.sink.clone(),
            limits.max_events(),
            limits.max_output_mib(),
        ));
        let setup_failed = |failure: StepFailure, view: &AbortView| Observed {
            ret: Err(Ended::Setup(Box::new(failure))),
            abort: view.cause(Instant::now()).map(|(c, _)| c),
            memory_denied: false,
            output_limit: None,
            panic: None,
            bad_patch: None,
            patches: Vec::new(),
        };
        if view.handle.is_aborted() {
            // Cancelled before it started: nothing new starts (S76).
            return setup_failed(
                StepFailure::new("cancelled", "cancelled before it started"),
                &view,
            );
        }
        let state = match self.store_state(sandbox, &io, view.clone(), out.clone()) {
            Ok(state) => state,
            Err(failure) => return setup_failed(failure, &view),
        };
        let mut variant = match prepared {
            Ok(v) => v,
            Err(err) => {
                return setup_failed(
                    StepFailure::new("trap", format!("cannot prepare the plugin: {err}")),
                    &view,
                );
            }
        };
        let mut store = new_store(&variant, state, sandbox);
        let stop = hard_stop(view.clone());
        tokio::pin!(stop);

        let mut instantiated = tokio::select! {
            biased;
            r = variant.pre.instantiate_async(&mut store) => r,
            () = &mut stop => Err(wasmtime::Error::new(Stop)),
        };
        if let Err(err) = &instantiated
            && variant.kind == EngineKind::Pooled
            && err
                .downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                .is_some()
        {
            tracing::debug!(plugin = %self.origin, "instance pool exhausted; instantiating on demand");
            match self.variant(EngineKind::OnDemand).await {
                Ok(v) => {
                    variant = v;
                    store = new_store(&variant, store.into_data(), sandbox);
                    instantiated = tokio::select! {
                        biased;
                        r = variant.pre.instantiate_async(&mut store) => r,
                        () = &mut stop => Err(wasmtime::Error::new(Stop)),
                    };
                }
                Err(e) => tracing::warn!("on-demand fallback unavailable: {e}"),
            }
        }
        let ret = match instantiated {
            Ok(instance) => {
                tokio::select! {
                    biased;
                    r = call_guest(&variant, &instance, &mut store, call) => r.map_err(Ended::Error),
                    () = &mut stop => Err(Ended::Stopped),
                }
            }
            Err(err) if err.downcast_ref::<Stop>().is_some() => Err(Ended::Stopped),
            Err(err) => Err(Ended::Error(err)),
        };
        out.finish();
        let state = store.into_data();
        Observed {
            ret,
            abort: view.cause(Instant::now()).map(|(c, _)| c),
            memory_denied: state.limiter.denied,
            output_limit: out.limit_hit(),
            panic: out.panic_message(),
            bad_patch: state.bad_patch,
            patches: state.patches,
        }
    }

    /// WASI and host state from the sandbox alone: no inherited env, args, stdin or network.
    fn store_state(
        &self,
        sandbox: &Sandbox,
        io: &Invocation,
        abort: AbortView,
        out: Arc<Emitter>,
    ) -> Result<StoreState, StepFailure> {
        let grants = &sandbox.grants;
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(LineStream::new(out.clone(), Stdio::Stdout))
            .stderr(LineStream::new(out.clone(), Stdio::Stderr))
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        for (name, value) in &grants.env {
            wasi.env(name, value);
        }
        for dir in &grants.dirs {
            let perms = match dir.mode {
                DirMode::Ro => FsPerms::ReadOnly,
                DirMode::Rw => FsPerms::ReadWrite,
            };
            wasi.preopened_dir(&dir.host, &dir.guest, perms)
                .map_err(|e| {
                    StepFailure::new(
                    "sandbox-error",
                    format!(
                        "cannot open the granted directory {} (guest {}): {}; fix grants.dirs in \
                         the workflow file",
                        dir.host.display(),
                        dir.guest,
                        one_line(&e)
                    ),
                )
                .not_retryable()
                })?;
        }
        let mut allowed = Vec::with_capacity(grants.http.len());
        for entry in &grants.http {
            match HostPattern::parse(entry) {
                Some(p) => allowed.push(p),
                None => {
                    return Err(StepFailure::new(
                        "sandbox-error",
                        format!("grants.http entry `{entry}` is not a host name"),
                    )
                    .not_retryable());
                }
            }
        }
        Ok(StoreState {
            wasi: wasi.build(),
            table: wasmtime::component::ResourceTable::new(),
            http: WasiHttpCtx::new(),
            gate: HttpGate {
                allowed: allowed.into(),
                out: out.clone(),
            },
            limiter: MemoryLimiter {
                max_bytes: sandbox.limits.memory_bytes(),
                max_table_elements: self.shared.config.pool.table_elements as usize,
                denied: false,
            },
            out,
            abort,
            run: io.run.clone(),
            patches: Vec::new(),
            bad_patch: None,
        })
    }
}

/// True when the host stopped the guest (after the abort grace) rather than the guest returning.
fn was_stopped<R>(ret: &Result<R, Ended>) -> bool {
    match ret {
        Err(Ended::Stopped) => true,
        Err(Ended::Error(err)) => {
            err.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt)
        }
        _ => false,
    }
}

/// Sends the events of `describe` to the host's diagnostic log.
struct TraceEvents {
    origin: String,
}

impl EventSink for TraceEvents {
    fn emit(&self, event: GuestEvent) {
        tracing::debug!(plugin = %self.origin, ?event, "event during describe");
    }
}

/// The marker error of an instantiation the host stopped.
#[derive(Debug)]
struct Stop;

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stopped by the host")
    }
}

impl std::error::Error for Stop {}

/// A fresh store for `variant`: memory limiter, epoch yields and stops, fuel.
fn new_store(variant: &Variant, state: StoreState, sandbox: &Sandbox) -> Store<StoreState> {
    let mut store = Store::new(variant.pre.engine(), state);
    store.limiter(|state| &mut state.limiter);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|ctx| {
        if ctx.data().abort.must_stop(Instant::now()) {
            Ok(UpdateDeadline::Interrupt)
        } else {
            Ok(UpdateDeadline::Yield(1))
        }
    });
    if variant.kind == EngineKind::Fuel {
        let fuel = sandbox.limits.fuel.unwrap_or(u64::MAX);
        if let Err(err) = store.set_fuel(fuel) {
            tracing::warn!("cannot set fuel: {}", one_line(&err));
        }
    }
    store
}

/// Resolves when the guest must be stopped: the abort grace after the deadline or the cancel.
async fn hard_stop(view: AbortView) {
    loop {
        let now = Instant::now();
        if view.must_stop(now) {
            return;
        }
        let next = view.next_stop();
        let timer = async {
            match next {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        if view.handle.is_aborted() {
            timer.await;
        } else {
            tokio::select! {
                () = timer => {}
                () = view.handle.aborted() => {}
            }
        }
    }
}

/// Instantiated: call the export.
async fn call_guest(
    variant: &Variant,
    instance: &Instance,
    store: &mut Store<StoreState>,
    call: Call,
) -> wasmtime::Result<Ret> {
    match call {
        Call::Describe => {
            let steps = match &variant.steps {
                Some(idx) => {
                    let guest = idx.load(&mut *store, instance)?;
                    Some(guest.call_describe(&mut *store).await?)
                }
                None => None,
            };
            let tools = match &variant.tools {
                Some(idx) => {
                    let guest = idx.load(&mut *store, instance)?;
                    Some(guest.call_describe(&mut *store).await?)
                }
                None => None,
            };
            Ok(Ret::Describe { steps, tools })
        }
        Call::Execute { name, ctx } => {
            let idx = variant
                .steps
                .as_ref()
                .ok_or_else(|| wasmtime::format_err!("the plugin exports no steps"))?;
            let guest = idx.load(&mut *store, instance)?;
            Ok(Ret::Execute(
                guest.call_execute(&mut *store, &name, &ctx).await?,
            ))
        }
        Call::Tool { name, call } => {
            let idx = variant
                .tools
                .as_ref()
                .ok_or_else(|| wasmtime::format_err!("the plugin exports no tools"))?;
            let guest = idx.load(&mut *store, instance)?;
            Ok(Ret::Tool(guest.call_call(&mut *store, &name, &call).await?))
        }
    }
}

/// The WIT `step-context` of a call (JSON as text).
fn step_context(call: &StepCall) -> types::StepContext {
    types::StepContext {
        run_id: call.run_id.clone(),
        workflow_id: call.workflow_id.clone(),
        step_path: call.step_path.clone(),
        attempt: call.attempt,
        input: call.input.to_string(),
        config: call.config.to_string(),
        state: call.state.to_string(),
        resume: call.resume.as_ref().map(|r| types::Resumption {
            data: r.data.to_string(),
            suspend_payload: r.suspend_payload.to_string(),
        }),
        foreach_index: call.foreach_index,
        iteration: call.iteration,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn plugin_and_host_are_shareable() {
        assert_send_sync::<Plugin>();
        assert_send_sync::<super::super::PluginHost>();
    }
}
