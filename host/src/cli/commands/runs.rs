//! `weft runs`: list runs, of one workflow or with one status.

use clap::Args;
use serde::{Deserialize, Serialize};

use super::refuse;
use crate::cli::{EXIT_OK, EXIT_USAGE, Output};
use crate::driver::Runtime;
use crate::engine::RunStatus;

/// The arguments of `weft runs`.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
#[command(
    after_help = "Examples:\n  weft runs\n  weft runs --status suspended\n  weft runs --workflow quickstart --status failed\n  weft runs --tag team:payments"
)]
pub struct RunsArgs {
    /// Only runs of this workflow.
    #[arg(long)]
    pub workflow: Option<String>,
    /// Only runs with this status.
    #[arg(long)]
    pub status: Option<String>,
    /// Only runs carrying this tag, `key:value` (repeat: runs carrying every one).
    #[arg(long = "tag", value_name = "KEY:VALUE", value_parser = crate::tags::parse_tag)]
    #[serde(default)]
    pub tags: Vec<(String, String)>,
}

/// Carries out `weft runs`.
pub(crate) async fn exec(rt: &Runtime, args: RunsArgs, out: &mut dyn Output) -> i32 {
    let RunsArgs {
        workflow,
        status,
        tags,
    } = args;
    let status = match status.as_deref().map(|s| (s, RunStatus::parse(s))) {
        Some((s, None)) => {
            out.err(&format!("error: unknown status `{s}`; use one of pending, running, suspended, success, failed, cancelled, tripwire"));
            return EXIT_USAGE;
        }
        Some((_, parsed)) => parsed,
        None => None,
    };
    match rt.runs(workflow.as_deref(), status) {
        Ok(runs) => {
            for r in runs.iter().filter(|r| r.has_tags(&tags)) {
                let shown: Vec<String> = r.tags.iter().map(|(k, v)| format!("{k}:{v}")).collect();
                let line = format!(
                    "{}  {:<24} {:<10} {}",
                    r.run_id,
                    r.workflow_id,
                    r.status,
                    crate::engine::rfc3339(r.created_at)
                );
                if shown.is_empty() {
                    out.line(&line);
                } else {
                    out.line(&format!("{line}  {}", shown.join(" ")));
                }
            }
            EXIT_OK
        }
        Err(e) => refuse(out, &e),
    }
}
