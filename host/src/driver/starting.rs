//! Starting runs: a new run of a workflow ([`Runtime::start`], [`Runtime::submit`],
//! [`Runtime::start_and_wait`]) or a re-run from a step of an ended one ([`Runtime::rerun`]),
//! stored and then driven here or left to a worker; and keeping a new run out of listings until
//! its creation is durable ([`Creating`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::oneshot;

use super::actor::{Msg, Position, Waiter};
use super::error::encode_failed;
use super::load::read_records;
use super::runtime::{lock, summary};
use super::{RunRecord, Runtime, RuntimeError, checked};
use crate::engine::{self, Event, Graph, RunState};
use crate::run_id::{check_new_run_id, check_run_id};
use crate::store::{Definition, NewRun};
use crate::workflow::LoadedWorkflow;

/// How a run starts, beyond its workflow and input: its id, its tags.
///
/// ```
/// let options = weft::StartOptions::default()
///     .with_run_id("order-1234")
///     .with_tag("team", "payments");
/// assert_eq!(options.tags["team"], "payments");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StartOptions {
    /// The run's id; one is made when it is not given.
    pub run_id: Option<String>,
    /// Its tags, `key: value` (checked: 1-64 characters of `A-Z a-z 0-9 . _ -` per key, at most
    /// 256 characters without control characters or `,` per value, at most 16 tags).
    pub tags: BTreeMap<String, String>,
}

impl StartOptions {
    /// Sets [`StartOptions::run_id`].
    pub fn with_run_id(mut self, run_id: impl Into<String>) -> Self {
        self.run_id = Some(run_id.into());
        self
    }

    /// Adds a tag.
    pub fn with_tag(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.tags.insert(key.into(), value.into());
        self
    }

    /// Options of run id `run_id` (or a new one) and no tags.
    fn of_id(run_id: Option<String>) -> Self {
        StartOptions {
            run_id,
            tags: BTreeMap::new(),
        }
    }
}

impl Runtime {
    /// Starts a run of `workflow` with `input` (defaults filled, checked: S57, S58) and returns
    /// its id. The run goes on in the background; [`Runtime::wait`] waits for it.
    pub async fn start(
        &self,
        workflow: &LoadedWorkflow,
        input: Value,
        run_id: Option<String>,
    ) -> Result<String, RuntimeError> {
        self.start_with(workflow, input, StartOptions::of_id(run_id))
            .await
    }

    /// [`Runtime::start`] with its id and tags given by `options`.
    pub async fn start_with(
        &self,
        workflow: &LoadedWorkflow,
        input: Value,
        options: StartOptions,
    ) -> Result<String, RuntimeError> {
        self.start_workflow(workflow, input, options, Launch::Drive)
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
        self.submit_with(workflow, input, StartOptions::of_id(run_id))
            .await
    }

    /// [`Runtime::submit`] with its id and tags given by `options`.
    pub async fn submit_with(
        &self,
        workflow: &LoadedWorkflow,
        input: Value,
        options: StartOptions,
    ) -> Result<String, RuntimeError> {
        if !self.is_shared() {
            return Err(RuntimeError::NotShared);
        }
        self.start_workflow(workflow, input, options, Launch::Submit)
            .await
    }

    /// Starts a new run of `workflow` (the id of `options`, checked, or a new id, and its tags)
    /// with `input`, as `then` says.
    pub(super) async fn start_workflow(
        &self,
        workflow: &LoadedWorkflow,
        input: Value,
        options: StartOptions,
        then: Launch,
    ) -> Result<String, RuntimeError> {
        crate::tags::check_tags(&options.tags)?;
        let mut new = new_run_id(options.run_id)?;
        new.tags = options.tags;
        let (graph, definition) = workflow
            .shared()
            .map_err(|e| encode_failed(&new.run_id, e))?;
        self.start_graph(graph, &definition, Some(workflow), input, new, then)
            .await
    }

    /// Starts run `new` of `graph` (serialized as `definition`) with `input`, checked; the
    /// components of `workflow`, when given, are stored with it.
    pub(super) async fn start_graph(
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
        let mut state = engine::new_run(&graph, new.run_id, input, now);
        state.tool_call_of = new.tool_call_of;
        state.tags = new.tags;
        state.value_limit = self.inner.config.max_output_bytes;
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
        self.start_and_wait_with(workflow, input, StartOptions::of_id(run_id))
            .await
    }

    /// [`Runtime::start_and_wait`] with its id and tags given by `options`.
    pub async fn start_and_wait_with(
        &self,
        workflow: &LoadedWorkflow,
        input: Value,
        options: StartOptions,
    ) -> Result<RunRecord, RuntimeError> {
        let (waiter, answer) = oneshot::channel();
        let run_id = self
            .start_workflow(workflow, input, options, Launch::DriveAndWait(waiter))
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
        let NewId { run_id, fresh, .. } = new_run_id(run_id)?;
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
        let mut state = engine::rerun::rerun(
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
        // The source was folded under the limit it ran with; the new run makes its values
        // under this runtime's.
        state.value_limit = self.inner.config.max_output_bytes;
        // A re-run carries its source's tags.
        state.tags = src_state.tags.clone();
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
    pub(super) async fn launch(
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
}

/// A new run among those whose creation is not yet durable, which listings leave out (S100),
/// until this is dropped: once a sync covered the creation, or it failed. The actor that starts
/// the run holds it, so a caller that stops waiting does not end it early.
pub(crate) struct Creating {
    rt: Runtime,
    run_id: String,
}

impl Creating {
    /// Counts `run_id` among the runs being created until the guard is dropped.
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

/// The id for a new run started from outside: the one given, once checked (outside the
/// namespace of workflow tools' children too), or a new ULID.
fn new_run_id(given: Option<String>) -> Result<NewId, RuntimeError> {
    match given {
        Some(run_id) => {
            check_new_run_id(&run_id)?;
            Ok(NewId {
                run_id,
                fresh: false,
                tool_call_of: None,
                tags: BTreeMap::new(),
            })
        }
        None => Ok(NewId {
            run_id: ulid::Ulid::new().to_string(),
            fresh: true,
            tool_call_of: None,
            tags: BTreeMap::new(),
        }),
    }
}

/// What [`Runtime::launch`] does with a new run once it is stored.
pub(super) enum Launch {
    /// Leaves it to the store's other processes: a worker starts it.
    Submit,
    /// Drives it here.
    Drive,
    /// Drives it here, this waiter queued behind its start ([`Msg::Wait`]).
    DriveAndWait(Waiter),
}

/// A new run's id, whether it was made here ([`NewRun::fresh_id`]), and the workflow-tool
/// call it is the child of.
pub(super) struct NewId {
    /// The id.
    pub(super) run_id: String,
    /// Made here.
    pub(super) fresh: bool,
    /// For a workflow tool's child run: the call starting it (S125).
    pub(super) tool_call_of: Option<crate::engine::ToolCallOf>,
    /// The run's tags, checked.
    pub(super) tags: BTreeMap<String, String>,
}
