//! `weft resume`: resume a suspended run (with no selector and no data, also recover an
//! orphaned one) and follow it until it ends or suspends again.

use clap::Args;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::record::follow_run;
use super::{parse_json, refuse};
use crate::cli::{EXIT_USAGE, Output, RunIdArg};
use crate::driver::Runtime;
use crate::engine::ResumeRequest;

/// The arguments of `weft resume`.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
#[command(
    after_help = "Examples:\n  weft resume 01JABCDEF... --data '{\"approved\": true}'\n  weft resume 01JABCDEF... --label manager --data '{\"approved\": false}'\n  weft resume 01JABCDEF...   (no data: recover a run whose process died)"
)]
pub struct ResumeArgs {
    /// The run.
    #[arg(value_parser = RunIdArg, allow_hyphen_values = true)]
    pub run_id: String,
    /// Select suspensions by path or path prefix.
    #[arg(long, conflicts_with = "label")]
    pub step: Option<String>,
    /// Select suspensions by label.
    #[arg(long)]
    pub label: Option<String>,
    /// Keep only this foreach item.
    #[arg(long)]
    pub foreach_index: Option<u32>,
    /// The resume data (JSON, default `{}`).
    #[arg(long)]
    pub data: Option<String>,
    /// Print exactly one run record on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Carries out `weft resume`.
pub(crate) async fn exec(rt: &Runtime, args: ResumeArgs, out: &mut dyn Output) -> i32 {
    let ResumeArgs {
        run_id,
        step,
        label,
        foreach_index,
        data,
        json,
    } = args;
    let run_id = run_id.as_str();
    let data_value = match data.as_deref().map(|d| parse_json(d, "--data")).transpose() {
        Ok(v) => v,
        Err(e) => {
            out.err(&format!("error: {e}"));
            return EXIT_USAGE;
        }
    };
    let from = match rt.watch_settled(run_id, 1) {
        Ok(mut rx) => {
            let mut last = 0;
            while let Ok(ev) = rx.try_recv() {
                last = ev.seq;
            }
            last + 1
        }
        Err(e) => return refuse(out, &e),
    };
    let bare = step.is_none() && label.is_none() && foreach_index.is_none() && data.is_none();
    let request = (!bare).then(|| ResumeRequest {
        step,
        label,
        foreach_index,
        data: data_value.unwrap_or_else(|| json!({})),
    });
    match rt.resume_or_recover(run_id, request).await {
        Ok(()) => follow_run(rt, run_id, from, json, out).await,
        Err(e) => refuse(out, &e),
    }
}
