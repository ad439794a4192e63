//! `POST /bulk/cancel` and `POST /bulk/resume`: act on every run a filter matches, as
//! `weft bulk` does.

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::App;
use super::error::{ApiError, ErrorBody};
use crate::driver::{BulkReport, RunFilter};
use crate::engine::{ResumeRequest, RunStatus};

/// Which runs a bulk operation acts on: those matching every member given (with none, every
/// run; `dry_run` counts them first).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BulkFilter {
    /// Only runs of this workflow id.
    #[serde(default)]
    workflow: Option<String>,
    /// Only runs of this status.
    #[serde(default)]
    #[schema(value_type = Option<RunStatus>)]
    status: Option<String>,
    /// Only runs carrying these tags: `key:value`, several separated by `,`.
    #[serde(default)]
    #[schema(schema_with = super::api::body_tag_filter_schema)]
    tag: Option<String>,
    /// Only runs created at or after this instant (RFC 3339).
    #[serde(default)]
    #[schema(format = DateTime)]
    created_after: Option<String>,
    /// Only runs created before this instant (RFC 3339).
    #[serde(default)]
    #[schema(format = DateTime)]
    created_before: Option<String>,
    /// Count the runs it would act on; change nothing.
    #[serde(default)]
    dry_run: bool,
}

/// A bulk resume: which runs (the members of a bulk cancel's body), and the one request each
/// is resumed with.
/// Its filter members are [`BulkFilter`]'s written out again: serde's `flatten` would let
/// unknown members through (it does not combine with `deny_unknown_fields`).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BulkResumeBody {
    /// Only runs of this workflow id.
    #[serde(default)]
    workflow: Option<String>,
    /// Only runs of this status.
    #[serde(default)]
    #[schema(value_type = Option<RunStatus>)]
    status: Option<String>,
    /// Only runs carrying these tags: `key:value`, several separated by `,`.
    #[serde(default)]
    #[schema(schema_with = super::api::body_tag_filter_schema)]
    tag: Option<String>,
    /// Only runs created at or after this instant (RFC 3339).
    #[serde(default)]
    #[schema(format = DateTime)]
    created_after: Option<String>,
    /// Only runs created before this instant (RFC 3339).
    #[serde(default)]
    #[schema(format = DateTime)]
    created_before: Option<String>,
    /// Count the runs it would resume; change nothing.
    #[serde(default)]
    dry_run: bool,
    /// Select suspensions by path or path prefix.
    #[serde(default)]
    step: Option<String>,
    /// Select suspensions by label.
    #[serde(default)]
    label: Option<String>,
    /// The resume data (default `{}`).
    #[serde(default)]
    data: Option<Value>,
}

/// What a bulk operation did, or in a dry run would do.
#[derive(Serialize, ToSchema)]
pub(crate) struct BulkAnswer {
    /// The runs the filter matched that the operation applies to.
    matched: u64,
    /// Of them, those it was carried out on (in a dry run: none).
    done: u64,
    /// Those refused, with why.
    refused: Vec<Refused>,
    /// Whether this was a dry run.
    dry_run: bool,
}

/// A run a bulk operation was refused for.
#[derive(Serialize, ToSchema)]
pub(crate) struct Refused {
    /// The run.
    run_id: String,
    /// Why.
    message: String,
}

impl From<BulkReport> for BulkAnswer {
    fn from(r: BulkReport) -> Self {
        BulkAnswer {
            matched: r.matched,
            done: r.done,
            refused: r
                .refused
                .into_iter()
                .map(|(run_id, message)| Refused { run_id, message })
                .collect(),
            dry_run: r.dry_run,
        }
    }
}

/// The body `json` as `T`: a JSON object only (serde would read a struct from an array too),
/// refused as axum refuses a body of the wrong shape (422).
pub(super) fn object<T: serde::de::DeserializeOwned>(
    Json(json): Json<Value>,
) -> Result<T, ApiError> {
    let refuse =
        |message: String| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "bad-request", message);
    if !json.is_object() {
        return Err(refuse("the body is a JSON object".into()));
    }
    serde_json::from_value(json).map_err(|e| refuse(format!("the body: {e}")))
}

