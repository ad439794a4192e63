//! State patches: applied to a file's state all or none, checked against its schema (S16,
//! S47–S49).

// Step failures travel by value through a few internal helpers; boxing them buys nothing here.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use serde_json::{Map, Value};

use super::context::{Cx, Frame};
use super::invocation::StepFailure;
use super::model::EntryDef;
use super::schema;

/// Applies an invocation's patches to its file's state, all or none (S16, S47–S49).
pub(crate) fn apply_patches(
    cx: &mut Cx,
    frame: &Frame,
    entry: &EntryDef,
    patches: &[Value],
) -> Result<(), StepFailure> {
    if patches.is_empty() {
        return Ok(());
    }
    let schema = cx.graph.file(frame.file).state_schema.as_ref();
    let Some(file) = cx.files.get_mut(&frame.file_key) else {
        return Ok(());
    };
    let mut state = Value::clone(&file.state);
    let mut written = Vec::new();
    for patch in patches {
        let Value::Object(members) = patch else {
            return Err(StepFailure::new(
                "invalid-state-patch",
                format!("step {}: a state patch must be a JSON object", entry.path),
            ));
        };
        if !state.is_object() {
            state = Value::Object(Map::new());
        }
        for (k, v) in members {
            state[k.as_str()] = v.clone();
            written.push(k.clone());
        }
        if let Some(schema) = schema
            && let Err(v) = schema.check(&state)
        {
            return Err(StepFailure::new(
                "invalid-state",
                format!("step {}: state: {}", entry.path, schema::summarize(&v)),
            )
            .with_details(schema::details(&v)));
        }
    }
    file.state = Arc::new(state);
    for key in written {
        if !file.written.contains(&key) {
            file.written.push(key);
        }
    }
    Ok(())
}
