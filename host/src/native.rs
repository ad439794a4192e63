//! Native Rust steps: async closures registered by name and used beside plugin steps.
//!
//! A workflow names one with `{ id: ..., native: NAME }` (or [`crate::builder::Entry::native`]).
//! It gets the same [`StepCall`] a plugin step gets, can write chunks, log and patch the state
//! through its [`NativeCall`], and follows the same rules for retries, schemas and suspension.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};

use serde_json::Value;

use crate::engine::invocation::{InvocationResult, StepCall, StepFailure, StepOutcome};
use crate::plugin::{AbortHandle, EventSink, GuestEvent, LogLevel, RunAccess, StepInfo};

/// The plugin key native steps use in a graph.
pub const NATIVE_PLUGIN: &str = "native";

type BoxFuture = Pin<Box<dyn Future<Output = Result<StepOutcome, StepFailure>> + Send>>;
type NativeFn = dyn Fn(NativeCall) -> BoxFuture + Send + Sync;

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
            info: StepInfo {
                name: String::new(),
                description: String::new(),
                input_schema: None,
                output_schema: None,
                suspend_schema: None,
                resume_schema: None,
                config_schema: None,
            },
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

    /// Runs one invocation.
    pub async fn execute(
        &self,
        call: StepCall,
        sink: Arc<dyn EventSink>,
        run: Arc<dyn RunAccess>,
        abort: AbortHandle,
    ) -> InvocationResult {
        let patches = Arc::new(Mutex::new(Vec::new()));
        let native = NativeCall {
            call,
            sink,
            run,
            abort: abort.clone(),
            patches: patches.clone(),
        };
        let outcome = tokio::select! {
            r = (self.run)(native) => r,
            () = abort.aborted() => Err(StepFailure::new("cancelled", "the step was cancelled").not_retryable()),
        };
        let patches = std::mem::take(&mut *patches.lock().unwrap_or_else(|e| e.into_inner()));
        InvocationResult { outcome, patches }
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

/// The native steps a runtime knows, by name.
#[derive(Default)]
pub struct NativeSteps {
    steps: RwLock<HashMap<String, NativeStep>>,
}

impl NativeSteps {
    /// Registers (or replaces) `step` under `name`.
    pub fn register(&self, name: impl Into<String>, mut step: NativeStep) {
        let name = name.into();
        step.info.name = name.clone();
        self.steps
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name, step);
    }

    /// The step registered under `name`.
    pub fn get(&self, name: &str) -> Option<NativeStep> {
        self.steps
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// The registered names, sorted.
    pub fn names(&self) -> Vec<String> {
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
