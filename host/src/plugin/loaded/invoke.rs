//! One guest call: a fresh store and instance under the sandbox's limits, the deadline and the
//! abort handle, and what the host observed of it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::Instance;
use wasmtime::{Store, UpdateDeadline};

use super::Plugin;
use crate::engine::invocation::{StepCall, StepFailure};
use crate::executor::Invocation;
use crate::plugin::abort::{AbortView, aborted, hard_stop};
use crate::plugin::bindings::weft::plugin::types;
use crate::plugin::engine::EngineKind;
use crate::plugin::error::one_line;
use crate::plugin::events::Emitter;
use crate::plugin::grants;
use crate::plugin::http::HttpGate;
use crate::plugin::limiter::MemoryLimiter;
use crate::plugin::outcome::{Ended, Observed};
use crate::plugin::sandbox::Sandbox;
use crate::plugin::state::StoreState;
use crate::plugin::variant::Variant;

/// What one guest call is.
pub(super) enum Call {
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
pub(super) enum Ret {
    Describe {
        steps: Option<Vec<types::StepInfo>>,
        tools: Option<Vec<types::ToolInfo>>,
    },
    Execute(Result<types::Outcome, types::Failure>),
    Tool(Result<String, types::Failure>),
}

impl Plugin {
    /// One guest call in a fresh store and instance, under the sandbox's limits, the deadline
    /// and the abort handle.
    pub(super) async fn invoke(
        &self,
        sandbox: &Sandbox,
        io: Invocation,
        call: Call,
    ) -> Observed<Ret> {
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
        // The guest memory this call may use, reserved from the host's budget until it ends
        // (the reservation is dropped last, after the store); waiting for it does not hold a
        // thread, and a cancel or the deadline ends the wait.
        let wanted = sandbox.limits.memory_mib();
        let budget = &self.shared.budget;
        let reserve = budget.reserve(wanted);
        tokio::pin!(reserve);
        let _memory = tokio::select! {
            biased;
            r = &mut reserve => match r {
                Ok(reservation) => reservation,
                Err(over) => {
                    return setup_failed(
                        StepFailure::new(
                            "memory-limit",
                            format!(
                                "{}: limits.memory-mib is {} MiB, more than the host's whole guest \
                                 memory budget of {} MiB; raise the budget (--guest-memory-mib, \
                                 HostConfig::guest_memory_mib) or lower limits.memory-mib",
                                self.origin, over.wanted_mib, over.budget_mib
                            ),
                        )
                        .not_retryable(),
                        &view,
                    );
                }
            },
            () = aborted(&view) => {
                return setup_failed(
                    StepFailure::new("cancelled", "aborted while waiting for guest memory"),
                    &view,
                );
            }
        };
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
            panic: out.panic_report(),
            bad_patch: state.bad_patch,
            patches: state.patches,
        }
    }

    /// The store's data: WASI and HTTP from the sandbox's grants alone, its memory limit, the
    /// event emitter, the abort view and the run access.
    fn store_state(
        &self,
        sandbox: &Sandbox,
        io: &Invocation,
        abort: AbortView,
        out: Arc<Emitter>,
    ) -> Result<StoreState, StepFailure> {
        // Checked when the workflow was loaded; again here for runs stored before that check.
        if let Some(why) = grants::exposure(&sandbox.grants, &self.shared.protected) {
            return Err(
                StepFailure::new("sandbox-error", format!("{}: {why}", self.origin))
                    .not_retryable(),
            );
        }
        let (wasi, allowed) = grants::wasi_from_grants(&sandbox.grants, &out)?;
        Ok(StoreState {
            wasi,
            table: wasmtime::component::ResourceTable::new(),
            http: wasmtime_wasi_http::WasiHttpCtx::new(),
            gate: HttpGate {
                allowed,
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
pub(super) fn was_stopped<R>(ret: &Result<R, Ended>) -> bool {
    match ret {
        Err(Ended::Stopped) => true,
        Err(Ended::Error(err)) => {
            err.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt)
        }
        _ => false,
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
                .execute
                .ok_or_else(|| wasmtime::format_err!("the plugin exports no steps"))?;
            let execute = instance.get_typed_func::<
                (&str, &types::StepContext),
                (Result<types::Outcome, types::Failure>,),
            >(&mut *store, idx)?;
            let (ret,) = execute.call_async(&mut *store, (&name, &ctx)).await?;
            Ok(Ret::Execute(ret))
        }
        Call::Tool { name, call } => {
            let idx = variant
                .call
                .ok_or_else(|| wasmtime::format_err!("the plugin exports no tools"))?;
            let call_fn = instance
                .get_typed_func::<(&str, &types::ToolCall), (Result<String, types::Failure>,)>(
                    &mut *store,
                    idx,
                )?;
            let (ret,) = call_fn.call_async(&mut *store, (&name, &call)).await?;
            Ok(Ret::Tool(ret))
        }
    }
}

/// The WIT `step-context` of a call (JSON as text).
pub(super) fn step_context(call: &StepCall) -> types::StepContext {
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
