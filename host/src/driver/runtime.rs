//! The runtime itself: [`Runtime`] over one home directory and what it holds ([`Inner`]), how
//! it is opened, and what the rest of the driver asks of it: its clock and settings, the
//! store's syncs, failed writes and halted runs, registered steps, listings.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::clock::Clock;
use super::config::RuntimeConfig;
use super::executors::Executors;
use super::graphs;
use super::live_events::LiveEvents;
use super::live_run::LiveRun;
use super::metrics;
use super::shared;
use super::sync::Syncer;
use super::{RuntimeError, checked};
use crate::engine::{self, Graph, RunState, RunStatus};
use crate::executor::{StepExecutor, StepInfo};
use crate::native::{NativeStep, NativeSteps};
use crate::plugin::PluginHost;
use crate::run_id::check_run_id;
use crate::store::{RunSummary, RunsPage, SledStore, Store, StoreError};
use crate::workflow::{LoadedWorkflow, WorkflowError, load_workflow_with};

/// The most runs [`Runtime::runs_page`] asks the store for at once while it reads on for a
/// filter that matches few.
const PAGE_READ_MAX: usize = 4096;

/// A weft runtime over one home directory: the library's entry point.
#[derive(Clone)]
pub struct Runtime {
    pub(super) inner: Arc<Inner>,
}

/// What a [`Runtime`] and its clones share: the store, the plugin host, the runs driven here
/// and everything the driver counts or keeps of them.
pub(super) struct Inner {
    pub(super) store: Arc<dyn Store>,
    pub(super) host: PluginHost,
    pub(super) syncer: Syncer,
    pub(super) config: RuntimeConfig,
    pub(super) live: Mutex<HashMap<String, LiveRun>>,
    /// Live events by run, also for runs without an actor yet, so a watcher follows a run
    /// that this process starts driving later (a resume served here, S106).
    pub(super) channels: Mutex<HashMap<String, Arc<LiveEvents>>>,
    /// What runs each step: plugins from `host`, natives from `natives`.
    pub(super) executors: Executors,
    pub(super) natives: NativeSteps,
    pub(super) home: PathBuf,
    /// Runs whose actor stopped because storing their progress failed, with the failure.
    pub(super) halted: Mutex<HashMap<String, StoreError>>,
    /// New runs whose creation is stored but not yet durable: listings leave them out (S100).
    pub(super) creating: Mutex<HashSet<String>>,
    /// What this runtime counts.
    pub(super) metrics: metrics::Metrics,
    /// Commits made durable so far, for [`RuntimeConfig::crash_after_commits`].
    pub(super) commits: std::sync::atomic::AtomicU64,
    /// Held (read) by each request of another process being answered here, so that
    /// [`Runtime::close`] answers them before it lets the runs go.
    pub(super) answering: Arc<tokio::sync::RwLock<()>>,
    /// Told when a run stops being driven here, so a worker looks for more at once.
    pub(super) freed: tokio::sync::Notify,
    /// Told (every waiter) when a run's actor lets it go: a prune waits for those of runs
    /// that just ended.
    pub(super) retired: tokio::sync::Notify,
    /// Runs driven here with an invocation in flight (see [`Runtime::busy`]).
    pub(super) working: Arc<std::sync::atomic::AtomicUsize>,
    /// The graphs of runs loaded from the store.
    pub(super) graphs: graphs::Graphs,
    /// How long ended runs are kept ([`RuntimeConfig::retention`], or as set since).
    pub(super) default_retention: Mutex<Option<std::time::Duration>>,
    /// Each workflow's `retention:`, as this runtime last loaded it.
    pub(super) retention: Mutex<HashMap<String, std::time::Duration>>,
    /// Whether the background prune is started (once a retention applies).
    pub(super) pruning: std::sync::atomic::AtomicBool,
    /// Held by a prune throughout: one at a time, so none counts another's deletions as
    /// runs it kept.
    pub(super) prune_lock: tokio::sync::Mutex<()>,
}

