//! The OpenAPI document of the API, generated from the handlers and types themselves (utoipa),
//! served at `GET /openapi.json`.

use axum::Json;
use utoipa::openapi::schema::{Object, OneOfBuilder, Schema, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ComponentsBuilder, RefOr};
use utoipa::{Modify, OpenApi};

use super::{api, bulk, prune};

/// The name of the bearer-token scheme the writes name.
const BEARER: &str = "bearer";

/// The API's document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "weft",
        description = "Runs of weft workflows: start, list, read, follow, resume, cancel, re-run and prune them, one or many at a time. docs/SERVER.md describes the server's guards and limits."
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
        prune::prune,
        bulk::cancel,
        bulk::resume,
    ),
    modifiers(&BearerToken, &WhichWorkflow)
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

/// Says which of `workflow` and `file` a body may name, as the server checks it: a start names
/// exactly one, a re-run at most one (none keeps the source run's stored definition). Each
/// body's schema becomes a `oneOf` of its derived object, once per way of naming: the member
/// that names is a string and required, the other one (or both) absent or `null`.
struct WhichWorkflow;

/// The members that name a workflow.
const NAMING: [&str; 2] = ["workflow", "file"];

/// A way of naming the workflow: the member that names it (`None`: neither does), and the
/// title of its branch of the `oneOf`.
type Way = (Option<&'static str>, &'static str);

/// The ways a start names its workflow.
const START: &[Way] = &[
    (Some("workflow"), "A workflow by its id"),
    (Some("file"), "A workflow by its file"),
];

/// The ways a re-run names its definition.
const RERUN: &[Way] = &[
    (None, "The source run's stored definition"),
    (Some("workflow"), "A new definition by its id"),
    (Some("file"), "A new definition by its file"),
];

impl Modify for WhichWorkflow {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi
            .components
            .get_or_insert_with(|| ComponentsBuilder::new().build());
        for (name, ways) in [("StartBody", START), ("RerunBody", RERUN)] {
            if let Some(RefOr::T(Schema::Object(object))) = components.schemas.get(name) {
                let one_of = one_way_each(object, ways);
                components.schemas.insert(name.to_owned(), one_of);
            }
        }
    }
}

/// `object` once per way of naming the workflow.
fn one_way_each(object: &Object, ways: &[Way]) -> RefOr<Schema> {
    let mut one_of = OneOfBuilder::new().description(object.description.clone());
    for (by, title) in ways {
        let mut way = object.clone();
        way.description = None;
        way.title = Some((*title).to_owned());
        for member in NAMING {
            let names = *by == Some(member);
            if let Some(RefOr::T(Schema::Object(schema))) = way.properties.get_mut(member) {
                schema.schema_type = if names { Type::String } else { Type::Null }.into();
            }
            if names {
                way.required.push(member.to_owned());
            }
        }
        one_of = one_of.item(way);
    }
    one_of.into()
}

/// `GET /openapi.json`.
pub(crate) async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
