//! Anthropic messages, streaming: `POST BASE/messages` with `stream: true`. The reply comes as
//! `message_start` (input tokens), then per content block `content_block_start` (`text`, or
//! `tool_use` with its id and name), `content_block_delta` (`text_delta`, or `input_json_delta`
//! pieces of the tool's input) and `content_block_stop`, then `message_delta` (stop reason,
//! output tokens) and `message_stop`. Tool results go back as a user message of `tool_result`
//! blocks; system messages become the `system` member.

use serde_json::{Value, json};

use super::http::{broken, malformed, post_sse, url};
use super::{Deltas, Message, Reply, Request, ToolCall, headers};
use crate::engine::invocation::StepFailure;
use crate::engine::model::ModelDef;

/// The API version weft speaks.
const VERSION: &str = "2023-06-01";

/// A content block being assembled.
enum Block {
    Text,
    Tool {
        index: usize,
        id: String,
        name: String,
        input: String,
    },
}

/// The request body.
fn body(def: &ModelDef, req: &Request) -> Value {
    let mut system: Vec<String> = req.system.iter().cloned().collect();
    let mut messages: Vec<Value> = Vec::new();
    for m in &req.messages {
        match m.role.as_str() {
            "system" => system.extend(m.content.clone()),
            "tool" => {
                let result = json!({
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id,
                    "content": m.content.clone().unwrap_or_default(),
                });
                // Consecutive results answer one turn: one user message holds them all.
                match messages.last_mut() {
                    Some(last)
                        if last["role"] == "user"
                            && last["content"]
                                .as_array()
                                .is_some_and(|c| c.iter().all(|b| b["type"] == "tool_result")) =>
                    {
                        if let Some(blocks) = last["content"].as_array_mut() {
                            blocks.push(result);
                        }
                    }
                    _ => messages.push(json!({ "role": "user", "content": [result] })),
                }
            }
            role => messages.push(message(role, m)),
        }
    }
    let mut body = json!({
        "model": def.model,
        "max_tokens": req.max_tokens,
        "messages": messages,
        "stream": true,
    });
    if !system.is_empty() {
        body["system"] = json!(system.join("\n\n"));
    }
    if let Some(t) = req.temperature {
        body["temperature"] = json!(t);
    }
    if !req.tools.is_empty() {
        body["tools"] = req
            .tools
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "input_schema": t.input_schema,
                })
            })
            .collect();
    }
    body
}

