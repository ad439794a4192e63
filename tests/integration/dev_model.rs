//! The scripted model double (`weft::dev_model`, `weft dev model`): OpenAI and Anthropic wire
//! shapes over real loopback sockets, read as raw HTTP bytes.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weft::dev_model::{Script, serve};

use crate::server::HANG_GUARD;
use crate::torture::{Proc, weft};

const SCRIPT: &str = r#"
models: [gpt-test, claude-test]
conversations:
  - match: "What is 2+3?"
    turns:
      - text: "I'll add them."
        tool_calls:
          - { id: call_1, name: add, arguments: { a: 2, b: 3 } }
          - { id: call_2, name: mul, arguments: { a: 2, b: 3 } }
        usage: { input_tokens: 12, output_tokens: 7 }
      - text: "It is 5."
        usage: { input_tokens: 20, output_tokens: 4 }
  - match: "quirky"
    turns:
      - text: "Quirks ahead."
        tool_calls: [{ id: call_q, name: add, arguments: { a: 1, b: 2 } }]
        usage: { input_tokens: 3, output_tokens: 5 }
        quirks: [repeat_id, missing_index, choices_null_usage, split_frames, keepalive]
  - match: "busy"
    turns:
      - { text: "Finally.", status: 429, retry_after_s: 2, retry_after_ms: 1500, fail_times: 2 }
  - match: "break"
    turns:
      - { text: "Hello, world", error_after_chars: 5 }
  - match: "wait"
    turns:
      - { text: "Before and after.", hold: true }
"#;

/// Serves [`SCRIPT`] on a fresh loopback port.
async fn start() -> SocketAddr {
    let script = Script::from_yaml(SCRIPT).expect("script");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(serve(listener, script));
    addr
}

/// A raw HTTP response: status, head, and the body as the chunks it came in.
struct Raw {
    status: u16,
    head: String,
    chunks: Vec<String>,
}

impl Raw {
    /// The body, chunk framing removed.
    fn body(&self) -> String {
        self.chunks.concat()
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body()).expect("JSON body")
    }

    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }

    /// The SSE frames' `data:` payloads, comments dropped.
    fn data(&self) -> Vec<String> {
        self.body()
            .split("\n\n")
            .filter_map(|frame| {
                frame
                    .lines()
                    .find_map(|l| l.strip_prefix("data: ").map(str::to_owned))
            })
            .collect()
    }

    /// The SSE frames' `event:` names.
    fn events(&self) -> Vec<String> {
        self.body()
            .split("\n\n")
            .filter_map(|frame| {
                frame
                    .lines()
                    .find_map(|l| l.strip_prefix("event: ").map(str::to_owned))
            })
            .collect()
    }
}

/// Sends one request (`req` its method and path), `body` as given; returns the connection.
async fn send(addr: SocketAddr, req: &str, headers: &[(&str, &str)], body: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let mut head = format!("{req} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let request = format!(
        "{head}content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    stream
}

/// Parses a whole raw response, keeping the chunks of a chunked body apart.
fn parse(bytes: &[u8]) -> Raw {
    let text = String::from_utf8_lossy(bytes).into_owned();
    let (head, mut body) = text.split_once("\r\n\r\n").expect("a response head");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let mut chunks = Vec::new();
    if chunked {
        while let Some((size, rest)) = body.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).expect("chunk size");
            if n == 0 {
                break;
            }
            chunks.push(rest[..n].to_owned());
            body = &rest[n + 2..];
        }
    } else {
        chunks.push(body.to_owned());
    }
    Raw {
        status,
        head: head.to_owned(),
        chunks,
    }
}

/// One request (`req` its method and path), read to the end.
async fn call(addr: SocketAddr, req: &str, headers: &[(&str, &str)], body: &str) -> Raw {
    let mut stream = send(addr, req, headers, body).await;
    let mut bytes = Vec::new();
    tokio::time::timeout(HANG_GUARD, stream.read_to_end(&mut bytes))
        .await
        .expect("the double hung")
        .expect("read");
    parse(&bytes)
}

