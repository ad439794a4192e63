//! OpenAI chat completions, streaming: `POST BASE/chat/completions` with `stream: true` and
//! `stream_options.include_usage`. Text comes in `delta.content` pieces; a tool call comes in
//! fragments keyed by `index`, its `id` and name usually only in the first, its arguments split
//! anywhere; the usage comes in a last chunk whose `choices` is empty (or `null`, as some
//! servers send it). A fragment without `index` continues the call started last, or starts one
//! when it carries a new `id`; a name repeated in every fragment is taken once.

use serde_json::{Value, json};

use super::http::{broken, malformed, post_sse, url};
use super::{Deltas, Message, Reply, Request, ToolCall, Usage, headers};
use crate::engine::invocation::StepFailure;
use crate::engine::model::ModelDef;

/// A tool call being assembled from its fragments.
#[derive(Default)]
struct Partial {
    id: String,
    name: String,
    arguments: String,
}

/// The request body.
fn body(def: &ModelDef, req: &Request) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = &req.system {
        messages.push(json!({ "role": "system", "content": system }));
    }
    messages.extend(req.messages.iter().map(message));
    let mut body = json!({
        "model": def.model,
        "messages": messages,
        "stream": true,
        "stream_options": { "include_usage": true },
        "max_tokens": req.max_tokens,
    });
    if let Some(t) = req.temperature {
        body["temperature"] = json!(t);
    }
    if !req.tools.is_empty() {
        body["tools"] = req
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    }
                })
            })
            .collect();
    }
    body
}

/// A neutral message in OpenAI's words.
fn message(m: &Message) -> Value {
    let mut out = json!({ "role": m.role, "content": m.content });
    if !m.tool_calls.is_empty() {
        out["tool_calls"] = m
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
    }
    if let Some(id) = &m.tool_call_id {
        out["tool_call_id"] = json!(id);
    }
    out
}

/// Calls the model and assembles its streamed reply, reporting fragments to `deltas`.
pub(crate) async fn call(
    def: &ModelDef,
    key: Option<&str>,
    req: &Request,
    deltas: &Deltas<'_>,
    max_line: usize,
) -> Result<Reply, StepFailure> {
    let endpoint = url(&def.base_url, "chat/completions");
    let auth = key.map(|key| ("authorization".to_owned(), format!("Bearer {key}")));
    let headers = headers(def, auth.into_iter().collect());
    let mut events = post_sse(&endpoint, &headers, &body(def, req), max_line).await?;
    let mut reply = Reply::default();
    let mut calls: Vec<Partial> = Vec::new();
    let mut done = false;
    while let Some(event) = events.next().await {
        let event = event?;
        let data = event.data.trim();
        if data == "[DONE]" {
            done = true;
            break;
        }
        if data.is_empty() {
            continue;
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| malformed(&endpoint, &format!("a chunk that is not JSON ({e})")))?;
        if let Some(error) = chunk.get("error") {
            let said = error["message"].as_str().unwrap_or("no message");
            return Err(broken(
                &endpoint,
                &format!("an error in the stream: {said}"),
            ));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
            reply.usage = Usage {
                input_tokens: usage["prompt_tokens"].as_u64().unwrap_or_default(),
                output_tokens: usage["completion_tokens"].as_u64().unwrap_or_default(),
            };
        }
        for choice in chunk["choices"].as_array().into_iter().flatten() {
            let delta = &choice["delta"];
            if let Some(text) = delta["content"].as_str() {
                reply.text.push_str(text);
                deltas.text(text)?;
            }
            for fragment in delta["tool_calls"].as_array().into_iter().flatten() {
                let id = fragment["id"].as_str();
                let index = match fragment["index"].as_u64() {
                    Some(i) => i as usize,
                    None => match (id, calls.last()) {
                        (Some(id), Some(last)) if last.id == id => calls.len() - 1,
                        (Some(_), _) | (None, None) => calls.len(),
                        (None, Some(_)) => calls.len() - 1,
                    },
                };
                if index > calls.len() {
                    return Err(malformed(
                        &endpoint,
                        &format!("tool call fragment {index} before fragment {}", calls.len()),
                    ));
                }
                if index == calls.len() {
                    calls.push(Partial::default());
                }
                let call = &mut calls[index];
                if let Some(id) = id {
                    call.id = id.to_owned();
                }
                // The name comes whole, in the first fragment; some servers repeat it in each.
                let name = fragment["function"]["name"].as_str();
                if let Some(name) = name
                    && call.name.is_empty()
                {
                    call.name = name.to_owned();
                }
                let args = fragment["function"]["arguments"]
                    .as_str()
                    .unwrap_or_default();
                call.arguments.push_str(args);
                deltas.tool_call(index, id, name, args)?;
            }
            if let Some(finish) = choice["finish_reason"].as_str() {
                reply.finish = finish.to_owned();
            }
        }
    }
    if !done {
        return Err(broken(&endpoint, "the stream ended before `[DONE]`"));
    }
    for (i, call) in calls.into_iter().enumerate() {
        if call.id.is_empty() || call.name.is_empty() {
            return Err(malformed(
                &endpoint,
                &format!("tool call {i} has no id or name"),
            ));
        }
        let arguments = if call.arguments.trim().is_empty() {
            json!({})
        } else {
            serde_json::from_str(&call.arguments).map_err(|e| {
                malformed(
                    &endpoint,
                    &format!("the arguments of tool call {} are not JSON ({e})", call.id),
                )
            })?
        };
        reply.tool_calls.push(ToolCall {
            id: call.id,
            name: call.name,
            arguments,
        });
    }
    if reply.finish.is_empty() {
        reply.finish = if reply.tool_calls.is_empty() {
            "stop".into()
        } else {
            "tool_calls".into()
        };
    }
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::ModelApi;
    use crate::models::ToolSpec;

    #[test]
    fn the_request_says_it_in_openais_words() {
        let def = ModelDef {
            api: ModelApi::OpenaiChat,
            base_url: "http://x/v1".into(),
            model: "m".into(),
            api_key_env: None,
            headers: Default::default(),
        };
        let req = Request {
            system: Some("be brief".into()),
            messages: vec![
                Message {
                    role: "assistant".into(),
                    content: None,
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "add".into(),
                        arguments: json!({"a": 1}),
                    }],
                    tool_call_id: None,
                },
                Message {
                    role: "tool".into(),
                    content: Some("2".into()),
                    tool_calls: vec![],
                    tool_call_id: Some("c1".into()),
                },
            ],
            tools: vec![ToolSpec {
                name: "add".into(),
                description: "adds".into(),
                input_schema: json!({"type": "object"}),
            }],
            max_tokens: 10,
            temperature: None,
        };
        let b = body(&def, &req);
        assert_eq!(
            b["messages"][0],
            json!({"role": "system", "content": "be brief"})
        );
        assert_eq!(
            b["messages"][1]["tool_calls"][0]["function"],
            json!({"name": "add", "arguments": "{\"a\":1}"})
        );
        assert_eq!(b["messages"][2]["tool_call_id"], "c1");
        assert_eq!(
            b["tools"][0]["function"]["parameters"],
            json!({"type": "object"})
        );
        assert_eq!(b["stream_options"], json!({"include_usage": true}));
    }
}
