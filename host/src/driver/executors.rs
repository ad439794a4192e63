//! Which [`StepExecutor`] runs each step: the driver's one resolver.
//!
//! A step of a graph names what runs it by a plugin key. A key of [`Graph::plugins`] is a
//! plugin step: its component comes from the [`PluginHost`], which loads it from the store's
//! content-addressed blob when it has not loaded that digest yet (once, for every run that
//! asks meanwhile), and runs in the sandbox the graph gives that key. The key
//! [`NATIVE_PLUGIN`] (how stored graphs mark a native step) is the executor registered under
//! the step's name in [`NativeSteps`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use serde::Deserialize;

use crate::engine::model::{MODEL_PLUGIN, PluginRef, WORKFLOW_TOOL_PLUGIN};
use crate::engine::{Graph, KeyHasher};
use crate::executor::StepExecutor;
use crate::models::{ModelConfig, ModelStep};
use crate::native::{NATIVE_PLUGIN, NativeSteps};
use crate::plugin::{Plugin, PluginError, PluginHost, PluginStep, Sandbox};
use crate::store::{Store, StoreError};

use super::runtime::{Inner, lock};
use super::workflow_tools::WorkflowTool;

/// Why no executor was found for a step; the step fails with `plugin-unavailable`.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unresolved {
    /// The step is native and nothing is registered under its name in this process.
    #[error(
        "no native step `{name}` is registered: register it with Runtime::register before starting or recovering runs that use it"
    )]
    NoNative {
        /// The step's name.
        name: String,
    },
    /// The graph names a plugin key it does not declare.
    #[error("plugin {key} is not in the workflow")]
    NotInWorkflow {
        /// The key.
        key: String,
    },
    /// The sandbox the graph gives a plugin does not parse.
    #[error("plugin {key}: its stored sandbox does not parse: {message}")]
    Sandbox {
        /// The key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// The store holds no component with the digest the graph names.
    #[error(
        "plugin sha256:{digest} is not in the store (the home's blobs/sha256, or the database's blobs table): restore it, or start the workflow again from its file"
    )]
    NotStored {
        /// The digest.
        digest: String,
    },
    /// Reading the component failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The component did not load.
    #[error(transparent)]
    Plugin(#[from] PluginError),
}

/// Finds executors: plugins through the plugin host and the store, natives in the registry.
/// Cheap to clone.
#[derive(Clone)]
pub(super) struct Executors {
    host: PluginHost,
    store: Arc<dyn Store>,
    natives: NativeSteps,
    /// The runtime workflow tools start their child runs on (S125).
    runtime: Weak<Inner>,
    /// The bounds of model calls.
    models: ModelConfig,
}

impl Executors {
    /// A resolver over this host, store and registry.
    pub(super) fn new(host: PluginHost, store: Arc<dyn Store>, natives: NativeSteps) -> Self {
        Executors {
            host,
            store,
            natives,
            runtime: Weak::new(),
            models: ModelConfig::default(),
        }
    }

    /// The same resolver, its model calls bounded by `models`.
    pub(super) fn bounding_models(mut self, models: ModelConfig) -> Self {
        self.models = models;
        self
    }

    /// The same resolver, running workflow tools as child runs of `runtime`.
    pub(super) fn starting_children_on(mut self, runtime: Weak<Inner>) -> Self {
        self.runtime = runtime;
        self
    }

    /// The resolver of one run's steps.
    pub(super) fn for_run(&self, graph: Arc<Graph>) -> RunExecutors {
        RunExecutors {
            executors: self.clone(),
            graph,
            plugins: Mutex::default(),
            sandboxes: Mutex::default(),
        }
    }

    /// The plugin with this digest: the host's, else loaded from the store's blob.
    async fn plugin(&self, digest: &str) -> Result<Arc<Plugin>, Unresolved> {
        self.host
            .load_stored(digest, || async {
                self.store
                    .plugin(digest)?
                    .ok_or_else(|| Unresolved::NotStored {
                        digest: digest.to_owned(),
                    })
            })
            .await
    }
}

/// The executors of one run's steps, by what its graph names; keeps each plugin key's
/// executor once resolved, so later steps of the run neither parse its sandbox nor look up
/// its plugin again.
pub(super) struct RunExecutors {
    executors: Executors,
    graph: Arc<Graph>,
    plugins: Mutex<HashMap<String, Arc<dyn StepExecutor>, KeyHasher>>,
    /// Each plugin key's sandbox as parsed the first time the run asked about that key (by
    /// [`RunExecutors::contained`] or [`RunExecutors::resolve`]), or why it does not parse.
    sandboxes: Mutex<HashMap<String, Result<Arc<Sandbox>, String>, KeyHasher>>,
}

