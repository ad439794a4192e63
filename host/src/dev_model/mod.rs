//! The scripted model double: an OpenAI-compatible (`POST /v1/chat/completions`) and
//! Anthropic-compatible (`POST /v1/messages`) HTTP server that replays scripted conversations,
//! for tests and for `weft dev model --script FILE` (docs/MODEL-DOUBLE.md).
//!
//! A [`Script`] holds conversations keyed by the text of a request's first user message; turn
//! `k` of a conversation answers a request that already holds `k` assistant messages. Replies
//! are deterministic. A turn can instead fail with an HTTP status (with `retry-after` headers),
//! break its stream after some characters, hold its stream open until released, or frame its
//! stream in unusual ways real providers and proxies do.
//!
//! A held stream (a turn with `hold: true`) sends its first part, then waits until someone
//! sends `POST /_double/release`, which releases every stream held at that moment or begun
//! before it, and answers `{"released": N}` with the number of held requests it let go.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let script = weft::dev_model::Script::from_yaml(
//!     "conversations:\n  - { match: hi, turns: [{ text: hello }] }\n",
//! )?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let addr = listener.local_addr()?;
//! tokio::spawn(weft::dev_model::serve(listener, script));
//! // Point an OpenAI client at http://{addr}/v1, or an Anthropic client at http://{addr}.
//! # let _ = addr;
//! # Ok(())
//! # }
//! ```

mod anthropic;
mod openai;
mod routes;
mod script;
mod sse;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::watch;

use script::Turn;
pub use script::{Script, ScriptError};

/// The largest request body accepted, in bytes.
const MAX_BODY_BYTES: usize = 64 << 20;

/// Serves `script` on `listener` until the listener fails: OpenAI chat completions at
/// `/v1/chat/completions`, Anthropic messages at `/v1/messages` and their token count at
/// `/v1/messages/count_tokens`, the script's models at `GET /v1/models`, and
/// `POST /_double/release` to release held streams. Any other path or method gets a JSON
/// 404 or 405 naming the routes served. No API key is needed; `Authorization` and
/// `x-api-key` are accepted and ignored.
pub async fn serve(listener: tokio::net::TcpListener, script: Script) -> std::io::Result<()> {
    let (release, _) = watch::channel(0u64);
    let double = Arc::new(Double {
        script,
        failures: Mutex::new(HashMap::new()),
        release,
        holding: Arc::new(AtomicUsize::new(0)),
    });
    let app = Router::new()
        .route(
            "/v1/chat/completions",
            post(openai_chat).fallback(routes::not_served),
        )
        .route(
            "/v1/messages",
            post(anthropic_messages).fallback(routes::not_served),
        )
        .route(
            "/v1/messages/count_tokens",
            post(routes::count_tokens).fallback(routes::not_served),
        )
        .route(
            "/v1/models",
            get(routes::models).fallback(routes::not_served),
        )
        .route(
            "/_double/release",
            post(release_held).fallback(routes::not_served),
        )
        .fallback(routes::not_served)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(double);
    axum::serve(listener, app).await
}

/// The server's state: the script, how often each failing turn has failed, and the release
/// signal for held streams.
struct Double {
    script: Script,
    /// Requests answered with their turn's error status so far, by (conversation, turn).
    failures: Mutex<HashMap<(usize, usize), u32>>,
    /// Bumped by each release; a held stream waits for a bump after it began.
    release: watch::Sender<u64>,
    /// Requests begun with a hold that have not passed it yet.
    holding: Arc<AtomicUsize>,
}

/// The two wire protocols spoken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Provider {
    OpenAi,
    Anthropic,
}

/// What a request asks for, as the double keys it.
struct Ask {
    /// The text of the first user message.
    first_user: String,
    /// The number of assistant messages already in the request: the turn asked for.
    turn: usize,
    /// The `model` to echo.
    model: String,
    stream: bool,
    /// OpenAI `stream_options.include_usage`.
    include_usage: bool,
}

