//! Durable storage of runs: one trait for what the core and drivers need, and its backends.
//!
//! Every transition of a run is one [`Commit`]: its orchestration event, its tracking events and
//! the new snapshot, written atomically (S100). Values are opaque bytes (JSON) here, so a backend
//! never needs to understand the engine's types.

mod sled_store;

use serde::{Deserialize, Serialize};

pub use sled_store::SledStore;

use crate::engine::RunStatus;

/// A failure of the storage backend.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A run with this id exists already (S11).
    #[error("a run with id {0} already exists; pick another --run-id")]
    RunExists(String),
    /// Another process holds the database (S118).
    #[error("{0} is held by another weft process")]
    Held(String),
    /// The backend failed.
    #[error("store: {0}")]
    Backend(String),
    /// Stored bytes could not be read back.
    #[error("store: corrupt entry {key}: {message}")]
    Corrupt {
        /// Which entry.
        key: String,
        /// What is wrong.
        message: String,
    },
}

/// The short description of a run that listing needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// The run's id.
    pub run_id: String,
    /// The top-level workflow id.
    pub workflow_id: String,
    /// Where it stands.
    pub status: RunStatus,
    /// Creation time (ms since the epoch).
    pub created_at: i64,
    /// Last change (ms since the epoch).
    pub updated_at: i64,
}

/// A new run and everything stored with it (S10).
pub struct NewRun<'a> {
    /// Its summary.
    pub summary: &'a RunSummary,
    /// The serialized graph.
    pub definition: &'a [u8],
    /// The components it uses, by digest.
    pub plugins: &'a [(&'a str, &'a [u8])],
    /// The first snapshot.
    pub snapshot: &'a [u8],
}

/// One atomic write of a run's transition (S100).
pub struct Commit<'a> {
    /// The run.
    pub run_id: &'a str,
    /// The orchestration event and its index in the run's log (0-based; the driver is the
    /// run's only writer and counts).
    pub event: Option<(u64, &'a [u8])>,
    /// Tracking events: a JSON array of consecutive events, stored under the `seq` of its last.
    pub events: Option<(u64, &'a [u8])>,
    /// The new snapshot and how many log events it covers.
    pub snapshot: Option<(&'a [u8], u64)>,
    /// The new summary.
    pub summary: Option<&'a RunSummary>,
}

/// What every backend provides.
pub trait Store: Send + Sync + 'static {
    /// Stores a new run; refuses an id that exists.
    fn create_run(&self, run: NewRun<'_>) -> Result<(), StoreError>;
    /// Writes one transition atomically.
    fn commit(&self, commit: Commit<'_>) -> Result<(), StoreError>;
    /// Makes every write so far durable (fsync).
    fn sync(&self) -> Result<(), StoreError>;
    /// The latest snapshot, and how many orchestration events of the log it covers.
    fn snapshot(&self, run_id: &str) -> Result<Option<(Vec<u8>, u64)>, StoreError>;
    /// The run's first snapshot, from which its whole log folds.
    fn base(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// The stored definition.
    fn definition(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// A component by digest.
    fn plugin(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// The batches of tracking events (JSON arrays) from the one holding `seq` `from` on, in
    /// order; the first may begin before `from`.
    fn events(&self, run_id: &str, from: u64) -> Result<Vec<Vec<u8>>, StoreError>;
    /// The `seq` of the run's last stored tracking event (0 when none).
    fn last_seq(&self, run_id: &str) -> Result<u64, StoreError>;
    /// The orchestration log from entry `from` (0-based) on, in order.
    fn log(&self, run_id: &str, from: u64) -> Result<Vec<Vec<u8>>, StoreError>;
    /// The summary of one run.
    fn summary(&self, run_id: &str) -> Result<Option<RunSummary>, StoreError>;
    /// Every run's summary, newest first.
    fn runs(&self) -> Result<Vec<RunSummary>, StoreError>;
}
