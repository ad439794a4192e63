//! [`Context`] (where a step invocation stands, and what it may ask of the host) and
//! [`ToolContext`] (the same for a tool call).
//!
//! The helpers that reach the host (`write`, `custom`, `log`, `aborted`, `set_state`,
//! `init_data`, `step_result`) work inside weft only. Built for any target other than wasm32
//! (native unit tests of a plugin's logic) they do nothing: writes and logs are dropped,
//! `aborted` is false, `init_data` is null and `step_result` is `None`.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::Failure;
use crate::prelude::*;

/// The level of a log line ([`Context::log`], [`ToolContext::log`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Level {
    /// Finer than debug.
    Trace,
    /// For whoever debugs the plugin.
    Debug,
    /// Normal operation.
    Info,
    /// Something looks wrong, the step goes on.
    Warn,
    /// Something went wrong.
    Error,
}

/// What resuming a suspended step brought: [`Context::resume`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resume {
    data: Value,
    suspend_payload: Value,
}

impl Resume {
    /// A resumption with `data` of a suspension with `suspend_payload` (for unit tests).
    pub fn new(data: impl Into<Value>, suspend_payload: impl Into<Value>) -> Self {
        Resume {
            data: data.into(),
            suspend_payload: suspend_payload.into(),
        }
    }

    /// The data given by whoever resumed the run (`weft resume --data`).
    pub fn data(&self) -> &Value {
        &self.data
    }

    /// The data, deserialized; a failure with code `invalid-input` when it does not fit `T`.
    pub fn data_as<T: DeserializeOwned>(&self) -> Result<T, Failure> {
        from_json(&self.data, "resume data", "invalid-input")
    }

    /// The payload this step suspended with.
    pub fn suspend_payload(&self) -> &Value {
        &self.suspend_payload
    }
}

/// Where a step invocation stands, and the host's services to it: the second argument of every
/// step handler.
///
/// [`Context::default`] (every field empty) and the `with_*` methods make one for unit tests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Context {
    step: String,
    run_id: String,
    workflow_id: String,
    step_path: String,
    attempt: u32,
    config: Value,
    state: Value,
    resume: Option<Resume>,
    foreach_index: Option<u32>,
    iteration: Option<u32>,
}

/// The parts of a [`Context`] that arrive from the host; the crate's bindings fill it.
pub(crate) struct StepFields {
    pub(crate) step: String,
    pub(crate) run_id: String,
    pub(crate) workflow_id: String,
    pub(crate) step_path: String,
    pub(crate) attempt: u32,
    pub(crate) config: Value,
    pub(crate) state: Value,
    pub(crate) resume: Option<Resume>,
    pub(crate) foreach_index: Option<u32>,
    pub(crate) iteration: Option<u32>,
}

impl Context {
    pub(crate) fn from_fields(f: StepFields) -> Self {
        Context {
            step: f.step,
            run_id: f.run_id,
            workflow_id: f.workflow_id,
            step_path: f.step_path,
            attempt: f.attempt,
            config: f.config,
            state: f.state,
            resume: f.resume,
            foreach_index: f.foreach_index,
            iteration: f.iteration,
        }
    }

    /// The name of the step being run (as registered).
    pub fn step(&self) -> &str {
        &self.step
    }

    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The id of the workflow being run.
    pub fn workflow_id(&self) -> &str {
        &self.workflow_id
    }

    /// The step's path in the workflow: ids joined by `.`, nested workflows included.
    pub fn step_path(&self) -> &str {
        &self.step_path
    }

    /// 0 on the first attempt, +1 on each retry.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The static configuration given to this step in the workflow file (defaults filled).
    pub fn config(&self) -> &Value {
        &self.config
    }

    /// The config, deserialized; a config that is null (none given) reads as `{}`. A failure
    /// with code `invalid-config` when it does not fit `T`.
    pub fn config_as<T: DeserializeOwned>(&self) -> Result<T, Failure> {
        match &self.config {
            Value::Null => from_json(
                &Value::Object(Default::default()),
                "config",
                "invalid-config",
            ),
            config => from_json(config, "config", "invalid-config"),
        }
    }

    /// The run's shared state as it stood when the step started.
    pub fn state(&self) -> &Value {
        &self.state
    }

    /// The state, deserialized; a failure with code `invalid-state` when it does not fit `T`.
    pub fn state_as<T: DeserializeOwned>(&self) -> Result<T, Failure> {
        from_json(&self.state, "state", "invalid-state")
    }

