//! The OpenAPI document of the API, generated from the handlers and types themselves (utoipa),
//! served at `GET /openapi.json`.

use axum::Json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::api;

/// The name of the bearer-token scheme the writes name.
const BEARER: &str = "bearer";

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
    ),
    modifiers(&BearerToken)
)]
pub(crate) struct ApiDoc;

/// Adds the bearer-token scheme: a server started with `--token-env` takes writes only with
/// its token (docs/SERVER.md); one started without takes them without, so each write lists
/// both (`security: [{}, {"bearer": []}]`).
struct BearerToken;

impl Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            BEARER,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The token the server was started with (`--token-env NAME`), or the \
                         one it printed when it started; needed for writes only when the \
                         server has one",
                    ))
                    .build(),
            ),
        );
    }
}

/// `GET /openapi.json`.
pub(crate) async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
