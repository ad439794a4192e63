//! The local driver: runs the pure core on tokio, carries out its commands, and keeps every
//! transition durable in the store before its effects happen (S100).
//!
//! Each live run has one actor task that owns its [`RunState`]. Invocations, timers and guest
//! events reach the actor as messages; the actor feeds them to [`advance`](fn@engine::advance),
//! commits the transition and then carries out the commands.

mod actor;
mod checked;
mod clock;
mod config;
mod executors;
mod graphs;
mod limits;
mod live_events;
pub mod metrics;
mod new_events;
mod record;
mod shared;
mod sync;
mod unpublished;
mod unrecoverable;
mod workflow_tools;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::engine::{self, Event, EventKind, Graph, Refusal, ResumeRequest, RunState, RunStatus};
use crate::executor::StepExecutor;
use crate::limits::LimitError;
use crate::native::{NativeStep, NativeSteps};
use crate::plugin::{PluginHost, StepInfo};
use crate::run_id::{InvalidRunId, check_run_id};
use crate::store::{
    Claim, Definition, NewRun, Notice, RecordKey, RunSummary, SledStore, Store, StoreError,
};
use crate::workflow::{LoadedWorkflow, WorkflowError, load_workflow_with};

pub use clock::{Clock, ManualClock, SystemClock, Wait};
pub use config::{RuntimeConfig, StoreUrl, redacted};
pub use record::{RunRecord, StoredEvent};
pub use unrecoverable::{HOST_ERROR, Recovery, Unrecovered};

use record::RecordIn;
use unrecoverable::is_unloadable;

use actor::{Actor, Msg, Position, Waiter};
use executors::Executors;
use live_events::LiveEvents;
use sync::Syncer;

/// Why the runtime refused or failed a request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// No run has this id.
    #[error("no run with id {0}")]
    UnknownRun(String),
    /// A value is over a limit of [`RuntimeConfig`].
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// The run id breaks the rule of [`crate::run_id`].
    #[error(transparent)]
    InvalidRunId(#[from] InvalidRunId),
    /// Only a `running` or `pending` run is recovered (S101).
    #[error(
        "run {run} is {status}, not running: only a running or pending run is recovered; resume a suspended one"
    )]
    NotRecoverable {
        /// The run.
        run: String,
        /// Its status.
        status: RunStatus,
    },
    /// The core refused (S62, S69, S75).
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The run input breaks the input schema (S58).
    #[error("invalid run input:\n{}", .0.iter().map(|v| format!("{}: {}", if v.path.is_empty() { "/" } else { &v.path }, v.message)).collect::<Vec<_>>().join("\n"))]
    InvalidInput(Vec<engine::schema::Violation>),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A plugin could not be loaded.
    #[error(transparent)]
    Plugin(#[from] crate::plugin::PluginError),
    /// A stored entry was written by a newer weft, in a format this one cannot read.
    #[error(
        "run {run}: stored {what} has format {found}, this weft reads format {reads}: upgrade weft"
    )]
    NewerFormat {
        /// The run.
        run: String,
        /// Which entry: `graph`, `state`.
        what: &'static str,
        /// The entry's format.
        found: u64,
        /// The format this weft reads.
        reads: u32,
    },
    /// A stored entry does not hold what this weft wrote.
    #[error("run {run}: stored {what} is corrupt: {message}")]
    Corrupt {
        /// The run.
        run: String,
        /// Which entry: `graph`, `state`, `record`.
        what: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A run's value could not be encoded for the store.
    #[error("run {run}: cannot encode it for the store: {message}")]
    Encode {
        /// The run.
        run: String,
        /// What went wrong.
        message: String,
    },
    /// The task driving a run stopped before it answered a request; the request may be tried
    /// again.
    #[error("run {run}: its driver stopped before answering; try again")]
    DriverStopped {
        /// The run.
        run: String,
    },
    /// Writing to the home's store failed (S100).
    #[error("cannot write to the store in home {}: {cause}{}", .home.display(), fix_now(.cause))]
    StoreFailed {
        /// The home.
        home: PathBuf,
        /// The failure.
        cause: StoreError,
    },
    /// The run stopped because its progress could not be stored; what it did until then is
    /// stored, and `weft resume` goes on with it (S101).
    #[error(
        "run {run} stopped: cannot write to the store in home {}: {cause}. Everything it did until then is stored: {}, go on with `weft resume {run}`",
        .home.display(),
        fix_later(.cause)
    )]
    Halted {
        /// The run.
        run: String,
        /// The home.
        home: PathBuf,
        /// The failure.
        cause: StoreError,
    },
    /// Another live process drives the run (a store shared by many processes).
    #[error("run {run} is driven by weft process {worker}")]
    Elsewhere {
        /// The run.
        run: String,
        /// That process's worker id.
        worker: String,
    },
    /// The process driving the run failed the request handed to it.
    #[error("run {run}: the weft process driving it answered: {message}")]
    Remote {
        /// The run.
        run: String,
        /// Its error.
        message: String,
    },
    /// Workers (and runs left to them) need a store shared by many processes.
    #[error(
        "only a store that processes share has workers to drive runs (weft worker, run \
         --detach): give --store postgres://... (or WEFT_STORE)"
    )]
    NotShared,
}

impl RuntimeError {
    /// Whether the error says the disk holding the home is full.
    pub fn is_disk_full(&self) -> bool {
        matches!(
            self,
            RuntimeError::Store(StoreError::DiskFull(_))
                | RuntimeError::StoreFailed {
                    cause: StoreError::DiskFull(_),
                    ..
                }
                | RuntimeError::Halted {
                    cause: StoreError::DiskFull(_),
                    ..
                }
        )
    }
}

/// What to do about a store failure now.
fn fix_now(cause: &StoreError) -> &'static str {
    match cause {
        StoreError::DiskFull(_) => "; free space on that disk, then try again",
        _ => "",
    }
}

/// When a run stopped by a store failure can go on.
fn fix_later(cause: &StoreError) -> &'static str {
    match cause {
        StoreError::DiskFull(_) => "once that disk has free space again",
        _ => "once the cause is fixed",
    }
}

