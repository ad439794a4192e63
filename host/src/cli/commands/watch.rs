//! `weft watch`: print a run's events, past then live, one JSON object a line.

use clap::Args;
use serde::{Deserialize, Serialize};

use super::refuse;
use crate::cli::{EXIT_OK, Output, RunIdArg};
use crate::driver::Runtime;

/// The arguments of `weft watch`.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
#[command(
    after_help = "Examples:\n  weft watch 01JABCDEF... --follow\n  weft watch 01JABCDEF... --from-seq 40"
)]
pub struct WatchArgs {
    /// The run.
    #[arg(value_parser = RunIdArg, allow_hyphen_values = true)]
    pub run_id: String,
    /// Start at this seq.
    #[arg(long, default_value_t = 1)]
    pub from_seq: u64,
    /// Keep following through suspensions until the run ends.
    #[arg(long)]
    pub follow: bool,
}

/// Carries out `weft watch`.
pub(crate) async fn exec(rt: &Runtime, args: WatchArgs, out: &mut dyn Output) -> i32 {
    let WatchArgs {
        run_id,
        from_seq,
        follow,
    } = args;
    let watched = if follow {
        rt.watch(&run_id, from_seq)
    } else {
        rt.watch_settled(&run_id, from_seq)
    };
    let mut rx = match watched {
        Ok(rx) => rx,
        Err(e) => return refuse(out, &e),
    };
    while let Some(ev) = rx.recv().await {
        out.line(&serde_json::to_string(&*ev).unwrap_or_default());
    }
    EXIT_OK
}
