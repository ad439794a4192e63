//! The API's handlers: start, list, read, follow, resume and cancel runs.

use std::collections::BTreeMap;
use std::convert::Infallible;

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};

use super::App;
use super::catalog::Entry;
use super::error::{ApiError, ErrorBody};
use crate::driver::{RunRecord, StartOptions, StoredEvent};
use crate::engine::{ResumeRequest, RunStatus, rfc3339};
use crate::store::RunSummary;
use crate::workflow::LoadedWorkflow;

/// A path's run id, checked before anything is looked up (400 when it breaks the rule).
fn run_id(id: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    let Path(id) = id?;
    crate::run_id::check_run_id(&id)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid-run-id", e.to_string()))?;
    Ok(id)
}

/// A run, by id: what a start, a resume or a cancel answers.
#[derive(Serialize, ToSchema)]
pub(crate) struct RunRef {
    /// The run's id.
    run_id: String,
}

fn run_ref(id: &str) -> Value {
    json!(RunRef {
        run_id: id.to_owned()
    })
}

/// The answer to a start or a re-run of run `id`: `201` and its id, or with `wait`, `200` and
/// its record once it has settled; `Location` names the run either way.
async fn started(app: &App, id: &str, wait: bool) -> Result<Response, ApiError> {
    if wait {
        return settled(&app.rt.wait(id).await?);
    }
    Ok(created(StatusCode::CREATED, id, run_ref(id)))
}

/// The answer to a start or a re-run with `wait`: `200` and the settled run's record.
fn settled(record: &RunRecord) -> Result<Response, ApiError> {
    let body = serde_json::to_value(record).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(created(StatusCode::OK, &record.run_id, body))
}

/// A `201 Created` (or, after a wait, `200`) naming the run at `Location`.
fn created(status: StatusCode, id: &str, body: Value) -> Response {
    let mut response = (status, Json(body)).into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/runs/{id}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

/// The most runs one page holds, and how many when `limit` is not given.
const MAX_PAGE: usize = 1000;
const DEFAULT_PAGE: usize = 100;

/// Which runs a page lists.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// Only runs of this workflow id.
    workflow: Option<String>,
    /// Only runs with this status.
    #[param(value_type = Option<RunStatus>)]
    status: Option<String>,
    /// Runs in a page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
    /// Where the page starts: the `next_cursor` of the page before.
    #[param(pattern = r"^-?[0-9]+\.[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")]
    cursor: Option<String>,
    /// Only runs carrying these tags: `key:value`, several separated by `,` (each must match).
    #[param(schema_with = tag_filter_schema)]
    tag: Option<String>,
}

/// A run in a list.
#[derive(Serialize, ToSchema)]
pub(crate) struct RunItem {
    /// The run's id.
    run_id: String,
    /// Its top-level workflow's id.
    workflow_id: String,
    /// Where it stands.
    status: RunStatus,
    /// RFC 3339.
    created_at: String,
    /// RFC 3339.
    updated_at: String,
    /// Its tags, given at its start.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    tags: BTreeMap<String, String>,
}

impl From<&RunSummary> for RunItem {
    fn from(s: &RunSummary) -> Self {
        RunItem {
            run_id: s.run_id.clone(),
            workflow_id: s.workflow_id.clone(),
            status: s.status,
            created_at: rfc3339(s.created_at),
            updated_at: rfc3339(s.updated_at),
            tags: s.tags.clone(),
        }
    }
}

/// One page of runs, newest first; `next_cursor` fetches the next one.
#[derive(Serialize, ToSchema)]
pub(crate) struct RunPage {
    /// The runs of this page.
    runs: Vec<RunItem>,
    /// The cursor of the next page; `null` on the last one.
    next_cursor: Option<String>,
}

/// A cursor: where the last run of a page sits in the order (creation, then id, descending).
fn cursor_of(s: &RunSummary) -> String {
    format!("{}.{}", s.created_at, s.run_id)
}

/// A cursor's place, as `cursor_of` writes it: a time, `.`, a run id (the document's
/// pattern). A time past the range of `i64` is a place before (or after) every run.
fn parse_cursor(cursor: &str) -> Option<(i64, &str)> {
    let (at, id) = cursor.split_once('.')?;
    let digits = at.strip_prefix('-').unwrap_or(at);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    crate::run_id::check_run_id(id).ok()?;
    let beyond = if digits.len() < at.len() {
        i64::MIN
    } else {
        i64::MAX
    };
    Some((at.parse().unwrap_or(beyond), id))
}

