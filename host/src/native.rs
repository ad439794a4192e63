//! Native Rust steps: async closures registered by name and used beside plugin steps.
//!
//! A workflow names one with `{ id: ..., native: NAME }` (or [`Entry::native`](crate::Entry::native)).
//! It gets the same [`StepCall`] a plugin step gets, can write chunks, log and patch the state
//! through its [`NativeCall`], and follows the same rules for retries, schemas and suspension.
//! A native step is a [`StepExecutor`]; [`NativeSteps`] holds any executor by name.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};

use futures::future::BoxFuture;
use serde_json::Value;

use crate::engine::invocation::{InvocationResult, StepCall, StepFailure, StepOutcome};
use crate::executor::{
    AbortHandle, EventSink, GuestEvent, LogLevel, RunAccess, StepExecutor, StepInfo, StepRequest,
    until_aborted,
};

/// The plugin key native steps use in a graph: what a stored graph says of a step that an
/// executor registered by name runs.
pub(crate) const NATIVE_PLUGIN: &str = "native";

type NativeFuture = Pin<Box<dyn Future<Output = Result<StepOutcome, StepFailure>> + Send>>;
type NativeFn = dyn Fn(NativeCall) -> NativeFuture + Send + Sync;

/// One native step: the function and what it declares about itself.
#[derive(Clone)]
pub struct NativeStep {
    info: StepInfo,
    run: Arc<NativeFn>,
}

impl NativeStep {
    /// A native step running `f` for every invocation.
    pub fn new<F, Fut>(f: F) -> Self
    where
        F: Fn(NativeCall) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<StepOutcome, StepFailure>> + Send + 'static,
    {
        NativeStep {
            info: StepInfo::default(),
            run: Arc::new(move |call| Box::pin(f(call))),
        }
    }

    /// Declares what the step accepts (JSON Schema 2020-12).
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.info.input_schema = Some(schema);
        self
    }

    /// Declares what the step returns.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.info.output_schema = Some(schema);
        self
    }

    /// Declares the step's configuration.
    pub fn config_schema(mut self, schema: Value) -> Self {
        self.info.config_schema = Some(schema);
        self
    }

    /// Declares what a resume must give.
    pub fn resume_schema(mut self, schema: Value) -> Self {
        self.info.resume_schema = Some(schema);
        self
    }

    /// Declares what the step suspends with.
    pub fn suspend_schema(mut self, schema: Value) -> Self {
        self.info.suspend_schema = Some(schema);
        self
    }

    /// Describes the step.
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.info.description = text.into();
        self
    }

    /// What the step declares.
    pub fn info(&self) -> &StepInfo {
        &self.info
    }
}

impl StepExecutor for NativeStep {
    /// Runs one invocation. Past its deadline (S15) the step sees its abort with reason
    /// `timeout` and the attempt fails with `timeout` at once: the step's future is dropped,
    /// which stops a Rust future at its next await.
    fn execute(&self, request: StepRequest) -> BoxFuture<'_, InvocationResult> {
        let StepRequest { call, io, .. } = request;
        // The step's own view: a timeout aborts it without touching the driver's handle.
        let abort = io.abort.child();
        let patches = Arc::new(Mutex::new(Vec::new()));
        let native = NativeCall {
            call,
            sink: io.sink,
            run: io.run,
            abort: abort.clone(),
            patches: patches.clone(),
        };
        let run = (self.run)(native);
        let deadline = io.deadline;
        Box::pin(async move {
            let outcome = until_aborted(
                run,
                &abort,
                deadline,
                "the step was cancelled",
                "the native step did not finish within its deadline of",
            )
            .await;
            let patches = std::mem::take(&mut *patches.lock().unwrap_or_else(|e| e.into_inner()));
            InvocationResult { outcome, patches }
        })
    }
}

/// What a native step receives: its call, and the host functions a plugin would import.
pub struct NativeCall {
    /// The call, as a plugin's `step-context`.
    pub call: StepCall,
    sink: Arc<dyn EventSink>,
    run: Arc<dyn RunAccess>,
    abort: AbortHandle,
    patches: Arc<Mutex<Vec<Value>>>,
}

impl NativeCall {
    /// Emits a writer chunk (`step-output`).
    pub fn write(&self, chunk: Value) {
        self.sink.emit(GuestEvent::Output(chunk));
    }

    /// Emits a custom event (`step-custom`).
    pub fn custom(&self, kind: impl Into<String>, data: Value) {
        self.sink.emit(GuestEvent::Custom {
            kind: kind.into(),
            data,
        });
    }

    /// Logs a line (`log`).
    pub fn log(&self, level: LogLevel, message: impl Into<String>) {
        self.sink.emit(GuestEvent::Log {
            level,
            message: message.into(),
        });
    }

    /// Merges the top-level keys of `patch` into the state when the step ends (S16).
    pub fn set_state(&self, patch: Value) {
        self.patches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(patch);
    }

    /// The workflow's input.
    pub fn init_data(&self) -> Value {
        self.run.init_data()
    }

    /// The output of a succeeded step, by id or path (S8).
    pub fn step_result(&self, step: &str) -> Option<Value> {
        self.run.step_result(step)
    }

    /// Whether the run was cancelled or the deadline passed.
    pub fn is_aborted(&self) -> bool {
        self.abort.is_aborted()
    }
}

/// The steps a runtime runs in-process, by name: native steps and other registered executors.
///
/// Cheap to clone; clones share the registry.
#[derive(Clone, Default)]
pub(crate) struct NativeSteps {
    steps: Arc<RwLock<HashMap<String, Registered>>>,
}

/// A registered executor and what it declares about the step it runs.
#[derive(Clone)]
struct Registered {
    info: StepInfo,
    executor: Arc<dyn StepExecutor>,
}

impl NativeSteps {
    /// Registers (or replaces) `step` under `name`.
    pub(crate) fn register(&self, name: impl Into<String>, step: NativeStep) {
        let info = step.info.clone();
        self.register_executor(name, info, Arc::new(step));
    }

    /// Registers (or replaces) `executor` under `name`: a workflow step `{ native: NAME }` runs
    /// it with `info`'s schemas and the name as its step name; `info.name` is set to `name`.
    pub(crate) fn register_executor(
        &self,
        name: impl Into<String>,
        mut info: StepInfo,
        executor: Arc<dyn StepExecutor>,
    ) {
        let name = name.into();
        info.name = name.clone();
        self.steps
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name, Registered { info, executor });
    }

    /// What the step registered under `name` declares.
    pub(crate) fn info(&self, name: &str) -> Option<StepInfo> {
        self.registered(name).map(|r| r.info)
    }

    /// The executor registered under `name`.
    pub(crate) fn executor(&self, name: &str) -> Option<Arc<dyn StepExecutor>> {
        self.registered(name).map(|r| r.executor)
    }

    fn registered(&self, name: &str) -> Option<Registered> {
        self.steps
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// The registered names, sorted.
    pub(crate) fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .steps
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    }
}
