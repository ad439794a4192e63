//! Accepting connections within limits: at most [`ServeConfig::max_connections`] open at once
//! (one more is closed as soon as it is accepted, so the process never runs out of file
//! descriptors), and a client that does not finish sending a request's headers within
//! [`ServeConfig::header_timeout`] is disconnected, so slow clients cannot hold every slot.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::config::ServeConfig;

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
