//! Accepting connections within limits: at most [`ServeConfig::max_connections`] open at once
//! (one more is closed as soon as it is accepted, so the process never runs out of file
//! descriptors), a client that does not finish sending a request's headers within
//! [`ServeConfig::header_timeout`] is disconnected, and one that does not finish sending its
//! body within [`ServeConfig::body_timeout`] is answered 408 and disconnected, so slow clients
//! cannot hold every slot.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::config::ServeConfig;
use super::error::ApiError;

/// How long accepting pauses after the system refused a connection (out of descriptors, say),
/// so a full table is not polled in a busy loop.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

/// Serves `app` on `listener` within `config`'s limits until the task is dropped.
pub(crate) async fn accept(listener: TcpListener, app: Router, config: &ServeConfig) {
    let slots = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("cannot accept a connection: {e}");
                tokio::time::sleep(ACCEPT_PAUSE).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            // Over the cap: closed at once, unread.
            drop(stream);
            continue;
        };
        let service = TowerToHyperService::new(app.clone());
        let connection = http.serve_connection(TokioIo::new(stream), service);
        tokio::spawn(async move {
            let _ = connection.await;
            drop(slot);
        });
    }
}

/// How long a request's body may take to arrive, and how large it may be.
#[derive(Clone, Copy)]
pub(crate) struct BodyLimits {
    /// [`ServeConfig::body_timeout`].
    pub(crate) timeout: Duration,
    /// [`ServeConfig::max_body_bytes`].
    pub(crate) max_bytes: usize,
}

/// Why a body was not read whole.
enum Unread {
    /// It is larger than the limit.
    TooLarge,
    /// The client broke off sending it.
    Broken,
}

/// The middleware: reads a request's whole body within [`BodyLimits::timeout`] before the
/// handler sees the request, so that no handler waits on a client that sends it a byte at a
/// time. Too slow: 408 `body-timeout`, and the connection is closed; too large: 413.
pub(crate) async fn read_body(
    State(limits): State<BodyLimits>,
    req: Request,
    next: Next,
) -> Response {
    let (parts, body) = req.into_parts();
    let read = tokio::time::timeout(limits.timeout, collect(body, limits.max_bytes)).await;
    let refusal = match read {
        Ok(Ok(bytes)) => {
            return next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await;
        }
        Ok(Err(Unread::TooLarge)) => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            "the request body is over this server's limit (`--max-body-bytes`)",
        ),
        Ok(Err(Unread::Broken)) => {
            ApiError::bad_request("the request body was broken off before its end; send it whole")
        }
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "body-timeout",
            format!(
                "the request body did not arrive within {:?}; send it at once, or raise the \
                 server's limit (`--body-timeout-s`)",
                limits.timeout
            ),
        ),
    };
    // The rest of the body is never read: the connection ends with this answer.
    let mut response = refusal.into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The bytes of `body`, at most `max` of them.
async fn collect(body: Body, max: usize) -> Result<Bytes, Unread> {
    let mut stream = body.into_data_stream();
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut len = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| Unread::Broken)?;
        len = len.saturating_add(chunk.len());
        if len > max {
            return Err(Unread::TooLarge);
        }
        chunks.push(chunk);
    }
    // Most bodies come in one chunk: kept as it is, not copied.
    Ok(match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.swap_remove(0),
        _ => Bytes::from(chunks.concat()),
    })
}
