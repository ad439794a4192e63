//! Refusals over HTTP: a status and `{"error": message}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::driver::RuntimeError;
use crate::engine::Refusal;

/// A refusal: its status and a message that says what is wrong and how to fix it.
#[derive(Debug)]
pub(crate) struct ApiError(StatusCode, String);

impl ApiError {
    /// A refusal with `status`.
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError(status, message.into())
    }

    /// A 400.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// Its status.
    pub(crate) fn status(&self) -> StatusCode {
        self.0
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

impl From<RuntimeError> for ApiError {
    fn from(e: RuntimeError) -> Self {
        let status = match &e {
            RuntimeError::UnknownRun(_) => StatusCode::NOT_FOUND,
            RuntimeError::Refused(Refusal::NotSuspended { .. } | Refusal::AlreadyEnded { .. })
            | RuntimeError::NotRecoverable { .. } => StatusCode::CONFLICT,
            RuntimeError::Refused(_)
            | RuntimeError::InvalidInput(_)
            | RuntimeError::InvalidRunId(_)
            | RuntimeError::Limit(_) => StatusCode::BAD_REQUEST,
            e if e.is_disk_full() => StatusCode::INSUFFICIENT_STORAGE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError(status, e.to_string())
    }
}
