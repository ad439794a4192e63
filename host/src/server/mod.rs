//! `weft serve`: the HTTP API and a small web view of runs, over one runtime.
//!
//! | route | does |
//! |---|---|
//! | `GET /` | the web view: runs, newest first, each linking to its record |
//! | `GET /runs?workflow=W&status=S` | run summaries |
//! | `POST /runs` `{file, input?, run_id?}` | start a run of a workflow file; `?wait=true` waits |
//! | `GET /runs/{id}` | the run record (WORKFLOW-FORMAT.md §3) |
//! | `GET /runs/{id}/events?from_seq=N&follow=true` | events as NDJSON, past then live |
//! | `POST /runs/{id}/resume` `{step?, label?, foreach_index?, data?}` | resume |
//! | `POST /runs/{id}/cancel` | cancel |
//!
//! Refusals answer 400 (bad request), 404 (unknown run) or 409 (the run's status forbids it)
//! with `{"error": message}`; a full disk holding the home answers 507, other failures 500.

use std::path::PathBuf;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::driver::{Runtime, RuntimeError};
use crate::engine::{Refusal, ResumeRequest, RunStatus};

/// Serves the API on `listener` until the task is dropped or the listener fails.
pub async fn serve(rt: Runtime, listener: TcpListener) -> std::io::Result<()> {
    axum::serve(listener, router(rt)).await
}

/// The API's routes over `rt`.
pub fn router(rt: Runtime) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/runs", get(list).post(start))
        .route("/runs/{id}", get(show))
        .route("/runs/{id}/events", get(events))
        .route("/runs/{id}/resume", post(resume))
        .route("/runs/{id}/cancel", post(cancel))
        .with_state(rt)
}

struct ApiError(StatusCode, String);

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

#[derive(Deserialize)]
struct ListQuery {
    workflow: Option<String>,
    status: Option<String>,
}

async fn list(State(rt): State<Runtime>, Query(q): Query<ListQuery>) -> Result<Response, ApiError> {
    let status =
        match q.status.as_deref() {
            Some(s) => Some(RunStatus::parse(s).ok_or_else(|| {
                ApiError(StatusCode::BAD_REQUEST, format!("unknown status `{s}`"))
            })?),
            None => None,
        };
    let runs = rt.runs(q.workflow.as_deref(), status)?;
    Ok(Json(runs).into_response())
}

#[derive(Deserialize)]
struct StartBody {
    file: PathBuf,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    run_id: Option<String>,
}

#[derive(Deserialize)]
struct WaitQuery {
    #[serde(default)]
    wait: bool,
}

async fn start(
    State(rt): State<Runtime>,
    Query(q): Query<WaitQuery>,
    Json(body): Json<StartBody>,
) -> Result<Response, ApiError> {
    let workflow = rt
        .load_workflow(&body.file)
        .await
        .map_err(|e| ApiError(StatusCode::BAD_REQUEST, e.to_string()))?;
    let id = rt
        .start(
            &workflow,
            body.input.unwrap_or_else(|| json!({})),
            body.run_id,
        )
        .await?;
    if q.wait {
        let record = rt.wait(&id).await?;
        return Ok((StatusCode::OK, Json(record)).into_response());
    }
    Ok((StatusCode::CREATED, Json(json!({ "run_id": id }))).into_response())
}

async fn show(State(rt): State<Runtime>, Path(id): Path<String>) -> Result<Response, ApiError> {
    Ok(Json(rt.show(&id).await?).into_response())
}

#[derive(Deserialize)]
struct EventsQuery {
    #[serde(default)]
    from_seq: Option<u64>,
    #[serde(default)]
    follow: bool,
}

async fn events(
    State(rt): State<Runtime>,
    Path(id): Path<String>,
    Query(q): Query<EventsQuery>,
) -> Result<Response, ApiError> {
    let from = q.from_seq.unwrap_or(1);
    let rx = if q.follow {
        rt.watch(&id, from)?
    } else {
        rt.watch_settled(&id, from)?
    };
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        let ev = rx.recv().await?;
        let mut line = serde_json::to_string(&*ev).unwrap_or_default();
        line.push('\n');
        Some((line, rx))
    })
    .map(Ok::<_, std::convert::Infallible>);
    Ok(Response::builder()
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .body(Body::from_stream(stream))
        .unwrap_or_default())
}

#[derive(Deserialize, Default)]
struct ResumeBody {
    step: Option<String>,
    label: Option<String>,
    foreach_index: Option<u32>,
    data: Option<Value>,
}

async fn resume(
    State(rt): State<Runtime>,
    Path(id): Path<String>,
    body: Option<Json<ResumeBody>>,
) -> Result<Response, ApiError> {
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
    rt.resume_or_recover(&id, request).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({ "run_id": id }))).into_response())
}

async fn cancel(State(rt): State<Runtime>, Path(id): Path<String>) -> Result<Response, ApiError> {
    rt.cancel(&id).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({ "run_id": id }))).into_response())
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

async fn index(State(rt): State<Runtime>) -> Result<Html<String>, ApiError> {
    let runs = rt.runs(None, None)?;
    let mut rows = String::new();
    for r in runs.iter().take(rt.config().web_view_runs) {
        rows.push_str(&format!(
            "<tr><td><a href=\"/runs/{id}\">{id}</a></td><td>{wf}</td><td class=\"{st}\">{st}</td><td>{at}</td><td><a href=\"/runs/{id}/events\">events</a></td></tr>\n",
            id = escape(&r.run_id),
            wf = escape(&r.workflow_id),
            st = r.status,
            at = crate::engine::rfc3339(r.updated_at),
        ));
    }
    Ok(Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>weft runs</title>\
         <style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:.2em .8em;text-align:left}}\
         .success{{color:green}}.failed,.tripwire{{color:#b00}}.suspended{{color:#a60}}</style></head>\
         <body><h1>weft runs</h1><p>{} runs in {}</p><table><tr><th>run</th><th>workflow</th>\
         <th>status</th><th>updated</th><th></th></tr>\n{rows}</table></body></html>",
        runs.len(),
        escape(&rt.home().display().to_string()),
    )))
}
