//! `weft cancel`: cancel a pending, running or suspended run.

use clap::Args;
use serde::{Deserialize, Serialize};

use super::refuse;
use crate::cli::{EXIT_OK, Output, RunIdArg};
use crate::driver::Runtime;

/// The arguments of `weft cancel`.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
#[command(after_help = "Examples:\n  weft cancel 01JABCDEF...")]
pub struct CancelArgs {
    /// The run.
    #[arg(value_parser = RunIdArg, allow_hyphen_values = true)]
    pub run_id: String,
}

/// Carries out `weft cancel`.
pub(crate) async fn exec(rt: &Runtime, args: CancelArgs, out: &mut dyn Output) -> i32 {
    let CancelArgs { run_id } = args;
    match rt.cancel(&run_id).await {
        Ok(()) => {
            out.err(&format!("cancel of run {run_id} accepted"));
            EXIT_OK
        }
        Err(e) => refuse(out, &e),
    }
}
