//! [`Step`] and [`Tool`]: a handler with its self-description, made by [`step`] and [`tool`];
//! and the glue between the registered handlers and the generated bindings.

use core::any::Any;
use core::fmt;
use core::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::context::{Context, Resume, StepFields, ToolContext, lenient};
use crate::outcome::{IntoOutcome, Outcome, to_json};
use crate::prelude::*;
use crate::{Failure, Tripwire};

/// A step handler, input already JSON.
type StepFn = dyn Fn(Value, &Context) -> Result<Outcome, Failure> + Send + Sync;

/// A tool handler, arguments already JSON.
type ToolFn = dyn Fn(Value, &ToolContext) -> Result<Value, Failure> + Send + Sync;

/// A workflow step: a name, a description, JSON Schemas and the handler. Made by [`step`],
/// registered with [`export_plugin!`](crate::export_plugin).
pub struct Step {
    name: String,
    description: String,
    input_schema: Option<Value>,
    output_schema: Option<Value>,
    config_schema: Option<Value>,
    suspend_schema: Option<Value>,
    resume_schema: Option<Value>,
    handler: Box<StepFn>,
}

/// A step named `name` run by `handler`.
///
/// The handler takes the step's input, deserialized as `I` (`serde_json::Value` to take it as
/// it is; input that does not fit fails with code `invalid-input` before the handler runs), and
/// the [`Context`]. It returns an [`Outcome`] or any serializable value (the output), or a
/// [`Failure`].
///
/// ```
/// use weft_plugin::{Context, Failure, json, json::Value, step};
///
/// fn shout(input: Value, _ctx: &Context) -> Result<Value, Failure> {
///     let text = input["text"].as_str().unwrap_or_default();
///     Ok(json!({"text": text.to_uppercase()}))
/// }
///
/// let s = step("shout", shout).describe("Upper-cases {text}.");
/// assert_eq!(s.name(), "shout");
/// ```
pub fn step<I, O, F>(name: impl Into<String>, handler: F) -> Step
where
    I: DeserializeOwned + 'static,
    O: IntoOutcome,
    F: Fn(I, &Context) -> Result<O, Failure> + Send + Sync + 'static,
{
    let handler = move |input: Value, ctx: &Context| -> Result<Outcome, Failure> {
        let input: I = from_input(input, "the input does not fit")?;
        handler(input, ctx)?.into_outcome()
    };
    Step {
        name: name.into(),
        description: String::new(),
        input_schema: None,
        output_schema: None,
        config_schema: None,
        suspend_schema: None,
        resume_schema: None,
        handler: Box::new(handler),
    }
}

impl Step {
    /// Sets the description (what the step does, for people and `weft plugin inspect`).
    pub fn describe(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Sets the JSON Schema (draft 2020-12) of the input; the host checks the input against it
    /// before the step runs.
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = Some(schema);
        self
    }

    /// Sets the JSON Schema of the output (of [`Outcome::Done`]).
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// Sets the JSON Schema of the step's `config`.
    pub fn config_schema(mut self, schema: Value) -> Self {
        self.config_schema = Some(schema);
        self
    }

    /// Sets the JSON Schema of a suspension's payload.
    pub fn suspend_schema(mut self, schema: Value) -> Self {
        self.suspend_schema = Some(schema);
        self
    }

    /// Sets the JSON Schema of resume data.
    pub fn resume_schema(mut self, schema: Value) -> Self {
        self.resume_schema = Some(schema);
        self
    }

    /// The step's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs the handler as the host would (for unit tests): `input` deserialized, the result
    /// serialized, a panic turned into a failure with code `exception` where panics unwind.
    pub fn run(&self, input: Value, ctx: &Context) -> Result<Outcome, Failure> {
        guarded(|| (self.handler)(input, ctx))
    }
}

/// A tool an agent's model may call: a name, a description, JSON Schemas, whether a person must
/// approve each call, and the handler. Made by [`tool`], registered with
/// [`export_plugin!`](crate::export_plugin).
pub struct Tool {
    name: String,
    description: String,
    input_schema: Option<Value>,
    output_schema: Option<Value>,
    needs_approval: bool,
    handler: Box<ToolFn>,
}