/// A page of runs, newest first, optionally filtered.
#[utoipa::path(get, path = "/runs", params(ListQuery), responses(
    (status = 200, description = "A page of runs", body = RunPage),
    (status = 400, description = "A filter, limit or cursor that does not parse", body = ErrorBody),
))]
pub(crate) async fn list(
    State(app): State<App>,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q?;
    let status = match q.status.as_deref() {
        Some(s) => Some(RunStatus::parse(s).ok_or_else(|| {
            ApiError::bad_request(format!(
                "unknown status `{}`; one of pending, running, suspended, success, failed, \
                 tripwire, cancelled",
                s.chars().take(40).collect::<String>()
            ))
        })?),
        None => None,
    };
    let limit = q.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "`limit` must be 1 to {MAX_PAGE}"
        )));
    }
    let after = match q.cursor.as_deref() {
        Some(c) => Some(parse_cursor(c).ok_or_else(|| {
            ApiError::bad_request("`cursor` is not one this server gave; start from the first page")
        })?),
        None => None,
    };
    let tags = tag_filter(q.tag.as_deref())?;
    let (page, more) = app
        .rt
        .runs_page(q.workflow.as_deref(), status, &tags, after, limit)?;
    let next_cursor = more.then(|| page.last().map(cursor_of)).flatten();
    Ok(Json(RunPage {
        runs: page.iter().map(RunItem::from).collect(),
        next_cursor,
    })
    .into_response())
}

/// The workflows `POST /runs` may start, each with its description and input schema (which
/// the web console turns into a form).
#[utoipa::path(get, path = "/workflows", responses(
    (status = 200, description = "The workflow files of the workflows directory, with each one's description and input schema", body = Vec<Entry>),
    (status = 403, description = "The server has no workflows directory", body = ErrorBody),
))]
pub(crate) async fn workflows(State(app): State<App>) -> Result<Response, ApiError> {
    let catalog = app.catalog.clone();
    let list = tokio::task::spawn_blocking(move || catalog.list())
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok(Json(list).into_response())
}

/// What to start: a workflow of the workflows directory, by `workflow` (its id) or `file`,
/// exactly one of them.
// Its members are its own, not a flattened struct, so the document says no other member is
// taken (`additionalProperties: false`); openapi.rs adds the `oneOf`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StartBody {
    /// The `id` of a workflow file of the workflows directory.
    #[serde(default)]
    workflow: Option<String>,
    /// A workflow file, relative to the workflows directory.
    #[serde(default)]
    file: Option<String>,
    /// The run's input (default `{}`), checked against the workflow's input schema.
    #[serde(default)]
    input: Option<Value>,
    /// The new run's id; one is made when it is not given.
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = r"^(?!.*\.tool-)(?!.*\.[0-9a-f]{32}$)[A-Za-z0-9_-][A-Za-z0-9._-]*$"
    )]
    run_id: Option<String>,
    /// The run's tags, `{"key": "value"}`: at most 16, each key 1-64 characters of
    /// `A-Z a-z 0-9 . _ -`, each value at most 256 characters with no control character and
    /// no `,`.
    #[serde(default)]
    #[schema(schema_with = tags_schema)]
    tags: Option<BTreeMap<String, String>>,
}

/// The tags a request's filter names (`key:value,...`; none when it names none), refused as
/// `invalid-tag` when one does not read.
pub(super) fn tag_filter(text: Option<&str>) -> Result<Vec<(String, String)>, ApiError> {
    text.map_or(Ok(Vec::new()), |t| {
        crate::tags::parse_filter(t)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid-tag", e.to_string()))
    })
}

/// The schema of a filter of tags (`key:value,...`), exactly what `tags::parse_filter` takes.
fn tag_filter_schema() -> utoipa::openapi::schema::Object {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .pattern(Some(crate::tags::FILTER_PATTERN))
        .build()
}

/// [`tag_filter_schema`] of a body member, which may be `null` (no filter).
pub(super) fn body_tag_filter_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .pattern(Some(crate::tags::FILTER_PATTERN))
        .description(Some(
            "Only runs carrying these tags: `key:value`, several separated by `,`",
        ))
        .build()
}

