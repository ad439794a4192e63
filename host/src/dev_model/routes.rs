//! The routes beside the conversations: `GET /v1/models`, Anthropic's
//! `POST /v1/messages/count_tokens`, and the JSON 404 or 405 answering anything else
//! (docs/MODEL-DOUBLE.md).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Double, Provider, error};

/// Every route served, as method and path, in the order error messages list them.
const ROUTES: [(&str, &str); 5] = [
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/messages"),
    ("POST", "/v1/messages/count_tokens"),
    ("GET", "/v1/models"),
    ("POST", "/_double/release"),
];

/// The `created` of every OpenAI model listed, and (as RFC 3339) Anthropic's `created_at`:
/// fixed, so listings are the same every time.
const CREATED: u64 = 0;

/// Whether a request is answered in Anthropic's shapes: it carries `anthropic-version`
/// (every Anthropic SDK sends it), or its path ends in `messages` or `count_tokens`.
fn provider_of(path: &str, headers: &HeaderMap) -> Provider {
    let last = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    if headers.contains_key("anthropic-version") || last == "messages" || last == "count_tokens" {
        Provider::Anthropic
    } else {
        Provider::OpenAi
    }
}

/// `GET /v1/models`: the script's models, in Anthropic's list shape when the request carries
/// `anthropic-version`, else in OpenAI's.
pub(super) async fn models(State(double): State<Arc<Double>>, headers: HeaderMap) -> Response {
    let names = &double.script.models;
    let body = if headers.contains_key("anthropic-version") {
        let data: Vec<Value> = names
            .iter()
            .map(|id| {
                json!({
                    "type": "model", "id": id, "display_name": id,
                    "created_at": "1970-01-01T00:00:00Z",
                })
            })
            .collect();
        json!({
            "data": data,
            "has_more": false,
            "first_id": names.first(),
            "last_id": names.last(),
        })
    } else {
        let data: Vec<Value> = names
            .iter()
            .map(
                |id| json!({ "id": id, "object": "model", "created": CREATED, "owned_by": "weft" }),
            )
            .collect();
        json!({ "object": "list", "data": data })
    };
    axum::Json(body).into_response()
}

/// `POST /v1/messages/count_tokens`: `{"input_tokens": N}` for an Anthropic messages body,
/// or a 400 saying what is wrong with it.
pub(super) async fn count_tokens(body: axum::body::Bytes) -> Response {
    match estimate(&body) {
        Ok(n) => axum::Json(json!({ "input_tokens": n })).into_response(),
        Err(message) => error(Provider::Anthropic, StatusCode::BAD_REQUEST, &message),
    }
}

/// The double's token estimate for a messages body: the characters of the compact JSON of
/// `system`, of each of `messages` and of `tools` (those given), summed, divided by 4 and
/// rounded up. An error is the message of a 400.
fn estimate(body: &[u8]) -> Result<u64, String> {
    let request: Value =
        serde_json::from_slice(body).map_err(|e| format!("the request body is not JSON: {e}"))?;
    let Some(request) = request.as_object() else {
        return Err("the request body must be a JSON object".into());
    };
    if !request.get("model").is_some_and(Value::is_string) {
        return Err("model: Field required (a string)".into());
    }
    let Some(messages) = request.get("messages").and_then(Value::as_array) else {
        return Err("messages: Field required (a list of messages)".into());
    };
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str);
        if !matches!(role, Some("user" | "assistant")) {
            return Err(format!(
                "messages.{i}.role: Input should be 'user' or 'assistant'"
            ));
        }
        if !m
            .get("content")
            .is_some_and(|c| c.is_string() || c.is_array())
        {
            return Err(format!(
                "messages.{i}.content: Field required (a string or a list of content blocks)"
            ));
        }
    }
    match request.get("system") {
        None | Some(Value::String(_) | Value::Array(_)) => {}
        Some(_) => return Err("system: Input should be a string or a list of text blocks".into()),
    }
    match request.get("tools") {
        None | Some(Value::Array(_)) => {}
        Some(_) => return Err("tools: Input should be a list of tools".into()),
    }
    let chars = |v: &Value| v.to_string().chars().count() as u64;
    let mut total: u64 = messages.iter().map(chars).sum();
    for key in ["system", "tools"] {
        if let Some(v) = request.get(key) {
            total = total.saturating_add(chars(v));
        }
    }
    Ok(total.div_ceil(4))
}

