//! The OpenAPI document of the API, generated from the handlers and types themselves (utoipa),
//! served at `GET /openapi.json`.

use axum::Json;
use utoipa::OpenApi;

use super::api;

/// The API's document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "weft",
        description = "Runs of weft workflows: start, list, read, follow, resume, cancel and re-run them. docs/SERVER.md describes the server's guards and limits."
    ),
    paths(
        api::list,
        api::workflows,
        api::start,
        api::show,
        api::definition,
        api::events,
        api::resume,
        api::cancel,
        api::rerun,
    )
)]
pub(crate) struct ApiDoc;

/// `GET /openapi.json`.
pub(crate) async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
