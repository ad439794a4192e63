//! The HTTP side of model calls: one shared client (rustls with the `ring` provider and the
//! webpki roots, so no system TLS library is needed), a POST whose answer is read as
//! Server-Sent Events ([`super::sse`], each line within a bound), and a provider's refusal
//! turned into a step failure that says what to do.
//!
//! A redirect is followed only within the origin of `base-url` (same scheme, host and port):
//! the API key and the model's `headers:` go with every request, and a redirect to another
//! origin would hand them to it. Such a redirect fails the call with `model-refused`, naming
//! where it led, and nothing is sent there.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Value, json};

use super::sse::{Event, Parser};
use crate::engine::invocation::StepFailure;

/// The most bytes of a refusal's body a failure repeats.
const MAX_REFUSAL_BYTES: usize = 2000;

/// How long connecting to a model may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a model's answer may go silent (no byte, not even a keep-alive) before the call
/// fails `model-unavailable` and is retried; a step's `timeout-ms` bounds the whole call.
const IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The most redirects followed within the origin before the call fails.
const MAX_REDIRECTS: usize = 10;

/// Follows a redirect only within the origin of the request before it, and at most
/// [`MAX_REDIRECTS`] of them; otherwise stops, and the redirect is the answer
/// ([`post_sse`] refuses it).
fn same_origin_redirects(attempt: reqwest::redirect::Attempt<'_>) -> reqwest::redirect::Action {
    let same = attempt
        .previous()
        .last()
        .is_some_and(|before| before.origin() == attempt.url().origin());
    if same && attempt.previous().len() <= MAX_REDIRECTS {
        attempt.follow()
    } else {
        attempt.stop()
    }
}

/// The client every model call shares (connection pools per host).
fn client() -> Result<&'static reqwest::Client, StepFailure> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            let tls = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots)
                .with_no_client_auth();
            reqwest::Client::builder()
                .tls_backend_preconfigured(tls)
                .connect_timeout(CONNECT_TIMEOUT)
                .read_timeout(IDLE_TIMEOUT)
                .redirect(reqwest::redirect::Policy::custom(same_origin_redirects))
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| StepFailure::new("model-unavailable", format!("no HTTP client: {e}")))
}

/// `base` and `path` joined with one `/`.
pub(crate) fn url(base: &str, path: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path.trim_start_matches('/')
    )
}

/// A model's answer as events, read as they arrive.
pub(crate) struct Events {
    url: String,
    body: BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    parser: Parser,
    ready: std::collections::VecDeque<Event>,
}

impl Events {
    /// The next event; `None` at the end of the answer. A broken connection fails the call
    /// `model-unavailable`, a line over the bound `model-malformed`.
    pub(crate) async fn next(&mut self) -> Option<Result<Event, StepFailure>> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(Ok(event));
            }
            let chunk = match self.body.next().await? {
                Ok(chunk) => chunk,
                Err(e) => return Some(Err(broken(&self.url, &without_url(&e)))),
            };
            let mut out = Vec::new();
            if let Err(e) = self.parser.push(&chunk, &mut out) {
                return Some(Err(malformed(&self.url, &e.to_string())));
            }
            self.ready.extend(out);
        }
    }
}

/// POSTs `body` as JSON with `headers` and returns the answer's events, each line of at most
/// `max_line` bytes; a refusal or a redirect to another origin is a failure.
pub(crate) async fn post_sse(
    url: &str,
    headers: &[(String, String)],
    body: &Value,
    max_line: usize,
) -> Result<Events, StepFailure> {
    let mut req = client()?
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream");
    for (name, value) in headers {
        req = req.header(name.as_str(), value.as_str());
    }
    let body = serde_json::to_vec(body)
        .map_err(|e| StepFailure::new("model-refused", e.to_string()).not_retryable())?;
    let response = req.body(body).send().await.map_err(|e| {
        StepFailure::new(
            "model-unavailable",
            format!("cannot reach the model at {url}: {}", without_url(&e)),
        )
    })?;
    let status = response.status();
    if status.is_redirection() {
        return Err(redirected(url, &response));
    }
    if !status.is_success() {
        let retry_after = retry_after_ms(response.headers());
        let text = response.text().await.unwrap_or_default();
        return Err(refusal(url, status.as_u16(), retry_after, &text));
    }
    Ok(Events {
        url: url.to_owned(),
        body: response.bytes_stream().boxed(),
        parser: Parser::new(max_line),
        ready: Default::default(),
    })
}