/// The schema of a start body's `tags`, as strict as `tags::check_tags`.
fn tags_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    let value = ObjectBuilder::new()
        .schema_type(Type::String)
        .max_length(Some(crate::tags::MAX_TAG_VALUE))
        .pattern(Some(crate::tags::VALUE_PATTERN));
    let key = ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(crate::tags::KEY_PATTERN));
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .additional_properties(Some(value))
        .property_names(Some(key))
        .max_properties(Some(crate::tags::MAX_TAGS))
        .description(Some("The run's tags, `{\"key\": \"value\"}`"))
        .build()
}

/// Whether to answer only once the run has settled.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct WaitQuery {
    /// Answer with the run record once the run has ended or suspended.
    #[serde(default)]
    wait: bool,
}

/// Finds and loads the workflow a request names, by `workflow` (its id) or `file` (relative
/// to the workflows directory), off the async workers: resolving and reading files may block.
/// `None` when it names none and `required` is false.
async fn load(
    app: &App,
    workflow: Option<&str>,
    file: Option<&str>,
    required: bool,
) -> Result<Option<LoadedWorkflow>, ApiError> {
    let which = match (workflow, file) {
        (Some(id), None) => Ok(id.to_owned()),
        (None, Some(file)) => Err(file.to_owned()),
        (None, None) if !required => return Ok(None),
        _ => {
            return Err(ApiError::bad_request(
                "name the workflow with exactly one of `workflow` (its id) and `file` (its \
                 file, relative to the workflows directory)",
            ));
        }
    };
    let catalog = app.catalog.clone();
    let rt = app.rt.clone();
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let path = match &which {
            Ok(id) => catalog.by_id(id)?,
            Err(file) => catalog.file(file)?,
        };
        handle
            .block_on(rt.load_workflow(&path))
            .map(Some)
            .map_err(|e| catalog.refusal(&e))
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
}

/// Starts a run of a workflow of the workflows directory.
#[utoipa::path(post, path = "/runs", params(WaitQuery), request_body = StartBody, responses(
    (status = 201, description = "Started; `Location` names the run", body = RunRef),
    (status = 401, description = "The server takes writes only with its token (`--token-env`), and the request has not got it", body = ErrorBody),
    (status = 200, description = "With `wait=true`: the run record once it settled", body = RunRecord),
    (status = 400, description = "Bad JSON, input or workflow", body = ErrorBody),
    (status = 403, description = "A file outside the workflows directory", body = ErrorBody),
    (status = 404, description = "No such workflow", body = ErrorBody),
    (status = 409, description = "The run id is taken", body = ErrorBody),
    (status = 413, description = "The body is over the limit", body = ErrorBody),
    (status = 415, description = "A body not sent as JSON (`Content-Type: application/json`)", body = ErrorBody),
    (status = 422, description = "A body member the API does not know, or a member of the wrong type", body = ErrorBody),
), security((), ("bearer" = [])))]
pub(crate) async fn start(
    State(app): State<App>,
    q: Result<Query<WaitQuery>, QueryRejection>,
    body: Result<Json<StartBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let (Query(q), Json(body)) = (q?, body?);
    let named = load(&app, body.workflow.as_deref(), body.file.as_deref(), true);
    let Some(workflow) = named.await? else {
        return Err(ApiError::internal("no workflow was loaded"));
    };
    let input = body.input.unwrap_or_else(|| json!({}));
    let options = StartOptions {
        run_id: body.run_id,
        tags: body.tags.unwrap_or_default(),
    };
    if q.wait {
        // One call that answers once the run has settled.
        let record = app
            .rt
            .start_and_wait_with(&workflow, input, options)
            .await?;
        return settled(&record);
    }
    let id = app.rt.start_with(&workflow, input, options).await?;
    Ok(created(StatusCode::CREATED, &id, run_ref(&id)))
}

/// Where a re-run starts, and with what.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RerunBody {
    /// The step to start from, by path (S94).
    from_step: String,
    /// Replaces the step's stored input (S99).
    #[serde(default)]
    input: Option<Value>,
    /// The new run's id; one is made when it is not given.
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = r"^(?!.*\.tool-)(?!.*\.[0-9a-f]{32}$)[A-Za-z0-9_-][A-Za-z0-9._-]*$"
    )]
    run_id: Option<String>,
    /// A new definition instead of the source run's stored one (S96): the `id` of a workflow
    /// file of the workflows directory, or (`file`) one relative to it; at most one of them.
    #[serde(default)]
    workflow: Option<String>,
    /// A workflow file, relative to the workflows directory, instead of the source run's
    /// stored definition (S96).
    #[serde(default)]
    file: Option<String>,
}

