//! `weft serve`: the HTTP API and the web console, over one runtime.
//!
//! The routes, the error shape and the guards are described in `docs/SERVER.md`; this module
//! wires them: `api` holds the handlers, `bulk` those acting on every run a filter matches, `catalog` the workflows directory, `guard` the
//! host, origin and token checks, `listen` the connection limits, `openapi` the OpenAPI
//! document, `prune` the deletion of ended runs (`POST /prune`), `redact` what a run's stored workflow shows of its secrets and paths, `schemas`
//! how that document describes the engine's types, `ui` the web console
//! (a single page and its embedded script and style).
//! [`ServeConfig`] holds what the server allows and its limits.

mod api;
mod bulk;
mod catalog;
mod config;
mod error;
mod guard;
mod listen;
mod metrics;
mod openapi;
mod prune;
mod redact;
mod schemas;
mod ui;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, Method, header};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower_http::cors::{AllowOrigin, CorsLayer};

pub use config::{ServeConfig, generate_token, is_loopback};

use crate::driver::Runtime;
use catalog::Catalog;
use guard::Guard;

/// What the handlers share.
#[derive(Clone)]
pub(crate) struct App {
    rt: Runtime,
    catalog: Arc<Catalog>,
    /// One permit per event stream that follows a run.
    followers: Arc<Semaphore>,
    heartbeat: Duration,
}

/// Serves the API on `listener` with `config` until the task is dropped; an error when the
/// configuration cannot be used (a workflows directory that is not one).
pub async fn serve(rt: Runtime, listener: TcpListener, config: ServeConfig) -> std::io::Result<()> {
    let bound = listener.local_addr()?;
    let app = router(rt, bound, &config)?;
    listen::accept(listener, app, &config).await;
    Ok(())
}

/// The API's routes over `rt`, for a server bound to `bound`, guarded as `config` says.
pub fn router(rt: Runtime, bound: SocketAddr, config: &ServeConfig) -> std::io::Result<Router> {
    let catalog = Catalog::new(config.workflows.as_deref())?;
    catalog.keep_retentions(&rt);
    let app = App {
        rt,
        catalog: Arc::new(catalog),
        followers: Arc::new(Semaphore::new(config.max_followers)),
        heartbeat: config.heartbeat,
    };
    let guard = Arc::new(Guard::new(bound, config));
    let mut router = Router::new()
        .route("/", get(ui::shell))
        .route("/ui/app.js", get(ui::script))
        .route("/ui/app.css", get(ui::style))
        .route("/openapi.json", get(openapi::document))
        .route("/metrics", get(metrics::metrics))
        .route("/workflows", get(api::workflows))
        .route("/runs", get(api::list).post(api::start))
        .route("/runs/{id}", get(api::show))
        .route("/runs/{id}/workflow", get(api::definition))
        .route("/runs/{id}/events", get(api::events))
        .route("/runs/{id}/resume", post(api::resume))
        .route("/runs/{id}/cancel", post(api::cancel))
        .route("/runs/{id}/rerun", post(api::rerun))
        .route("/prune", post(prune::prune))
        .route("/bulk/cancel", post(bulk::cancel))
        .route("/bulk/resume", post(bulk::resume))
        .fallback(error::no_route)
        .method_not_allowed_fallback(error::no_method)
        .with_state(app)
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(
            listen::BodyLimits {
                timeout: config.body_timeout,
                max_bytes: config.max_body_bytes,
            },
            listen::read_body,
        ))
        .layer(axum::middleware::from_fn_with_state(guard, guard::check));
    if !config.cors_origins.is_empty() {
        let origins: Vec<HeaderValue> = config
            .cors_origins
            .iter()
            .filter_map(|o| HeaderValue::from_str(o.trim_end_matches('/')).ok())
            .collect();
        router = router.layer(
            CorsLayer::new()
                .allow_origin(AllowOrigin::list(origins))
                .allow_methods([Method::GET, Method::POST])
                .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE]),
        );
    }
    Ok(router)
}