async fn post_with(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: Value) -> Raw {
    call(addr, &format!("POST {path}"), headers, &body.to_string()).await
}

async fn post(addr: SocketAddr, path: &str, body: Value) -> Raw {
    post_with(addr, path, &[], body).await
}

fn user(text: &str) -> Value {
    json!({ "role": "user", "content": text })
}

/// The OpenAI transcript of the 2+3 conversation after its first turn.
fn after_tool_calls() -> Vec<Value> {
    vec![
        json!({ "role": "system", "content": "You add." }),
        user("What is 2+3?"),
        json!({ "role": "assistant", "content": "I'll add them.", "tool_calls": [
            { "id": "call_1", "type": "function", "function": { "name": "add", "arguments": "{\"a\":2,\"b\":3}" } }
        ] }),
        json!({ "role": "tool", "tool_call_id": "call_1", "content": "5" }),
    ]
}

/// Text, tool calls (by index, or by id when fragments carry no index) and finish reason
/// reassembled from OpenAI chunks.
#[derive(Debug, Default)]
struct Assembled {
    text: String,
    calls: BTreeMap<String, (String, String, String)>,
    finish: Option<String>,
    usage: Option<Value>,
    error: Option<Value>,
    done: bool,
}

/// The tool-call fragments of OpenAI chunks, in order.
fn fragments(data: &[String]) -> Vec<Value> {
    data.iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| c.pointer("/choices/0/delta/tool_calls/0").cloned())
        .collect()
}

fn assemble(raw: &Raw) -> Assembled {
    let mut out = Assembled::default();
    let mut last_key = String::new();
    for data in raw.data() {
        assert!(!out.done, "a frame after [DONE]: {data}");
        if data == "[DONE]" {
            out.done = true;
            continue;
        }
        let chunk: Value = serde_json::from_str(&data).expect("chunk JSON");
        if chunk.get("error").is_some() {
            out.error = Some(chunk["error"].clone());
            continue;
        }
        assert_eq!(chunk["object"], "chat.completion.chunk", "{chunk}");
        if !chunk["usage"].is_null() {
            out.usage = Some(chunk["usage"].clone());
        }
        let Some(choice) = chunk["choices"].get(0) else {
            continue;
        };
        if let Some(reason) = choice["finish_reason"].as_str() {
            out.finish = Some(reason.to_owned());
        }
        let delta = &choice["delta"];
        if let Some(t) = delta["content"].as_str() {
            out.text.push_str(t);
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let key = match (&call["index"], call["id"].as_str()) {
                (Value::Number(n), _) => n.to_string(),
                (_, Some(id)) => id.to_owned(),
                _ => last_key.clone(),
            };
            last_key.clone_from(&key);
            let entry = out.calls.entry(key).or_default();
            if let Some(id) = call["id"].as_str() {
                entry.0 = id.to_owned();
            }
            if let Some(name) = call["function"]["name"].as_str() {
                entry.1 = name.to_owned();
            }
            entry
                .2
                .push_str(call["function"]["arguments"].as_str().unwrap_or(""));
        }
    }
    out
}