/// A turn found for a request, and where it sits in the script.
pub(crate) struct Found<'a> {
    pub(crate) turn: &'a Turn,
    pub(crate) conversation: usize,
    pub(crate) index: usize,
    pub(crate) model: String,
}

/// A held request's place in the count of held requests; leaves it when dropped.
pub(crate) struct HoldGuard(Arc<AtomicUsize>);

impl Drop for HoldGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How a held request waits: the release signal as it stood when the request began.
pub(crate) struct Hold {
    pub(crate) release: watch::Receiver<u64>,
    pub(crate) guard: HoldGuard,
}

impl Hold {
    /// Waits for a release sent after the request began.
    pub(crate) async fn wait(mut self) {
        // An error means the server is gone; nothing is left to wait for.
        let _ = self.release.changed().await;
        drop(self.guard);
    }
}

async fn openai_chat(State(double): State<Arc<Double>>, body: Bytes) -> Response {
    double.answer(Provider::OpenAi, &body).await
}

async fn anthropic_messages(State(double): State<Arc<Double>>, body: Bytes) -> Response {
    double.answer(Provider::Anthropic, &body).await
}

async fn release_held(State(double): State<Arc<Double>>) -> Response {
    let released = double.holding.load(Ordering::SeqCst);
    double.release.send_modify(|g| *g = g.wrapping_add(1));
    axum::Json(json!({ "released": released })).into_response()
}

impl Double {
    async fn answer(&self, provider: Provider, body: &[u8]) -> Response {
        let ask = match parse_request(provider, body) {
            Ok(ask) => ask,
            Err(message) => return error(provider, StatusCode::BAD_REQUEST, &message),
        };
        let found = match self.find(&ask) {
            Ok(found) => found,
            Err(message) => return error(provider, StatusCode::BAD_REQUEST, &message),
        };
        if let Some(response) = self.scripted_failure(provider, &found) {
            return response;
        }
        let turn = found.turn;
        let hold = turn.hold.then(|| self.hold());
        if !ask.stream {
            if turn.error_after_chars.is_some() {
                let message = format!(
                    "scripted failure (conversations[{}].turns[{}] has `error_after_chars`; a non-streaming request gets this error instead)",
                    found.conversation, found.index
                );
                return error(provider, StatusCode::INTERNAL_SERVER_ERROR, &message);
            }
            if let Some(hold) = hold {
                hold.wait().await;
            }
            let reply = match provider {
                Provider::OpenAi => openai::reply(&found),
                Provider::Anthropic => anthropic::reply(&found),
            };
            return axum::Json(reply).into_response();
        }
        let plan = match provider {
            Provider::OpenAi => openai::stream(&found, ask.include_usage),
            Provider::Anthropic => anthropic::stream(&found),
        };
        let broken = turn.error_after_chars.is_some();
        let mut response = plan.into_body(hold).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        if broken {
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }

    /// The turn `ask` asks for, or why there is none, naming what was looked for and what the
    /// script has.
    fn find(&self, ask: &Ask) -> Result<Found<'_>, String> {
        let conversations = &self.script.conversations;
        let Some(c) = conversations
            .iter()
            .position(|c| c.first_user == ask.first_user)
        else {
            let mut have: Vec<String> = conversations
                .iter()
                .take(20)
                .map(|c| format!("{:?} ({} turns)", c.first_user, c.turns.len()))
                .collect();
            if conversations.len() > 20 {
                have.push(format!("and {} more", conversations.len() - 20));
            }
            return Err(format!(
                "the model double has no conversation for this request: it looked for one whose `match` is {:?} (the first user message), turn {} (the request holds {} assistant messages); the script's conversations match: {}",
                ask.first_user,
                ask.turn,
                ask.turn,
                have.join(", ")
            ));
        };
        let conversation = &conversations[c];
        let Some(turn) = conversation.turns.get(ask.turn) else {
            return Err(format!(
                "the model double's conversation {:?} (conversations[{c}]) has turns 0 to {}, but the request holds {} assistant messages, so it asks for turn {}: add that turn to the script, or check that the client sends the whole conversation back",
                conversation.first_user,
                conversation.turns.len().saturating_sub(1),
                ask.turn,
                ask.turn
            ));
        };
        Ok(Found {
            turn,
            conversation: c,
            index: ask.turn,
            model: ask.model.clone(),
        })
    }