/// An instant of a filter, as ms since the epoch.
fn instant(name: &str, text: Option<&str>) -> Result<Option<i64>, ApiError> {
    text.map(|t| {
        chrono::DateTime::parse_from_rfc3339(t)
            .map(|at| at.timestamp_millis())
            .map_err(|e| ApiError::bad_request(format!("`{name}` is not an RFC 3339 instant: {e}")))
    })
    .transpose()
}

impl BulkFilter {
    /// The filter this body gives.
    fn filter(&self) -> Result<RunFilter, ApiError> {
        run_filter(
            self.workflow.as_deref(),
            self.status.as_deref(),
            self.tag.as_deref(),
            self.created_after.as_deref(),
            self.created_before.as_deref(),
        )
    }
}

/// The filter of a body's members, each read and checked.
fn run_filter(
    workflow: Option<&str>,
    status: Option<&str>,
    tag: Option<&str>,
    created_after: Option<&str>,
    created_before: Option<&str>,
) -> Result<RunFilter, ApiError> {
    let status = match status {
        Some(s) => Some(RunStatus::parse(s).ok_or_else(|| {
            ApiError::bad_request(format!(
                "unknown status {s:?}; one of pending, running, suspended, success, failed, \
                 tripwire, cancelled"
            ))
        })?),
        None => None,
    };
    let tags = super::api::tag_filter(tag)?;
    Ok(RunFilter {
        workflow: workflow.map(str::to_owned),
        status,
        tags,
        created_after: instant("created_after", created_after)?,
        created_before: instant("created_before", created_before)?,
    })
}

/// Cancels every pending, running or suspended run the filter matches (with no member, every
/// one); a dry run counts them.
#[utoipa::path(post, path = "/bulk/cancel", request_body = BulkFilter, responses(
    (status = 200, description = "What was done, or would be", body = BulkAnswer),
    (status = 400, description = "A member that does not read (a status, a tag, an instant)", body = ErrorBody),
    (status = 401, description = "The server takes writes only with its token (`--token-env`), and the request has not got it", body = ErrorBody),
    (status = 413, description = "The body is over the limit", body = ErrorBody),
    (status = 415, description = "A body not sent as JSON (`Content-Type: application/json`)", body = ErrorBody),
    (status = 422, description = "A body member the API does not know, or a member of the wrong type", body = ErrorBody),
), security((), ("bearer" = [])))]
pub(crate) async fn cancel(
    State(app): State<App>,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<Json<BulkAnswer>, ApiError> {
    let body: BulkFilter = object(body?)?;
    let filter = body.filter()?;
    Ok(Json(
        app.rt.cancel_matching(&filter, body.dry_run).await?.into(),
    ))
}

/// Resumes every suspended run the filter matches with one request; a dry run counts them.
#[utoipa::path(post, path = "/bulk/resume", request_body = BulkResumeBody, responses(
    (status = 200, description = "What was done, or would be", body = BulkAnswer),
    (status = 400, description = "A member that does not read (a status, a tag, an instant)", body = ErrorBody),
    (status = 401, description = "The server takes writes only with its token (`--token-env`), and the request has not got it", body = ErrorBody),
    (status = 413, description = "The body is over the limit", body = ErrorBody),
    (status = 415, description = "A body not sent as JSON (`Content-Type: application/json`)", body = ErrorBody),
    (status = 422, description = "A body member the API does not know, or a member of the wrong type", body = ErrorBody),
), security((), ("bearer" = [])))]
pub(crate) async fn resume(
    State(app): State<App>,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<Json<BulkAnswer>, ApiError> {
    let body: BulkResumeBody = object(body?)?;
    let filter = run_filter(
        body.workflow.as_deref(),
        body.status.as_deref(),
        body.tag.as_deref(),
        body.created_after.as_deref(),
        body.created_before.as_deref(),
    )?;
    let request = ResumeRequest {
        step: body.step,
        label: body.label,
        foreach_index: None,
        data: body.data.unwrap_or_else(|| json!({})),
    };
    Ok(Json(
        app.rt
            .resume_matching(&filter, &request, body.dry_run)
            .await?
            .into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_read_in_every_form_rfc_3339_allows() {
        for text in [
            "2026-12-01T00:00:00Z",
            "2026-12-01t00:00:00z",
            "2026-12-01T00:00:00.123456+05:30",
            "1937-01-01T12:00:27.87+00:20",
        ] {
            assert!(instant("at", Some(text)).is_ok(), "{text}");
        }
        assert!(instant("at", Some("yesterday")).is_err());
    }
}