/// Starts a new run from a step of an ended run (S94–S99).
#[utoipa::path(post, path = "/runs/{id}/rerun", params(("id" = String, Path, description = "The ended run", min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$"), WaitQuery), request_body = RerunBody, responses(
    (status = 201, description = "Started; `Location` names the new run", body = RunRef),
    (status = 401, description = "The server takes writes only with its token (`--token-env`), and the request has not got it", body = ErrorBody),
    (status = 200, description = "With `wait=true`: the new run's record once it settled", body = RunRecord),
    (status = 400, description = "A bad step, input or workflow", body = ErrorBody),
    (status = 404, description = "No such run", body = ErrorBody),
    (status = 403, description = "A file outside the workflows directory", body = ErrorBody),
    (status = 409, description = "The run has not ended, or the new run id is taken", body = ErrorBody),
    (status = 413, description = "The body is over the limit", body = ErrorBody),
    (status = 415, description = "A body not sent as JSON (`Content-Type: application/json`)", body = ErrorBody),
    (status = 422, description = "A body member the API does not know, or a member of the wrong type", body = ErrorBody),
), security((), ("bearer" = [])))]
pub(crate) async fn rerun(
    State(app): State<App>,
    id: Result<Path<String>, PathRejection>,
    q: Result<Query<WaitQuery>, QueryRejection>,
    body: Result<Json<RerunBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let source = run_id(id)?;
    let (Query(q), Json(body)) = (q?, body?);
    let workflow = load(&app, body.workflow.as_deref(), body.file.as_deref(), false).await?;
    let id = app
        .rt
        .rerun(
            &source,
            &body.from_step,
            workflow.as_ref(),
            body.input,
            body.run_id,
        )
        .await?;
    started(&app, &id, q.wait).await
}

/// The run record.
#[utoipa::path(get, path = "/runs/{id}", params(("id" = String, Path, description = "The run", min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$")), responses(
    (status = 200, description = "The run record", body = RunRecord),
    (status = 400, description = "An invalid run id", body = ErrorBody),
    (status = 404, description = "No such run", body = ErrorBody),
))]
pub(crate) async fn show(
    State(app): State<App>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = run_id(id)?;
    Ok(Json(app.rt.show(&id).await?).into_response())
}

/// The workflow a run follows, as stored when it started.
#[derive(Serialize, ToSchema)]
pub(crate) struct Definition {
    /// The checked workflow graph.
    #[schema(value_type = Object)]
    graph: Value,
    /// The graph as a Mermaid flowchart.
    mermaid: String,
}

/// The workflow a run follows, as stored when it started: the graph, and a Mermaid drawing.
/// Literal `grants.env` values and model headers read `<redacted>`, and the host's paths are
/// relative to the workflows directory, or `<redacted>` outside it.
#[utoipa::path(get, path = "/runs/{id}/workflow", params(("id" = String, Path, description = "The run", min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$")), responses(
    (status = 200, description = "The run's workflow", body = Definition),
    (status = 400, description = "An invalid run id", body = ErrorBody),
    (status = 404, description = "No such run", body = ErrorBody),
))]
pub(crate) async fn definition(
    State(app): State<App>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = run_id(id)?;
    let graph = app.rt.definition(&id)?;
    let mermaid = graph.draw(crate::engine::draw::DrawingFormat::Mermaid);
    let mut graph = serde_json::to_value(&graph).map_err(|e| ApiError::internal(e.to_string()))?;
    super::redact::definition(&mut graph, app.catalog.dir_if_any());
    Ok(Json(Definition { graph, mermaid }).into_response())
}

/// Which events, and whether to follow the run.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct EventsQuery {
    /// The first event's `seq`, 0 to 2^63 - 1 (default 1, as 0 is).
    #[serde(default)]
    #[param(minimum = 0, maximum = 9_223_372_036_854_775_807_i64)]
    from_seq: Option<u64>,
    /// Go on with live events until the run closes (Server-Sent Events always do).
    #[serde(default)]
    follow: bool,
}

