//! The plugin host: engines, the epoch ticker, and loading plugins by content digest.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::OnceCell;
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::bindings;
use super::cache::{self, Miss};
use super::config::HostConfig;
use super::error::{PluginError, one_line};
use super::io::lock;
use super::plugin::Plugin;
use super::state::StoreState;

const MIB: u64 = 1024 * 1024;

/// Which engine an instance runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum EngineKind {
    /// Pooling allocator (the main engine, unless pooling is off or could not be set up).
    Pooled,
    /// On-demand allocation: pool exhausted, or memory above the pool's slot size.
    OnDemand,
    /// On-demand allocation with fuel metering, for plugins whose limits set `fuel`.
    Fuel,
}

/// An engine with its linker and cache fingerprint.
pub(crate) struct Runtime {
    pub(crate) kind: EngineKind,
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<StoreState>,
    pub(crate) fingerprint: String,
}

/// The engines of one host: the main one, and the others made when first needed.
pub(crate) struct Engines {
    pub(crate) main: Runtime,
    on_demand: OnceLock<Runtime>,
    fuel: OnceLock<Runtime>,
}

impl Engines {
    /// Advances the epoch of every engine made so far.
    fn tick(&self) {
        self.main.engine.increment_epoch();
        if let Some(rt) = self.on_demand.get() {
            rt.engine.increment_epoch();
        }
        if let Some(rt) = self.fuel.get() {
            rt.engine.increment_epoch();
        }
    }

    /// The runtime of `kind`, made on first use.
    pub(crate) fn get(
        &self,
        kind: EngineKind,
        config: &HostConfig,
    ) -> Result<&Runtime, PluginError> {
        let slot = match kind {
            EngineKind::Pooled if self.main.kind == EngineKind::Pooled => return Ok(&self.main),
            EngineKind::Pooled | EngineKind::OnDemand => {
                if self.main.kind == EngineKind::OnDemand {
                    return Ok(&self.main);
                }
                &self.on_demand
            }
            EngineKind::Fuel => &self.fuel,
        };
        if let Some(rt) = slot.get() {
            return Ok(rt);
        }
        let kind = if kind == EngineKind::Pooled {
            EngineKind::OnDemand
        } else {
            kind
        };
        let rt = runtime(kind, config)?;
        Ok(slot.get_or_init(|| rt))
    }
}

/// The wasmtime settings shared by every engine, so artifacts move between pooled and on-demand
/// engines (same tunables, same fingerprint).
fn base_config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.concurrency_support(false);
    config.epoch_interruption(true);
    // Explicit, so pooled and on-demand engines agree whatever the defaults become.
    config.memory_reservation(4 << 30);
    config.memory_guard_size(32 << 20);
    config.memory_may_move(false);
    config.parallel_compilation(true);
    config
}

fn pooling(config: &HostConfig) -> PoolingAllocationConfig {
    let pool = &config.pool;
    let slots = pool.slots.max(1);
    let mut p = PoolingAllocationConfig::new();
    p.total_component_instances(slots)
        .total_core_instances(slots.saturating_mul(pool.core_instances_per_slot.max(1)))
        .total_memories(slots.saturating_mul(pool.memories_per_slot.max(1)))
        .total_tables(slots.saturating_mul(pool.tables_per_slot.max(1)))
        .total_stacks(slots)
        .max_memory_size(
            usize::try_from(config.max_memory_mib.saturating_mul(MIB)).unwrap_or(usize::MAX),
        )
        .table_elements(pool.table_elements as usize)
        .max_tables_per_module(2)
        .max_memories_per_module(1)
        .linear_memory_keep_resident(pool.keep_resident)
        .table_keep_resident(pool.keep_resident)
        .async_stack_keep_resident(pool.keep_resident)
        .decommit_batch_size(pool.decommit_batch.max(1));
    p
}

/// Makes the engine of `kind` and its linker.
fn runtime(kind: EngineKind, config: &HostConfig) -> Result<Runtime, PluginError> {
    let mut wasm_config = base_config();
    match kind {
        EngineKind::Pooled => {
            wasm_config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling(config)));
        }
        EngineKind::OnDemand => {
            wasm_config.allocation_strategy(InstanceAllocationStrategy::OnDemand);
        }
        EngineKind::Fuel => {
            wasm_config.allocation_strategy(InstanceAllocationStrategy::OnDemand);
            wasm_config.consume_fuel(true);
        }
    }
    let engine = Engine::new(&wasm_config).map_err(|e| PluginError::Engine {
        message: one_line(&e),
    })?;
    let linker = linker(&engine).map_err(|e| PluginError::Engine {
        message: one_line(&e),
    })?;
    let fingerprint = cache::engine_fingerprint(&engine);
    Ok(Runtime {
        kind,
        engine,
        linker,
        fingerprint,
    })
}