impl RunExecutors {
    /// Whether an invocation under plugin key `key` can change nothing outside weft: a plugin
    /// step or tool whose sandbox grants no read-write directory and no HTTP host
    /// ([`Sandbox::reaches_out`]). Its only effects are its guest events and its end, which
    /// reach the actor through its channel; so it may start before the transition that
    /// issued it is on disk, and is applied only after. Native steps, model calls and
    /// workflow tools may reach anything: never contained.
    pub(super) fn contained(&self, key: &str) -> bool {
        if [MODEL_PLUGIN, WORKFLOW_TOOL_PLUGIN, NATIVE_PLUGIN].contains(&key) {
            return false;
        }
        let Some(plugin) = self.graph.plugins.get(key) else {
            return false;
        };
        self.sandbox(key, plugin).is_ok_and(|s| !s.reaches_out())
    }

    /// The sandbox the graph gives plugin key `key`, parsed once per run.
    fn sandbox(&self, key: &str, plugin: &PluginRef) -> Result<Arc<Sandbox>, Unresolved> {
        let mut sandboxes = lock(&self.sandboxes);
        let parsed = match sandboxes.get(key) {
            Some(parsed) => parsed.clone(),
            None => {
                let parsed = Sandbox::deserialize(&plugin.sandbox)
                    .map(Arc::new)
                    .map_err(|e| e.to_string());
                sandboxes.insert(key.to_owned(), parsed.clone());
                parsed
            }
        };
        parsed.map_err(|message| Unresolved::Sandbox {
            key: key.to_owned(),
            message,
        })
    }

    /// The executor of the plugin of key `key` when a step of it was resolved already: what
    /// [`RunExecutors::resolve`] would give, found without waiting for anything.
    pub(super) fn ready(&self, key: &str) -> Option<Arc<dyn StepExecutor>> {
        if matches!(key, MODEL_PLUGIN | WORKFLOW_TOOL_PLUGIN | NATIVE_PLUGIN)
            || !self.graph.plugins.contains_key(key)
        {
            return None;
        }
        lock(&self.plugins).get(key).cloned()
    }

