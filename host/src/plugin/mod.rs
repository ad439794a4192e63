//! The WebAssembly plugin host.
//!
//! A [`PluginHost`] (one per process) owns the wasmtime engines: component model, async calls,
//! epoch interruption, a pooling allocator with an on-demand fallback, and a separate
//! fuel-metering engine for plugins whose limits set `fuel`. [`PluginHost::load`] compiles a
//! component once per content digest (cached on disk keyed by digest and engine fingerprint and
//! authenticated by an HMAC under the home's `cache.key`), links it against WASI 0.2, wasi-http
//! and the `weft:plugin` imports, and calls its `describe`. A component that uses the
//! component-model-async ABI is refused (the engines do not enable it).
//!
//! Modules: `engine` (wasmtime settings, pooling, linker), `ticker` (epochs), `shared` (what a
//! host and its plugins share; compile or load from `cache`), `budget` (the guest memory every
//! invocation reserves from the host's), `loaded` and `loaded::invoke` (a
//! plugin and one guest call), `grants` (WASI from `grants:`, and the paths no grant may
//! expose), the imports `writer`, `abort`, `run`, `log`, `http`, `events`/`stdio` (output
//! in call order, with limits), and `step` ([`PluginStep`]: a plugin behind the executor seam,
//! whose types, [`crate::executor`], the imports talk to).
//!
//! Each [`Plugin::execute`] or [`Plugin::call_tool`] gets a fresh store and instance whose WASI
//! comes from the [`Sandbox`] alone. Everything a guest does — traps, panics, exits, memory
//! bombs, endless loops, blocking calls, floods of output, malformed results — ends as a
//! [`StepFailure`](crate::engine::invocation::StepFailure) with a code from S14/S83:
//!
//! | code | when |
//! |---|---|
//! | `trap` | a wasm trap or guest panic (one-line reason), or a WASI exit (`plugin exited with status N`) |
//! | `memory-limit` | the guest trapped after the limiter refused to grow its memory, or its `memory-mib` is more than the host's whole guest memory budget (never retried) |
//! | `fuel-exhausted` | metered fuel ran out |
//! | `timeout` | the deadline passed before the call returned (whatever it returned) |
//! | `cancelled` | the abort handle was cancelled before the call returned (never retried) |
//! | `malformed-result` | a `done`/`bail`/suspend payload/tool result that is not JSON |
//! | `output-limit` | a result or writer chunk over `limits.max-output-mib`, or more than `limits.max-events` events |
//! | `invalid-state-patch` | a `run.set-state` patch that is not a JSON object |
//! | `step-failed` | the guest's own failure without a code |
//! | `unknown-step` / `unknown-tool` | the plugin does not describe that name (never retried) |
//! | `sandbox-error` | a granted directory cannot be opened (never retried) |

// `StepFailure` (fixed in `engine::invocation`) is the failure type of the contract; it is large,
// but failures are the cold path and boxing it everywhere would only obscure the code.
#![allow(clippy::result_large_err)]

mod abi;
mod abort;
mod bindings;
mod budget;
mod cache;
mod config;
mod describe;
mod engine;
mod error;
mod events;
mod file_digest;
mod grants;
mod host;
mod http;
mod limiter;
mod loaded;
mod log;
mod outcome;
mod run;
mod sandbox;
mod shared;
mod state;
mod stdio;
mod step;
mod swap;
mod ticker;
mod variant;
mod writer;

pub use config::{CompileNotice, HostConfig, PoolConfig};
pub use describe::{PluginExports, ToolCall, ToolInfo};
pub use error::PluginError;
pub use host::{PluginHost, PoolUsage};
pub use loaded::Plugin;
pub(crate) use sandbox::DEFAULT_MAX_EVENTS;
pub use sandbox::{DirGrant, DirMode, EnvValue, Grants, Limits, Sandbox};
pub(crate) use step::PluginStep;

/// Locks a mutex, ignoring poisoning (the data are plain values that stay consistent).
fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