    /// Set when this invocation resumes a suspension of this step.
    pub fn resume(&self) -> Option<&Resume> {
        self.resume.as_ref()
    }

    /// The item's index when the step runs inside `foreach`.
    pub fn foreach_index(&self) -> Option<u32> {
        self.foreach_index
    }

    /// The iteration (1-based) when the step runs inside a loop.
    pub fn iteration(&self) -> Option<u32> {
        self.iteration
    }

    /// Emits one chunk of streamed output, delivered to watchers in order.
    pub fn write(&self, chunk: impl Into<Value>) {
        host::write(&chunk.into());
    }

    /// Emits a custom event, e.g. kind `progress` with `{"done": 3, "total": 10}`.
    pub fn custom(&self, kind: &str, data: impl Into<Value>) {
        host::custom(kind, &data.into());
    }

    /// Logs a line, kept with the run.
    pub fn log(&self, level: Level, message: impl AsRef<str>) {
        host::log(level, message.as_ref());
    }

    /// True once the run is cancelled or the invocation's deadline has passed: a long step
    /// should check it now and then and stop early (the host stops it anyway after a grace
    /// period).
    pub fn aborted(&self) -> bool {
        host::aborted()
    }

    /// Why the invocation was aborted, once it is.
    pub fn abort_reason(&self) -> Option<String> {
        host::abort_reason()
    }

    /// Merges the top-level keys of `patch` (a JSON object) into the run's state when the step
    /// ends (successfully or not; a later call overrides an earlier one key by key).
    pub fn set_state(&self, patch: impl Into<Value>) {
        host::set_state(&patch.into());
    }

    /// The workflow's input.
    pub fn init_data(&self) -> Value {
        host::init_data()
    }

    /// The output of a step of this run that succeeded, by its id or path; `None` if it has
    /// not succeeded (or not run).
    pub fn step_result(&self, step: &str) -> Option<Value> {
        host::step_result(step)
    }

    /// This context with `step` as the step's name (for unit tests).
    pub fn with_step(mut self, step: impl Into<String>) -> Self {
        self.step = step.into();
        self
    }

    /// This context with `attempt` (for unit tests).
    pub fn with_attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// This context with `config` (for unit tests).
    pub fn with_config(mut self, config: impl Into<Value>) -> Self {
        self.config = config.into();
        self
    }

    /// This context with `state` (for unit tests).
    pub fn with_state(mut self, state: impl Into<Value>) -> Self {
        self.state = state.into();
        self
    }

    /// This context resuming with `resume` (for unit tests).
    pub fn with_resume(mut self, resume: Resume) -> Self {
        self.resume = Some(resume);
        self
    }
}

/// Where a tool call stands, and the host's services to it: the second argument of every tool
/// handler. Tools cannot touch the run's state or other steps' results.
///
/// [`ToolContext::default`] and [`ToolContext::with_config`] make one for unit tests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolContext {
    tool: String,
    run_id: String,
    call_id: String,
    config: Value,
}

impl ToolContext {
    pub(crate) fn from_fields(
        tool: String,
        run_id: String,
        call_id: String,
        config: Value,
    ) -> Self {
        ToolContext {
            tool,
            run_id,
            call_id,
            config,
        }
    }

    /// The name of the tool being called (as registered).
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The run the call belongs to.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The call's id, unique within the run.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// The tool's static configuration.
    pub fn config(&self) -> &Value {
        &self.config
    }

    /// The config, deserialized; a config that is null (none given) reads as `{}`. A failure
    /// with code `invalid-config` when it does not fit `T`.
    pub fn config_as<T: DeserializeOwned>(&self) -> Result<T, Failure> {
        match &self.config {
            Value::Null => from_json(
                &Value::Object(Default::default()),
                "config",
                "invalid-config",
            ),
            config => from_json(config, "config", "invalid-config"),
        }
    }

    /// Emits one chunk of streamed output.
    pub fn write(&self, chunk: impl Into<Value>) {
        host::write(&chunk.into());
    }

    /// Emits a custom event, e.g. kind `progress` with `{"done": 3, "total": 10}`.
    pub fn custom(&self, kind: &str, data: impl Into<Value>) {
        host::custom(kind, &data.into());
    }

    /// Logs a line, kept with the run.
    pub fn log(&self, level: Level, message: impl AsRef<str>) {
        host::log(level, message.as_ref());
    }

    /// True once the run is cancelled or the call's deadline has passed.
    pub fn aborted(&self) -> bool {
        host::aborted()
    }