/// Whether the client asked for Server-Sent Events.
fn wants_sse(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains("text/event-stream"))
}

/// The run's events: NDJSON (past, then live with `follow=true`), or Server-Sent Events when
/// the client accepts `text/event-stream` (always live, `id:` the event's `seq`, resumed after
/// `Last-Event-ID` with no gap and no duplicate; `204` once nothing more will come, which
/// tells an `EventSource` to stop reconnecting).
#[utoipa::path(get, path = "/runs/{id}/events", params(("id" = String, Path, description = "The run", min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$"), EventsQuery), responses(
    (status = 200, description = "The events, one JSON object a line, or Server-Sent Events", content(
        (StoredEvent = "application/x-ndjson"),
        (String = "text/event-stream"),
    )),
    (status = 204, description = "Server-Sent Events: nothing more will come"),
    (status = 400, description = "An invalid run id", body = ErrorBody),
    (status = 404, description = "No such run", body = ErrorBody),
    (status = 503, description = "Too many event streams are open", body = ErrorBody),
))]
pub(crate) async fn events(
    State(app): State<App>,
    id: Result<Path<String>, PathRejection>,
    q: Result<Query<EventsQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = run_id(id)?;
    let Query(q) = q?;
    let sse = wants_sse(&headers);
    let mut from = q.from_seq.unwrap_or(1);
    if i64::try_from(from).is_err() {
        return Err(ApiError::bad_request(format!(
            "`from_seq` must be 0 to {}, the `seq` of the first event to send",
            i64::MAX
        )));
    }
    if sse
        && let Some(last) = headers
            .get("last-event-id")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
    {
        from = from.max(last.saturating_add(1));
    }
    let follow = q.follow || sse;
    // A follower holds a slot for as long as its stream is open.
    let slot = if follow {
        let slot = app.followers.clone().try_acquire_owned().map_err(|_| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "too-many-followers",
                "too many event streams are open on this server; try again later, or raise \
                 its limit (`--max-followers`)",
            )
        })?;
        Some(slot)
    } else {
        None
    };
    let rx = if follow {
        app.rt.watch(&id, from)?
    } else {
        app.rt.watch_settled(&id, from)?
    };
    let heartbeat = app.heartbeat;
    if sse {
        if rx.is_closed() && rx.is_empty() {
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
        let stream = futures::stream::unfold((rx, slot), |(mut rx, slot)| async move {
            let ev = rx.recv().await?;
            let event = SseEvent::default()
                .id(ev.seq.to_string())
                .event(
                    serde_json::to_value(ev.kind)
                        .ok()?
                        .as_str()
                        .unwrap_or("event"),
                )
                .data(serde_json::to_string(&*ev).unwrap_or_default());
            Some((Ok::<_, Infallible>(event), (rx, slot)))
        });
        return Ok(Sse::new(stream)
            .keep_alive(KeepAlive::new().interval(heartbeat))
            .into_response());
    }
    let stream = futures::stream::unfold((rx, slot), move |(mut rx, slot)| async move {
        // An idle stream gets an empty line now and then, so it is seen to be alive.
        let line = match tokio::time::timeout(heartbeat, rx.recv()).await {
            Ok(Some(ev)) => {
                let mut line = serde_json::to_string(&*ev).unwrap_or_default();
                line.push('\n');
                line
            }
            Ok(None) => return None,
            Err(_) => "\n".to_owned(),
        };
        Some((line, (rx, slot)))
    })
    .map(Ok::<_, Infallible>);
    Ok(Response::builder()
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .body(Body::from_stream(stream))
        .unwrap_or_default())
}

/// Which suspended steps to resume, and with what (S67–S70).
#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResumeBody {
    /// The suspended step, by path.
    step: Option<String>,
    /// A label of the suspension.
    label: Option<String>,
    /// The foreach item, when the step is inside one: a whole number, `2` or `2.0` alike, as
    /// JSON Schema's `integer` is.
    #[serde(default, deserialize_with = "whole_u32")]
    #[schema(value_type = Option<u64>, maximum = 4_294_967_295_u64)]
    foreach_index: Option<u32>,
    /// The resume data, checked against the step's resume schema.
    data: Option<Value>,
}