/// The failure for a redirect not followed: to another origin, or one too many.
fn redirected(url: &str, response: &reqwest::Response) -> StepFailure {
    let status = response.status().as_u16();
    let location = response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|l| response.url().join(l).ok());
    let message = match location {
        Some(to) if to.origin() == response.url().origin() => format!(
            "the model at {url} answered {status}, redirecting more than {MAX_REDIRECTS} times within its origin (last to {to}); set the model's `base-url` to the address that answers"
        ),
        Some(to) => format!(
            "the model at {url} answered {status}, a redirect to {to}, another origin; weft follows no redirect of a model API to another origin, as it would carry the API key and the model's headers there: set the model's `base-url` to that address if you trust it"
        ),
        None => format!(
            "the model at {url} answered {status}, a redirect without a usable `location`; set the model's `base-url` to the address that answers"
        ),
    };
    StepFailure::new("model-refused", message)
        .with_details(json!({ "status": status }))
        .not_retryable()
}

/// A reqwest error's words without the URL it repeats (the caller names it once).
fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(&format!(" ({url})"), "");
    }
    text
}

/// What the provider asked to wait before trying again: `retry-after-ms`, else `retry-after`
/// in seconds.
fn retry_after_ms(headers: &reqwest::header::HeaderMap) -> Option<u64> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok()) {
        return Some(ms.max(0.0).ceil() as u64);
    }
    get("retry-after")
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|s| (s.max(0.0) * 1000.0).ceil() as u64)
}

/// The failure for a provider's refusal with `status` and `body`.
pub(crate) fn refusal(url: &str, status: u16, retry_after: Option<u64>, body: &str) -> StepFailure {
    let said = provider_message(body);
    let (code, retryable, fix) = match status {
        429 => (
            "rate-limited",
            true,
            "the step waits and tries again (its `retry:` policy)",
        ),
        408 | 409 | 500..=599 => (
            "model-unavailable",
            true,
            "the step tries again (its `retry:` policy)",
        ),
        401 | 403 => (
            "model-auth",
            false,
            "check the API key in the model's `api-key-env` variable and the `base-url`",
        ),
        _ => (
            "model-refused",
            false,
            "fix the request the step makes (its input, tools or config)",
        ),
    };
    let mut failure = StepFailure::new(
        code,
        format!("the model at {url} answered {status}: {said}; {fix}"),
    );
    let mut details = json!({ "status": status });
    if let Some(ms) = retry_after {
        details["retry_after_ms"] = json!(ms);
    }
    failure.details = Some(details);
    if !retryable {
        failure = failure.not_retryable();
    }
    failure
}

/// The provider's own words from an error body (`{"error": {"message"}}` or
/// `{"error": {"type", "message"}}`), else the body, cut.
fn provider_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| {
            v["error"]["message"]
                .as_str()
                .or_else(|| v["message"].as_str())
                .or_else(|| v["error"].as_str())
        })
        .map(str::to_owned)
        .unwrap_or_else(|| body.trim().to_owned());
    let mut cut: String = message.chars().take(MAX_REFUSAL_BYTES).collect();
    if cut.len() < message.len() {
        cut.push('…');
    }
    if cut.is_empty() {
        "(no body)".into()
    } else {
        cut
    }
}

/// A stream that ended or broke before the reply was whole.
pub(crate) fn broken(url: &str, what: &str) -> StepFailure {
    StepFailure::new(
        "model-unavailable",
        format!("the model at {url} stopped its answer early: {what}"),
    )
}

/// A stream event that is not what the protocol says.
pub(crate) fn malformed(url: &str, what: &str) -> StepFailure {
    StepFailure::new(
        "model-malformed",
        format!("the model at {url} sent what its protocol does not allow: {what}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_say_what_to_do_and_carry_the_wait_asked_for() {
        let f = refusal(
            "http://m/v1",
            429,
            Some(1500),
            r#"{"error":{"message":"slow down"}}"#,
        );
        assert_eq!(f.code, "rate-limited");
        assert!(f.retryable);
        assert!(
            f.message.contains("answered 429: slow down"),
            "{}",
            f.message
        );
        assert_eq!(
            f.details,
            Some(json!({"status": 429, "retry_after_ms": 1500}))
        );
        let f = refusal("http://m/v1", 401, None, "nope");
        assert_eq!((f.code.as_str(), f.retryable), ("model-auth", false));
        let f = refusal("http://m/v1", 400, None, "");
        assert_eq!((f.code.as_str(), f.retryable), ("model-refused", false));
        assert!(f.message.contains("(no body)"));
        let f = refusal("http://m/v1", 503, None, "down");
        assert_eq!((f.code.as_str(), f.retryable), ("model-unavailable", true));
    }

    #[test]
    fn retry_after_is_read_in_milliseconds_or_seconds() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("retry-after", "2".parse().expect("value"));
        assert_eq!(retry_after_ms(&h), Some(2000));
        h.insert("retry-after-ms", "250".parse().expect("value"));
        assert_eq!(retry_after_ms(&h), Some(250));
        assert_eq!(retry_after_ms(&reqwest::header::HeaderMap::new()), None);
    }
}