    /// Why the call was aborted, once it is.
    pub fn abort_reason(&self) -> Option<String> {
        host::abort_reason()
    }

    /// This context with `config` (for unit tests).
    pub fn with_config(mut self, config: impl Into<Value>) -> Self {
        self.config = config.into();
        self
    }
}

/// `value` deserialized as `T`; a failure with `code` naming `what` when it does not fit.
pub(crate) fn from_json<T: DeserializeOwned>(
    value: &Value,
    what: &str,
    code: &str,
) -> Result<T, Failure> {
    T::deserialize(value).map_err(|e| Failure::new(code, format!("the {what} does not fit: {e}")))
}

/// JSON text from the host as a value; text that does not parse is kept as a JSON string (the
/// host hands over JSON, so this does not happen in practice).
pub(crate) fn lenient(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// The host's imports, reached through the crate's bindings.
#[cfg(target_arch = "wasm32")]
mod host {
    use serde_json::Value;

    use super::{Level, lenient};
    use crate::bindings::steps_world::weft::plugin::{abort, log as wit_log, run, writer};
    use crate::prelude::*;

    pub(super) fn write(chunk: &Value) {
        writer::write(&chunk.to_string());
    }

    pub(super) fn custom(kind: &str, data: &Value) {
        writer::custom(kind, &data.to_string());
    }

    pub(super) fn log(level: Level, message: &str) {
        let level = match level {
            Level::Trace => wit_log::Level::Trace,
            Level::Debug => wit_log::Level::Debug,
            Level::Info => wit_log::Level::Info,
            Level::Warn => wit_log::Level::Warn,
            Level::Error => wit_log::Level::Error,
        };
        wit_log::log(level, message);
    }

    pub(super) fn aborted() -> bool {
        abort::is_aborted()
    }

    pub(super) fn abort_reason() -> Option<String> {
        abort::reason()
    }

    pub(super) fn set_state(patch: &Value) {
        run::set_state(&patch.to_string());
    }

    pub(super) fn init_data() -> Value {
        lenient(&run::init_data())
    }

    pub(super) fn step_result(step: &str) -> Option<Value> {
        run::step_result(step).map(|text| lenient(&text))
    }
}

/// Stand-ins for the host's imports outside wasm32 (native unit tests): nothing reaches a
/// host.
#[cfg(not(target_arch = "wasm32"))]
mod host {
    use serde_json::Value;

    use super::Level;
    use crate::prelude::*;

    pub(super) fn write(_chunk: &Value) {}

    pub(super) fn custom(_kind: &str, _data: &Value) {}

    pub(super) fn log(_level: Level, _message: &str) {}

    pub(super) fn aborted() -> bool {
        false
    }

    pub(super) fn abort_reason() -> Option<String> {
        None
    }

    pub(super) fn set_state(_patch: &Value) {}

    pub(super) fn init_data() -> Value {
        Value::Null
    }

    pub(super) fn step_result(_step: &str) -> Option<Value> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    /// A typed config (the tests do without serde's derive, so that the crate has no
    /// dev-dependencies and `cargo test -p weft-plugin` works from the guests workspace).
    type Config = BTreeMap<String, u32>;

    #[test]
    fn a_missing_config_reads_as_an_empty_object() {
        let ctx = Context::default();
        assert_eq!(ctx.config_as::<Config>(), Ok(Config::new()));
        let ctx = ctx.with_config(json!({"n": 4}));
        let four: Config = [("n".to_string(), 4)].into_iter().collect();
        assert_eq!(ctx.config_as::<Config>(), Ok(four));
        let bad = Context::default().with_config(json!({"n": "x"}));
        let code = bad.config_as::<Config>().err().and_then(|f| f.code);
        assert_eq!(code.as_deref(), Some("invalid-config"));
    }

    #[test]
    fn helpers_do_nothing_outside_wasm() {
        let ctx = Context::default().with_resume(Resume::new(json!({"ok": true}), json!(1)));
        ctx.write("x");
        ctx.custom("progress", json!({"n": 1}));
        ctx.log(Level::Info, "hello");
        ctx.set_state(json!({"a": 1}));
        assert!(!ctx.aborted());
        assert_eq!(ctx.init_data(), Value::Null);
        assert_eq!(ctx.step_result("a"), None);
        assert_eq!(ctx.resume().map(Resume::data), Some(&json!({"ok": true})));
        assert_eq!(lenient("{"), json!("{"));
    }
}