/// WASI 0.2 in full, wasi-http, and the weft imports.
fn linker(engine: &Engine) -> wasmtime::Result<Linker<StoreState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    bindings::Plugin::add_to_linker::<StoreState, wasmtime::component::HasSelf<StoreState>>(
        &mut linker,
        |state| state,
    )?;
    Ok(linker)
}

/// Advances the engines' epochs on a thread of its own until dropped.
struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    fn start(engines: Arc<Engines>, tick: Duration) -> Result<Self, PluginError> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name("weft-epoch".into())
            .spawn({
                let stop = stop.clone();
                move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::park_timeout(tick);
                        engines.tick();
                    }
                }
            })
            .map_err(|e| PluginError::Engine {
                message: format!("cannot start the epoch thread: {e}"),
            })?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

/// What the host and every plugin it loaded share.
pub(crate) struct Shared {
    pub(crate) config: HostConfig,
    pub(crate) engines: Arc<Engines>,
    compilations: AtomicU64,
    _ticker: Ticker,
}

impl Shared {
    /// Loads `wasm` for `rt` from the disk cache, or compiles it (and caches it). Blocking.
    pub(crate) fn component_blocking(
        &self,
        rt: &Runtime,
        digest: &str,
        wasm: &[u8],
        origin: &str,
    ) -> Result<Component, PluginError> {
        let path = self
            .config
            .cache_dir
            .as_ref()
            .map(|dir| cache::artifact_path(dir, digest, &rt.fingerprint));
        if let Some(path) = &path {
            match cache::read_artifact(&rt.engine, path) {
                Ok(component) => {
                    tracing::debug!(%digest, path = %path.display(), "plugin loaded from cache");
                    return Ok(component);
                }
                Err(Miss::Absent) => {}
                Err(Miss::Unusable(why)) => {
                    tracing::warn!(path = %path.display(), "cached plugin unusable ({why}); recompiling");
                }
            }
        }
        let started = std::time::Instant::now();
        let component = Component::new(&rt.engine, wasm).map_err(|e| PluginError::Compile {
            origin: origin.to_string(),
            message: one_line(&e),
        })?;
        self.compilations.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%digest, engine = ?rt.kind, elapsed_ms = started.elapsed().as_millis() as u64, "plugin compiled");
        if let Some(path) = &path {
            match component.serialize() {
                Ok(bytes) => {
                    if let Err(err) = cache::write_artifact(path, &bytes) {
                        tracing::warn!(path = %path.display(), "cannot write the plugin cache: {err}");
                    }
                }
                Err(err) => {
                    tracing::warn!("cannot serialize a compiled plugin: {}", one_line(&err))
                }
            }
        }
        Ok(component)
    }
}

/// Pooling allocator slots in use, from [`PluginHost::pool_usage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolUsage {
    /// Live component instances.
    pub component_instances: u64,
    /// Live core instances.
    pub core_instances: u64,
    /// Linear memories in use.
    pub memories: u64,
    /// Tables in use.
    pub tables: u64,
    /// Fiber stacks in use.
    pub stacks: u64,
}

/// Runs WebAssembly plugins: one per process, cheap to clone.
///
/// Plugins are loaded by content digest, compiled once per digest per process and cached on
/// disk; every invocation gets a fresh instance in a fresh store.
#[derive(Clone)]
pub struct PluginHost {
    inner: Arc<HostInner>,
}

struct HostInner {
    shared: Arc<Shared>,
    plugins: Mutex<HashMap<String, Arc<OnceCell<Arc<Plugin>>>>>,
}

impl std::fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginHost")
            .field("config", &self.inner.shared.config)
            .field("main_engine", &self.inner.shared.engines.main.kind)
            .finish_non_exhaustive()
    }
}

