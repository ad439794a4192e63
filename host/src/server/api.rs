//! The API's handlers: start, list, read, follow, resume and cancel runs.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};

use super::App;
use super::error::ApiError;
use crate::engine::{ResumeRequest, RunStatus};
use crate::workflow::LoadedWorkflow;

/// A path's run id, checked before anything is looked up (400 when it breaks the rule).
fn run_id(id: &str) -> Result<(), ApiError> {
    crate::run_id::check_run_id(id).map_err(|e| ApiError::bad_request(e.to_string()))
}

#[derive(Deserialize)]
pub(crate) struct ListQuery {
    workflow: Option<String>,
    status: Option<String>,
}

pub(crate) async fn list(
    State(app): State<App>,
    Query(q): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let status = match q.status.as_deref() {
        Some(s) => Some(
            RunStatus::parse(s)
                .ok_or_else(|| ApiError::bad_request(format!("unknown status `{s}`")))?,
        ),
        None => None,
    };
    let runs = app.rt.runs(q.workflow.as_deref(), status)?;
    Ok(Json(runs).into_response())
}

/// The workflows `POST /runs` may start: `[{id, file}]`.
pub(crate) async fn workflows(State(app): State<App>) -> Result<Response, ApiError> {
    let catalog = app.catalog.clone();
    let list = tokio::task::spawn_blocking(move || catalog.list())
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok(Json(list).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StartBody {
    /// The `id` of a workflow file of the workflows directory.
    #[serde(default)]
    workflow: Option<String>,
    /// A workflow file, relative to the workflows directory.
    #[serde(default)]
    file: Option<String>,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    run_id: Option<String>,
}

#[derive(Deserialize)]
pub(crate) struct WaitQuery {
    #[serde(default)]
    wait: bool,
}

/// Finds and loads the workflow a start names, off the async workers: resolving and reading
/// files may block.
async fn load(app: &App, body: &StartBody) -> Result<LoadedWorkflow, ApiError> {
    let named = match (&body.workflow, &body.file) {
        (Some(id), None) => Ok(id.clone()),
        (None, Some(file)) => Err(file.clone()),
        _ => {
            return Err(ApiError::bad_request(
                "name the workflow to start with exactly one of `workflow` (its id) and `file` \
                 (its file, relative to the workflows directory)",
            ));
        }
    };
    let catalog = app.catalog.clone();
    let rt = app.rt.clone();
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let path = match &named {
            Ok(id) => catalog.by_id(id)?,
            Err(file) => catalog.file(file)?,
        };
        handle
            .block_on(rt.load_workflow(&path))
            .map_err(|e| ApiError::bad_request(e.to_string()))
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
}

pub(crate) async fn start(
    State(app): State<App>,
    Query(q): Query<WaitQuery>,
    Json(body): Json<StartBody>,
) -> Result<Response, ApiError> {
    let workflow = load(&app, &body).await?;
    let id = app
        .rt
        .start(
            &workflow,
            body.input.unwrap_or_else(|| json!({})),
            body.run_id,
        )
        .await?;
    if q.wait {
        let record = app.rt.wait(&id).await?;
        return Ok((StatusCode::OK, Json(record)).into_response());
    }
    Ok((StatusCode::CREATED, Json(json!({ "run_id": id }))).into_response())
}

pub(crate) async fn show(
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    run_id(&id)?;
    Ok(Json(app.rt.show(&id).await?).into_response())
}

#[derive(Deserialize)]
pub(crate) struct EventsQuery {
    #[serde(default)]
    from_seq: Option<u64>,
    #[serde(default)]
    follow: bool,
}

pub(crate) async fn events(
    State(app): State<App>,
    Path(id): Path<String>,
    Query(q): Query<EventsQuery>,
) -> Result<Response, ApiError> {
    run_id(&id)?;
    let from = q.from_seq.unwrap_or(1);
    // A follower holds a slot for as long as its stream is open.
    let slot = if q.follow {
        let slot = app.followers.clone().try_acquire_owned().map_err(|_| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many event streams are open on this server; try again later, or raise \
                 its limit (`--max-followers`)",
            )
        })?;
        Some(slot)
    } else {
        None
    };
    let rx = if q.follow {
        app.rt.watch(&id, from)?
    } else {
        app.rt.watch_settled(&id, from)?
    };
    let heartbeat = app.heartbeat;
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
    .map(Ok::<_, std::convert::Infallible>);
    Ok(Response::builder()
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .body(Body::from_stream(stream))
        .unwrap_or_default())
}

#[derive(Deserialize, Default)]
pub(crate) struct ResumeBody {
    step: Option<String>,
    label: Option<String>,
    foreach_index: Option<u32>,
    data: Option<Value>,
}

pub(crate) async fn resume(
    State(app): State<App>,
    Path(id): Path<String>,
    body: Option<Json<ResumeBody>>,
) -> Result<Response, ApiError> {
    run_id(&id)?;
    let body = body.map(|Json(b)| b).unwrap_or_default();
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
    Ok((StatusCode::ACCEPTED, Json(json!({ "run_id": id }))).into_response())
}

pub(crate) async fn cancel(
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    run_id(&id)?;
    app.rt.cancel(&id).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({ "run_id": id }))).into_response())
}
