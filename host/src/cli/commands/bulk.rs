//! `weft bulk cancel` and `weft bulk resume`: act on every run a filter matches.

use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{parse_json, print_json, refuse};
use crate::cli::{EXIT_OK, EXIT_USAGE, Output};
use crate::driver::{BulkReport, RunFilter, Runtime};
use crate::engine::{ResumeRequest, RunStatus};

/// The bulk operations.
#[derive(Debug, Clone, Subcommand, Serialize, Deserialize)]
pub enum BulkCmd {
    /// Cancel every pending, running or suspended run the filter matches.
    #[command(
        after_help = "Examples:\n  weft bulk cancel --workflow approval --status suspended --dry-run\n  weft bulk cancel --tag customer:acme"
    )]
    Cancel {
        /// Which runs.
        #[command(flatten)]
        filter: FilterArgs,
    },
    /// Resume every suspended run the filter matches with one request.
    #[command(
        after_help = "Examples:\n  weft bulk resume --workflow approval --label manager --data '{\"approved\": true}' --dry-run"
    )]
    Resume {
        /// Which runs.
        #[command(flatten)]
        filter: FilterArgs,
        /// Select suspensions by path or path prefix.
        #[arg(long, conflicts_with = "label")]
        step: Option<String>,
        /// Select suspensions by label.
        #[arg(long)]
        label: Option<String>,
        /// The resume data (JSON, default `{}`).
        #[arg(long)]
        data: Option<String>,
    },
}

/// Which runs a bulk operation acts on; at least one of them must be given.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
pub struct FilterArgs {
    /// Only runs of this workflow.
    #[arg(long)]
    pub workflow: Option<String>,
    /// Only runs with this status.
    #[arg(long, value_parser = parse_status)]
    pub status: Option<RunStatus>,
    /// Only runs carrying this tag, `key:value` (repeat: runs carrying every one).
    #[arg(long = "tag", value_name = "KEY:VALUE", value_parser = crate::tags::parse_tag)]
    #[serde(default)]
    pub tags: Vec<(String, String)>,
    /// Only runs created at or after this instant (RFC 3339, e.g. 2026-12-01T00:00:00Z).
    #[arg(long, value_parser = parse_instant)]
    pub created_after: Option<i64>,
    /// Only runs created before this instant (RFC 3339).
    #[arg(long, value_parser = parse_instant)]
    pub created_before: Option<i64>,
    /// Count the runs it would act on; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// A status, as `--status` takes it.
fn parse_status(text: &str) -> Result<RunStatus, String> {
    RunStatus::parse(text).ok_or_else(|| {
        format!(
            "unknown status `{text}`; use one of pending, running, suspended, success, failed, \
             cancelled, tripwire"
        )
    })
}

/// An instant written in RFC 3339, as ms since the epoch.
fn parse_instant(text: &str) -> Result<i64, String> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|at| at.timestamp_millis())
        .map_err(|e| {
            format!("`{text}` is not an instant ({e}); write RFC 3339, e.g. 2026-12-01T00:00:00Z")
        })
}

impl FilterArgs {
    /// The filter these arguments give.
    fn filter(&self) -> RunFilter {
        RunFilter {
            workflow: self.workflow.clone(),
            status: self.status,
            tags: self.tags.clone(),
            created_after: self.created_after,
            created_before: self.created_before,
        }
    }
}

/// Carries out `weft bulk`.
pub(crate) async fn exec(rt: &Runtime, cmd: BulkCmd, out: &mut dyn Output) -> i32 {
    let (args, what) = match &cmd {
        BulkCmd::Cancel { filter } => (filter, "cancelled"),
        BulkCmd::Resume { filter, .. } => (filter, "resumed"),
    };
    let filter = args.filter();
    if filter.is_empty() {
        out.err(
            "error: name the runs: --workflow, --status, --tag, --created-after or \
             --created-before (a bulk operation on every run is not taken)",
        );
        return EXIT_USAGE;
    }
    let report = match &cmd {
        BulkCmd::Cancel { .. } => rt.cancel_matching(&filter, args.dry_run).await,
        BulkCmd::Resume {
            step, label, data, ..
        } => {
            let data = match data.as_deref().map(|d| parse_json(d, "--data")).transpose() {
                Ok(v) => v.unwrap_or_else(|| json!({})),
                Err(e) => {
                    out.err(&format!("error: {e}"));
                    return EXIT_USAGE;
                }
            };
            let request = ResumeRequest {
                step: step.clone(),
                label: label.clone(),
                foreach_index: None,
                data,
            };
            rt.resume_matching(&filter, &request, args.dry_run).await
        }
    };
    match report {
        Ok(report) => print(out, &report, what, args.json),
        Err(e) => refuse(out, &e),
    }
}

/// Prints `report`: a JSON object, or a line and one line per refused run.
fn print(out: &mut dyn Output, report: &BulkReport, what: &str, json: bool) -> i32 {
    if json {
        return print_json(out, report);
    }
    if report.dry_run {
        out.line(&format!(
            "{} runs would be {what}; nothing was changed",
            report.matched
        ));
        return EXIT_OK;
    }
    out.line(&format!(
        "{} of {} runs {what}, {} refused",
        report.done,
        report.matched,
        report.refused.len()
    ));
    for (id, why) in &report.refused {
        out.err(&format!("{id}: {why}"));
    }
    EXIT_OK
}
