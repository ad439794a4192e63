//! What a host and every plugin it loaded share: the settings, the engines, the epoch ticker,
//! and compiling a component (or loading it from the disk cache) for an engine.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::component::Component;

use super::abi;
use super::budget::{MemoryBudget, machine_default_mib};
use super::cache::{DiskCache, Miss};
use super::config::{CompileNotice, HostConfig};
use super::engine::{Engines, LinkedEngine};
use super::error::{PluginError, one_line};
use super::grants::Protected;
use super::ticker::Ticker;

/// The state shared by a [`PluginHost`](super::PluginHost) and its plugins.
pub(crate) struct HostShared {
    pub(crate) config: HostConfig,
    pub(crate) engines: Arc<Engines>,
    /// The disk cache of compiled components, when there is one and its key could be read.
    cache: Option<DiskCache>,
    /// The host's own paths no grant may expose: the home, the cache and its key.
    pub(crate) protected: Vec<Protected>,
    /// The memory the guests may reserve at once ([`HostConfig::guest_memory_mib`]).
    pub(crate) budget: MemoryBudget,
    compilations: AtomicU64,
    _ticker: Ticker,
}

impl HostShared {
    /// Makes the main engine and starts the epoch ticker.
    pub(crate) fn new(config: HostConfig) -> Result<Self, PluginError> {
        if config.guest_memory_mib == Some(0) {
            return Err(PluginError::Engine {
                message: "a guest memory budget of 0 MiB lets no guest run; give \
                          HostConfig::guest_memory_mib (--guest-memory-mib) 1 or more"
                    .into(),
            });
        }
        let engines = Arc::new(Engines::new(&config)?);
        let ticker = Ticker::start(engines.clone(), config.epoch_tick)?;
        let cache = config.cache_dir.as_deref().and_then(|dir| {
            DiskCache::open(
                dir,
                config.cache_key.as_deref(),
                config.max_cache_entry_mib.saturating_mul(1 << 20),
            )
            .inspect_err(|err| {
                tracing::warn!(
                    cache = %dir.display(),
                    "plugin cache disabled: {err}; plugins are compiled at every start"
                );
            })
            .ok()
        });
        let mut protected = Vec::new();
        if let Some(home) = &config.home {
            protected.push(Protected::new("the weft home", home));
        }
        match &cache {
            Some(cache) => {
                protected.push(Protected::new("the plugin cache", &cache.dir));
                protected.push(Protected::new("the plugin cache key", &cache.key_path));
            }
            None => {
                if let Some(dir) = &config.cache_dir {
                    protected.push(Protected::new("the plugin cache", dir));
                }
            }
        }
        let budget = MemoryBudget::new(config.guest_memory_mib.unwrap_or_else(machine_default_mib));
        Ok(Self {
            config,
            engines,
            cache,
            protected,
            budget,
            compilations: AtomicU64::new(0),
            _ticker: ticker,
        })
    }

    /// How many components were compiled (not loaded from the disk cache).
    pub(crate) fn compilations(&self) -> u64 {
        self.compilations.load(Ordering::Relaxed)
    }

    /// Loads `wasm` for `engine` from the disk cache, or compiles it (and caches it). Blocking.
    pub(crate) fn component_blocking(
        &self,
        engine: &LinkedEngine,
        digest: &str,
        wasm: &[u8],
        origin: &str,
    ) -> Result<Component, PluginError> {
        if let Some(cache) = &self.cache {
            match cache.read(&engine.engine, digest, &engine.fingerprint) {
                Ok(component) => {
                    tracing::debug!(%digest, fingerprint = %engine.fingerprint, "plugin loaded from cache");
                    return Ok(component);
                }
                Err(Miss::Absent) => {}
                Err(Miss::Unusable(why)) => {
                    tracing::warn!(%digest, fingerprint = %engine.fingerprint, "cached plugin unusable ({why}); recompiling");
                }
            }
        }
        if let Some(notice) = &self.config.compile_notice
            && wasm.len() >= CompileNotice::MIN_BYTES
        {
            (notice.0)(&format!(
                "compiling {origin} ({:.1} MiB) to native code, once: later runs load it from the \
                 cache",
                wasm.len() as f64 / (1024.0 * 1024.0)
            ));
        }
        let started = std::time::Instant::now();
        let component =
            Component::new(&engine.engine, wasm).map_err(|e| match abi::async_abi_use(wasm) {
                Some(uses) => PluginError::AsyncAbi {
                    origin: origin.to_string(),
                    uses: uses.to_string(),
                },
                None => PluginError::Compile {
                    origin: origin.to_string(),
                    message: one_line(&e),
                },
            })?;
        self.compilations.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%digest, engine = ?engine.kind, elapsed_ms = started.elapsed().as_millis() as u64, "plugin compiled");
        if let Some(cache) = &self.cache {
            match component.serialize() {
                Ok(bytes) => {
                    if let Err(err) = cache.write(digest, &engine.fingerprint, &bytes) {
                        tracing::warn!(cache = %cache.dir.display(), "cannot write the plugin cache: {err}");
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
