//! The nested-workflow machine: another file as one entry, with its own input and state
//! (S41–S45).

use indexmap::IndexMap;
use serde_json::{Map, Value};

use crate::engine::context::{Cx, Frame};
use crate::engine::drive::{drive_seq, end_node, start_block};
use crate::engine::model::{EntryDef, FileId};
use crate::engine::nodes::{End, ListRef, Node, NodeKind, Phase, Seq};
use crate::engine::patches::apply_patches;
use crate::engine::schema;
use crate::engine::state::FileState;

/// Starts the nested file with its own input and state, drives it, and merges the keys its
/// steps wrote into the parent state when it succeeds (S41–S45).
pub(crate) fn drive_nested(
    node: &mut Node,
    entry: &EntryDef,
    file_id: FileId,
    frame: &Frame,
    cx: &mut Cx,
) {
    let key = format!("{}/{}", frame.scopes[0], entry.path);
    if node.phase == Phase::New {
        start_block(node, entry, frame, cx);
        let file = cx.graph.file(file_id);
        let mut input = node.input.clone();
        if let Some(schema) = &file.input_schema
            && let Err(v) = schema.fill_and_check(&mut input)
        {
            let mut err = cx.error(
                frame,
                &entry.path,
                "invalid-input",
                format!("workflow {}: input: {}", entry.path, schema::summarize(&v)),
            );
            err.details = Some(schema::details(&v));
            end_node(node, entry, frame, cx, End::Failed(err));
            return;
        }
        let mut state = file.initial_state.clone();
        if let (Value::Object(nested), Value::Object(parent)) =
            (&mut state, &cx.file_state(frame).state)
        {
            for (k, v) in parent {
                nested.insert(k.clone(), v.clone());
            }
        }
        if let Some(schema) = &file.state_schema
            && let Err(v) = schema.check(&state)
        {
            let mut err = cx.error(
                frame,
                &entry.path,
                "invalid-state",
                format!("workflow {}: state: {}", entry.path, schema::summarize(&v)),
            );
            err.details = Some(schema::details(&v));
            end_node(node, entry, frame, cx, End::Failed(err));
            return;
        }
        cx.files.insert(
            key.clone(),
            FileState {
                input: input.clone(),
                state,
                written: Vec::new(),
                bailed: None,
            },
        );
        cx.results.insert(key.clone(), IndexMap::new());
        node.kind = NodeKind::Nested(Seq::new(ListRef::File(file_id), file.body[0], input));
    }
    let inner = Frame {
        file: file_id,
        file_key: key.clone(),
        scopes: vec![key.clone()],
        foreach_index: frame.foreach_index,
        iteration: frame.iteration,
        in_item: frame.in_item,
    };
    let NodeKind::Nested(seq) = &mut node.kind else {
        return;
    };
    drive_seq(seq, &inner, cx);
    match seq.phase.clone() {
        Phase::New | Phase::Running => node.phase = Phase::Running,
        Phase::Suspended => node.phase = Phase::Suspended,
        Phase::Done(end) => {
            let nested = cx.files.remove(&key);
            cx.results.remove(&key);
            let end = match end {
                End::Success(v) | End::Bail(v) => {
                    let patch: Map<String, Value> = nested
                        .map(|n| {
                            n.written
                                .iter()
                                .filter_map(|k| n.state.get(k).map(|v| (k.clone(), v.clone())))
                                .collect()
                        })
                        .unwrap_or_default();
                    if patch.is_empty() {
                        End::Success(v)
                    } else {
                        match apply_patches(cx, frame, entry, &[Value::Object(patch)]) {
                            Ok(()) => End::Success(v),
                            Err(f) => {
                                let mut err = cx.error(frame, &entry.path, &f.code, f.message);
                                err.details = f.details;
                                End::Failed(err)
                            }
                        }
                    }
                }
                other => other,
            };
            end_node(node, entry, frame, cx, end);
        }
    }
}
