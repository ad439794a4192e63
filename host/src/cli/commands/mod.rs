//! One file per command (or small family of commands; a directory for `new`): its clap
//! arguments and its `exec`, which carries it out against a runtime and writes through an
//! [`Output`].
//!
//! What several commands share is here (refusals and their exit code, JSON arguments), in
//! `record` (a run followed to its end, its record printed, its exit code) and in `service`
//! (what the long-running commands share).

pub(super) mod bulk;
pub(super) mod cancel;
pub(super) mod dev;
pub(super) mod graph;
pub mod new;
pub(super) mod plugin;
pub(super) mod prune;
pub(super) mod record;
pub(super) mod resume;
pub(super) mod run;
pub(super) mod runs;
pub(super) mod serve;
mod service;
pub(super) mod show;
pub(super) mod validate;
pub(super) mod watch;
pub(super) mod worker;

use serde_json::Value;

use super::{EXIT_OK, EXIT_USAGE, Output};
use crate::driver::RuntimeError;
use crate::engine::Refusal;

/// Prints a refusal and gives exit code 2; invalid data lists each violation on its own line.
fn refuse(out: &mut dyn Output, e: &RuntimeError) -> i32 {
    out.err(&format!("error: {e}"));
    if let RuntimeError::Refused(Refusal::InvalidData { violations, .. }) = e {
        for v in violations {
            let path = if v.path.is_empty() { "/" } else { &v.path };
            out.err(&format!("{path}: {}", v.message));
        }
    }
    EXIT_USAGE
}

/// Prints `report` as one JSON line (a command's `--json`).
fn print_json(out: &mut dyn Output, report: &impl serde::Serialize) -> i32 {
    match serde_json::to_string(report) {
        Ok(line) => {
            out.line(&line);
            EXIT_OK
        }
        Err(e) => {
            out.err(&format!("error: cannot encode the report: {e}"));
            EXIT_USAGE
        }
    }
}

fn parse_json(text: &str, what: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("{what} is not valid JSON: {e}"))
}