/// A tool named `name` (`[a-zA-Z0-9_-]`, at most 64 characters) run by `handler`.
///
/// The handler takes the call's arguments, deserialized as `I` (arguments that do not fit fail
/// with code `invalid-input`), and the [`ToolContext`]; it returns any serializable value (the
/// result) or a [`Failure`].
///
/// ```
/// use weft_plugin::{Failure, ToolContext, json, json::Value, tool};
///
/// fn add(args: Value, _ctx: &ToolContext) -> Result<Value, Failure> {
///     let (Some(a), Some(b)) = (args["a"].as_f64(), args["b"].as_f64()) else {
///         return Err(Failure::invalid_input("a and b must be numbers"));
///     };
///     Ok(json!({"sum": a + b}))
/// }
///
/// let t = tool("add", add).describe("Adds two numbers.");
/// assert_eq!(t.name(), "add");
/// ```
pub fn tool<I, O, F>(name: impl Into<String>, handler: F) -> Tool
where
    I: DeserializeOwned + 'static,
    O: Serialize,
    F: Fn(I, &ToolContext) -> Result<O, Failure> + Send + Sync + 'static,
{
    let handler = move |args: Value, ctx: &ToolContext| -> Result<Value, Failure> {
        let args: I = from_input(args, "the arguments do not fit")?;
        to_json(&handler(args, ctx)?, "result")
    };
    Tool {
        name: name.into(),
        description: String::new(),
        input_schema: None,
        output_schema: None,
        needs_approval: false,
        handler: Box::new(handler),
    }
}

impl Tool {
    /// Sets the description, as the model sees it.
    pub fn describe(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Sets the JSON Schema of the arguments (default: `{"type": "object"}`).
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = Some(schema);
        self
    }

    /// Sets the JSON Schema of the result.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// A person must approve each call before it runs.
    pub fn needs_approval(mut self) -> Self {
        self.needs_approval = true;
        self
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Calls the handler as the host would (for unit tests): `args` deserialized, the result
    /// serialized, a panic turned into a failure with code `exception` where panics unwind.
    pub fn call(&self, args: Value, ctx: &ToolContext) -> Result<Value, Failure> {
        guarded(|| (self.handler)(args, ctx))
    }
}

impl fmt::Debug for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Step")
            .field("name", &self.name)
            .field("description", &self.description)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.name)
            .field("description", &self.description)
            .field("needs_approval", &self.needs_approval)
            .finish_non_exhaustive()
    }
}

/// `value` as the handler's input type; `invalid-input` (with `misfit`, e.g. "the input does
/// not fit", before serde's reason) when it does not fit. A `Value` input is taken as it is.
fn from_input<I: DeserializeOwned + 'static>(value: Value, misfit: &str) -> Result<I, Failure> {
    // Most handlers take a `Value`: hand it over without a round trip through serde.
    let mut slot = Some(value);
    if let Some(same) = (&mut slot as &mut dyn Any).downcast_mut::<Option<I>>()
        && let Some(input) = same.take()
    {
        return Ok(input);
    }
    I::deserialize(slot.unwrap_or(Value::Null))
        .map_err(|e| Failure::invalid_input(format!("{misfit}: {e}")))
}

/// Runs `f`, turning a panic into a failure with code `exception` where panics unwind. (A
/// wasm32-wasip2 component built with stable Rust aborts on panic, whatever its profile says:
/// there the panic traps before this sees it.)
#[cfg(feature = "std")]
fn guarded<T>(f: impl FnOnce() -> Result<T, Failure>) -> Result<T, Failure> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|payload| Err(Failure::exception(panic_message(payload.as_ref()))))
}

/// Runs `f`. Without std nothing unwinds: a panic traps (see the crate's lean mode).
#[cfg(not(feature = "std"))]
fn guarded<T>(f: impl FnOnce() -> Result<T, Failure>) -> Result<T, Failure> {
    f()
}

/// The text a panic carried.
#[cfg(feature = "std")]
fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic whose payload is not text".to_string()
    }
}