/// Locks `m`, ignoring poisoning (what it guards stays consistent).
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Runtime {
    /// Opens the home directory `home` (created when missing): its database and plugin cache.
    pub fn open(home: &Path, mut config: RuntimeConfig) -> Result<Self, RuntimeError> {
        // Absolute, so every message names the home unambiguously.
        let home = &std::path::absolute(home).unwrap_or_else(|_| home.to_path_buf());
        crate::home::create_dir(home)
            .map_err(|e| StoreError::Backend(format!("cannot create {}: {e}", home.display())))?;
        let store: Arc<dyn Store> = match &config.store {
            None => Arc::new(SledStore::open(home, config.cache_mib)?),
            Some(url) => shared::open(url.as_str())?,
        };
        // The home's own cache unless a shared one is given; either is made when missing.
        let cache = config
            .host
            .cache_dir
            .clone()
            .unwrap_or_else(|| home.join("cache"));
        crate::home::create_dir(&cache)
            .map_err(|e| StoreError::Backend(format!("cannot create {}: {e}", cache.display())))?;
        config.host.cache_dir = Some(cache);
        config.host.home = Some(home.to_path_buf());
        let host = PluginHost::new(config.host.clone())?;
        let natives = NativeSteps::default();
        // Process-wide: the last runtime opened sets it (RuntimeConfig::expr_steps).
        crate::engine::expr::set_step_budget(config.expr_steps);
        crate::engine::expr::set_memory_budget(config.expr_memory_bytes);
        let notices = store.shared().map(|s| s.notices());
        let metrics = metrics::Metrics::new();
        let graph_cache = config.graph_cache;
        let retention = config.retention;
        let rt = Runtime {
            // The executors start child runs of workflow tools on this runtime (S125).
            inner: Arc::new_cyclic(|me| Inner {
                executors: Executors::new(host.clone(), store.clone(), natives.clone())
                    .bounding_models(config.models.clone())
                    .starting_children_on(me.clone()),
                syncer: Syncer::new(store.clone(), metrics.syncs()),
                store,
                host,
                config,
                live: Mutex::new(HashMap::new()),
                channels: Mutex::new(HashMap::new()),
                natives,
                home: home.to_path_buf(),
                halted: Mutex::new(HashMap::new()),
                creating: Mutex::new(HashSet::new()),
                metrics,
                commits: std::sync::atomic::AtomicU64::new(0),
                answering: Arc::new(tokio::sync::RwLock::new(())),
                freed: tokio::sync::Notify::new(),
                retired: tokio::sync::Notify::new(),
                working: Default::default(),
                graphs: graphs::Graphs::new(graph_cache),
                default_retention: Mutex::new(retention),
                retention: Mutex::new(HashMap::new()),
                pruning: std::sync::atomic::AtomicBool::new(false),
                prune_lock: tokio::sync::Mutex::new(()),
            }),
        };
        if retention.is_some() {
            rt.start_pruning();
        }
        if let Some(notices) = notices {
            if tokio::runtime::Handle::try_current().is_ok() {
                Runtime::serve_requests(Arc::downgrade(&rt.inner), notices);
            } else {
                tracing::warn!(
                    "the runtime is opened outside a tokio runtime: resumes and cancels other \
                     processes hand to its runs wait until they take the runs over"
                );
            }
        }
        Ok(rt)
    }

    /// The error for a failed write to the store.
    pub(super) fn write_failed(&self, cause: StoreError) -> RuntimeError {
        match cause {
            StoreError::RunExists(_) => RuntimeError::Store(cause),
            cause => RuntimeError::StoreFailed {
                home: self.inner.home.clone(),
                cause,
            },
        }
    }

    /// Stops driving `run_id` because storing its progress failed with `cause`: its actor is
    /// gone, watchers of it end, and [`Runtime::wait`] reports the failure. `weft resume`
    /// recovers it from what is stored (S101).
    pub(super) fn halt(&self, run_id: &str, cause: StoreError) {
        // Left for another process (or a later `weft resume`) to take up.
        let _ = self.inner.store.release(run_id);
        lock(&self.inner.halted).insert(run_id.to_owned(), cause);
        lock(&self.inner.live).remove(run_id);
        lock(&self.inner.channels).remove(run_id);
    }

    /// Why `run_id` stopped, if a store failure stopped it.
    pub(super) fn halted(&self, run_id: &str) -> Option<RuntimeError> {
        lock(&self.inner.halted)
            .get(run_id)
            .map(|cause| RuntimeError::Halted {
                run: run_id.to_owned(),
                home: self.inner.home.clone(),
                cause: cause.clone(),
            })
    }

    /// Moves what the store keeps in its log into its long-term place (sled), so that a
    /// process ending now leaves nothing to replay; a dropped runtime does the same once the
    /// last of its runs lets go of the store. Runs go on meanwhile.
    pub async fn checkpoint(&self) -> Result<(), RuntimeError> {
        let store = self.inner.store.clone();
        tokio::task::spawn_blocking(move || store.checkpoint())
            .await
            .map_err(|e| StoreError::Backend(e.to_string()))?
            .map_err(|e| self.write_failed(e))
    }

    /// The home directory.
    pub fn home(&self) -> &Path {
        &self.inner.home
    }

    /// Now, on the runtime's clock.
    pub(super) fn now(&self) -> engine::Millis {
        self.inner.config.clock.now_ms()
    }

    /// The runtime's clock.
    pub(super) fn clock(&self) -> Arc<dyn Clock> {
        self.inner.config.clock.clone()
    }

    /// The settings the runtime was opened with.
    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    /// The plugin host, for loading workflows.
    pub fn host(&self) -> &PluginHost {
        &self.inner.host
    }

    /// Registers a native Rust step under `name`; workflows loaded afterwards may use it as
    /// `{ id: ..., native: NAME }`.
    pub fn register(&self, name: impl Into<String>, step: NativeStep) {
        self.inner.natives.register(name, step);
    }

    /// Registers any [`StepExecutor`] under `name`, used like a native step: workflows loaded
    /// afterwards may use it as `{ id: ..., native: NAME }`, checked against `info`'s schemas.
    pub fn register_executor(
        &self,
        name: impl Into<String>,
        info: StepInfo,
        executor: Arc<dyn StepExecutor>,
    ) {
        self.inner.natives.register_executor(name, info, executor);
    }

    /// Loads and checks a workflow file, with this runtime's native steps available.
    pub async fn load_workflow(&self, path: &Path) -> Result<LoadedWorkflow, WorkflowError> {
        let loaded = load_workflow_with(path, None, &self.inner.host, &self.inner.natives).await?;
        self.set_workflow_retention(loaded.workflow_id(), loaded.retention());
        Ok(loaded)
    }

    /// Loads and checks a workflow given as text (YAML or JSON); relative paths in it are
    /// relative to the current directory.
    pub async fn load_workflow_text(
        &self,
        name: &str,
        text: &str,
    ) -> Result<LoadedWorkflow, WorkflowError> {
        let path = std::path::absolute(name).unwrap_or_else(|_| PathBuf::from(name));
        let loaded =
            load_workflow_with(&path, Some(text), &self.inner.host, &self.inner.natives).await?;
        self.set_workflow_retention(loaded.workflow_id(), loaded.retention());
        Ok(loaded)
    }

    /// Whether more runs driven here have an invocation in flight than
    /// [`RuntimeConfig::own_task_above`] says: then a run's invocations run on its own task,
    /// not on a task each (`Actor::commit`).
    pub(super) fn busy(&self) -> bool {
        let above = self.inner.config.own_task_above.unwrap_or_else(|| {
            tokio::runtime::Handle::try_current().map_or(1, |h| h.metrics().num_workers())
        });
        self.inner
            .working
            .load(std::sync::atomic::Ordering::Relaxed)
            > above
    }

    /// Counts a durable commit; aborts the process at the one
    /// [`RuntimeConfig::crash_after_commits`] names.
    pub(super) fn committed(&self) {
        let n = self
            .inner
            .commits
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        if self.inner.config.crash_after_commits == Some(n) {
            eprintln!("weft: crashing after commit {n} (crash-after-commits)");
            std::process::abort();
        }
    }

    /// Returns once every write made so far is on disk (with `sync_writes`; at once without):
    /// a new run is acknowledged only then (S100), sharing the fsync with other transitions.
    pub(super) async fn durable(&self) -> Result<(), RuntimeError> {
        self.durable_at(self.sync_ticket()).await
    }

    /// A ticket for the writes made so far, which [`Runtime::durable_at`] waits for; none
    /// without `sync_writes`.
    pub(super) fn sync_ticket(&self) -> Option<u64> {
        self.inner
            .config
            .sync_writes
            .then(|| self.inner.syncer.ticket())
    }

    /// Returns once the writes made before `ticket` was taken are on disk.
    pub(super) async fn durable_at(&self, ticket: Option<u64>) -> Result<(), RuntimeError> {
        if let Some(ticket) = ticket {
            self.inner
                .syncer
                .until(ticket)
                .await
                .map_err(|e| self.write_failed(e))?;
        }
        Ok(())
    }

    /// Every metric of this runtime in the Prometheus text format (its content type is
    /// [`METRICS_CONTENT_TYPE`](crate::METRICS_CONTENT_TYPE)): stored runs by status, runs driven, step invocations in
    /// flight, transitions, and step latency by outcome.
    pub fn metrics(&self) -> Result<String, RuntimeError> {
        let statuses = self.summaries()?.into_iter().map(|r| r.status);
        Ok(self.inner.metrics.render(statuses))
    }

    /// The workflow graph a run follows, as it was stored when the run started (S10).
    pub fn definition(&self, run_id: &str) -> Result<Graph, RuntimeError> {
        check_run_id(run_id)?;
        let bytes = self
            .inner
            .store
            .definition(run_id)?
            .ok_or_else(|| RuntimeError::UnknownRun(run_id.into()))?;
        checked::graph(run_id, &bytes)
    }

    /// Every run's summary, newest first, optionally filtered; a run is one whose creation a
    /// sync made durable, a status one a sync made durable (S100).
    pub fn runs(
        &self,
        workflow: Option<&str>,
        status: Option<RunStatus>,
    ) -> Result<Vec<RunSummary>, RuntimeError> {
        Ok(self
            .summaries()?
            .into_iter()
            .filter(|r| workflow.is_none_or(|w| r.workflow_id == w))
            .filter(|r| status.is_none_or(|s| r.status == s))
            .collect())
    }

    /// One page of [`Runtime::runs`]: at most `limit` runs after `after` (the creation time and
    /// id of the last run of the page before), and whether more follow. The store reads its
    /// index from the cursor on, so a page costs what its runs cost, not what every stored run
    /// does; a `status` filter, which holds a run's status as published (S100), reads on until
    /// the page is full or the runs end. With `tags`, only runs carrying every one of them (the
    /// store reads the index of the first).
    pub fn runs_page(
        &self,
        workflow: Option<&str>,
        status: Option<RunStatus>,
        tags: &[(String, String)],
        after: Option<(i64, &str)>,
        limit: usize,
    ) -> Result<(Vec<RunSummary>, bool), RuntimeError> {
        // One more than the page, to tell whether more follow, and those being created, which
        // are left out.
        let being_created = lock(&self.inner.creating).len();
        let mut batch = limit.saturating_add(1).saturating_add(being_created);
        let mut out = Vec::with_capacity(limit.saturating_add(1));
        let mut cursor: Option<(i64, String)> = after.map(|(at, id)| (at, id.to_owned()));
        loop {
            let page = RunsPage {
                workflow,
                tags,
                after: cursor.as_ref().map(|(at, id)| (*at, id.as_str())),
                limit: batch,
            };
            let runs = self.inner.store.runs_page(&page)?;
            // Read after the page: a run is counted as being created before its creation is
            // written, so any run of the page not yet durable is in this set. Read before, a
            // run created in between was listed before it was durable (S100).
            let creating: HashSet<String> = lock(&self.inner.creating).clone();
            let ended = runs.len() < batch;
            cursor = runs.last().map(|r| (r.created_at, r.run_id.clone()));
            {
                let live = lock(&self.inner.live);
                for mut run in runs {
                    if creating.contains(&run.run_id) {
                        continue;
                    }
                    if let Some(l) = live.get(&run.run_id) {
                        let published = l.status.borrow();
                        if published.status != run.status {
                            run.status = published.status;
                            run.updated_at = published.updated_at;
                        }
                    }
                    if status.is_none_or(|s| run.status == s) {
                        out.push(run);
                    }
                }
            }
            if out.len() > limit {
                out.truncate(limit);
                return Ok((out, true));
            }
            if ended {
                return Ok((out, false));
            }
            // A filter that matches few runs reads on in larger steps.
            batch = batch.saturating_mul(2).min(PAGE_READ_MAX.max(batch));
        }
    }

    /// Every stored run's summary, those of runs this process drives as their actors last
    /// published them: the store holds a transition, and the summary it changes, before the
    /// sync that makes them durable, and a status is told only once durable (S100). A new run
    /// is left out until its creation is durable.
    fn summaries(&self) -> Result<Vec<RunSummary>, RuntimeError> {
        let mut runs = self.inner.store.runs()?;
        {
            let creating = lock(&self.inner.creating);
            if !creating.is_empty() {
                runs.retain(|run| !creating.contains(&run.run_id));
            }
        }
        let live = lock(&self.inner.live);
        for run in &mut runs {
            if let Some(l) = live.get(&run.run_id) {
                let published = l.status.borrow();
                if published.status != run.status {
                    run.status = published.status;
                    run.updated_at = published.updated_at;
                }
            }
        }
        Ok(runs)
    }
}

/// The summary the store lists of the run in `state`.
pub(super) fn summary(state: &RunState) -> RunSummary {
    RunSummary {
        run_id: state.run_id.clone(),
        workflow_id: state.workflow_id.clone(),
        status: state.status,
        created_at: state.created_at,
        updated_at: state.updated_at,
        tags: state.tags.clone(),
    }
}
