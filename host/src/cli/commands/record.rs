//! A run's outcome as `run`, `resume` and `show` print it: its progress followed until it
//! settles, its record, and the exit code of its status (S105).

use super::refuse;
use super::service::shutdown_signal;
use crate::cli::live::Live;
use crate::cli::output::Progress;
use crate::cli::{
    EXIT_CANCELLED, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_SUSPENDED, EXIT_TRIPWIRE, Output,
};
use crate::driver::{RunRecord, Runtime, RuntimeError};
use crate::engine::RunStatus;

/// Prints progress from `from` on to stderr (a live display on a terminal, else a line per
/// event) until the run ends or suspends, then the result.
///
/// Ctrl-C or SIGTERM stops the following: the run is left as stored, the exit code is
/// [`EXIT_INTERRUPTED`] with how to go on, and the caller lets the run go as the process ends
/// (`Runtime::close`), so that `weft resume` or a worker takes it up at once. A second signal
/// ends the process at once, whatever it is still doing.
pub(super) async fn follow_run(
    rt: &Runtime,
    run_id: &str,
    from: u64,
    json: bool,
    out: &mut dyn Output,
) -> i32 {
    let stop = shutdown_signal();
    let followed = tokio::select! {
        code = follow(rt, run_id, from, json, out) => Some(code),
        () = stop => None,
    };
    if let Some(code) = followed {
        return code;
    }
    tokio::spawn(async {
        shutdown_signal().await;
        std::process::exit(EXIT_INTERRUPTED);
    });
    out.err(&format!(
        "error: interrupted: run {run_id} stays as stored, with nothing driving it once this \
         process has ended; go on with `weft resume {run_id}`, or stop it with \
         `weft cancel {run_id}`"
    ));
    EXIT_INTERRUPTED
}

/// [`follow_run`] without its signals.
async fn follow(rt: &Runtime, run_id: &str, from: u64, json: bool, out: &mut dyn Output) -> i32 {
    if let Ok(mut rx) = rt.watch_settled(run_id, from) {
        // A person at a terminal gets a live display; a pipe and `--json` one line per event.
        if !json && out.terminal() {
            let mut live: Option<Live> = None;
            while let Some(ev) = rx.recv().await {
                if !out.live_elsewhere(&ev) {
                    live.get_or_insert_with(Live::new).show(&ev);
                }
            }
            if let Some(live) = live {
                live.finish();
            }
        } else {
            let mut progress = Progress::default();
            while let Some(ev) = rx.recv().await {
                progress.show(out, &ev, rt.config().progress_data_bytes);
            }
            progress.end(out);
        }
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
