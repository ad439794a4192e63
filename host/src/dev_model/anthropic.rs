//! The Anthropic messages wire shapes: replies, event streams and errors.

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::sse::Plan;
use super::{Found, first_chars, pieces};

/// Characters of text per `text_delta`.
const TEXT_PIECE: usize = 4;
/// Characters of input JSON per `input_json_delta`.
const ARGS_PIECE: usize = 6;

fn id(found: &Found<'_>) -> String {
    format!("msg_double_{}_{}", found.conversation, found.index)
}

fn stop_reason(found: &Found<'_>) -> &'static str {
    if found.turn.tool_calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    }
}

/// The `message` object answering a non-streaming request.
pub(super) fn reply(found: &Found<'_>) -> Value {
    let turn = found.turn;
    let mut content = Vec::new();
    if let Some(text) = &turn.text {
        content.push(json!({ "type": "text", "text": text }));
    }
    for call in &turn.tool_calls {
        content.push(json!({
            "type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments,
        }));
    }
    json!({
        "id": id(found),
        "type": "message",
        "role": "assistant",
        "model": found.model,
        "content": content,
        "stop_reason": stop_reason(found),
        "stop_sequence": null,
        "usage": {
            "input_tokens": turn.usage.input_tokens,
            "output_tokens": turn.usage.output_tokens,
        },
    })
}

/// The event stream answering a streaming request.
pub(super) fn stream(found: &Found<'_>) -> Plan {
    let turn = found.turn;
    let mut plan = Plan::new(turn.quirks);
    let start = json!({
        "type": "message_start",
        "message": {
            "id": id(found),
            "type": "message",
            "role": "assistant",
            "model": found.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": { "input_tokens": turn.usage.input_tokens, "output_tokens": 0 },
        }
    });
    plan.event("message_start", &start.to_string());
    let mut held = !turn.hold;
    let mut pinged = false;
    let mut block = 0usize;
    let mut open = |plan: &mut Plan, index: usize, content_block: Value| {
        let e = json!({ "type": "content_block_start", "index": index, "content_block": content_block });
        plan.event("content_block_start", &e.to_string());
        if !pinged {
            plan.event("ping", &json!({ "type": "ping" }).to_string());
            pinged = true;
        }
    };
    let delta = |plan: &mut Plan, index: usize, delta: Value| {
        let e = json!({ "type": "content_block_delta", "index": index, "delta": delta });
        plan.event("content_block_delta", &e.to_string());
    };
    let close = |plan: &mut Plan, index: usize| {
        let e = json!({ "type": "content_block_stop", "index": index });
        plan.event("content_block_stop", &e.to_string());
    };
    if let Some(text) = &turn.text {
        open(&mut plan, block, json!({ "type": "text", "text": "" }));
        let sent = match turn.error_after_chars {
            Some(n) => first_chars(text, n),
            None => text.clone(),
        };
        for piece in pieces(&sent, TEXT_PIECE) {
            if piece.is_empty() {
                continue;
            }
            delta(
                &mut plan,
                block,
                json!({ "type": "text_delta", "text": piece }),
            );
            if !held {
                plan.hold();
                held = true;
            }
        }
        if let Some(n) = turn.error_after_chars {
            let error = json!({
                "type": "error",
                "error": {
                    "type": "overloaded_error",
                    "message": format!(
                        "scripted stream error after {n} characters (conversations[{}].turns[{}])",
                        found.conversation, found.index
                    ),
                }
            });
            plan.event("error", &error.to_string());
            return plan;
        }
        close(&mut plan, block);
        block += 1;
    }
    for call in &turn.tool_calls {
        open(
            &mut plan,
            block,
            json!({ "type": "tool_use", "id": call.id, "name": call.name, "input": {} }),
        );
        if !held {
            plan.hold();
            held = true;
        }
        for piece in pieces(&call.arguments.to_string(), ARGS_PIECE) {
            delta(
                &mut plan,
                block,
                json!({ "type": "input_json_delta", "partial_json": piece }),
            );
        }
        close(&mut plan, block);
        block += 1;
    }
    let end = json!({
        "type": "message_delta",
        "delta": { "stop_reason": stop_reason(found), "stop_sequence": null },
        "usage": { "output_tokens": turn.usage.output_tokens },
    });
    plan.event("message_delta", &end.to_string());
    plan.event(
        "message_stop",
        &json!({ "type": "message_stop" }).to_string(),
    );
    plan
}

/// An error body in Anthropic's shape.
pub(super) fn error_body(status: StatusCode, message: &str) -> Value {
    let kind = match status.as_u16() {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    json!({ "type": "error", "error": { "type": kind, "message": message } })
}
