//! The OpenAI chat-completions wire shapes: replies, chunk streams and errors.

use axum::http::StatusCode;
use serde_json::{Map, Value, json};

use super::sse::Plan;
use super::{Found, first_chars, pieces};

/// Characters of text per content delta.
const TEXT_PIECE: usize = 4;
/// Characters of arguments JSON per tool-call fragment.
const ARGS_PIECE: usize = 6;

fn id(found: &Found<'_>) -> String {
    format!("chatcmpl-double-{}-{}", found.conversation, found.index)
}

fn created() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn finish_reason(found: &Found<'_>) -> &'static str {
    if found.turn.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    }
}

fn usage(found: &Found<'_>) -> Value {
    let u = found.turn.usage;
    json!({
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.input_tokens.saturating_add(u.output_tokens),
    })
}

/// The `chat.completion` object answering a non-streaming request.
pub(super) fn reply(found: &Found<'_>) -> Value {
    let turn = found.turn;
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert("content".into(), json!(turn.text));
    message.insert("refusal".into(), Value::Null);
    if !turn.tool_calls.is_empty() {
        let calls: Vec<Value> = turn
            .tool_calls
            .iter()
            .map(|c| {
                json!({
                    "id": c.id,
                    "type": "function",
                    "function": { "name": c.name, "arguments": c.arguments.to_string() },
                })
            })
            .collect();
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    json!({
        "id": id(found),
        "object": "chat.completion",
        "created": created(),
        "model": found.model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_reason(found),
        }],
        "usage": usage(found),
    })
}

/// The `chat.completion.chunk` stream answering a streaming request.
pub(super) fn stream(found: &Found<'_>, include_usage: bool) -> Plan {
    let turn = found.turn;
    let quirks = turn.quirks;
    let id = id(found);
    let created = created();
    let chunk = |delta: Value, finish: Value| {
        let mut c = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": found.model,
            "choices": [{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish }],
        });
        if include_usage {
            c["usage"] = Value::Null;
        }
        c.to_string()
    };
    let mut plan = Plan::new(quirks);
    plan.data(&chunk(
        json!({ "role": "assistant", "content": "", "refusal": null }),
        Value::Null,
    ));
    let mut held = !turn.hold;
    if let Some(text) = &turn.text {
        let sent = match turn.error_after_chars {
            Some(n) => first_chars(text, n),
            None => text.clone(),
        };
        for piece in pieces(&sent, TEXT_PIECE) {
            if piece.is_empty() {
                continue;
            }
            plan.data(&chunk(json!({ "content": piece }), Value::Null));
            if !held {
                plan.hold();
                held = true;
            }
        }
        if let Some(n) = turn.error_after_chars {
            let error = json!({
                "error": {
                    "message": format!(
                        "scripted stream error after {n} characters (conversations[{}].turns[{}])",
                        found.conversation, found.index
                    ),
                    "type": "server_error",
                    "param": null,
                    "code": null,
                }
            });
            plan.data(&error.to_string());
            return plan;
        }
    }
    if !held {
        plan.hold();
    }
    for (index, call) in turn.tool_calls.iter().enumerate() {
        let fragment = |first: bool, arguments: &str| {
            let mut f = Map::new();
            if !quirks.missing_index {
                f.insert("index".into(), json!(index));
            }
            let mut function = Map::new();
            if first || quirks.repeat_id {
                f.insert("id".into(), json!(call.id));
                f.insert("type".into(), json!("function"));
                function.insert("name".into(), json!(call.name));
            }
            function.insert("arguments".into(), json!(arguments));
            f.insert("function".into(), Value::Object(function));
            json!({ "tool_calls": [f] })
        };
        plan.data(&chunk(fragment(true, ""), Value::Null));
        for piece in pieces(&call.arguments.to_string(), ARGS_PIECE) {
            plan.data(&chunk(fragment(false, &piece), Value::Null));
        }
    }
    plan.data(&chunk(json!({}), json!(finish_reason(found))));
    if include_usage {
        let choices = if quirks.choices_null_usage {
            Value::Null
        } else {
            json!([])
        };
        let last = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": found.model,
            "choices": choices,
            "usage": usage(found),
        });
        plan.data(&last.to_string());
    }
    plan.data("[DONE]");
    plan
}

/// An error body in OpenAI's shape.
pub(super) fn error_body(status: StatusCode, message: &str) -> Value {
    let (kind, code) = match status.as_u16() {
        400 => ("invalid_request_error", Value::Null),
        401 => ("invalid_request_error", json!("invalid_api_key")),
        404 => ("invalid_request_error", json!("model_not_found")),
        429 => ("requests", json!("rate_limit_exceeded")),
        500..=599 => ("server_error", Value::Null),
        _ => ("invalid_request_error", Value::Null),
    };
    json!({ "error": { "message": message, "type": kind, "param": null, "code": code } })
}