/// Anything not served: a 405 for a served path asked with another method, else a 404; JSON
/// in the request's provider shape, naming what was asked for and the routes served, and
/// saying so when the path is a served one with `/v1` missing or doubled.
pub(super) async fn not_served(method: Method, uri: Uri, headers: HeaderMap) -> Response {
    let path = uri.path();
    let provider = provider_of(path, &headers);
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("ADDR");
    let served: Vec<String> = ROUTES.iter().map(|(m, p)| format!("{m} {p}")).collect();
    let served = format!("The model double serves: {}.", served.join(", "));
    let asked = format!("{method} {path} is not served");
    if let Some((allowed, _)) = ROUTES.iter().find(|(_, p)| *p == path) {
        let message = format!("{asked}: {path} takes {allowed}. {served}");
        let body = match provider {
            Provider::OpenAi => {
                json!({ "error": { "message": message, "type": "invalid_request_error", "param": null, "code": null } })
            }
            Provider::Anthropic => {
                json!({ "type": "error", "error": { "type": "invalid_request_error", "message": message } })
            }
        };
        let mut response = (StatusCode::METHOD_NOT_ALLOWED, axum::Json(body)).into_response();
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(allowed));
        return response;
    }
    let base = match provider {
        Provider::OpenAi => format!("an OpenAI client's base URL is http://{host}/v1"),
        Provider::Anthropic => format!(
            "an Anthropic client's base URL is http://{host}, without /v1 (the client adds /v1 itself)"
        ),
    };
    let message = match did_you_mean(path) {
        Some((m, p, Fault::Missing)) => format!(
            "{asked}: did you mean {m} {p}? The base URL should end in /v1: {base}. {served}"
        ),
        Some((m, p, Fault::Doubled)) => format!(
            "{asked}: did you mean {m} {p}? The path has /v1 more than once: {base}. {served}"
        ),
        Some((m, p, Fault::TrailingSlash)) => {
            format!("{asked}: did you mean {m} {p}, without the trailing /? {served}")
        }
        None => format!("{asked}. {served} Check the base URL: {base}."),
    };
    let body = match provider {
        Provider::OpenAi => {
            json!({ "error": { "message": message, "type": "invalid_request_error", "param": null, "code": "unknown_url" } })
        }
        Provider::Anthropic => {
            json!({ "type": "error", "error": { "type": "not_found_error", "message": message } })
        }
    };
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

/// How a path asked for differs from a served one.
enum Fault {
    /// `/chat/completions` for `/v1/chat/completions`.
    Missing,
    /// `/v1/v1/messages` for `/v1/messages`.
    Doubled,
    /// `/v1/models/` for `/v1/models`.
    TrailingSlash,
}

/// The served route `path` is with `/v1` put right (once, at the start) and any trailing `/`
/// dropped, and what was wrong with it; `None` when that is no served `/v1` route.
fn did_you_mean(path: &str) -> Option<(&'static str, &'static str, Fault)> {
    let trimmed = path.trim_end_matches('/');
    let mut rest = trimmed;
    let mut v1s = 0usize;
    while let Some(r) = rest.strip_prefix("/v1") {
        if !(r.is_empty() || r.starts_with('/')) {
            break;
        }
        rest = r;
        v1s += 1;
    }
    let want = format!("/v1{rest}");
    let (m, p) = ROUTES
        .iter()
        .find(|(_, p)| *p == want && p.starts_with("/v1/"))?;
    let fault = match v1s {
        0 => Fault::Missing,
        1 if trimmed != path => Fault::TrailingSlash,
        1 => return None,
        _ => Fault::Doubled,
    };
    Some((m, p, fault))
}
