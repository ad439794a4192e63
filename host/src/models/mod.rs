//! Model steps (S122): a `model:` entry calls a model of the workflow's `models:` over its
//! provider's wire protocol (OpenAI chat completions, Anthropic messages), streaming: text and
//! tool-call fragments reach watchers as `step-output` events while the call runs, and the step's
//! output is the whole reply, with exact usage.
//!
//! The input is provider-neutral (`{prompt}` or `{messages}`, with `system` and `tools`); each
//! protocol module turns it into its request and its stream back into a [`Reply`]. The API key
//! is read from the host's environment at each call and sent only to the model's `base-url`
//! (a redirect to another origin is refused, `http`); records, events and guests never see it:
//! a failure's words, which may repeat what the provider said, have the key and the model's
//! header values replaced by `[redacted]` before they leave the call. A refusal of the provider
//! is a step failure whose code says what to do: `rate-limited` (retried after what the
//! provider's `retry-after` asks, S121), `model-unavailable` (retried), `model-auth` and
//! `model-refused` (not retried).
//!
//! Every call is bounded host-wide ([`ModelConfig`]): a deadline when its step sets none, the
//! longest line of the stream, and the most pieces it may stream (`output-limit` past it).

// Step failures travel by value to the step's result; boxing them buys nothing here.
#![allow(clippy::result_large_err)]

mod anthropic;
mod config;
mod http;
mod openai;
mod secrets;
mod sse;

pub use config::ModelConfig;
#[cfg(feature = "cli")]
pub(crate) use config::{
    DEFAULT_MODEL_MAX_EVENTS, DEFAULT_MODEL_MAX_LINE_KIB, DEFAULT_MODEL_TIMEOUT_MS,
};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::engine::invocation::{InvocationResult, StepFailure, StepOutcome};
use crate::engine::model::{ModelApi, ModelDef};
use crate::executor::{EventSink, GuestEvent, StepExecutor, StepRequest, until_aborted};
use secrets::Secrets;

/// One message of a conversation, provider-neutral.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text (for `tool`, the tool's result as text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// The calls an `assistant` message made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The call a `tool` message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolCall {
    /// The provider's id of the call.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, parsed.
    pub arguments: Value,
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// What it does, for the model.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of its arguments.
    pub input_schema: Value,
}

/// A model step's input.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    /// One user message; or `messages`.
    #[serde(default)]
    prompt: Option<String>,
    /// The conversation so far.
    #[serde(default)]
    messages: Option<Vec<Message>>,
    /// Instructions before the conversation.
    #[serde(default)]
    system: Option<String>,
    /// Tools the model may call.
    #[serde(default)]
    tools: Vec<ToolSpec>,
}

/// A model step's `config:`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Config {
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    temperature: Option<f64>,
}

/// What a provider is asked, provider-neutral.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub(crate) system: Option<String>,
    pub(crate) messages: Vec<Message>,
    pub(crate) tools: Vec<ToolSpec>,
    pub(crate) max_tokens: u32,
    pub(crate) temperature: Option<f64>,
}

/// Tokens a call used, as the provider counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Usage {
    /// Tokens of the request.
    pub input_tokens: u64,
    /// Tokens of the reply.
    pub output_tokens: u64,
}

/// A model's whole reply: the step's output.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Reply {
    /// The text.
    pub text: String,
    /// The tool calls, in the order the model made them.
    pub tool_calls: Vec<ToolCall>,
    /// Tokens used.
    pub usage: Usage,
    /// Why the model stopped: `stop`, `tool_calls`, `length`, or the provider's own word.
    pub finish: String,
}

impl Reply {
    /// The step's output: the reply, and the assistant message to append to the conversation.
    fn output(&self) -> Value {
        let mut message = json!({ "role": "assistant", "content": self.text });
        if !self.tool_calls.is_empty() {
            message["tool_calls"] = json!(self.tool_calls);
        }
        json!({
            "text": self.text,
            "tool_calls": self.tool_calls,
            "usage": self.usage,
            "finish": self.finish,
            "message": message,
        })
    }
}