#[tokio::test]
async fn openai_non_streaming_reply_with_parallel_tool_calls() {
    let addr = start().await;
    let raw = post_with(
        addr,
        "/v1/chat/completions",
        &[("authorization", "Bearer sk-anything")],
        json!({ "model": "gpt-test", "messages": [user("What is 2+3?")], "tools": [] }),
    )
    .await;
    assert_eq!(raw.status, 200, "{}", raw.body());
    let reply = raw.json();
    assert_eq!(reply["object"], "chat.completion");
    assert_eq!(reply["model"], "gpt-test");
    let choice = &reply["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], "I'll add them.");
    let calls = choice["message"]["tool_calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0]["id"], "call_1");
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[1]["function"]["name"], "mul");
    let args: Value =
        serde_json::from_str(calls[0]["function"]["arguments"].as_str().expect("string"))
            .expect("arguments JSON");
    assert_eq!(args, json!({ "a": 2, "b": 3 }));
    assert_eq!(
        reply["usage"],
        json!({ "prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19 })
    );
}

#[tokio::test]
async fn openai_streaming_reassembles_text_and_parallel_tool_calls() {
    let addr = start().await;
    let raw = post(
        addr,
        "/v1/chat/completions",
        json!({ "model": "m", "messages": [user("What is 2+3?")], "stream": true,
                "stream_options": { "include_usage": true } }),
    )
    .await;
    assert_eq!(raw.status, 200, "{}", raw.body());
    assert_eq!(
        raw.header("content-type").as_deref(),
        Some("text/event-stream")
    );
    let data = raw.data();
    let first: Value = serde_json::from_str(&data[0]).expect("first chunk");
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    let content_deltas = data.iter().filter(|d| d.contains("\"content\":\"")).count();
    assert!(content_deltas > 2, "text in several deltas: {data:?}");
    let a = assemble(&raw);
    assert!(a.done, "ends with [DONE]");
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(a.text, "I'll add them.");
    assert_eq!(a.finish.as_deref(), Some("tool_calls"));
    assert_eq!(a.calls.len(), 2, "{:?}", a.calls);
    let (id, name, args) = &a.calls["0"];
    assert_eq!((id.as_str(), name.as_str()), ("call_1", "add"));
    assert_eq!(
        serde_json::from_str::<Value>(args).expect("args"),
        json!({ "a": 2, "b": 3 })
    );
    assert_eq!(a.calls["1"].1, "mul");
    // Arguments come in several pieces; id and name only in the first fragment of each call.
    let fragments = fragments(&data);
    assert!(fragments.len() > 4, "{fragments:?}");
    assert_eq!(
        fragments.iter().filter(|f| f.get("id").is_some()).count(),
        2
    );
    assert!(fragments.iter().all(|f| f["index"].is_number()));
    // The usage chunk: `choices: []`, just before [DONE].
    let usage: Value = serde_json::from_str(&data[data.len() - 2]).expect("usage chunk");
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["total_tokens"], 19);

    // Without include_usage: no usage chunk.
    let raw = post(
        addr,
        "/v1/chat/completions",
        json!({ "model": "m", "messages": [user("What is 2+3?")], "stream": true }),
    )
    .await;
    let a = assemble(&raw);
    assert!(a.done && a.usage.is_none(), "{a:?}");
    assert!(!raw.body().contains("\"usage\""), "{}", raw.body());
}

#[tokio::test]
async fn turns_are_picked_by_the_number_of_assistant_messages() {
    let addr = start().await;
    let raw = post(
        addr,
        "/v1/chat/completions",
        json!({ "model": "m", "messages": after_tool_calls() }),
    )
    .await;
    assert_eq!(raw.status, 200, "{}", raw.body());
    let reply = raw.json();
    assert_eq!(reply["choices"][0]["message"]["content"], "It is 5.");
    assert_eq!(reply["choices"][0]["finish_reason"], "stop");
    assert!(reply["choices"][0]["message"].get("tool_calls").is_none());

    // Anthropic: tool results come back in a user message; the first user message still keys.
    let raw = post_with(
        addr,
        "/v1/messages",
        &[("x-api-key", "anything"), ("anthropic-version", "2023-06-01")],
        json!({ "model": "claude-test", "max_tokens": 100, "system": "You add.", "messages": [
            { "role": "user", "content": [{ "type": "text", "text": "What is 2+3?" }] },
            { "role": "assistant", "content": [{ "type": "tool_use", "id": "call_1", "name": "add", "input": { "a": 2, "b": 3 } }] },
            { "role": "user", "content": [{ "type": "tool_result", "tool_use_id": "call_1", "content": "5" }] },
        ] }),
    )
    .await;
    assert_eq!(raw.status, 200, "{}", raw.body());
    let reply = raw.json();
    assert_eq!(reply["type"], "message");
    assert_eq!(
        reply["content"],
        json!([{ "type": "text", "text": "It is 5." }])
    );
    assert_eq!(reply["stop_reason"], "end_turn");
    assert_eq!(
        reply["usage"],
        json!({ "input_tokens": 20, "output_tokens": 4 })
    );
}

#[tokio::test]
async fn each_quirk_shows_in_the_raw_bytes() {
    let addr = start().await;
    let raw = post(
        addr,
        "/v1/chat/completions",
        json!({ "model": "m", "messages": [user("quirky")], "stream": true,
                "stream_options": { "include_usage": true } }),
    )
    .await;
    assert_eq!(raw.status, 200, "{}", raw.body());
    let body = raw.body();
    // keepalive: comment lines between frames.
    assert!(body.contains("\n\n: keep-alive\n\ndata: "), "{body}");
    // split_frames: chunks that end mid-line (not at a frame's end).
    let mid_line = raw.chunks.iter().filter(|c| !c.ends_with('\n')).count();
    assert!(mid_line > 3, "frames split mid-line: {:?}", raw.chunks);
    assert!(
        raw.chunks
            .iter()
            .any(|c| c == "data: [DO" || c.starts_with("data: ") && !c.contains('\n'))
    );
    // choices_null_usage.
    let data = raw.data();
    let usage: Value = serde_json::from_str(&data[data.len() - 2]).expect("usage chunk");
    assert_eq!(usage["choices"], Value::Null);
    assert!(body.contains("\"choices\":null"), "{body}");
    // missing_index and repeat_id: every fragment has the id and the name, none an index.
    let fragments = fragments(&data);
    assert!(fragments.len() > 2, "{fragments:?}");
    for f in &fragments {
        assert!(f.get("index").is_none(), "{f}");
        assert_eq!(f["id"], "call_q", "{f}");
        assert_eq!(f["function"]["name"], "add", "{f}");
    }
    // The stream still reassembles.
    let a = assemble(&raw);
    assert_eq!(a.text, "Quirks ahead.");
    assert!(a.done);
    assert_eq!(
        serde_json::from_str::<Value>(&a.calls["call_q"].2).expect("args"),
        json!({ "a": 1, "b": 2 })
    );
}

#[tokio::test]
async fn a_429_with_retry_after_headers_then_the_reply() {
    let addr = start().await;
    let ask = json!({ "model": "m", "messages": [user("busy")] });
    for _ in 0..2 {
        let raw = post(addr, "/v1/chat/completions", ask.clone()).await;
        assert_eq!(raw.status, 429, "{}", raw.body());
        assert_eq!(raw.header("retry-after").as_deref(), Some("2"));
        assert_eq!(raw.header("retry-after-ms").as_deref(), Some("1500"));
        let body = raw.json();
        assert_eq!(body["error"]["code"], "rate_limit_exceeded", "{body}");
    }
    let raw = post(addr, "/v1/chat/completions", ask).await;
    assert_eq!(raw.status, 200, "{}", raw.body());
    assert_eq!(raw.json()["choices"][0]["message"]["content"], "Finally.");
}

#[tokio::test]
async fn a_stream_breaks_after_the_scripted_characters() {
    let addr = start().await;
    let raw = post(
        addr,
        "/v1/chat/completions",
        json!({ "model": "m", "messages": [user("break")], "stream": true }),
    )
    .await;
    assert_eq!(raw.status, 200);
    let a = assemble(&raw);
    assert_eq!(a.text, "Hello");
    assert!(!a.done, "no [DONE] after an error");
    let error = a.error.expect("an error frame");
    assert_eq!(error["type"], "server_error", "{error}");
    assert!(
        raw.data()
            .last()
            .is_some_and(|d| d.starts_with("{\"error\""))
    );

    let raw = post(
        addr,
        "/v1/messages",
        json!({ "model": "c", "max_tokens": 10, "messages": [user("break")], "stream": true }),
    )
    .await;
    let events = raw.events();
    assert_eq!(
        events.last().map(String::as_str),
        Some("error"),
        "{events:?}"
    );
    assert!(!events.contains(&"message_stop".to_owned()));
    let text: String = raw
        .data()
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| v["delta"]["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(text, "Hello");
}

#[tokio::test]
async fn a_held_stream_finishes_after_the_release() {
    let addr = start().await;
    let body = json!({ "model": "m", "messages": [user("wait")], "stream": true });
    let mut stream = send(addr, "POST /v1/chat/completions", &[], &body.to_string()).await;
    // Read until the first text delta has come.
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&bytes).contains("\"content\":\"Befo\"") {
        let n = tokio::time::timeout(HANG_GUARD, stream.read(&mut buf))
            .await
            .expect("the first part never came")
            .expect("read");
        assert!(
            n > 0,
            "closed before the hold: {}",
            String::from_utf8_lossy(&bytes)
        );
        bytes.extend_from_slice(&buf[..n]);
    }
    assert!(!String::from_utf8_lossy(&bytes).contains("[DONE]"));
    let released = post(addr, "/_double/release", json!({})).await;
    assert_eq!(released.status, 200);
    assert_eq!(released.json(), json!({ "released": 1 }));
    tokio::time::timeout(HANG_GUARD, stream.read_to_end(&mut bytes))
        .await
        .expect("the held stream never finished")
        .expect("read");
    let a = assemble(&parse(&bytes));
    assert_eq!(a.text, "Before and after.");
    assert!(a.done);
}

#[tokio::test]
async fn anthropic_stream_event_sequence_and_tool_use_input() {
    let addr = start().await;
    let raw = post(
        addr,
        "/v1/messages",
        json!({ "model": "claude-test", "max_tokens": 100, "messages": [user("What is 2+3?")],
                "tools": [{ "name": "add", "input_schema": { "type": "object" } }], "stream": true }),
    )
    .await;
    assert_eq!(raw.status, 200, "{}", raw.body());
    let events = raw.events();
    let mut collapsed: Vec<&str> = Vec::new();
    for e in &events {
        if collapsed.last() != Some(&e.as_str()) {
            collapsed.push(e);
        }
    }
    assert_eq!(
        collapsed,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    let data: Vec<Value> = raw
        .data()
        .iter()
        .map(|d| serde_json::from_str(d).expect("event JSON"))
        .collect();
    assert_eq!(data[0]["message"]["usage"]["input_tokens"], 12);
    let mut text = String::new();
    let mut blocks: BTreeMap<u64, (Value, String)> = BTreeMap::new();
    for d in &data {
        let index = d["index"].as_u64().unwrap_or(0);
        match d["type"].as_str() {
            Some("content_block_start") => {
                blocks.insert(index, (d["content_block"].clone(), String::new()));
            }
            Some("content_block_delta") => match d["delta"]["type"].as_str() {
                Some("text_delta") => text.push_str(d["delta"]["text"].as_str().expect("text")),
                Some("input_json_delta") => blocks
                    .get_mut(&index)
                    .expect("started block")
                    .1
                    .push_str(d["delta"]["partial_json"].as_str().expect("partial_json")),
                other => panic!("unexpected delta {other:?}"),
            },
            _ => {}
        }
    }
    assert_eq!(text, "I'll add them.");
    let (block, input) = &blocks[&1];
    assert_eq!(block["type"], "tool_use");
    assert_eq!(block["id"], "call_1");
    assert_eq!(block["name"], "add");
    assert_eq!(
        serde_json::from_str::<Value>(input).expect("input"),
        json!({ "a": 2, "b": 3 })
    );
    assert_eq!(blocks[&2].0["name"], "mul");
    let delta = data
        .iter()
        .find(|d| d["type"] == "message_delta")
        .expect("message_delta");
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(delta["usage"]["output_tokens"], 7);
    let input_deltas = events
        .iter()
        .filter(|e| *e == "content_block_delta")
        .count();
    assert!(
        input_deltas > 6,
        "text and input in several pieces: {events:?}"
    );
}

#[tokio::test]
async fn an_unmatched_request_is_a_400_naming_what_it_looked_for() {
    let addr = start().await;
    let raw = post(
        addr,
        "/v1/chat/completions",
        json!({ "model": "m", "messages": [user("What is 2+4?")] }),
    )
    .await;
    assert_eq!(raw.status, 400);
    let message = raw.json()["error"]["message"]
        .as_str()
        .expect("message")
        .to_owned();
    assert!(message.contains("\"What is 2+4?\""), "{message}");
    assert!(message.contains("turn 0"), "{message}");
    assert!(message.contains("\"What is 2+3?\" (2 turns)"), "{message}");

    // A known conversation asked for a turn past its last, in Anthropic's error shape.
    let raw = post(
        addr,
        "/v1/messages",
        json!({ "model": "c", "max_tokens": 10, "messages": [
            user("busy"),
            { "role": "assistant", "content": "Finally." },
            user("again"),
        ] }),
    )
    .await;
    assert_eq!(raw.status, 400);
    let body = raw.json();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let message = body["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("\"busy\"") && message.contains("turn 1"),
        "{message}"
    );

    // Not JSON at all.
    let raw = call(addr, "POST /v1/messages", &[], "{{{").await;
    assert_eq!(raw.status, 400);
    assert!(raw.body().contains("not JSON"), "{}", raw.body());
}

/// Asserts a response's status and error shape (Anthropic's, or OpenAI's) and error `type`,
/// and returns its message.
fn error_of(raw: &Raw, status: u16, kind: &str, anthropic: bool) -> String {
    let body = raw.json();
    let (at, want) = match anthropic {
        true => ("/type", json!("error")),
        false => ("/error/param", Value::Null),
    };
    let got = (raw.status, &body["error"]["type"], body.pointer(at));
    assert_eq!(got, (status, &json!(kind), Some(&want)), "{body}");
    body["error"]["message"]
        .as_str()
        .expect("message")
        .to_owned()
}

/// Requests the double does not serve, one a line: method and path, the `anthropic-version`
/// header sent or not (`A` or `-`), the status, the error type, and a part of the message
/// (`ADDR` standing for the double's address).
const MISSES: &str = "\
POST /chat/completions - 404 invalid_request_error did you mean POST /v1/chat/completions? \
The base URL should end in /v1: an OpenAI client's base URL is http://ADDR/v1. The model double \
serves: POST /v1/chat/completions, POST /v1/messages, POST /v1/messages/count_tokens, \
GET /v1/models, POST /_double/release.
POST /v1/v1/messages A 404 not_found_error did you mean POST /v1/messages? The path has /v1 \
more than once: an Anthropic client's base URL is http://ADDR, without /v1
GET /v1/models/ - 404 invalid_request_error did you mean GET /v1/models, without the trailing /?
GET /nowhere - 404 invalid_request_error GET /nowhere is not served. The model double serves:
GET /v1/messages - 405 invalid_request_error GET /v1/messages is not served: /v1/messages takes POST
GET /v1/chat/completions - 405 invalid_request_error /v1/chat/completions takes POST.";

#[tokio::test]
async fn an_unknown_path_is_a_json_404_naming_the_route_meant() {
    let addr = start().await;
    for line in MISSES.lines() {
        let mut f = line.splitn(6, ' ');
        let mut next = || f.next().expect("a field");
        let (method, path, header, status, kind) = (next(), next(), next(), next(), next());
        let says = next().replace("ADDR", &addr.to_string());
        let anthropic = header == "A" || path.ends_with("messages");
        let headers: &[(&str, &str)] = match header {
            "A" => &[("anthropic-version", "2023-06-01")],
            _ => &[],
        };
        let raw = call(addr, &format!("{method} {path}"), headers, "{}").await;
        let status: u16 = status.parse().expect("status");
        let message = error_of(&raw, status, kind, anthropic);
        assert!(message.contains(&says), "{line}\n{message}");
        let code = &raw.json()["error"]["code"];
        match (status, anthropic) {
            (404, false) => assert_eq!(code, "unknown_url"),
            (405, _) => assert_eq!(raw.header("allow").as_deref(), Some("POST")),
            _ => {}
        }
    }
}

#[tokio::test]
async fn get_v1_models_lists_the_scripts_models_in_either_shape() {
    let addr = start().await;
    let raw = call(addr, "GET /v1/models", &[("authorization", "k")], "").await;
    let model = |id| json!({ "id": id, "object": "model", "created": 0, "owned_by": "weft" });
    let want = json!({ "object": "list", "data": [model("gpt-test"), model("claude-test")] });
    assert_eq!((raw.status, raw.json()), (200, want));
    let raw = call(addr, "GET /v1/models", &[("anthropic-version", "1")], "").await;
    let at = "1970-01-01T00:00:00Z";
    let model = |id| json!({ "type": "model", "id": id, "display_name": id, "created_at": at });
    let data = [model("gpt-test"), model("claude-test")];
    let (first_id, last_id) = ("gpt-test", "claude-test");
    let want = json!({ "data": data, "has_more": false, "first_id": first_id, "last_id": last_id });
    assert_eq!((raw.status, raw.json()), (200, want));
}

#[tokio::test]
async fn count_tokens_is_a_quarter_of_the_json_characters_rounded_up() {
    let addr = start().await;
    let (system, messages) = (json!("You add."), json!([user("What is 2+3?")]));
    let tools = json!([{ "name": "add", "input_schema": { "type": "object" } }]);
    let parts = [&system, &messages[0], &tools];
    let chars: usize = parts.iter().map(|v| v.to_string().chars().count()).sum();
    let body = json!({ "model": "c", "system": system, "messages": messages, "tools": tools });
    let raw = post(addr, "/v1/messages/count_tokens", body).await;
    let want = json!({ "input_tokens": chars.div_ceil(4) });
    assert_eq!((raw.status, raw.json()), (200, want));
    for (bad, says) in [
        ("{{{", "not JSON"),
        (r#"{"model": "c"}"#, "messages: Field required"),
        (
            r#"{"model": "c", "messages": [{"role": "tool"}]}"#,
            "messages.0.role",
        ),
        (r#"{"messages": []}"#, "model: Field required"),
    ] {
        let raw = call(addr, "POST /v1/messages/count_tokens", &[], bad).await;
        let message = error_of(&raw, 400, "invalid_request_error", true);
        assert!(message.contains(says), "{bad}: {message}");
    }
}

#[test]
fn weft_dev_model_prints_its_address_and_serves() {
    let dir = tempfile::tempdir().expect("dir");
    let script = dir.path().join("script.yaml");
    std::fs::write(&script, SCRIPT).expect("write script");
    let home = dir.path().join("home");
    let script_arg = script.to_str().expect("UTF-8 path");
    let args = [
        "dev",
        "model",
        "--script",
        script_arg,
        "--addr",
        "127.0.0.1:0",
    ];
    let mut proc = Proc::start(weft(&home, &args));
    let line = proc.expect_line("model double on http://");
    assert!(
        line.ends_with("(OpenAI: /v1/chat/completions, Anthropic: /v1/messages and /v1/messages/count_tokens, both: /v1/models)"),
        "{line}"
    );
    let addr: SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|a| a.parse().ok())
        .expect("an address");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let raw = rt.block_on(post(
        addr,
        "/v1/chat/completions",
        json!({ "model": "m", "messages": [user("What is 2+3?")] }),
    ));
    proc.kill();
    assert_eq!(raw.status, 200, "{}", raw.body());
    assert!(!home.exists(), "`weft dev model` needs no home");

    // A bad script: refused before listening, exit code 2.
    std::fs::write(&script, "conversations:\n  - turns: []\n").expect("write script");
    let out = Proc::start(weft(&home, &["dev", "model", "--script", script_arg])).finish();
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("has no `match`"), "{out:?}");
}
