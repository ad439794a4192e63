//! `weft prune`: delete ended runs older than a duration.

use std::time::Duration;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::{print_json, refuse};
use crate::cli::{EXIT_OK, Output};
use crate::driver::{PruneFilter, Runtime};
use crate::engine::RunStatus;

/// The arguments of `weft prune`.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
#[command(
    after_help = "Examples:\n  weft prune --older-than 30d --dry-run\n  weft prune --older-than 7d --status failed --workflow quickstart\n  weft prune --older-than 0s --json"
)]
pub struct PruneArgs {
    /// Delete runs that ended at least this long ago: `30d`, `12h`, `90m`, `1h 30m`.
    #[arg(long, value_parser = crate::age::parse_age)]
    pub older_than: Duration,
    /// Only runs with this status: success, failed, cancelled or tripwire (a pending, running
    /// or suspended run is never deleted).
    #[arg(long, value_parser = parse_ended)]
    pub status: Option<RunStatus>,
    /// Only runs of this workflow.
    #[arg(long)]
    pub workflow: Option<String>,
    /// Only runs carrying this tag, `key:value` (repeat: runs carrying every one).
    #[arg(long = "tag", value_name = "KEY:VALUE", value_parser = crate::tags::parse_tag)]
    #[serde(default)]
    pub tags: Vec<(String, String)>,
    /// Count the runs that would be deleted; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// An ended status, as `--status` takes it.
fn parse_ended(text: &str) -> Result<RunStatus, String> {
    match RunStatus::parse(text) {
        Some(s) if s.is_ended() => Ok(s),
        Some(s) => Err(format!(
            "{s} runs have not ended and are never pruned; use success, failed, cancelled or \
             tripwire"
        )),
        None => Err(format!(
            "unknown status `{text}`; use success, failed, cancelled or tripwire"
        )),
    }
}

/// Carries out `weft prune`.
pub(crate) async fn exec(rt: &Runtime, args: PruneArgs, out: &mut dyn Output) -> i32 {
    let mut filter = PruneFilter::older_than(args.older_than);
    filter.status = args.status;
    filter.workflow = args.workflow;
    filter.tags = args.tags;
    filter.dry_run = args.dry_run;
    match rt.prune(&filter).await {
        Ok(report) if args.json => print_json(out, &report),
        Ok(report) => {
            if report.dry_run {
                out.line(&format!(
                    "{} runs would be deleted ({} kept: still driven, or children of runs \
                     that have not ended); nothing was deleted",
                    report.deleted, report.kept
                ));
            } else {
                out.line(&format!(
                    "{} runs deleted, {} kept; {} blobs removed, {} given back",
                    report.deleted,
                    report.kept,
                    report.blobs,
                    bytes(report.bytes)
                ));
            }
            EXIT_OK
        }
        Err(e) => refuse(out, &e),
    }
}

/// `n` bytes, in the largest unit that keeps a whole number before the point.
fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_statuses_are_read_or_refused_with_what_to_write() {
        assert_eq!(
            crate::age::parse_age("30d"),
            Ok(Duration::from_secs(30 * 86_400))
        );
        assert_eq!(
            crate::age::parse_age("1h 30m"),
            Ok(Duration::from_secs(5400))
        );
        assert!(crate::age::parse_age("soon").unwrap_err().contains("30d"));
        assert_eq!(parse_ended("failed"), Ok(RunStatus::Failed));
        assert!(
            parse_ended("suspended")
                .unwrap_err()
                .contains("never pruned")
        );
        assert!(parse_ended("done").unwrap_err().contains("unknown status"));
        assert_eq!(bytes(1536), "1.5 KiB");
    }
}