/// Where a protocol module reports fragments as they arrive, at most `max` of them (the
/// plugins' per-invocation cap on events, applied to a model's streamed pieces).
pub(crate) struct Deltas<'a> {
    sink: &'a dyn EventSink,
    emitted: AtomicU64,
    max: u64,
}

impl Deltas<'_> {
    /// A piece of the reply's text.
    pub(crate) fn text(&self, piece: &str) -> Result<(), StepFailure> {
        if !piece.is_empty() {
            self.emit(json!({ "text": piece }))?;
        }
        Ok(())
    }

    /// A fragment of tool call `index`.
    pub(crate) fn tool_call(
        &self,
        index: usize,
        id: Option<&str>,
        name: Option<&str>,
        args: &str,
    ) -> Result<(), StepFailure> {
        let mut fragment = json!({ "index": index, "arguments": args });
        if let Some(id) = id {
            fragment["id"] = json!(id);
        }
        if let Some(name) = name {
            fragment["name"] = json!(name);
        }
        self.emit(json!({ "tool_call": fragment }))
    }

    /// Emits `data` as a `step-output`, unless the call has emitted its `max` already.
    fn emit(&self, data: Value) -> Result<(), StepFailure> {
        if self.emitted.fetch_add(1, Ordering::Relaxed) >= self.max {
            return Err(StepFailure::new(
                "output-limit",
                format!(
                    "the model streamed more than {} pieces (text and tool-call fragments) in one call; ask for a shorter answer (`config: {{max-tokens}}`), or raise RuntimeConfig::models.max_events (weft --model-max-events)",
                    self.max
                ),
            )
            .not_retryable());
        }
        self.sink.emit(GuestEvent::Output(data));
        Ok(())
    }
}

/// The model's own `headers:`, then `extra` (the protocol's version, its key header).
pub(crate) fn headers(def: &ModelDef, extra: Vec<(String, String)>) -> Vec<(String, String)> {
    def.headers
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .chain(extra)
        .collect()
}

/// The step failure for an input that is not a model step's.
fn invalid_input(message: String) -> StepFailure {
    StepFailure::new("invalid-input", message).not_retryable()
}

/// The provider-neutral request of a step's input and config.
fn make_request(input: &Value, config: &Value) -> Result<Request, StepFailure> {
    let input: Input = serde_json::from_value(input.clone()).map_err(|e| {
        invalid_input(format!(
            "a model step's input is {{prompt}} or {{messages}}, with optional system and tools: {e}"
        ))
    })?;
    let config: Config = serde_json::from_value(config.clone())
        .map_err(|e| invalid_input(format!("a model step's config: {e}")))?;
    let messages = match (input.prompt, input.messages) {
        (Some(prompt), None) => vec![Message {
            role: "user".into(),
            content: Some(prompt),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }],
        (None, Some(messages)) if !messages.is_empty() => messages,
        _ => {
            return Err(invalid_input(
                "a model step's input holds exactly one of `prompt` and a non-empty `messages`"
                    .into(),
            ));
        }
    };
    if let Some(bad) = messages
        .iter()
        .find(|m| !matches!(m.role.as_str(), "system" | "user" | "assistant" | "tool"))
    {
        return Err(invalid_input(format!(
            "message role `{}` is none of system, user, assistant, tool",
            bad.role
        )));
    }
    Ok(Request {
        system: input.system,
        messages,
        tools: input.tools,
        max_tokens: config.max_tokens.unwrap_or(1024),
        temperature: config.temperature,
    })
}

/// Runs the calls of one model of a workflow.
pub(crate) struct ModelStep {
    def: Arc<ModelDef>,
    config: ModelConfig,
}

