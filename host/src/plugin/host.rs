//! The plugin host: one per process; loads plugins by content digest, once each.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

use super::cache;
use super::config::HostConfig;
use super::engine::EngineKind;
use super::error::PluginError;
use super::file_digest::FileDigests;
use super::grants;
use super::loaded::Plugin;
use super::lock;
use super::sandbox::Sandbox;
use super::shared::HostShared;

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
    shared: Arc<HostShared>,
    plugins: Mutex<HashMap<String, Arc<OnceCell<Arc<Plugin>>>>>,
    files: FileDigests,
    /// How many times [`PluginHost::load_stored`] fetched a component's bytes.
    fetched: AtomicU64,
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
        Ok(Self {
            inner: Arc::new(HostInner {
                shared: Arc::new(HostShared::new(config)?),
                plugins: Mutex::new(HashMap::new()),
                files: FileDigests::default(),
                fetched: AtomicU64::new(0),
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

    /// The guest memory budget this host took, in MiB: [`HostConfig::guest_memory_mib`], or
    /// the machine's figure when that is `None`.
    pub fn guest_memory_budget_mib(&self) -> u64 {
        self.inner.shared.budget.total_mib()
    }

    /// The MiB of the guest memory budget the invocations under way have reserved (each its
    /// `limits.memory-mib`).
    pub fn guest_memory_in_use_mib(&self) -> u64 {
        self.inner.shared.budget.in_use_mib()
    }

    /// How many invocations wait for guest memory to be given back.
    pub fn guest_memory_waiting(&self) -> u64 {
        self.inner.shared.budget.waiting()
    }

    /// How many times a component was compiled by this host (not loaded from the disk cache).
    pub fn compilations(&self) -> u64 {
        self.inner.shared.compilations()
    }

    /// Checks a plugin's sandbox before any invocation: what [`Sandbox::check`] checks, and that
    /// no granted directory is, lies inside, or contains the home, the plugin cache or its key.
    ///
    /// Call it when a workflow file is loaded; an invocation with a sandbox that fails it fails
    /// with code `sandbox-error` before the guest starts.
    #[doc(hidden)]
    pub fn check_sandbox(&self, sandbox: &Sandbox) -> Result<(), PluginError> {
        sandbox.check()?;
        match grants::exposure(&sandbox.grants, &self.inner.shared.protected) {
            Some(message) => Err(PluginError::InvalidSandbox { message }),
            None => Ok(()),
        }
    }

    /// How many times this host read and hashed a plugin file: a file is read again only when
    /// its size, modification time or identity changed.
    pub fn files_hashed(&self) -> u64 {
        self.inner.files.hashed()
    }

    /// Loads a plugin from its bytes, checking them against `pin` (hex sha256, optionally
    /// `sha256:`-prefixed) when given. Loading the same bytes again returns the same plugin.
    #[doc(hidden)]
    pub async fn load(&self, wasm: &[u8], pin: Option<&str>) -> Result<Arc<Plugin>, PluginError> {
        let digest = cache::sha256_hex(wasm);
        let origin = format!("plugin sha256:{}", &digest[..12]);
        self.load_digest(digest, wasm.into(), pin, origin).await
    }

    /// Loads a plugin file, checking it against `pin` when given; errors name the path.
    pub async fn load_file(
        &self,
        path: &Path,
        pin: Option<&str>,
    ) -> Result<Arc<Plugin>, PluginError> {
        self.load_path(path, pin).await.map(|(plugin, _)| plugin)
    }

    /// [`PluginHost::load_file`], with the component's bytes. The file is read and hashed only
    /// when it changed since this host last read it.
    pub async fn load_path(
        &self,
        path: &Path,
        pin: Option<&str>,
    ) -> Result<(Arc<Plugin>, Arc<[u8]>), PluginError> {
        let (digest, wasm) = self.inner.files.read(path).await?;
        let origin = format!("plugin {}", path.display());
        let plugin = self.load_digest(digest, wasm.clone(), pin, origin).await?;
        Ok((plugin, wasm))
    }

    /// How many times [`PluginHost::load_stored`] fetched a component's bytes because this host
    /// had not loaded that digest yet.
    pub fn blobs_fetched(&self) -> u64 {
        self.inner.fetched.load(Ordering::Relaxed)
    }

    /// The plugin whose content digest is `digest` (hex sha256, optionally `sha256:`-prefixed):
    /// the one this host has loaded already, else the one made from the bytes `fetch` gives (a
    /// run's component from the store, for a run recovered in a new process).
    ///
    /// Per digest, `fetch` runs only while no plugin is loaded and never twice at once: callers
    /// that ask meanwhile wait and share its plugin (after a failure, the next caller fetches
    /// again). Bytes that do not hash to `digest` are refused with [`PluginError::Damaged`].
    #[doc(hidden)]
    pub async fn load_stored<F, Fut, E>(&self, digest: &str, fetch: F) -> Result<Arc<Plugin>, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<u8>, E>>,
        E: From<PluginError>,
    {
        let origin = |d: &str| format!("plugin sha256:{}", d.get(..12).unwrap_or(d));
        let digest = cache::normalize_pin(digest).ok_or_else(|| PluginError::InvalidPin {
            pin: digest.to_owned(),
            origin: origin(digest),
        })?;
        let cell = lock(&self.inner.plugins)
            .entry(digest.clone())
            .or_default()
            .clone();
        let plugin = cell
            .get_or_try_init(|| async {
                self.inner.fetched.fetch_add(1, Ordering::Relaxed);
                let wasm = fetch().await?;
                let actual = cache::sha256_hex(&wasm);
                if actual != digest {
                    return Err(E::from(PluginError::Damaged {
                        origin: origin(&digest),
                        expected: digest.clone(),
                        actual,
                    }));
                }
                let shared = self.inner.shared.clone();
                Plugin::load(shared, digest.clone(), wasm.into(), origin(&digest))
                    .await
                    .map_err(E::from)
            })
            .await?;
        Ok(plugin.clone())
    }

    async fn load_digest(
        &self,
        digest: String,
        wasm: Arc<[u8]>,
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
            .get_or_try_init(|| Plugin::load(shared, digest, wasm, origin))
            .await?;
        Ok(plugin.clone())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
}
