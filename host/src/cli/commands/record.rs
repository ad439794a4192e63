//! A run's outcome as `run`, `resume` and `show` print it: its progress followed until it
//! settles, its record, and the exit code of its status (S105).

use super::refuse;
use crate::cli::output::Progress;
use crate::cli::{
    EXIT_CANCELLED, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_SUSPENDED, EXIT_TRIPWIRE, Output,
};
use crate::driver::{RunRecord, Runtime, RuntimeError};
use crate::engine::RunStatus;

/// Prints progress from `from` on to stderr until the run ends or suspends, then the result.
pub(super) async fn follow_run(
    rt: &Runtime,
    run_id: &str,
    from: u64,
    json: bool,
    out: &mut dyn Output,
) -> i32 {
    if let Ok(mut rx) = rt.watch_settled(run_id, from) {
        let mut progress = Progress::default();
        while let Some(ev) = rx.recv().await {
            progress.show(out, &ev, rt.config().progress_data_bytes);
        }
        progress.end(out);
    }
    let record = match rt.wait(run_id).await {
        Ok(r) => r,
        Err(e @ RuntimeError::Halted { .. }) => {
            out.err(&format!("error: {e}"));
            return EXIT_INTERRUPTED;
        }
        Err(e) => return refuse(out, &e),
    };
    print_record(out, &record, json);
    exit_code(record.status)
}

/// The exit code of `run` and `resume` for a status (S105).
pub fn exit_code(status: RunStatus) -> i32 {
    match status {
        RunStatus::Success => EXIT_OK,
        RunStatus::Failed => EXIT_FAILED,
        RunStatus::Suspended => EXIT_SUSPENDED,
        RunStatus::Cancelled => EXIT_CANCELLED,
        RunStatus::Tripwire => EXIT_TRIPWIRE,
        RunStatus::Running | RunStatus::Pending => EXIT_OK,
    }
}

/// Prints a run's record: as one line of JSON, or as text (status, steps, result, error,
/// tripwire, suspensions and how to resume them).
pub(super) fn print_record(out: &mut dyn Output, record: &RunRecord, json: bool) {
    if json {
        out.line(&serde_json::to_string(record).unwrap_or_default());
        return;
    }
    out.line(&format!(
        "run {} ({}): {}",
        record.run_id, record.workflow_id, record.status
    ));
    for (path, step) in &record.steps {
        let status = serde_json::to_value(step.status).unwrap_or_default();
        out.line(&format!(
            "  {path:<32} {}",
            status.as_str().unwrap_or_default()
        ));
    }
    if let Some(result) = &record.result {
        out.line(&format!(
            "result: {}",
            serde_json::to_string_pretty(result).unwrap_or_default()
        ));
    }
    if let Some(error) = &record.error {
        out.line(&format!(
            "error: [{}] {} (at {})",
            error.code, error.message, error.step
        ));
    }
    if let Some(t) = &record.tripwire {
        out.line(&format!("tripwire: {}", t.reason));
    }
    if let Some(suspended) = &record.suspended {
        for s in suspended {
            out.line(&format!(
                "suspended: {}{} labels {:?} payload {}",
                s.path,
                s.foreach_index
                    .map(|i| format!(" [item {i}]"))
                    .unwrap_or_default(),
                s.labels,
                s.payload
            ));
        }
        out.line(&format!(
            "resume with: weft resume {} --data '{{...}}'",
            record.run_id
        ));
    }
}