    /// The executor of step `step` of plugin key `key` (an [`Invoke`](crate::engine::Invoke)'s
    /// `plugin` and `step`).
    pub(super) async fn resolve(
        &self,
        key: &str,
        step: &str,
    ) -> Result<Arc<dyn StepExecutor>, Unresolved> {
        if let Some(executor) = self.ready(key) {
            return Ok(executor);
        }
        match (key, self.graph.plugins.get(key)) {
            (MODEL_PLUGIN, _) => match self.graph.models.get(step) {
                Some(def) => Ok(Arc::new(ModelStep::new(
                    def.clone(),
                    self.executors.models.clone(),
                ))),
                None => Err(Unresolved::NotInWorkflow {
                    key: format!("{MODEL_PLUGIN}/{step}"),
                }),
            },
            (WORKFLOW_TOOL_PLUGIN, _) => {
                let cached = format!("{WORKFLOW_TOOL_PLUGIN}/{step}");
                if let Some(executor) = lock(&self.plugins).get(&cached) {
                    return Ok(executor.clone());
                }
                let Some(graph) = self.graph.workflow_tools.get(step) else {
                    return Err(Unresolved::NotInWorkflow { key: cached });
                };
                let executor: Arc<dyn StepExecutor> = Arc::new(WorkflowTool::new(
                    self.executors.runtime.clone(),
                    Arc::new(graph.clone()),
                ));
                lock(&self.plugins).insert(cached, executor.clone());
                Ok(executor)
            }
            (NATIVE_PLUGIN, _) => {
                self.executors
                    .natives
                    .executor(step)
                    .ok_or_else(|| Unresolved::NoNative {
                        name: step.to_owned(),
                    })
            }
            (_, Some(plugin)) => {
                let sandbox = self.sandbox(key, plugin)?;
                let plugin = self.executors.plugin(&plugin.digest).await?;
                let executor: Arc<dyn StepExecutor> = Arc::new(PluginStep::new(plugin, sandbox));
                lock(&self.plugins).insert(key.to_owned(), executor.clone());
                Ok(executor)
            }
            (_, None) => Err(Unresolved::NotInWorkflow {
                key: key.to_owned(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::future::BoxFuture;
    use indexmap::IndexMap;
    use serde_json::json;

    use super::*;
    use crate::engine::GRAPH_FORMAT;
    use crate::engine::invocation::{InvocationResult, StepOutcome};
    use crate::executor::{StepInfo, StepRequest};
    use crate::plugin::{HostConfig, PoolConfig};
    use crate::store::SledStore;

    /// An executor that answers `null`.
    struct Nothing;

    impl StepExecutor for Nothing {
        fn execute(&self, _request: StepRequest) -> BoxFuture<'_, InvocationResult> {
            Box::pin(async {
                InvocationResult {
                    outcome: Ok(StepOutcome::Done(json!(null))),
                    patches: Vec::new(),
                }
            })
        }
    }

    fn info() -> StepInfo {
        StepInfo::default()
    }

    /// A resolver over a fresh home, for a graph with plugin keys `f/kit` (stored nowhere) and
    /// `f/bad` (a sandbox that does not parse).
    fn resolver(dir: &std::path::Path) -> (RunExecutors, PluginHost, NativeSteps) {
        let host = PluginHost::new(HostConfig {
            pool: PoolConfig {
                slots: 4,
                ..Default::default()
            },
            ..HostConfig::default()
        })
        .expect("host");
        let store: Arc<dyn Store> = Arc::new(SledStore::open(dir, 8).expect("store"));
        let natives = NativeSteps::default();
        let plugin = |sandbox| PluginRef {
            digest: "0".repeat(64),
            source: "kit.wasm".into(),
            sandbox,
        };
        let graph = Graph {
            format: GRAPH_FORMAT,
            files: Vec::new(),
            entries: Vec::new(),
            plugins: IndexMap::from([
                ("f/kit".to_owned(), plugin(json!({}))),
                ("f/bad".to_owned(), plugin(json!({"limits": "none"}))),
            ]),
            models: IndexMap::new(),
            workflow_tools: IndexMap::new(),
        };
        let executors = Executors::new(host.clone(), store, natives.clone());
        (executors.for_run(Arc::new(graph)), host, natives)
    }

    #[tokio::test]
    async fn a_native_step_resolves_to_the_executor_registered_under_its_name() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (run, _, natives) = resolver(dir.path());
        let nothing: Arc<dyn StepExecutor> = Arc::new(Nothing);
        natives.register_executor("nothing", info(), nothing.clone());
        let found = run
            .resolve(NATIVE_PLUGIN, "nothing")
            .await
            .expect("registered");
        assert!(std::ptr::addr_eq(
            Arc::as_ptr(&found),
            Arc::as_ptr(&nothing)
        ));
        let err = run
            .resolve(NATIVE_PLUGIN, "kit")
            .await
            .err()
            .expect("nothing is registered as kit");
        assert!(matches!(err, Unresolved::NoNative { ref name } if name == "kit"));
        assert!(err.to_string().contains("Runtime::register"), "{err}");
    }

    /// S100: only steps that can change nothing outside weft start before their transition
    /// is durable.
    #[test]
    fn s100_only_plugins_granted_no_read_write_directory_and_no_host_are_contained() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (run, _, _) = resolver(dir.path());
        let here = dir.path().to_str().expect("utf-8 path");
        let graph = |sandbox: serde_json::Value| {
            let mut graph = Graph::clone(&run.graph);
            graph.plugins["f/kit"].sandbox = sandbox;
            Executors::new(
                run.executors.host.clone(),
                run.executors.store.clone(),
                NativeSteps::default(),
            )
            .for_run(Arc::new(graph))
        };
        let read_only =
            json!({"grants": {"env": {"A": "1"}, "dirs": [{"host": here, "guest": "/d"}]}});
        assert!(graph(json!({})).contained("f/kit"));
        assert!(graph(read_only).contained("f/kit"));
        let http = json!({"grants": {"http": ["example.com"]}});
        assert!(!graph(http).contained("f/kit"));
        let rw = json!({"grants": {"dirs": [{"host": here, "guest": "/d", "mode": "rw"}]}});
        assert!(!graph(rw).contained("f/kit"), "a read-write directory");
        assert!(!run.contained("f/bad"), "a sandbox that does not parse");
        assert!(!run.contained("f/other"), "not in the graph");
        for key in [NATIVE_PLUGIN, MODEL_PLUGIN, WORKFLOW_TOOL_PLUGIN] {
            assert!(!run.contained(key), "{key}");
        }
    }

    #[tokio::test]
    async fn what_the_graph_does_not_declare_or_cannot_run_is_refused_before_the_store_is_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (run, host, _) = resolver(dir.path());
        let err = run.resolve("f/other", "inc").await.err().expect("refused");
        assert!(matches!(err, Unresolved::NotInWorkflow { ref key } if key == "f/other"));
        let err = run.resolve("f/bad", "inc").await.err().expect("refused");
        assert!(matches!(err, Unresolved::Sandbox { ref key, .. } if key == "f/bad"));
        assert_eq!(host.blobs_fetched(), 0);
        let err = run.resolve("f/kit", "inc").await.err().expect("refused");
        assert!(matches!(err, Unresolved::NotStored { .. }), "{err}");
        assert_eq!(host.blobs_fetched(), 1);
    }
}