    /// The scripted error response, while the turn has failures left to give.
    fn scripted_failure(&self, provider: Provider, found: &Found<'_>) -> Option<Response> {
        let turn = found.turn;
        let status = turn.status?;
        let key = (found.conversation, found.index);
        let nth = {
            let mut failures = self
                .failures
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let served = failures.entry(key).or_insert(0);
            if turn.fail_times.is_some_and(|n| *served >= n) {
                return None;
            }
            *served = served.saturating_add(1);
            *served
        };
        let of = turn
            .fail_times
            .map_or_else(|| "every time".to_owned(), |n| format!("{nth} of {n}"));
        let message = format!(
            "scripted error {status} from the model double (conversations[{}].turns[{}], failure {of})",
            found.conversation, found.index
        );
        let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = error(provider, code, &message);
        let headers = response.headers_mut();
        if let Some(s) = turn.retry_after_s
            && let Ok(v) = HeaderValue::from_str(&s.to_string())
        {
            headers.insert(header::RETRY_AFTER, v);
        }
        if let Some(ms) = turn.retry_after_ms
            && let Ok(v) = HeaderValue::from_str(&ms.to_string())
        {
            headers.insert("retry-after-ms", v);
        }
        Some(response)
    }

    /// A hold begun now: it counts as held until it is released or dropped.
    fn hold(&self) -> Hold {
        self.holding.fetch_add(1, Ordering::SeqCst);
        Hold {
            release: self.release.subscribe(),
            guard: HoldGuard(self.holding.clone()),
        }
    }
}

/// Reads what a request asks for, per provider; an error is the message of a 400.
fn parse_request(provider: Provider, body: &[u8]) -> Result<Ask, String> {
    let request: Value =
        serde_json::from_slice(body).map_err(|e| format!("the request body is not JSON: {e}"))?;
    let Some(messages) = request.get("messages").and_then(Value::as_array) else {
        return Err("messages: Field required (a list of messages)".into());
    };
    if provider == Provider::Anthropic && request.get("max_tokens").is_none() {
        return Err("max_tokens: Field required".into());
    }
    let first_user = messages
        .iter()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .map(|m| text_of(m.get("content").unwrap_or(&Value::Null)))
        .ok_or_else(|| {
            "the request has no user message; the model double picks a conversation by the text of the first one".to_owned()
        })?;
    let turn = messages
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        .count();
    Ok(Ask {
        first_user,
        turn,
        model: request
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or(script::DEFAULT_MODEL)
            .to_owned(),
        stream: request.get("stream").and_then(Value::as_bool) == Some(true),
        include_usage: request
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            == Some(true),
    })
}

/// A message's text: a string, or its text parts (`{type: text, text}`) joined with nothing
/// between them.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// An error response in the provider's shape.
fn error(provider: Provider, status: StatusCode, message: &str) -> Response {
    let body = match provider {
        Provider::OpenAi => openai::error_body(status, message),
        Provider::Anthropic => anthropic::error_body(status, message),
    };
    (status, axum::Json(body)).into_response()
}

/// `text` cut into pieces of at most `size` characters (at least one piece).
pub(crate) fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    chars
        .chunks(size.max(1))
        .map(|c| c.iter().collect())
        .collect()
}

/// The first `n` characters of `text`.
pub(crate) fn first_chars(text: &str, n: usize) -> String {
    text.chars().take(n).collect()
}
