//! `POST /prune`: delete ended runs older than a duration, as `weft prune` does.

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::App;
use super::error::{ApiError, ErrorBody};
use crate::driver::{PruneFilter, PruneReport};
use crate::engine::RunStatus;

/// Which ended runs to delete.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PruneBody {
    /// Delete runs that ended at least this long ago: `30d`, `12h`, `90m`, `1h 30m`, `0s`.
    #[schema(schema_with = age_schema)]
    older_than: String,
    /// Only runs with this status (only an ended run is ever deleted).
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^(success|failed|cancelled|tripwire)$")]
    status: Option<String>,
    /// Only runs of this workflow id.
    #[serde(default)]
    workflow: Option<String>,
    /// Only runs carrying these tags: `key:value`, several separated by `,`.
    #[serde(default)]
    #[schema(schema_with = super::api::body_tag_filter_schema)]
    tag: Option<String>,
    /// Count what would be deleted, and delete nothing.
    #[serde(default)]
    dry_run: bool,
}

/// The schema of a duration, exactly the form `age::parse_age` takes.
fn age_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(crate::age::AGE_PATTERN))
        .examples(["30d", "1h 30m"])
        .description(Some(
            "Delete runs that ended at least this long ago: numbers with units (s, m, h, d, w, \
             M, y and their long names), up to eight parts separated by one space: `30d`, \
             `12h`, `1h 30m`, `0s`",
        ))
        .build()
}

/// What a prune did, or in a dry run would do.
#[derive(Serialize, ToSchema)]
pub(crate) struct PruneAnswer {
    /// The runs deleted (in a dry run: that would be).
    deleted: u64,
    /// Runs the filter matched that were kept: still driven, written a moment ago, or a
    /// workflow tool's child whose parent has not ended.
    kept: u64,
    /// Blobs (definitions and components) no remaining run names, removed.
    blobs: u64,
    /// Bytes given back to the file system.
    bytes: u64,
    /// Whether this was a dry run.
    dry_run: bool,
}

impl From<PruneReport> for PruneAnswer {
    fn from(r: PruneReport) -> Self {
        PruneAnswer {
            deleted: r.deleted,
            kept: r.kept,
            blobs: r.blobs,
            bytes: r.bytes,
            dry_run: r.dry_run,
        }
    }
}

/// Deletes ended runs (never a pending, running or suspended one), then the blobs no run
/// names, and gives the room back; a dry run only counts.
#[utoipa::path(post, path = "/prune", request_body = PruneBody, responses(
    (status = 200, description = "What was deleted, or would be", body = PruneAnswer),
    (status = 400, description = "A duration or status that does not read, or a status that has not ended", body = ErrorBody),
    (status = 401, description = "The server takes writes only with its token (`--token-env`), and the request has not got it", body = ErrorBody),
    (status = 413, description = "The body is over the limit", body = ErrorBody),
    (status = 415, description = "A body not sent as JSON (`Content-Type: application/json`)", body = ErrorBody),
    (status = 422, description = "A body member the API does not know, or a member of the wrong type", body = ErrorBody),
), security((), ("bearer" = [])))]
pub(crate) async fn prune(
    State(app): State<App>,
    body: Result<Json<serde_json::Value>, JsonRejection>,
) -> Result<Json<PruneAnswer>, ApiError> {
    let body: PruneBody = super::bulk::object(body?)?;
    let older_than = crate::age::parse_age(&body.older_than).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad-request",
            format!("`older_than`: {e}"),
        )
    })?;
    let mut filter = PruneFilter::older_than(older_than);
    filter.status = match body.status.as_deref() {
        None => None,
        Some(s) => Some(RunStatus::parse(s).ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad-request",
                format!("unknown status {s:?}; use success, failed, cancelled or tripwire"),
            )
        })?),
    };
    filter.workflow = body.workflow;
    filter.tags = super::api::tag_filter(body.tag.as_deref())?;
    filter.dry_run = body.dry_run;
    Ok(Json(app.rt.prune(&filter).await?.into()))
}