impl PluginHost {
    /// Sets up the engines and starts the epoch ticker (a thread that stops once the host and
    /// every plugin it loaded are dropped).
    ///
    /// When the pooling allocator cannot reserve its memory, the host falls back to on-demand
    /// allocation and logs a warning.
    pub fn new(config: HostConfig) -> Result<Self, PluginError> {
        if config.epoch_tick.is_zero() {
            return Err(PluginError::Engine {
                message: "epoch_tick must be greater than zero".into(),
            });
        }
        let main = if config.pool.enabled {
            match runtime(EngineKind::Pooled, &config) {
                Ok(rt) => rt,
                Err(err) => {
                    tracing::warn!(
                        "pooling allocator unavailable ({err}); using on-demand allocation"
                    );
                    runtime(EngineKind::OnDemand, &config)?
                }
            }
        } else {
            runtime(EngineKind::OnDemand, &config)?
        };
        let engines = Arc::new(Engines {
            main,
            on_demand: OnceLock::new(),
            fuel: OnceLock::new(),
        });
        let ticker = Ticker::start(engines.clone(), config.epoch_tick)?;
        Ok(Self {
            inner: Arc::new(HostInner {
                shared: Arc::new(Shared {
                    config,
                    engines,
                    compilations: AtomicU64::new(0),
                    _ticker: ticker,
                }),
                plugins: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The settings the host was made with.
    pub fn config(&self) -> &HostConfig {
        &self.inner.shared.config
    }

    /// True when the main engine uses the pooling allocator.
    pub fn is_pooled(&self) -> bool {
        self.inner.shared.engines.main.kind == EngineKind::Pooled
    }

    /// What the pooling allocator has in use right now (`None` without pooling).
    pub fn pool_usage(&self) -> Option<PoolUsage> {
        let engines = &self.inner.shared.engines;
        if engines.main.kind != EngineKind::Pooled {
            return None;
        }
        engines
            .main
            .engine
            .pooling_allocator_metrics()
            .map(|m| PoolUsage {
                component_instances: m.component_instances(),
                core_instances: m.core_instances(),
                memories: m.memories() as u64,
                tables: m.tables() as u64,
                stacks: m.stacks() as u64,
            })
    }

    /// How many times a component was compiled by this host (not loaded from the disk cache).
    pub fn compilations(&self) -> u64 {
        self.inner.shared.compilations.load(Ordering::Relaxed)
    }

    /// Loads a plugin from its bytes, checking them against `pin` (hex sha256, optionally
    /// `sha256:`-prefixed) when given. Loading the same bytes again returns the same plugin.
    pub async fn load(&self, wasm: &[u8], pin: Option<&str>) -> Result<Arc<Plugin>, PluginError> {
        let digest = cache::sha256_hex(wasm);
        let origin = format!("plugin sha256:{}", &digest[..12]);
        self.load_digest(digest, wasm.to_vec(), pin, origin).await
    }

    /// Loads a plugin file, checking it against `pin` when given; errors name the path.
    pub async fn load_file(
        &self,
        path: &Path,
        pin: Option<&str>,
    ) -> Result<Arc<Plugin>, PluginError> {
        let wasm = tokio::fs::read(path)
            .await
            .map_err(|source| PluginError::Read {
                path: path.to_path_buf(),
                source,
            })?;
        let digest = cache::sha256_hex(&wasm);
        let origin = format!("plugin {}", path.display());
        self.load_digest(digest, wasm, pin, origin).await
    }

    async fn load_digest(
        &self,
        digest: String,
        wasm: Vec<u8>,
        pin: Option<&str>,
        origin: String,
    ) -> Result<Arc<Plugin>, PluginError> {
        if let Some(pin) = pin {
            let expected = cache::normalize_pin(pin).ok_or_else(|| PluginError::InvalidPin {
                pin: pin.to_string(),
                origin: origin.clone(),
            })?;
            if expected != digest {
                return Err(PluginError::PinMismatch {
                    origin,
                    expected,
                    actual: digest,
                });
            }
        }
        let cell = lock(&self.inner.plugins)
            .entry(digest.clone())
            .or_default()
            .clone();
        let shared = self.inner.shared.clone();
        let plugin = cell
            .get_or_try_init(|| Plugin::load(shared, digest, wasm.into(), origin))
            .await?;
        Ok(plugin.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epoch_thread_ends_with_the_host() {
        let host = PluginHost::new(HostConfig {
            pool: super::super::PoolConfig {
                slots: 4,
                ..Default::default()
            },
            ..HostConfig::default()
        })
        .expect("host");
        assert!(host.is_pooled());
        let engines = Arc::downgrade(&host.inner.shared.engines);
        std::thread::sleep(Duration::from_millis(5));
        drop(host);
        // The ticker thread held the last other reference; it has been joined.
        assert!(engines.upgrade().is_none());
    }

    #[test]
    fn pooled_and_on_demand_engines_share_artifacts() {
        let config = HostConfig::default();
        let pooled = runtime(EngineKind::Pooled, &config).expect("pooled");
        let on_demand = runtime(EngineKind::OnDemand, &config).expect("on demand");
        let fuel = runtime(EngineKind::Fuel, &config).expect("fuel");
        assert_eq!(pooled.fingerprint, on_demand.fingerprint);
        assert_ne!(pooled.fingerprint, fuel.fingerprint);
    }
}
