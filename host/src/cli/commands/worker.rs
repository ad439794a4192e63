//! `weft worker`: drive the runs no live process drives on a shared store, until stopped.

use clap::Args;
use serde::{Deserialize, Serialize};

use super::service::{print_recovery, shutdown_signal};
use crate::cli::{EXIT_FAILED, EXIT_OK, EXIT_USAGE, Output, StdOutput};
use crate::driver::{Recovery, Runtime, RuntimeError};

/// The arguments of `weft worker`.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
#[command(
    after_help = "Examples:\n  weft worker --store postgres://weft@db/weft\n  weft worker --store postgres://weft@db/weft --concurrency 64"
)]
pub struct WorkerArgs {
    /// Runs driven at once (pending or running) before it takes up more.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
}

/// Carries out `weft worker`.
pub(crate) async fn exec(rt: &Runtime, args: WorkerArgs, out: &mut dyn Output) -> i32 {
    let WorkerArgs { concurrency } = args;
    if !rt.is_shared() {
        out.err(&format!("error: {}", RuntimeError::NotShared));
        return EXIT_USAGE;
    }
    out.err(&format!(
        "worker {} driving up to {concurrency} runs",
        rt.shared_worker_id().unwrap_or_default()
    ));
    let report = |r: Recovery| print_recovery(&mut StdOutput, &r);
    match rt.work(concurrency.max(1), shutdown_signal(), report).await {
        Ok(()) => EXIT_OK,
        Err(e) => {
            out.err(&format!("error: {e}"));
            EXIT_FAILED
        }
    }
}
