//! `weft show`: print one run's record.

use clap::Args;
use serde::{Deserialize, Serialize};

use super::record::print_record;
use super::refuse;
use crate::cli::{EXIT_OK, Output, RunIdArg};
use crate::driver::Runtime;

/// The arguments of `weft show`.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
#[command(
    after_help = "Examples:\n  weft show 01JABCDEF...\n  weft show 01JABCDEF... --json | jq .result"
)]
pub struct ShowArgs {
    /// The run.
    #[arg(value_parser = RunIdArg, allow_hyphen_values = true)]
    pub run_id: String,
    /// Print the run record as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Carries out `weft show`.
pub(crate) async fn exec(rt: &Runtime, args: ShowArgs, out: &mut dyn Output) -> i32 {
    let ShowArgs { run_id, json } = args;
    match rt.show(&run_id).await {
        Ok(record) => {
            print_record(out, &record, json);
            EXIT_OK
        }
        Err(e) => refuse(out, &e),
    }
}
