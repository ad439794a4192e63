//! What a file writes that weft compiles before anything runs: jq expressions and JSON Schemas,
//! refused with where they are and what is wrong.

use std::path::Path;

use serde_json::Value;
use serde_saphyr::Spanned;

use super::{Builder, FileCx, line};
use crate::engine::expr::Expr;
use crate::engine::schema::Schema;
use crate::workflow::WorkflowError;

impl Builder<'_> {
    /// The jq expression `s`, checked; `what` says where it is in refusals.
    pub(super) fn expr(
        &self,
        s: &Spanned<String>,
        what: &str,
        fcx: &FileCx,
    ) -> Result<Expr, WorkflowError> {
        let e = Expr::new(s.value.clone());
        e.check().map_err(|msg| {
            WorkflowError::at(
                fcx.path,
                line(&s.referenced),
                format!("{what}: {msg}"),
                "fix the jq expression",
            )
        })?;
        Ok(e)
    }
}

/// A schema written in the file, refused with its line when it is not a valid schema.
pub(super) fn file_schema(
    path: &Path,
    value: Option<&Spanned<Value>>,
    what: &str,
) -> Result<Option<Schema>, WorkflowError> {
    let Some(value) = value else { return Ok(None) };
    compile_schema(path, Some(value.value.clone()), what).map_err(|mut e| {
        e.line = line(&value.referenced);
        e
    })
}

/// The JSON Schema `value` (none when `None`), compiled; `what` says which it is in refusals.
pub(super) fn compile_schema(
    path: &Path,
    value: Option<Value>,
    what: &str,
) -> Result<Option<Schema>, WorkflowError> {
    let Some(value) = value else { return Ok(None) };
    let schema = Schema::new(value);
    schema.compile().map_err(|e| {
        WorkflowError::at(
            path,
            None,
            format!("{what}: {e}"),
            "fix the JSON Schema (draft 2020-12)",
        )
    })?;
    Ok(Some(schema))
}
