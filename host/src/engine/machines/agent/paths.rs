//! Where an agent's calls sit: the path of each model and tool call, and the entry and frame
//! a call is driven as (S123, S125).

use crate::engine::context::Frame;
use crate::engine::model::{EntryDef, EntryKind};

/// The path of model call `turn` (1-based).
pub(super) fn model_path(entry: &EntryDef, turn: u32) -> String {
    format!("{}.model-{turn}", entry.path)
}

/// The path of the tool call with the provider's id `id`: characters other than ASCII
/// letters, digits, `-` and `_` become `_`, so the path stays one segment, and `-2`, `-3`...
/// follow an id the agent has seen before (`taken`: the paths used so far).
pub(super) fn tool_path(entry: &EntryDef, id: &str, taken: &[String]) -> String {
    let safe: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let base = format!("{}.tool-{safe}", entry.path);
    let mut path = base.clone();
    let mut n = 1;
    while taken.contains(&path) {
        n += 1;
        path = format!("{base}-{n}");
    }
    path
}

/// The entry a sub-step is driven as: its own path, the agent's file. The step machine reads
/// only these of an entry; the kind is the step definition it is given beside.
pub(super) fn sub_entry(entry: &EntryDef, path: &str) -> EntryDef {
    EntryDef {
        id: path.rsplit('.').next().unwrap_or(path).to_owned(),
        path: path.to_owned(),
        file: entry.file,
        kind: EntryKind::Group { body: Vec::new() },
    }
}

/// The frame of an agent's sub-steps: the agent's, with a scope of their own, so that their
/// outputs never show in `.steps` (the agent drops it after each pass).
pub(super) fn sub_frame(frame: &Frame, entry: &EntryDef) -> Frame {
    let mut sub = frame.clone();
    sub.scopes = vec![format!("{}\u{0}agent:{}", frame.scopes[0], entry.path)];
    sub
}
