//! Why the runtime refused or failed a request: [`RuntimeError`], and the hints its messages
//! give about a failed store.

use std::path::PathBuf;

use crate::engine::{self, Refusal, RunStatus};
use crate::limits::LimitError;
use crate::run_id::InvalidRunId;
use crate::store::StoreError;

/// Why the runtime refused or failed a request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// No run has this id.
    #[error("no run with id {0}")]
    UnknownRun(String),
    /// A tag breaks the rule of tags (see [`InvalidTag`](crate::InvalidTag)).
    #[error(transparent)]
    InvalidTag(#[from] crate::tags::InvalidTag),
    /// A prune was asked to delete runs of a status that has not ended.
    #[error(
        "a prune deletes ended runs only, and {0} runs have not ended: give the status \
         success, failed, cancelled or tripwire, or none"
    )]
    NotPrunable(RunStatus),
    /// A value is over a limit of [`RuntimeConfig`](super::RuntimeConfig).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// The run id breaks the rule of run ids (see [`InvalidRunId`]).
    #[error(transparent)]
    InvalidRunId(#[from] InvalidRunId),
    /// Only a `running` or `pending` run is recovered (S101).
    #[error(
        "run {run} is {status}, not running: only a running or pending run is recovered; resume a suspended one"
    )]
    NotRecoverable {
        /// The run.
        run: String,
        /// Its status.
        status: RunStatus,
    },
    /// The core refused (S62, S69, S75).
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The run input breaks the input schema (S58).
    #[error("invalid run input:\n{}", .0.iter().map(|v| format!("{}: {}", if v.path.is_empty() { "/" } else { &v.path }, v.message)).collect::<Vec<_>>().join("\n"))]
    InvalidInput(Vec<engine::schema::Violation>),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A plugin could not be loaded.
    #[error(transparent)]
    Plugin(#[from] crate::plugin::PluginError),
    /// A stored entry was written by a newer weft, in a format this one cannot read.
    #[error(
        "run {run}: stored {what} has format {found}, this weft reads format {reads}: upgrade weft"
    )]
    NewerFormat {
        /// The run.
        run: String,
        /// Which entry: `graph`, `state`.
        what: &'static str,
        /// The entry's format.
        found: u64,
        /// The format this weft reads.
        reads: u32,
    },
    /// A stored entry does not hold what this weft wrote.
    #[error("run {run}: stored {what} is corrupt: {message}")]
    Corrupt {
        /// The run.
        run: String,
        /// Which entry: `graph`, `state`, `record`.
        what: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A run's value could not be encoded for the store.
    #[error("run {run}: cannot encode it for the store: {message}")]
    Encode {
        /// The run.
        run: String,
        /// What went wrong.
        message: String,
    },
    /// The task driving a run stopped before it answered a request; the request may be tried
    /// again.
    #[error("run {run}: its driver stopped before answering; try again")]
    DriverStopped {
        /// The run.
        run: String,
    },
    /// Writing to the home's store failed (S100).
    #[error("cannot write to the store in home {}: {cause}{}", .home.display(), fix_now(.cause))]
    StoreFailed {
        /// The home.
        home: PathBuf,
        /// The failure.
        cause: StoreError,
    },
    /// The run stopped because its progress could not be stored; what it did until then is
    /// stored, and `weft resume` goes on with it (S101).
    #[error(
        "run {run} stopped: cannot write to the store in home {}: {cause}. Everything it did until then is stored: {}, go on with `weft resume {run}`",
        .home.display(),
        fix_later(.cause)
    )]
    Halted {
        /// The run.
        run: String,
        /// The home.
        home: PathBuf,
        /// The failure.
        cause: StoreError,
    },
    /// Another live process drives the run (a store shared by many processes).
    #[error("run {run} is driven by weft process {worker}")]
    Elsewhere {
        /// The run.
        run: String,
        /// That process's worker id.
        worker: String,
    },
    /// The process driving the run failed the request handed to it.
    #[error("run {run}: the weft process driving it answered: {message}")]
    Remote {
        /// The run.
        run: String,
        /// Its error.
        message: String,
    },
    /// Workers (and runs left to them) need a store shared by many processes.
    #[error(
        "only a store that processes share has workers to drive runs (weft worker, run \
         --detach): give --store postgres://... (or WEFT_STORE)"
    )]
    NotShared,
}

impl RuntimeError {
    /// Whether the error says the disk holding the home is full.
    pub fn is_disk_full(&self) -> bool {
        matches!(
            self,
            RuntimeError::Store(StoreError::DiskFull(_))
                | RuntimeError::StoreFailed {
                    cause: StoreError::DiskFull(_),
                    ..
                }
                | RuntimeError::Halted {
                    cause: StoreError::DiskFull(_),
                    ..
                }
        )
    }
}

/// What to do about a store failure now.
fn fix_now(cause: &StoreError) -> &'static str {
    match cause {
        StoreError::DiskFull(_) => "; free space on that disk, then try again",
        _ => "",
    }
}

/// When a run stopped by a store failure can go on.
fn fix_later(cause: &StoreError) -> &'static str {
    match cause {
        StoreError::DiskFull(_) => "once that disk has free space again",
        _ => "once the cause is fixed",
    }
}

/// The error for a value of run `run` that cannot be encoded for the store.
pub(super) fn encode_failed(run: &str, e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Encode {
        run: run.into(),
        message: e.to_string(),
    }
}