/// A whole number of `u32`'s range, written as JSON Schema's `integer` allows: `2`, `2.0` or
/// `2e0`; `null` is none.
fn whole_u32<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let Some(n) = Option::<serde_json::Number>::deserialize(d)? else {
        return Ok(None);
    };
    let whole = n.as_u64().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(f))
            .map(|f| f as u64)
    });
    match whole.and_then(|w| u32::try_from(w).ok()) {
        Some(w) => Ok(Some(w)),
        None => Err(serde::de::Error::custom(format_args!(
            "`foreach_index` is {n}: it must be a whole number 0 to {}",
            u32::MAX
        ))),
    }
}

/// Resumes suspended steps; with no body, recovers a run no process drives (S101).
#[utoipa::path(post, path = "/runs/{id}/resume", params(("id" = String, Path, description = "The run", min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$")), request_body(content = Option<ResumeBody>, description = "What to resume; no body, or `null`, recovers a stopped run"), responses(
    (status = 202, description = "Resumed", body = RunRef),
    (status = 401, description = "The server takes writes only with its token (`--token-env`), and the request has not got it", body = ErrorBody),
    (status = 400, description = "Bad data, or nothing it names is suspended", body = ErrorBody),
    (status = 404, description = "No such run", body = ErrorBody),
    (status = 409, description = "The run is not suspended", body = ErrorBody),
    (status = 413, description = "The body is over the limit", body = ErrorBody),
    (status = 415, description = "A body not sent as JSON (`Content-Type: application/json`)", body = ErrorBody),
    (status = 422, description = "A body member the API does not know, or a member of the wrong type", body = ErrorBody),
), security((), ("bearer" = [])))]
pub(crate) async fn resume(
    State(app): State<App>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let id = run_id(id)?;
    let body = body.map_err(|r| {
        ApiError::new(
            r.status(),
            "body-too-large",
            "the request body is over this server's limit (`--max-body-bytes`)",
        )
    })?;
    // No body at all, or `null` (what the document allows, and what generated clients send
    // for no body), is a bare resume: it recovers a stopped run (S101).
    // A body is JSON, refused as `POST /runs` refuses one: 415 when not sent as JSON, 400
    // when it does not parse, 422 when it parses but is not a resume body.
    let body: ResumeBody = if body.iter().all(u8::is_ascii_whitespace) {
        ResumeBody::default()
    } else {
        if !sent_as_json(&headers) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "not-json",
                "a resume body is JSON: send it with `Content-Type: application/json`",
            ));
        }
        serde_json::from_slice::<Option<ResumeBody>>(&body)
            .map_err(|e| {
                let status = if e.is_data() {
                    StatusCode::UNPROCESSABLE_ENTITY
                } else {
                    StatusCode::BAD_REQUEST
                };
                ApiError::new(status, "bad-request", format!("the resume body: {e}"))
            })?
            .unwrap_or_default()
    };
    let bare = body.step.is_none()
        && body.label.is_none()
        && body.foreach_index.is_none()
        && body.data.is_none();
    let request = (!bare).then(|| ResumeRequest {
        step: body.step,
        label: body.label,
        foreach_index: body.foreach_index,
        data: body.data.unwrap_or_else(|| json!({})),
    });
    app.rt.resume_or_recover(&id, request).await?;
    Ok((StatusCode::ACCEPTED, Json(run_ref(&id))).into_response())
}

/// Whether the request says its body is JSON (`application/json`, or a `+json` type), as
/// axum's `Json` requires.
fn sent_as_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|m| m.trim().to_ascii_lowercase())
        .is_some_and(|m| {
            m == "application/json" || (m.starts_with("application/") && m.ends_with("+json"))
        })
}

/// Cancels a run (S74–S78).
#[utoipa::path(post, path = "/runs/{id}/cancel", params(("id" = String, Path, description = "The run", min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$")), responses(
    (status = 202, description = "Cancelled", body = RunRef),
    (status = 400, description = "An invalid run id", body = ErrorBody),
    (status = 401, description = "The server takes writes only with its token (`--token-env`), and the request has not got it", body = ErrorBody),
    (status = 404, description = "No such run", body = ErrorBody),
    (status = 409, description = "The run has ended", body = ErrorBody),
), security((), ("bearer" = [])))]
pub(crate) async fn cancel(
    State(app): State<App>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = run_id(id)?;
    app.rt.cancel(&id).await?;
    Ok((StatusCode::ACCEPTED, Json(run_ref(&id))).into_response())
}
