//! Refusals over HTTP, all of one shape: a status and `{"error": {"code", "message"}}`, where
//! `code` is a stable kebab-case word a client can branch on and `message` says what is wrong
//! and how to fix it. axum's own refusals (a body that is not JSON, a bad query, an unknown
//! route, a method a route lacks, a body over the limit) are turned into the same shape.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::driver::RuntimeError;
use crate::engine::Refusal;
use crate::store::StoreError;

/// A refusal: its status, its code and a message that says what is wrong and how to fix it.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

/// The body of every refusal.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct ErrorDetail {
    /// A stable kebab-case word: `bad-request`, `invalid-run-id`, `unknown-run`, ...
    pub code: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl ApiError {
    /// A refusal with `status` and `code`.
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// A 400 `bad-request`.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "bad-request", message)
    }

    /// A 500 `internal`.
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// Its status.
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message,
            },
        };
        (self.status, Json(body)).into_response()
    }
}

impl From<RuntimeError> for ApiError {
    fn from(e: RuntimeError) -> Self {
        let (status, code) = match &e {
            RuntimeError::UnknownRun(_) => (StatusCode::NOT_FOUND, "unknown-run"),
            RuntimeError::Refused(Refusal::NotSuspended { .. }) => {
                (StatusCode::CONFLICT, "not-suspended")
            }
            RuntimeError::Refused(Refusal::AlreadyEnded { .. }) => {
                (StatusCode::CONFLICT, "already-ended")
            }
            RuntimeError::NotRecoverable { .. } => (StatusCode::CONFLICT, "not-recoverable"),
            RuntimeError::Store(StoreError::RunExists(_)) => (StatusCode::CONFLICT, "run-exists"),
            RuntimeError::Refused(Refusal::InvalidData { .. }) => {
                (StatusCode::BAD_REQUEST, "invalid-data")
            }
            RuntimeError::Refused(_) => (StatusCode::BAD_REQUEST, "refused"),
            RuntimeError::InvalidInput(_) => (StatusCode::BAD_REQUEST, "invalid-input"),
            RuntimeError::NotPrunable(_) => (StatusCode::BAD_REQUEST, "not-prunable"),
            RuntimeError::InvalidTag(_) => (StatusCode::BAD_REQUEST, "invalid-tag"),
            RuntimeError::InvalidRunId(_) => (StatusCode::BAD_REQUEST, "invalid-run-id"),
            RuntimeError::Limit(_) => (StatusCode::BAD_REQUEST, "over-limit"),
            e if e.is_disk_full() => (StatusCode::INSUFFICIENT_STORAGE, "disk-full"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        let message = match &e {
            // The store's words are the command line's; over HTTP the id is a body member.
            RuntimeError::Store(StoreError::RunExists(id)) => {
                format!("a run with id {id} already exists; pick another `run_id`")
            }
            _ => e.to_string(),
        };
        ApiError::new(status, code, message)
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        from_rejection(r.status(), r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        from_rejection(r.status(), r.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        from_rejection(r.status(), r.body_text())
    }
}

/// One of axum's refusals, with its status and words.
fn from_rejection(status: StatusCode, text: String) -> ApiError {
    let code = match status {
        StatusCode::PAYLOAD_TOO_LARGE => "body-too-large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "not-json",
        _ => "bad-request",
    };
    let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
        "the request body is over this server's limit (`--max-body-bytes`)".to_owned()
    } else {
        text
    };
    ApiError::new(status, code, message)
}

/// The answer to a route that does not exist.
pub(crate) async fn no_route(uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no-route",
        format!(
            "no route {}; docs/SERVER.md lists the routes",
            uri.path().chars().take(200).collect::<String>()
        ),
    )
}

/// The answer to a method a route does not take.
pub(crate) async fn no_method(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
        format!(
            "{} does not take {method}; docs/SERVER.md lists the routes",
            uri.path().chars().take(200).collect::<String>()
        ),
    )
}
