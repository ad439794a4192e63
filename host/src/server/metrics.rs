//! `GET /metrics`: the runtime's metrics in the Prometheus text format.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::App;
use super::error::ApiError;
use crate::driver::metrics::METRICS_CONTENT_TYPE;

/// Stored runs by status, runs driven, step invocations in flight, transitions, and step
/// latency by outcome.
pub(crate) async fn metrics(State(app): State<App>) -> Result<Response, ApiError> {
    let rt = app.rt.clone();
    // Counting runs by status reads the store: off the async workers.
    let text = tokio::task::spawn_blocking(move || rt.metrics())
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok(([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], text).into_response())
}
