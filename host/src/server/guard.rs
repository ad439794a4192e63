//! The checks every request passes before a handler sees it:
//! - its `Host` names this server: the bound address, `localhost` on loopback, or a name
//!   allowed with `--allow-host` (a page on another name, made to resolve here by DNS
//!   rebinding, is refused);
//! - its `Origin`, when it has one, is the server's own or an allowed one, and a write without
//!   one is not marked cross-site by `Sec-Fetch-Site` (a form on another site cannot cancel
//!   runs);
//! - a write (any method but `GET`, `HEAD` and `OPTIONS`) carries the bearer token, when one
//!   is set.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::config::ServeConfig;
use super::error::ApiError;

/// What a request is checked against.
pub(crate) struct Guard {
    bound: SocketAddr,
    hosts: Vec<String>,
    origins: Vec<String>,
    token: Option<String>,
}

impl Guard {
    /// The guard of a server bound to `bound` with `config`.
    pub(crate) fn new(bound: SocketAddr, config: &ServeConfig) -> Self {
        Guard {
            bound,
            hosts: config.allowed_hosts.iter().map(|h| normalize(h)).collect(),
            origins: config
                .cors_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
            token: config.token.clone(),
        }
    }

    /// Checks the `Host` header; returns it as sent.
    fn host<'a>(&self, headers: &'a HeaderMap) -> Result<&'a str, ApiError> {
        let sent = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .ok_or_else(|| {
                ApiError::bad_request("the request has no readable `Host` header; send one")
            })?;
        let refuse = || {
            ApiError::new(
                StatusCode::FORBIDDEN,
                "host-refused",
                format!(
                    "this server does not answer to host `{}`; if that name is how it is reached, \
                     start it with `--allow-host NAME`",
                    sent.chars().take(100).collect::<String>()
                ),
            )
        };
        let authority: axum::http::uri::Authority = sent.parse().map_err(|_| refuse())?;
        let name = normalize(authority.host());
        // A name given with `--allow-host` may come through a proxy on another port; an
        // address or `localhost` names this server only with its own port.
        let own_port = authority.port_u16().unwrap_or(80) == self.bound.port();
        let bound = self.bound.ip();
        let allowed = match name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            Ok(ip) => {
                own_port
                    && (ip == bound
                        || bound.is_unspecified()
                        || (bound.is_loopback() && ip.is_loopback()))
            }
            Err(_) => {
                (own_port && name == "localhost" && (bound.is_loopback() || bound.is_unspecified()))
                    || self.hosts.contains(&name)
            }
        };
        if allowed { Ok(sent) } else { Err(refuse()) }
    }

    /// Checks `Origin` (and, for a write without one, `Sec-Fetch-Site`).
    fn origin(&self, headers: &HeaderMap, host: &str, write: bool) -> Result<(), ApiError> {
        let Some(origin) = headers.get(header::ORIGIN) else {
            let site = headers
                .get("sec-fetch-site")
                .and_then(|s| s.to_str().ok())
                .unwrap_or("none");
            if write && !matches!(site, "same-origin" | "none") {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "origin-refused",
                    format!("a {site} request may not change runs"),
                ));
            }
            return Ok(());
        };
        let origin = origin
            .to_str()
            .unwrap_or_default()
            .trim_end_matches('/')
            .to_ascii_lowercase();
        let host = host.to_ascii_lowercase();
        let own = origin == format!("http://{host}") || origin == format!("https://{host}");
        if own || self.origins.contains(&origin) {
            return Ok(());
        }
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "origin-refused",
            format!(
                "requests from origin `{}` are refused; to let pages of that origin use this \
                 server, start it with `--cors-origin ORIGIN`",
                origin.chars().take(100).collect::<String>()
            ),
        ))
    }

    /// Checks the bearer token of a write.
    fn token(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        let sent = headers
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| {
                let (scheme, value) = h.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| value.trim())
            });
        match sent {
            Some(sent) if bool::from(sent.as_bytes().ct_eq(token.as_bytes())) => Ok(()),
            _ => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "token-required",
                "this server takes writes only with its token: send `Authorization: Bearer \
                 TOKEN`, the token the server was started with (`--token-env NAME`) or printed \
                 when it started",
            )),
        }
    }
}

/// A host name as compared: lower case, without a trailing dot.
fn normalize(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// The middleware: refuses a request that fails a check, passes the others on.
pub(crate) async fn check(State(guard): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let write = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let checked = guard.host(req.headers()).and_then(|host| {
        guard.origin(req.headers(), host, write)?;
        if write {
            guard.token(req.headers())?;
        }
        Ok(())
    });
    match checked {
        Ok(()) => next.run(req).await,
        Err(e) => {
            let unauthorized = e.status() == StatusCode::UNAUTHORIZED;
            let mut response = e.into_response();
            if unauthorized {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    header::HeaderValue::from_static("Bearer"),
                );
            }
            response
        }
    }
}