/// A plugin's registered steps and tools; [`export_plugin!`](crate::export_plugin) implements
/// it for a type of the guest's.
#[doc(hidden)]
pub trait Registry: 'static {
    /// The registered steps, built anew (an instance serves one call from the host).
    fn steps() -> Vec<Step>;
    /// The registered tools, built anew.
    fn tools() -> Vec<Tool>;
}

/// What the generated bindings call: the `Guest` of both interfaces, over the steps and tools
/// of `R`.
#[doc(hidden)]
pub struct Exporter<R>(PhantomData<R>);

/// JSON text from the host as a value, or a failure with `code`.
fn parse(text: &str, what: &str, code: &str) -> Result<Value, Failure> {
    serde_json::from_str(text)
        .map_err(|e| Failure::new(code, format!("the {what} is not JSON: {e}")))
}

mod steps_glue {
    use super::*;
    use crate::bindings::steps_world::exports::weft::plugin::steps::Guest;
    use crate::bindings::steps_world::weft::plugin::types as raw;

    impl<R: Registry> Guest for Exporter<R> {
        fn describe() -> Vec<raw::StepInfo> {
            R::steps()
                .iter()
                .map(|s| raw::StepInfo {
                    name: s.name.clone(),
                    description: s.description.clone(),
                    input_schema: s.input_schema.as_ref().map(Value::to_string),
                    output_schema: s.output_schema.as_ref().map(Value::to_string),
                    suspend_schema: s.suspend_schema.as_ref().map(Value::to_string),
                    resume_schema: s.resume_schema.as_ref().map(Value::to_string),
                    config_schema: s.config_schema.as_ref().map(Value::to_string),
                })
                .collect()
        }

        fn execute(name: String, ctx: raw::StepContext) -> Result<raw::Outcome, raw::Failure> {
            execute(&R::steps(), name, ctx)
                .map(|outcome| match outcome {
                    Outcome::Done(v) => raw::Outcome::Done(v.to_string()),
                    Outcome::Bail(v) => raw::Outcome::Bail(v.to_string()),
                    Outcome::Suspend { payload, labels } => {
                        raw::Outcome::Suspend(raw::Suspension {
                            payload: payload.to_string(),
                            labels,
                        })
                    }
                })
                .map_err(to_raw)
        }
    }

    fn execute(steps: &[Step], name: String, raw: raw::StepContext) -> Result<Outcome, Failure> {
        let Some(step) = steps.iter().find(|s| s.name == name) else {
            return Err(Failure::new(
                "unknown-step",
                format!("this plugin has no step named {name:?}"),
            ));
        };
        let input = parse(&raw.input, "input", "invalid-input")?;
        let config = parse(&raw.config, "config", "invalid-config")?;
        let ctx = Context::from_fields(StepFields {
            step: name,
            run_id: raw.run_id,
            workflow_id: raw.workflow_id,
            step_path: raw.step_path,
            attempt: raw.attempt,
            config,
            state: lenient(&raw.state),
            resume: raw
                .resume
                .map(|r| Resume::new(lenient(&r.data), lenient(&r.suspend_payload))),
            foreach_index: raw.foreach_index,
            iteration: raw.iteration,
        });
        step.run(input, &ctx)
    }

    /// A failure as the bindings carry it.
    pub(super) fn to_raw(f: Failure) -> raw::Failure {
        raw::Failure {
            message: f.message,
            code: f.code,
            retryable: f.retryable,
            details: f.details.as_ref().map(Value::to_string),
            tripwire: f.tripwire.map(|t| {
                let t: Tripwire = *t;
                raw::Tripwire {
                    reason: t.reason,
                    retry: t.retry,
                    metadata: t.metadata.as_ref().map(Value::to_string),
                    processor_id: t.processor_id,
                }
            }),
        }
    }
}

mod tools_glue {
    use super::*;
    use crate::bindings::steps_world::weft::plugin::types as raw;
    use crate::bindings::tools_world::exports::weft::plugin::tools::Guest;