/// A user or assistant message in Anthropic's words.
fn message(role: &str, m: &Message) -> Value {
    if m.tool_calls.is_empty() {
        return json!({ "role": role, "content": m.content.clone().unwrap_or_default() });
    }
    let mut blocks = Vec::new();
    if let Some(text) = m.content.as_deref().filter(|t| !t.is_empty()) {
        blocks.push(json!({ "type": "text", "text": text }));
    }
    for c in &m.tool_calls {
        blocks
            .push(json!({ "type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments }));
    }
    json!({ "role": role, "content": blocks })
}

/// Calls the model and assembles its streamed reply, reporting fragments to `deltas`.
pub(crate) async fn call(
    def: &ModelDef,
    key: Option<&str>,
    req: &Request,
    deltas: &Deltas<'_>,
    max_line: usize,
) -> Result<Reply, StepFailure> {
    let endpoint = url(&def.base_url, "messages");
    let mut extra = vec![("anthropic-version".to_owned(), VERSION.to_owned())];
    extra.extend(key.map(|key| ("x-api-key".to_owned(), key.to_owned())));
    let headers = headers(def, extra);
    let mut events = post_sse(&endpoint, &headers, &body(def, req), max_line).await?;
    let mut reply = Reply::default();
    let mut blocks: Vec<Option<Block>> = Vec::new();
    let mut calls = 0;
    let mut stopped = false;
    while let Some(event) = events.next().await {
        let event = event?;
        if event.data.trim().is_empty() {
            continue;
        }
        let data: Value = serde_json::from_str(&event.data)
            .map_err(|e| malformed(&endpoint, &format!("an event that is not JSON ({e})")))?;
        let kind = data["type"].as_str().unwrap_or(event.event.as_str());
        match kind {
            "message_start" => {
                let usage = &data["message"]["usage"];
                reply.usage.input_tokens = usage["input_tokens"].as_u64().unwrap_or_default();
                reply.usage.output_tokens = usage["output_tokens"].as_u64().unwrap_or_default();
            }
            "content_block_start" => {
                let at = data["index"].as_u64().unwrap_or(blocks.len() as u64) as usize;
                let block = &data["content_block"];
                let started = match block["type"].as_str() {
                    Some("tool_use") => {
                        let id = block["id"].as_str().unwrap_or_default().to_owned();
                        let name = block["name"].as_str().unwrap_or_default().to_owned();
                        deltas.tool_call(calls, Some(&id), Some(&name), "")?;
                        calls += 1;
                        Block::Tool {
                            index: calls - 1,
                            id,
                            name,
                            input: String::new(),
                        }
                    }
                    _ => Block::Text,
                };
                if blocks.len() <= at {
                    blocks.resize_with(at + 1, || None);
                }
                blocks[at] = Some(started);
            }
            "content_block_delta" => {
                let at = data["index"].as_u64().unwrap_or_default() as usize;
                let delta = &data["delta"];
                match (
                    blocks.get_mut(at).and_then(Option::as_mut),
                    delta["type"].as_str(),
                ) {
                    (Some(Block::Text), Some("text_delta")) => {
                        let text = delta["text"].as_str().unwrap_or_default();
                        reply.text.push_str(text);
                        deltas.text(text)?;
                    }
                    (Some(Block::Tool { index, input, .. }), Some("input_json_delta")) => {
                        let piece = delta["partial_json"].as_str().unwrap_or_default();
                        input.push_str(piece);
                        deltas.tool_call(*index, None, None, piece)?;
                    }
                    (None, _) => {
                        return Err(malformed(
                            &endpoint,
                            &format!("a delta for content block {at}, which never started"),
                        ));
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = data["delta"]["stop_reason"].as_str() {
                    reply.finish = match reason {
                        "end_turn" | "stop_sequence" => "stop".into(),
                        "tool_use" => "tool_calls".into(),
                        "max_tokens" => "length".into(),
                        other => other.into(),
                    };
                }
                if let Some(n) = data["usage"]["output_tokens"].as_u64() {
                    reply.usage.output_tokens = n;
                }
                if let Some(n) = data["usage"]["input_tokens"].as_u64() {
                    reply.usage.input_tokens = n;
                }
            }
            "message_stop" => {
                stopped = true;
                break;
            }
            "error" => {
                let said = data["error"]["message"].as_str().unwrap_or("no message");
                return Err(broken(
                    &endpoint,
                    &format!("an error in the stream: {said}"),
                ));
            }
            _ => {}
        }
    }
    if !stopped {
        return Err(broken(&endpoint, "the stream ended before `message_stop`"));
    }
    for block in blocks.into_iter().flatten() {
        if let Block::Tool {
            id, name, input, ..
        } = block
        {
            let arguments = if input.trim().is_empty() {
                json!({})
            } else {
                serde_json::from_str(&input).map_err(|e| {
                    malformed(
                        &endpoint,
                        &format!("the input of tool use {id} is not JSON ({e})"),
                    )
                })?
            };
            reply.tool_calls.push(ToolCall {
                id,
                name,
                arguments,
            });
        }
    }
    if reply.finish.is_empty() {
        reply.finish = "stop".into();
    }
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::ModelApi;

    fn msg(role: &str, content: &str, id: Option<&str>) -> Message {
        Message {
            role: role.into(),
            content: Some(content.into()),
            tool_calls: vec![],
            tool_call_id: id.map(Into::into),
        }
    }

    #[test]
    fn tool_results_of_one_turn_go_back_in_one_user_message_and_system_moves_out() {
        let def = ModelDef {
            api: ModelApi::AnthropicMessages,
            base_url: "http://x/v1".into(),
            model: "m".into(),
            api_key_env: None,
            headers: Default::default(),
        };
        let mut asked = msg("assistant", "", None);
        asked.tool_calls = vec![
            ToolCall {
                id: "a".into(),
                name: "t".into(),
                arguments: json!({}),
            },
            ToolCall {
                id: "b".into(),
                name: "t".into(),
                arguments: json!({"x": 1}),
            },
        ];
        let req = Request {
            system: None,
            messages: vec![
                msg("system", "be brief", None),
                msg("user", "go", None),
                asked,
                msg("tool", "1", Some("a")),
                msg("tool", "2", Some("b")),
            ],
            tools: vec![],
            max_tokens: 10,
            temperature: None,
        };
        let b = body(&def, &req);
        assert_eq!(b["system"], "be brief");
        let messages = b["messages"].as_array().expect("messages");
        assert_eq!(messages.len(), 3, "{b}");
        assert_eq!(messages[1]["content"][1]["type"], "tool_use");
        assert_eq!(messages[1]["content"][1]["input"], json!({"x": 1}));
        let results = messages[2]["content"].as_array().expect("blocks");
        assert_eq!(results.len(), 2);
        assert_eq!(results[1]["tool_use_id"], "b");
    }
}