/// A weft runtime over one home directory: the library's entry point.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn Store>,
    host: PluginHost,
    syncer: Syncer,
    config: RuntimeConfig,
    live: Mutex<HashMap<String, LiveRun>>,
    /// Live events by run, also for runs without an actor yet, so a watcher follows a run
    /// that this process starts driving later (a resume served here, S106).
    channels: Mutex<HashMap<String, Arc<LiveEvents>>>,
    /// What runs each step: plugins from `host`, natives from `natives`.
    executors: Executors,
    natives: NativeSteps,
    home: PathBuf,
    /// Runs whose actor stopped because storing their progress failed, with the failure.
    halted: Mutex<HashMap<String, StoreError>>,
    /// New runs whose creation is stored but not yet durable: listings leave them out (S100).
    creating: Mutex<HashSet<String>>,
    /// What this runtime counts.
    metrics: metrics::Metrics,
    /// Commits made durable so far, for [`RuntimeConfig::crash_after_commits`].
    commits: std::sync::atomic::AtomicU64,
    /// Held (read) by each request of another process being answered here, so that
    /// [`Runtime::close`] answers them before it lets the runs go.
    answering: Arc<tokio::sync::RwLock<()>>,
    /// Told when a run stops being driven here, so a worker looks for more at once.
    freed: tokio::sync::Notify,
    /// Runs driven here with an invocation in flight (see [`Runtime::busy`]).
    working: Arc<std::sync::atomic::AtomicUsize>,
    /// The graphs of runs loaded from the store.
    graphs: graphs::Graphs,
}

/// Where a watch ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Until {
    /// After the closing event.
    Closed,
    /// After the closing event or a `run-suspended` the run stands at.
    Settled,
}

impl Until {
    /// Whether a watch ends after an event of `kind` that is the run's latest.
    fn stops_at(self, kind: EventKind) -> bool {
        kind.is_closing() || (self == Until::Settled && kind == EventKind::RunSuspended)
    }
}

/// A run that has an actor in this process.
#[derive(Clone)]
struct LiveRun {
    tx: mpsc::UnboundedSender<Msg>,
    /// Closed once the actor has stopped (it holds the sender).
    status: watch::Receiver<Progress>,
}

/// A request [`LiveRun::ask`] could not send: the actor had stopped reading.
struct NotSent;

impl LiveRun {
    /// Sends the actor the request that `msg` makes of a reply channel and waits for the
    /// answer: `None` when the actor stopped without giving one.
    ///
    /// The actor's end is watched, not only the reply channel. A request sent just as the
    /// actor stops can land in its queue after the actor's last read of it; the queue then
    /// keeps the reply channel open, unanswered, for as long as any sender of the queue lives
    /// (a pending timer's, or this caller's), and waiting on the reply alone would never end.
    async fn ask<T>(
        self,
        msg: impl FnOnce(oneshot::Sender<T>) -> Msg,
    ) -> Result<Option<T>, NotSent> {
        let LiveRun { tx, mut status } = self;
        let (reply, mut answer) = oneshot::channel();
        tx.send(msg(reply)).map_err(|_| NotSent)?;
        drop(tx);
        Ok(tokio::select! {
            biased;
            answered = &mut answer => answered.ok(),
            () = stopped(&mut status) => answer.try_recv().ok(),
        })
    }
}

/// Returns once the actor that publishes `status` has stopped.
async fn stopped(status: &mut watch::Receiver<Progress>) {
    while status.changed().await.is_ok() {}
}

/// Where a live run stands, as its actor publishes it once durable (S100): what listings
/// show of it.
#[derive(Clone)]
struct Progress {
    status: RunStatus,
    /// When the run last changed, as of `status`.
    updated_at: i64,
}