    impl<R: Registry> Guest for Exporter<R> {
        fn describe() -> Vec<raw::ToolInfo> {
            R::tools()
                .iter()
                .map(|t| raw::ToolInfo {
                    name: t.name.clone(),
                    description: t.description.clone(),
                    input_schema: t
                        .input_schema
                        .clone()
                        .unwrap_or_else(|| json!({"type": "object"}))
                        .to_string(),
                    output_schema: t.output_schema.as_ref().map(Value::to_string),
                    needs_approval: t.needs_approval,
                })
                .collect()
        }

        fn call(name: String, call: raw::ToolCall) -> Result<String, raw::Failure> {
            let result = (|| {
                let tools = R::tools();
                let Some(tool) = tools.iter().find(|t| t.name == name) else {
                    return Err(Failure::new(
                        "unknown-tool",
                        format!("this plugin has no tool named {name:?}"),
                    ));
                };
                let args = parse(&call.args, "arguments", "invalid-input")?;
                let config = parse(&call.config, "config", "invalid-config")?;
                let ctx = ToolContext::from_fields(name.clone(), call.run_id, call.call_id, config);
                tool.call(args, &ctx)
            })();
            result
                .map(|v| v.to_string())
                .map_err(super::steps_glue::to_raw)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;

    /// A typed input (the tests do without serde's derive: see `context.rs`).
    type Text = BTreeMap<String, String>;

    fn shout(input: Text, _ctx: &Context) -> Result<Value, Failure> {
        let text = input.get("text").map(String::as_str).unwrap_or_default();
        Ok(json!({"text": text.to_uppercase()}))
    }

    #[test]
    fn typed_input_is_deserialized_and_checked() {
        let s = step("shout", shout);
        let ctx = Context::default();
        assert_eq!(
            s.run(json!({"text": "hi"}), &ctx),
            Ok(Outcome::Done(json!({"text": "HI"})))
        );
        let err = s.run(json!(["hi"]), &ctx).err();
        let err = err.as_ref();
        assert_eq!(err.and_then(|f| f.code.as_deref()), Some("invalid-input"));
        assert!(
            err.is_some_and(|f| f.message.starts_with("the input does not fit")),
            "{err:?}"
        );
    }

    #[test]
    fn value_input_is_handed_over_as_it_is() {
        let s = step("echo", |input: Value, _ctx: &Context| Ok(input));
        let ctx = Context::default();
        assert_eq!(
            s.run(json!([1, "a"]), &ctx),
            Ok(Outcome::Done(json!([1, "a"])))
        );
        let b = step("bail", |input: Value, _ctx: &Context| {
            Ok(Outcome::bail(input))
        });
        assert_eq!(b.run(json!(3), &ctx), Ok(Outcome::Bail(json!(3))));
    }

    #[test]
    fn a_panic_is_a_failure_with_code_exception() {
        let s = step(
            "boom",
            |_: Value, _ctx: &Context| -> Result<Value, Failure> { panic!("boom went the step") },
        );
        let failure = s.run(Value::Null, &Context::default()).err();
        assert_eq!(
            failure,
            Some(Failure {
                message: "boom went the step".into(),
                code: Some("exception".into()),
                retryable: false,
                details: Some(json!({"type": "panic"})),
                tripwire: None,
            })
        );
        let n = 3;
        let t = tool(
            "boom",
            move |_: Value, _ctx: &ToolContext| -> Result<Value, Failure> {
                panic!("tool {n} broke")
            },
        );
        let failure = t.call(Value::Null, &ToolContext::default()).err();
        assert_eq!(failure.map(|f| f.message), Some("tool 3 broke".into()));
    }

    #[test]
    fn tools_serialize_their_results() {
        let t = tool("count", |args: Text, _ctx: &ToolContext| {
            let text = args.get("text").map(String::as_str).unwrap_or_default();
            Ok(BTreeMap::from([("words", text.split_whitespace().count())]))
        });
        assert_eq!(
            t.call(json!({"text": "a b c"}), &ToolContext::default()),
            Ok(json!({"words": 3}))
        );
        let err = t.call(json!(1), &ToolContext::default()).err();
        assert!(
            err.is_some_and(|f| f.message.starts_with("the arguments do not fit")),
            "arguments are plural"
        );
    }
}