impl ModelStep {
    /// The executor of `def`, its calls bounded by `config`.
    pub(crate) fn new(def: ModelDef, config: ModelConfig) -> Self {
        ModelStep {
            def: Arc::new(def),
            config,
        }
    }

    async fn call(&self, request: &StepRequest) -> Result<Reply, StepFailure> {
        let req = make_request(&request.call.input, &request.call.config)?;
        let key = match &self.def.api_key_env {
            Some(name) => Some(std::env::var(name).map_err(|_| {
                StepFailure::new(
                    "model-auth",
                    format!(
                        "the model's API key is read from the host's environment variable {name}, which is not set; set it where weft runs"
                    ),
                )
                .not_retryable()
            })?),
            None => None,
        };
        let deltas = Deltas {
            sink: request.io.sink.as_ref(),
            emitted: AtomicU64::new(0),
            max: self.config.max_events,
        };
        let (key, max_line) = (key.as_deref(), self.config.max_line_bytes);
        let secrets = Secrets::of(key, &self.def);
        match self.def.api {
            ModelApi::OpenaiChat => openai::call(&self.def, key, &req, &deltas, max_line).await,
            ModelApi::AnthropicMessages => {
                anthropic::call(&self.def, key, &req, &deltas, max_line).await
            }
        }
        .map_err(|failure| secrets.redact(failure))
    }
}

impl StepExecutor for ModelStep {
    fn execute(&self, request: StepRequest) -> BoxFuture<'_, InvocationResult> {
        Box::pin(async move {
            let abort = request.io.abort.child();
            let (deadline, late) = match request.io.deadline {
                Some(deadline) => (
                    deadline,
                    "the model did not answer within the step's deadline of",
                ),
                None => (
                    self.config.timeout,
                    "the model did not answer within the host's deadline of a model call whose step sets no `timeout-ms` (RuntimeConfig::models.timeout, weft --model-timeout-ms):",
                ),
            };
            let outcome = until_aborted(
                self.call(&request),
                &abort,
                Some(deadline),
                "the model call was cancelled",
                late,
            )
            .await
            .map(|reply| StepOutcome::Done(reply.output()));
            InvocationResult {
                outcome,
                patches: Vec::new(),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_or_messages_make_the_request_and_anything_else_is_refused() {
        let r =
            make_request(&json!({"prompt": "hi", "system": "be brief"}), &json!({})).expect("ok");
        assert_eq!(r.messages.len(), 1);
        assert_eq!(r.messages[0].content.as_deref(), Some("hi"));
        assert_eq!(
            (r.system.as_deref(), r.max_tokens),
            (Some("be brief"), 1024)
        );
        let r = make_request(
            &json!({"messages": [{"role": "user", "content": "a"}]}),
            &json!({"max-tokens": 50, "temperature": 0.5}),
        )
        .expect("ok");
        assert_eq!((r.max_tokens, r.temperature), (50, Some(0.5)));
        for bad in [
            json!({}),
            json!({"prompt": "a", "messages": [{"role": "user", "content": "b"}]}),
            json!({"messages": []}),
            json!({"messages": [{"role": "wizard", "content": "b"}]}),
            json!({"prompt": 5}),
        ] {
            let err = make_request(&bad, &json!({})).expect_err("refused");
            assert_eq!(err.code, "invalid-input", "{bad}");
            assert!(!err.retryable);
        }
    }

    #[test]
    fn the_output_holds_the_reply_and_the_assistant_message_to_append() {
        let reply = Reply {
            text: "Adding.".into(),
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "add".into(),
                arguments: json!({"a": 1}),
            }],
            usage: Usage {
                input_tokens: 3,
                output_tokens: 4,
            },
            finish: "tool_calls".into(),
        };
        let out = reply.output();
        assert_eq!(out["usage"], json!({"input_tokens": 3, "output_tokens": 4}));
        assert_eq!(out["message"]["role"], "assistant");
        assert_eq!(out["message"]["tool_calls"][0]["name"], "add");
    }
}