impl Progress {
    /// The progress of a run in `state`.
    fn of(state: &RunState) -> Self {
        Progress {
            status: state.status,
            updated_at: state.updated_at,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
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
        let notices = store.shared().map(|s| s.notices());
        let metrics = metrics::Metrics::new();
        let graph_cache = config.graph_cache;
        let rt = Runtime {
            // The executors start child runs of workflow tools on this runtime (S125).
            inner: Arc::new_cyclic(|me| Inner {
                executors: Executors::new(host.clone(), store.clone(), natives.clone())
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
                working: Default::default(),
                graphs: graphs::Graphs::new(graph_cache),
            }),
        };
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
    fn write_failed(&self, cause: StoreError) -> RuntimeError {
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
    fn halt(&self, run_id: &str, cause: StoreError) {
        // Left for another process (or a later `weft resume`) to take up.
        let _ = self.inner.store.release(run_id);
        lock(&self.inner.halted).insert(run_id.to_owned(), cause);
        lock(&self.inner.live).remove(run_id);
        lock(&self.inner.channels).remove(run_id);
    }

    /// Why `run_id` stopped, if a store failure stopped it.
    fn halted(&self, run_id: &str) -> Option<RuntimeError> {
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
    fn now(&self) -> engine::Millis {
        self.inner.config.clock.now_ms()
    }

    /// The runtime's clock.
    fn clock(&self) -> Arc<dyn Clock> {
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
        load_workflow_with(path, None, &self.inner.host, &self.inner.natives).await
    }

    /// Loads and checks a workflow given as text (YAML or JSON); relative paths in it are
    /// relative to the current directory.
    pub async fn load_workflow_text(
        &self,
        name: &str,
        text: &str,
    ) -> Result<LoadedWorkflow, WorkflowError> {
        let path = std::path::absolute(name).unwrap_or_else(|_| PathBuf::from(name));
        load_workflow_with(&path, Some(text), &self.inner.host, &self.inner.natives).await
    }

    /// Starts a run of `workflow` with `input` (defaults filled, checked: S57, S58) and returns
    /// its id. The run goes on in the background; [`Runtime::wait`] waits for it.
    pub async fn start(
        &self,
        workflow: &LoadedWorkflow,
        input: Value,
        run_id: Option<String>,
    ) -> Result<String, RuntimeError> {
        self.start_workflow(workflow, input, run_id, Launch::Drive)
            .await
    }

    /// Stores a new run of `workflow` with `input` (checked as by [`Runtime::start`]) for any
    /// process on the store to drive, and returns its id at once: a `weft worker` takes it up.
    /// Only on a store processes share ([`RuntimeError::NotShared`] on the embedded one, where
    /// no other process would).
    pub async fn submit(
        &self,
        workflow: &LoadedWorkflow,
        input: Value,
        run_id: Option<String>,
    ) -> Result<String, RuntimeError> {
        if !self.is_shared() {
            return Err(RuntimeError::NotShared);
        }
        self.start_workflow(workflow, input, run_id, Launch::Submit)
            .await
    }

    /// Starts a new run of `workflow` (`run_id`, checked, or a new id) with `input`, as
    /// `then` says.
    async fn start_workflow(
        &self,
        workflow: &LoadedWorkflow,
        input: Value,
        run_id: Option<String>,
        then: Launch,
    ) -> Result<String, RuntimeError> {
        let new = new_run_id(run_id)?;
        let (graph, definition) = workflow
            .shared()
            .map_err(|e| encode_failed(&new.run_id, e))?;
        self.start_graph(graph, &definition, Some(workflow), input, new, then)
            .await
    }

    /// Starts run `new` of `graph` (serialized as `definition`) with `input`, checked; the
    /// components of `workflow`, when given, are stored with it.
    async fn start_graph(
        &self,
        graph: Arc<Graph>,
        definition: &Definition,
        workflow: Option<&LoadedWorkflow>,
        mut input: Value,
        new: NewId,
        then: Launch,
    ) -> Result<String, RuntimeError> {
        self.inner
            .config
            .input_limit()
            .check_value("run input", &input)?;
        engine::check_run_input(&graph, &mut input).map_err(RuntimeError::InvalidInput)?;
        let now = self.now();
        let state = engine::new_run(&graph, new.run_id, input, now);
        self.launch(state, graph, definition, workflow, now, then, new.fresh)
            .await
    }

    /// Starts a run of `workflow` with `input` and waits until it ends or suspends: what
    /// [`Runtime::start`] then [`Runtime::wait`] do, in one call, answered once, by the run's
    /// record, durable (S100). The run is driven in the background as with `start`: should the
    /// caller stop waiting, it goes on.
    pub async fn start_and_wait(
        &self,
        workflow: &LoadedWorkflow,
        input: Value,
        run_id: Option<String>,
    ) -> Result<RunRecord, RuntimeError> {
        let (waiter, answer) = oneshot::channel();
        let run_id = self
            .start_workflow(workflow, input, run_id, Launch::DriveAndWait(waiter))
            .await?;
        match answer.await {
            Ok(answer) => answer,
            // Its actor went away without answering: the store has the final word.
            Err(_) => self.wait_stored(&run_id).await,
        }
    }

    /// Starts a new run from step `path` of the ended run `source` (S94–S99), with the source's
    /// stored definition, or with `workflow` when given (S96); `input` replaces the step's
    /// stored input (S99). Returns the new run's id.
    pub async fn rerun(
        &self,
        source: &str,
        path: &str,
        workflow: Option<&LoadedWorkflow>,
        input: Option<Value>,
        run_id: Option<String>,
    ) -> Result<String, RuntimeError> {
        check_run_id(source)?;
        let NewId { run_id, fresh } = new_run_id(run_id)?;
        if let Some(input) = &input {
            self.inner
                .config
                .input_limit()
                .check_value("re-run input", input)?;
        }
        let (src_state, src_graph) = self.load(source)?;
        let log: Vec<Event> = read_records(&*self.inner.store, source, (0, 0))?
            .into_iter()
            .filter_map(|(_, r)| r.log)
            .collect();
        let base = self
            .inner
            .store
            .base(source)?
            .ok_or_else(|| RuntimeError::UnknownRun(source.into()))?;
        let base = checked::base(source, &base, &src_graph)?;
        // The workflow's graph and definition as its runs share them; else the source's graph,
        // encoded again for the new run.
        let (graph, definition) = match workflow {
            Some(w) => w.shared().map_err(|e| encode_failed(&run_id, e))?,
            None => {
                let bytes =
                    serde_json::to_vec(&*src_graph).map_err(|e| encode_failed(&run_id, e))?;
                (src_graph.clone(), Arc::new(Definition::new(bytes)))
            }
        };
        let now = self.now();
        let state = engine::rerun::rerun(
            &graph,
            engine::rerun::RerunRequest {
                source: &src_state,
                source_graph: &src_graph,
                base,
                log: &log,
                path,
                input,
                run_id: run_id.clone(),
                at: now,
            },
        )?;
        self.launch(
            state,
            graph,
            &definition,
            workflow,
            now,
            Launch::Drive,
            fresh,
        )
        .await
    }

    /// Stores a new run (its summary, definition, the components of `workflow` and its first
    /// state) and does with it what `then` says (`fresh`: its id was made here,
    /// [`NewRun::fresh_id`]);
    /// returns its id once the run is on disk (S100), or, for a caller that waits for the run
    /// to settle ([`Launch::DriveAndWait`]), once its first transition is stored: that caller
    /// learns nothing before a sync covers both. A driven run's creation is made durable by
    /// the fsync of its first transition, which the log holds after it: one fsync, not two.
    #[allow(clippy::too_many_arguments)]
    async fn launch(
        &self,
        state: RunState,
        graph: Arc<Graph>,
        definition: &Definition,
        workflow: Option<&LoadedWorkflow>,
        now: engine::Millis,
        then: Launch,
        fresh: bool,
    ) -> Result<String, RuntimeError> {
        let run_id = state.run_id.clone();
        let snapshot = serde_json::to_vec(&state).map_err(|e| encode_failed(&run_id, e))?;
        let creating = Creating::new(self, &run_id);
        let plugin_bytes: Vec<(&str, &[u8])> = workflow
            .into_iter()
            .flat_map(|w| &w.plugins)
            .map(|(d, p)| (d.as_str(), &p.bytes[..]))
            .collect();
        self.inner
            .store
            .create_run(NewRun {
                summary: &summary(&state),
                definition,
                plugins: &plugin_bytes,
                base: &snapshot,
                fresh_id: fresh,
            })
            .map_err(|e| self.write_failed(e))?;
        let waiter = match then {
            Launch::Drive => None,
            Launch::DriveAndWait(waiter) => Some(waiter),
            Launch::Submit => {
                self.durable().await?;
                drop(creating);
                // Pending and nobody's: a worker starts it (S101 recovers a pending run by
                // starting it).
                self.inner
                    .store
                    .release(&run_id)
                    .map_err(|e| self.write_failed(e))?;
                return Ok(run_id);
            }
        };
        let live = self.spawn(state, graph, Position::FRESH)?;
        let started = live
            .ask(|reply| Msg::Start {
                at: now,
                reply,
                creating,
                waiter,
            })
            .await;
        match started {
            Ok(Some(durable)) => durable.map(|()| run_id),
            // The actor went away without answering (it failed while starting the run and
            // ended it failed): the creation is made durable here.
            _ => self.durable().await.map(|()| run_id),
        }
    }

    /// Whether more runs driven here have an invocation in flight than
    /// [`RuntimeConfig::own_task_above`] says: then a run's invocations run on its own task,
    /// not on a task each (`Actor::commit`).
    fn busy(&self) -> bool {
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
    fn committed(&self) {
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
    async fn durable(&self) -> Result<(), RuntimeError> {
        self.durable_at(self.sync_ticket()).await
    }

    /// A ticket for the writes made so far, which [`Runtime::durable_at`] waits for; none
    /// without `sync_writes`.
    fn sync_ticket(&self) -> Option<u64> {
        self.inner
            .config
            .sync_writes
            .then(|| self.inner.syncer.ticket())
    }

    /// Returns once the writes made before `ticket` was taken are on disk.
    async fn durable_at(&self, ticket: Option<u64>) -> Result<(), RuntimeError> {
        if let Some(ticket) = ticket {
            self.inner
                .syncer
                .until(ticket)
                .await
                .map_err(|e| self.write_failed(e))?;
        }
        Ok(())
    }

    /// Waits until the run has ended or suspended, and returns its record.
    pub async fn wait(&self, run_id: &str) -> Result<RunRecord, RuntimeError> {
        check_run_id(run_id)?;
        if let Some(live) = self.live(run_id)
            && let Ok(Some(answer)) = live.ask(Msg::Wait).await
        {
            return answer;
        }
        self.wait_stored(run_id).await
    }

    /// [`Runtime::wait`] for a run this process does not drive, or whose actor went away
    /// without answering (it retired, or halted): the store has the final word.
    async fn wait_stored(&self, run_id: &str) -> Result<RunRecord, RuntimeError> {
        if let Some(halted) = self.halted(run_id) {
            return Err(halted);
        }
        if self.is_shared() {
            // Another process may drive it: follow it until it settles.
            let mut events = self.watch_settled(run_id, 1)?;
            while events.recv().await.is_some() {}
        }
        self.show(run_id).await
    }

    /// The run's record (WORKFLOW-FORMAT.md §3).
    pub async fn show(&self, run_id: &str) -> Result<RunRecord, RuntimeError> {
        check_run_id(run_id)?;
        if let Some(live) = self.live(run_id)
            && let Ok(Some(record)) = live.ask(Msg::Show).await
        {
            return Ok(record);
        }
        let (state, graph) = self.load(run_id)?;
        Ok(RunRecord::from_state(state, &graph))
    }

    /// Every metric of this runtime in the Prometheus text format (its content type is
    /// [`metrics::CONTENT_TYPE`]): stored runs by status, runs driven, step invocations in
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

    /// Resumes suspended steps (S67–S70).
    pub async fn resume(&self, run_id: &str, request: ResumeRequest) -> Result<(), RuntimeError> {
        self.check_resume(run_id, &request)?;
        self.ask(run_id, &shared::Ask::Resume(request), true).await
    }

    /// Resumes suspended steps as [`Runtime::resume`] does, then waits until the run ends or
    /// suspends again, as [`Runtime::wait`] does: one call, answered once, by the run's record
    /// (a refused resume is answered at once, with its error).
    pub async fn resume_and_wait(
        &self,
        run_id: &str,
        request: ResumeRequest,
    ) -> Result<RunRecord, RuntimeError> {
        self.check_resume(run_id, &request)?;
        match self.ensure_live(run_id) {
            Ok(live) => {
                let resume = |tx| Msg::ResumeWait(request.clone(), tx);
                if let Ok(Some(answer)) = live.ask(resume).await {
                    return answer;
                }
            }
            // Driven by another process: asked there, then followed.
            Err(RuntimeError::Elsewhere { .. }) => {}
            Err(e) => return Err(e),
        }
        // Its actor went away without answering: asked again, as `resume` does.
        self.resume(run_id, request).await?;
        self.wait(run_id).await
    }

    /// Refuses a resume of a malformed run id, or whose data is over the limit.
    fn check_resume(&self, run_id: &str, request: &ResumeRequest) -> Result<(), RuntimeError> {
        check_run_id(run_id)?;
        self.inner
            .config
            .resume_limit()
            .check_value("resume data", &request.data)?;
        Ok(())
    }

    /// Recovers a `pending` or `running` run that no process drives (S101, S114): its driver
    /// starts here and issues again what was in flight (S102, S103). A run this process (or,
    /// on a shared store, another live one) drives already is left as it is; a suspended or
    /// ended one is refused with [`RuntimeError::NotRecoverable`].
    pub async fn recover(&self, run_id: &str) -> Result<(), RuntimeError> {
        check_run_id(run_id)?;
        let summary = self
            .inner
            .store
            .summary(run_id)?
            .ok_or_else(|| RuntimeError::UnknownRun(run_id.into()))?;
        if !matches!(summary.status, RunStatus::Running | RunStatus::Pending) {
            return Err(RuntimeError::NotRecoverable {
                run: run_id.into(),
                status: summary.status,
            });
        }
        match self.ensure_live(run_id) {
            Ok(_) => Ok(()),
            // Another process holds it: recovered here once it shows itself gone, else it is
            // driven there and needs nothing (S127).
            Err(RuntimeError::Elsewhere { worker, .. }) => {
                self.take_up_when_gone(run_id, &worker).await
            }
            Err(e) => Err(e),
        }
    }

    /// What `weft resume` and `POST /runs/{id}/resume` do: resume with `request`; without one
    /// (no selector, no data), recover a running or pending run that no process drives (S101),
    /// else resume every suspension with `{}`.
    #[cfg(feature = "server")]
    pub(crate) async fn resume_or_recover(
        &self,
        run_id: &str,
        request: Option<ResumeRequest>,
    ) -> Result<(), RuntimeError> {
        let request = match request {
            Some(request) => request,
            None => match self.recover(run_id).await {
                Err(RuntimeError::NotRecoverable { .. }) => ResumeRequest {
                    step: None,
                    label: None,
                    foreach_index: None,
                    data: Value::Object(Default::default()),
                },
                recovered => return recovered,
            },
        };
        self.resume(run_id, request).await
    }

    /// Cancels a pending, running or suspended run (S75–S78). A run whose stored data does not
    /// load ends `cancelled` without running anything more of it.
    pub async fn cancel(&self, run_id: &str) -> Result<(), RuntimeError> {
        check_run_id(run_id)?;
        match self.ask(run_id, &shared::Ask::Cancel, true).await {
            Err(e) if is_unloadable(&e) => {
                let Some(s) = self.inner.store.summary(run_id)? else {
                    return Err(e);
                };
                if s.status.is_ended() {
                    return Err(Refusal::AlreadyEnded {
                        run: run_id.into(),
                        status: s.status,
                    }
                    .into());
                }
                tracing::warn!(
                    run = %run_id,
                    "the run cannot be loaded ({e}); it ends cancelled without running anything more"
                );
                self.end_undrivable(run_id, RunStatus::Cancelled, &e.to_string())
                    .await?;
                Ok(())
            }
            other => other,
        }
    }

    /// Sends a request to the run's actor; when the actor retires meanwhile, asks a new one.
    /// A run another process drives (a shared store) gets the request through the store when
    /// `forward`, else [`RuntimeError::Elsewhere`].
    async fn ask(
        &self,
        run_id: &str,
        ask: &shared::Ask,
        forward: bool,
    ) -> Result<(), RuntimeError> {
        let mut attempt = 0;
        while attempt < self.inner.config.ask_attempts {
            let live = match self.ensure_live(run_id) {
                Err(RuntimeError::Elsewhere { worker, .. }) if forward => {
                    match self.ask_elsewhere(run_id, &worker, ask).await? {
                        Some(answer) => return answer,
                        // It moved on: look again (not an attempt: the run was not there).
                        None => continue,
                    }
                }
                other => other?,
            };
            attempt += 1;
            match live.ask(|tx| ask.msg(tx)).await {
                Ok(Some(answer)) => return answer,
                Ok(None) => {}
                Err(NotSent) => self.retire(run_id),
            }
        }
        Err(RuntimeError::DriverStopped { run: run_id.into() })
    }

    /// The run's events from `from_seq` on: the stored ones, then live ones as this process
    /// drives the run, without gap or duplicate (S87). The receiver ends after the run's closing
    /// event, at once when the run has closed before `from_seq`.
    pub fn watch(
        &self,
        run_id: &str,
        from_seq: u64,
    ) -> Result<mpsc::UnboundedReceiver<Arc<StoredEvent>>, RuntimeError> {
        self.watch_until(run_id, from_seq, Until::Closed)
    }

    /// [`Runtime::watch`] that also ends at a suspension that is the run's current state, as a
    /// plain `weft watch` does (S106): after the `run-suspended` the run stands at, when it is
    /// suspended, and at once when that event lies before `from_seq`. A `run-suspended` that a
    /// resume or cancel has already followed is passed like any other event.
    pub fn watch_settled(
        &self,
        run_id: &str,
        from_seq: u64,
    ) -> Result<mpsc::UnboundedReceiver<Arc<StoredEvent>>, RuntimeError> {
        check_run_id(run_id)?;
        self.watch_until(run_id, from_seq, Until::Settled)
    }

    fn watch_until(
        &self,
        run_id: &str,
        from_seq: u64,
        until: Until,
    ) -> Result<mpsc::UnboundedReceiver<Arc<StoredEvent>>, RuntimeError> {
        check_run_id(run_id)?;
        if self.inner.store.summary(run_id)?.is_none() {
            return Err(RuntimeError::UnknownRun(run_id.into()));
        }
        // Subscribe before reading the store: no event falls between the two.
        let channel = self.channel(run_id);
        let mut live_rx = channel.subscribe();
        // Its actor syncs what it stored meanwhile now, for this watcher, rather than when the
        // run next needs a sync.
        if let Some(live) = self.live(run_id) {
            let _ = live.tx.send(Msg::Watched);
        }
        // Paired with the actor's when it publishes (`unpublished`): either it finds this
        // watcher subscribed and sends it the events, or this watcher finds them durable below.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        let (tx, rx) = mpsc::unbounded_channel();
        let mut next = from_seq.max(1);
        let bound = self.durable_bound(run_id, &channel);
        let stored = stored_events(&*self.inner.store, run_id, next, bound)?;
        // Where the run stands is told by its last stored event, also when `from_seq` lies
        // past it: nothing follows a closing event (S88), and a `run-suspended` that nothing
        // follows is the suspension the run stands at.
        let last = match stored.last() {
            Some(event) => Some(event.kind),
            None => last_event(&*self.inner.store, run_id, bound)?.map(|e| e.kind),
        };
        for event in stored {
            next = event.seq + 1;
            let _ = tx.send(Arc::new(event));
        }
        // A run this process stopped driving because its store failed (and that no actor drives
        // again since) gets no more events here: the channel just subscribed to was made for
        // this watcher, and nothing would ever send on it or close it.
        let halted_here = {
            let live = lock(&self.inner.live);
            !live.contains_key(run_id) && lock(&self.inner.halted).contains_key(run_id)
        };
        if halted_here || last.is_some_and(|kind| until.stops_at(kind)) {
            // Nothing more will come: drop the channel unless a live run or watcher uses it.
            drop(live_rx);
            let live = lock(&self.inner.live).contains_key(run_id);
            let mut channels = lock(&self.inner.channels);
            if !live
                && channels
                    .get(run_id)
                    .is_some_and(|c| c.receiver_count() == 0)
            {
                channels.remove(run_id);
            }
        } else {
            let store = self.inner.store.clone();
            let run = run_id.to_owned();
            // Neither the channel nor the runtime itself: the channel's sender must go once the
            // run's actor and the runtime let it go, which ends this watch when the run halts,
            // and a watch keeps no runtime open.
            let (channel, inner, bounded) = (
                Arc::downgrade(&channel),
                Arc::downgrade(&self.inner),
                run.clone(),
            );
            let bound = move || {
                let (channel, inner) = (channel.upgrade()?, inner.upgrade()?);
                Runtime { inner }.durable_bound(&bounded, &channel)
            };
            // A run another process drives is followed by the store's notices.
            let mut notices = store.shared().map(|s| s.notices());
            if notices.is_some() && catch_up(&*store, &run, &mut next, &tx, until, &bound) {
                return Ok(rx);
            }
            tokio::spawn(async move {
                // A look at the store now and then, whatever the notices say.
                let mut tick = tokio::time::interval(FOLLOW_TICK);
                tick.tick().await;
                loop {
                    let shared = notices.is_some();
                    let noticed = async {
                        match &mut notices {
                            Some(n) => n.recv().await,
                            None => std::future::pending().await,
                        }
                    };
                    let ticked = async {
                        if shared {
                            tick.tick().await;
                        } else {
                            std::future::pending::<()>().await;
                        }
                    };
                    let received = tokio::select! {
                        r = live_rx.recv() => r,
                        n = noticed => match n {
                            Ok(Notice::Records(r)) if r != run => continue,
                            Ok(Notice::Records(_) | Notice::Reconnected)
                            | Err(broadcast::error::RecvError::Lagged(_)) => {
                                if catch_up(&*store, &run, &mut next, &tx, until, &bound) {
                                    return;
                                }
                                continue;
                            }
                            Ok(_) => continue,
                            Err(broadcast::error::RecvError::Closed) => {
                                notices = None;
                                continue;
                            }
                        },
                        () = ticked => {
                            if catch_up(&*store, &run, &mut next, &tx, until, &bound) {
                                return;
                            }
                            continue;
                        }
                        // The reader went away: stop following.
                        () = tx.closed() => return,
                    };
                    match received {
                        Ok(ev) if ev.seq >= next => {
                            next = ev.seq + 1;
                            let stop = until.stops_at(ev.kind);
                            if tx.send(ev).is_err() || stop {
                                return;
                            }
                        }
                        // Sent already, or before `from_seq`.
                        Ok(ev) if !until.stops_at(ev.kind) => {}
                        // A stop before `from_seq` (the store says whether the run still stands
                        // there), or the watcher fell behind the live buffer: everything
                        // published is stored, so catch up from the store, then go on live.
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {
                            if catch_up(&*store, &run, &mut next, &tx, until, &bound) {
                                return;
                            }
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                }
            });
        }
        Ok(rx)
    }

    /// Recovers every `pending` or `running` run that no live process drives (S101, S114), each
    /// on its own: a run whose stored data does not load is marked failed, and one the core
    /// fails on while recovering it ends failed (by its actor), while the others go on.
    pub async fn recover_all(&self) -> Result<Recovery, RuntimeError> {
        let mut report = Recovery::default();
        for run in self.inner.store.runs()? {
            if !matches!(run.status, RunStatus::Running | RunStatus::Pending)
                || self.live(&run.run_id).is_some()
            {
                continue;
            }
            self.recover_one(&run.run_id, &mut report).await;
        }
        Ok(report)
    }

    /// Recovers `run_id` into `report`, unless another live process drives it.
    async fn recover_one(&self, run_id: &str, report: &mut Recovery) {
        let error = match self.ensure_live(run_id) {
            Ok(_) => {
                report.recovered.push(run_id.to_owned());
                return;
            }
            Err(RuntimeError::Elsewhere { .. }) => return,
            Err(e) => e,
        };
        let mut marked_failed = false;
        if is_unloadable(&error) {
            match self
                .end_undrivable(run_id, RunStatus::Failed, &error.to_string())
                .await
            {
                Ok(_) => marked_failed = true,
                Err(e) => tracing::error!(run = %run_id, "cannot mark the run failed: {e}"),
            }
        }
        report.failed.push(Unrecovered {
            run_id: run_id.to_owned(),
            error,
            marked_failed,
        });
    }

    fn live(&self, run_id: &str) -> Option<LiveRun> {
        lock(&self.inner.live).get(run_id).cloned()
    }

    /// The run's latest state: its snapshot, with the log events after it folded in again.
    fn load(&self, run_id: &str) -> Result<(RunState, Arc<Graph>), RuntimeError> {
        self.load_counted(run_id)
            .map(|(state, graph, _)| (state, graph))
    }

    /// [`Runtime::load`], with where its stored records stand for an actor taking it up.
    fn load_counted(&self, run_id: &str) -> Result<(RunState, Arc<Graph>, Position), RuntimeError> {
        let store = &self.inner.store;
        let definition = store
            .definition(run_id)?
            .ok_or_else(|| RuntimeError::UnknownRun(run_id.into()))?;
        let graph = self.inner.graphs.of(run_id, definition)?;
        let (mut state, mut last, from, snapshot_len) = match store.snapshot(run_id)? {
            Some(bytes) => {
                let snap = checked::snapshot(run_id, &bytes, &graph)?;
                let (seq, sub) = snap.covers;
                (snap.state, Some(snap.covers), (seq, sub + 1), bytes.len())
            }
            None => {
                let base = store
                    .base(run_id)?
                    .ok_or_else(|| RuntimeError::UnknownRun(run_id.into()))?;
                (checked::base(run_id, &base, &graph)?, None, (0, 0), 0)
            }
        };
        let stored = store.records(run_id, from)?;
        // A new actor counts these toward its next snapshot: a run taken up again and again (a
        // resume in another process each time) still folds at most a snapshot's worth.
        let since_snapshot: usize = stored.iter().map(|(_, bytes)| bytes.len()).sum();
        let records = parse_records(run_id, stored)?;
        if let Some((at, _)) = records.last() {
            last = Some(*at);
        }
        engine::fold(
            &mut state,
            &graph,
            records.into_iter().filter_map(|(_, record)| record.log),
        );
        let (next_seq, next_sub) = last.map_or((1, 0), |(seq, sub)| (seq + 1, sub + 1));
        let at = Position {
            next_seq,
            next_sub,
            since_snapshot,
            snapshot_len,
        };
        Ok((state, graph, at))
    }

    /// The run's actor, started from the store when this process has none.
    fn ensure_live(&self, run_id: &str) -> Result<LiveRun, RuntimeError> {
        if let Some(live) = self.live(run_id) {
            return Ok(live);
        }
        if let Claim::Elsewhere(worker) = self.inner.store.claim(run_id)? {
            return Err(RuntimeError::Elsewhere {
                run: run_id.into(),
                worker,
            });
        }
        let (state, graph, at) = self.load_counted(run_id)?;
        let recover = matches!(state.status, RunStatus::Running | RunStatus::Pending);
        let recover = recover.then(|| Msg::Event(Event::Recover { at: self.now() }));
        Ok(self.spawn_with(state, graph, at, recover))
    }

    fn spawn(
        &self,
        state: RunState,
        graph: Arc<Graph>,
        at: Position,
    ) -> Result<LiveRun, RuntimeError> {
        Ok(self.spawn_with(state, graph, at, None))
    }

    /// The run's actor: a new one, given `first` as its first message, unless one runs already
    /// (which gets nothing: two recoveries of one run would issue its invocations twice).
    fn spawn_with(
        &self,
        state: RunState,
        graph: Arc<Graph>,
        at: Position,
        first: Option<Msg>,
    ) -> LiveRun {
        let mut live = lock(&self.inner.live);
        if let Some(existing) = live.get(&state.run_id) {
            return existing.clone();
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let events = self.channel(&state.run_id);
        // What is stored when the actor takes the run up is durable.
        events.mark_durable(at.next_seq.saturating_sub(1));
        let (status_tx, status) = watch::channel(Progress::of(&state));
        let handle = LiveRun {
            tx: tx.clone(),
            status,
        };
        live.insert(state.run_id.clone(), handle.clone());
        lock(&self.inner.halted).remove(&state.run_id);
        if let Some(msg) = first {
            let _ = tx.send(msg);
        }
        let actor = Actor::new(self.clone(), state, graph, tx, events, status_tx, at);
        tokio::spawn(actor.run(rx));
        handle
    }

    fn retire(&self, run_id: &str) {
        lock(&self.inner.live).remove(run_id);
        self.inner.freed.notify_one();
        if let Err(e) = self.inner.store.release(run_id) {
            tracing::warn!(run = %run_id, "cannot let the run go: {e}");
        }
        let mut channels = lock(&self.inner.channels);
        if channels
            .get(run_id)
            .is_some_and(|c| c.receiver_count() == 0)
        {
            channels.remove(run_id);
        }
    }

    /// How far a watcher may read the events of `run_id` from the store: up to the last one
    /// published, while this process drives the run. Its actor publishes a transition's events
    /// once a sync covers them (S100), and the store holds them from before; a watcher gets the
    /// rest live, once published. `None` (no bound) for a run driven elsewhere or not at all,
    /// whose stored events are all durable.
    fn durable_bound(&self, run_id: &str, channel: &LiveEvents) -> Option<u64> {
        lock(&self.inner.live)
            .contains_key(run_id)
            .then(|| channel.durable_through())
    }

    /// The run's live event channel, made when missing.
    fn channel(&self, run_id: &str) -> Arc<LiveEvents> {
        lock(&self.inner.channels)
            .entry(run_id.to_owned())
            .or_insert_with(|| Arc::new(LiveEvents::new(self.inner.config.watch_buffer)))
            .clone()
    }
}

/// A new run among those whose creation is not yet durable, which listings leave out (S100),
/// until this is dropped: once a sync covered the creation, or it failed. The actor that starts
/// the run holds it, so a caller that stops waiting does not end it early.
pub(crate) struct Creating {
    rt: Runtime,
    run_id: String,
}

impl Creating {
    fn new(rt: &Runtime, run_id: &str) -> Self {
        lock(&rt.inner.creating).insert(run_id.to_owned());
        Creating {
            rt: rt.clone(),
            run_id: run_id.to_owned(),
        }
    }
}

impl Drop for Creating {
    fn drop(&mut self) {
        lock(&self.rt.inner.creating).remove(&self.run_id);
    }
}

/// How often a follower of a run on a shared store reads the store whatever the notices say.
const FOLLOW_TICK: std::time::Duration = std::time::Duration::from_secs(1);

/// The id for a new run: the one given, once checked, or a new ULID.
fn new_run_id(given: Option<String>) -> Result<NewId, RuntimeError> {
    match given {
        Some(run_id) => {
            check_run_id(&run_id)?;
            Ok(NewId {
                run_id,
                fresh: false,
            })
        }
        None => Ok(NewId {
            run_id: ulid::Ulid::new().to_string(),
            fresh: true,
        }),
    }
}

/// What [`Runtime::launch`] does with a new run once it is stored.
enum Launch {
    /// Leaves it to the store's other processes: a worker starts it.
    Submit,
    /// Drives it here.
    Drive,
    /// Drives it here, this waiter queued behind its start ([`Msg::Wait`]).
    DriveAndWait(Waiter),
}

/// A new run's id, and whether it was made here ([`NewRun::fresh_id`]).
struct NewId {
    run_id: String,
    fresh: bool,
}

/// The run's records from `from` on, parsed.
fn read_records(
    store: &dyn Store,
    run_id: &str,
    from: RecordKey,
) -> Result<Vec<(RecordKey, RecordIn)>, RuntimeError> {
    parse_records(run_id, store.records(run_id, from)?)
}

/// The run's stored records, parsed.
fn parse_records(
    run_id: &str,
    stored: Vec<(RecordKey, Vec<u8>)>,
) -> Result<Vec<(RecordKey, RecordIn)>, RuntimeError> {
    stored
        .into_iter()
        .map(|(at, bytes)| checked::record(run_id, &bytes).map(|r| (at, r)))
        .collect()
}

/// Sends the run's stored events from `next` on; whether the watch is over: its reader went
/// away, the store failed, or the run's last stored event ends it. On a store that other
/// processes drive runs in, a failed read is not the end: the follower tries again at its next
/// notice or tick.
fn catch_up(
    store: &dyn Store,
    run_id: &str,
    next: &mut u64,
    tx: &mpsc::UnboundedSender<Arc<StoredEvent>>,
    until: Until,
    bound: &dyn Fn() -> Option<u64>,
) -> bool {
    let failed = |e: RuntimeError| {
        if store.shared().is_none() {
            return true;
        }
        tracing::warn!(run = %run_id, "cannot read the run's events, trying again: {e}");
        false
    };
    let (missed, last) = loop {
        let bound = bound();
        let missed = match stored_events(store, run_id, *next, bound) {
            Ok(missed) => missed,
            Err(e) => return failed(e),
        };
        if let Some(event) = missed.last() {
            let kind = event.kind;
            break (missed, Some(kind));
        }
        match last_event(store, run_id, bound) {
            // Stored after the read above (another process drives the run): read them too,
            // never judge the watch over on an event not sent.
            Ok(Some(event)) if event.seq >= *next => continue,
            Ok(event) => break (missed, event.map(|e| e.kind)),
            Err(e) => return failed(e),
        }
    };
    for ev in missed {
        *next = ev.seq + 1;
        if tx.send(Arc::new(ev)).is_err() {
            return true;
        }
    }
    last.is_some_and(|kind| until.stops_at(kind))
}

/// The run's last stored event, or the last up to `bound` (see [`Runtime::durable_bound`]).
fn last_event(
    store: &dyn Store,
    run_id: &str,
    bound: Option<u64>,
) -> Result<Option<StoredEvent>, RuntimeError> {
    match store.last_record(run_id)? {
        // The record's key holds the seq of the last event stored up to it.
        Some((seq, _)) => {
            let from = bound.map_or(seq, |b| seq.min(b));
            Ok(stored_events(store, run_id, from, bound)?.pop())
        }
        None => Ok(None),
    }
}

/// The stored events of a run with `seq >= from`, in order, and none past `bound` (see
/// [`Runtime::durable_bound`]).
fn stored_events(
    store: &dyn Store,
    run_id: &str,
    from: u64,
    bound: Option<u64>,
) -> Result<Vec<StoredEvent>, RuntimeError> {
    Ok(read_records(store, run_id, (from, 0))?
        .into_iter()
        .flat_map(|(_, r)| r.events)
        .filter(|e| e.seq >= from)
        .take_while(|e| bound.is_none_or(|b| e.seq <= b))
        .collect())
}

fn encode_failed(run: &str, e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Encode {
        run: run.into(),
        message: e.to_string(),
    }
}

fn summary(state: &RunState) -> RunSummary {
    RunSummary {
        run_id: state.run_id.clone(),
        workflow_id: state.workflow_id.clone(),
        status: state.status,
        created_at: state.created_at,
        updated_at: state.updated_at,
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    /// What a cancel asked of a live run answers.
    type Asked = Result<Option<Result<(), RuntimeError>>, NotSent>;

    /// A live run as the runtime holds it, with its actor's ends: its queue and the sender of
    /// its status, which the actor drops as it stops.
    fn live_run() -> (
        LiveRun,
        mpsc::UnboundedReceiver<Msg>,
        watch::Sender<Progress>,
    ) {
        let (tx, queue) = mpsc::unbounded_channel();
        let (status_tx, status) = watch::channel(Progress {
            status: RunStatus::Running,
            updated_at: 0,
        });
        (LiveRun { tx, status }, queue, status_tx)
    }

    /// A cancel asked of a live run, sent and not yet answered.
    struct Asking<F> {
        /// The waiting call.
        asked: std::pin::Pin<Box<F>>,
        /// The reply channel its request carries.
        reply: oneshot::Sender<Result<(), RuntimeError>>,
        /// The sender of the actor's status, dropped as the actor stops.
        status: watch::Sender<Progress>,
    }

    fn asked_a_cancel() -> Asking<impl Future<Output = Asked>> {
        let (live, mut queue, status) = live_run();
        let mut asked = Box::pin(live.ask(Msg::Cancel));
        assert!(
            (&mut asked).now_or_never().is_none(),
            "answered before asked"
        );
        let Ok(Msg::Cancel(reply)) = queue.try_recv() else {
            panic!("the request was not queued");
        };
        assert!(
            (&mut asked).now_or_never().is_none(),
            "unanswered, actor live"
        );
        Asking {
            asked,
            reply,
            status,
        }
    }

    /// A request that landed in the queue of an actor that had stopped reading it (sent as
    /// the actor retired) is not waited for once the actor is gone, although its reply channel
    /// is still open: `wait`, `show`, `resume` and `cancel` then ask the store. Waiting on
    /// the reply alone hung `Runtime::wait` about once in ten thousand runs under load.
    #[test]
    fn a_request_left_in_a_stopped_actors_queue_is_not_waited_for() {
        let Asking {
            asked,
            reply,
            status,
        } = asked_a_cancel();
        drop(status);
        match asked.now_or_never() {
            Some(Ok(None)) => {}
            Some(_) => panic!("an answer nobody gave"),
            None => panic!("still waiting on an actor that has stopped"),
        }
        assert!(reply.is_closed(), "the caller let go of the reply channel");
    }

    /// An answer given just before the actor stopped is the answer, not the store's.
    #[test]
    fn an_answer_given_as_the_actor_stops_is_kept() {
        let Asking {
            asked,
            reply,
            status,
        } = asked_a_cancel();
        let _ = reply.send(Ok(()));
        drop(status);
        assert!(matches!(asked.now_or_never(), Some(Ok(Some(Ok(()))))));
    }

    /// A request to an actor that no longer reads its queue is not sent.
    #[test]
    fn a_request_to_a_closed_queue_is_not_sent() {
        let (live, queue, _status) = live_run();
        drop(queue);
        assert!(matches!(
            live.ask(Msg::Cancel).now_or_never(),
            Some(Err(NotSent))
        ));
    }
}
