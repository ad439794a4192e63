//! The web console: a single page (`GET /`) and its script and style (`GET /ui/app.js`,
//! `GET /ui/app.css`), embedded in the binary at build time. The script is written as several
//! files of named purpose under `ui/` and served joined, in the order [`SCRIPT`] lists them, so
//! the page loads one script and the router one route. The page renders itself in the
//! browser from the API (docs/SERVER.md, "The web console"); it loads nothing from anywhere but
//! this server, which its Content-Security-Policy also enforces.

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// One embedded file of the console.
struct Asset {
    /// Its bytes, as built into the binary.
    body: &'static str,
    /// Its `Content-Type`.
    content_type: &'static str,
    /// A hash of `body`, the base of its `ETag`.
    hash: u64,
}

/// FNV-1a over `bytes`, at compile time: an `ETag` that changes whenever the file does.
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    hash
}

/// Declares an embedded asset from files of `ui/`, joined in the order given.
macro_rules! asset {
    ($($file:literal),+; $type:literal) => {{
        const BODY: &str = concat!($(include_str!(concat!("ui/", $file))),+);
        Asset {
            body: BODY,
            content_type: $type,
            hash: fnv1a(BODY.as_bytes()),
        }
    }};
}

/// The app shell: the page every console view starts from.
const SHELL: Asset = asset!("index.html"; "text/html; charset=utf-8");

/// The console's script: what every view uses first, each file after the ones it takes from,
/// the routes last (each file says what it holds).
const SCRIPT: Asset = asset!(
    "core.js",
    "forms.js",
    "lists.js",
    "graph.js",
    "timeline.js",
    "events.js",
    "actions.js",
    "run.js",
    "app.js";
    "text/javascript; charset=utf-8"
);

/// The console's style sheet.
const STYLE: Asset = asset!("app.css"; "text/css; charset=utf-8");

/// What the shell may load and connect to: this server only, nothing inline, no frames.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";

impl Asset {
    /// The answer to a request with `headers`: the file, or `304 Not Modified` when the client
    /// already holds this version. Browsers revalidate on every load (`no-cache`), so a new
    /// binary's console is seen at once, and an unchanged one costs no transfer.
    fn respond(&self, headers: &HeaderMap) -> Response {
        let etag = format!("\"{:016x}\"", self.hash);
        let fresh = headers
            .get(header::IF_NONE_MATCH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
        let mut response = if fresh {
            StatusCode::NOT_MODIFIED.into_response()
        } else {
            self.body.into_response()
        };
        let h = response.headers_mut();
        let mut set = |name: HeaderName, value: &str| {
            if let Ok(value) = HeaderValue::from_str(value) {
                h.insert(name, value);
            }
        };
        set(header::CACHE_CONTROL, "no-cache");
        set(header::ETAG, &etag);
        set(header::X_CONTENT_TYPE_OPTIONS, "nosniff");
        if !fresh {
            set(header::CONTENT_TYPE, self.content_type);
        }
        response
    }
}

/// `GET /`: the console's app shell.
pub(crate) async fn shell(headers: HeaderMap) -> Response {
    let mut response = SHELL.respond(&headers);
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// `GET /ui/app.js`: the console's script.
pub(crate) async fn script(headers: HeaderMap) -> Response {
    SCRIPT.respond(&headers)
}

/// `GET /ui/app.css`: the console's style sheet.
pub(crate) async fn style(headers: HeaderMap) -> Response {
    STYLE.respond(&headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_console_names_no_other_origin_and_loads_its_assets() {
        for asset in [&SHELL, &SCRIPT, &STYLE] {
            let text = asset.body.to_ascii_lowercase();
            for external in [
                "http:", "https:", "\"//", "'//", "`//", "(//", "@import", "url(", "<iframe",
            ] {
                assert!(
                    !text.contains(external),
                    "{} has `{external}`",
                    asset.content_type
                );
            }
        }
        assert!(SHELL.body.contains("src=\"/ui/app.js\""));
        assert!(SHELL.body.contains("href=\"/ui/app.css\""));
    }

    #[test]
    fn an_unchanged_asset_is_not_sent_again() {
        let first = SCRIPT.respond(&HeaderMap::new());
        assert_eq!(first.status(), StatusCode::OK);
        let etag = first.headers().get(header::ETAG).cloned();
        let mut again = HeaderMap::new();
        if let Some(etag) = etag {
            again.insert(header::IF_NONE_MATCH, etag);
        }
        assert_eq!(SCRIPT.respond(&again).status(), StatusCode::NOT_MODIFIED);
        assert_ne!(SCRIPT.hash, STYLE.hash);
    }
}
