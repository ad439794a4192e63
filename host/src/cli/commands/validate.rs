//! `weft validate`: check a workflow file and every file and plugin it names.

use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};

use crate::cli::{EXIT_OK, EXIT_USAGE, Output};
use crate::driver::Runtime;
use crate::workflow::load_workflow;

/// The arguments of `weft validate`.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
#[command(after_help = "Examples:\n  weft validate examples/approval.yaml")]
pub struct ValidateArgs {
    /// The workflow file.
    pub file: PathBuf,
}

/// Carries out `weft validate`.
pub(crate) async fn exec(rt: &Runtime, args: ValidateArgs, out: &mut dyn Output) -> i32 {
    let ValidateArgs { file } = args;
    match load_workflow(&file, rt.host()).await {
        Ok(w) => {
            out.line(&format!(
                "ok: {} (workflow {}, {} entries, {} plugins)",
                file.display(),
                w.graph.workflow_id(),
                w.graph.entries.len(),
                w.plugins.len()
            ));
            EXIT_OK
        }
        Err(e) => {
            out.err(&format!("error: {e}"));
            EXIT_USAGE
        }
    }
}
