//! Durable storage of runs: one trait for what the core and drivers need, and its backends.
//!
//! Every transition of a run is one record, written atomically before its effects (S100).
//! Values are opaque bytes (JSON) here, so a backend never needs to understand the engine's
//! types.

mod json;
#[cfg(feature = "postgres")]
mod postgres;
mod sled;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use self::sled::{STORE_FORMAT, SledStore};
pub(crate) use json::from_stored;
#[cfg(feature = "postgres")]
pub use postgres::PgStore;
#[cfg(feature = "postgres")]
pub(crate) use postgres::is_postgres;

use crate::engine::RunStatus;

/// A failure of the storage backend.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// A run with this id exists already (S11).
    #[error("a run with id {0} already exists; pick another --run-id")]
    RunExists(String),
    /// Another process holds the database (S118).
    #[error("{0} is held by another weft process")]
    Held(String),
    /// The database was written in another store format.
    #[error(
        "{dir} holds a weft store of format {found}; this weft reads format {expected} only and \
         cannot convert it: open it with the weft version that wrote it, or move the home aside \
         (or remove it) to start with an empty one"
    )]
    Format {
        /// The database directory.
        dir: String,
        /// The format found (1: written before formats were marked).
        found: u32,
        /// The format this build reads.
        expected: u32,
    },
    /// The database cannot be read: damaged on disk.
    #[error(
        "the database in {dir} is damaged ({detail}); weft cannot use it. Restore the home from \
         a backup, or move it aside (`mv {home} {home}.damaged`) to start with an empty one"
    )]
    Damaged {
        /// The home directory.
        home: String,
        /// The database directory.
        dir: String,
        /// What sled reported.
        detail: String,
    },
    /// The backend failed.
    #[error("store: {0}")]
    Backend(String),
    /// The disk holding the store is full (or its quota is used up).
    #[error("the disk is full ({0})")]
    DiskFull(String),
    /// Another process took the run over: this one may no longer write it.
    #[error(
        "run {0} is driven by another weft process now (this one was presumed gone); its writes \
         from here are refused"
    )]
    Fenced(String),
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
    /// Its tags, given at its start (`tags::check_tags` holds them to its rule).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tags: std::collections::BTreeMap<String, String>,
}

impl RunSummary {
    /// Whether the run carries every one of `tags` (key and value).
    pub fn has_tags(&self, tags: &[(String, String)]) -> bool {
        tags.iter().all(|(k, v)| self.tags.get(k) == Some(v))
    }
}

/// Which runs a page of the listing holds: newest first (creation time, then id, both
/// descending), those after `after` when given (where the page before ended: its last run's
/// creation time and id), of workflow `workflow` when given, at most `limit` of them.
#[derive(Debug, Clone, Copy)]
pub struct RunsPage<'a> {
    /// Only runs of this top-level workflow id.
    pub workflow: Option<&'a str>,
    /// Only runs after this one in the order: its creation time (ms) and id.
    pub after: Option<(i64, &'a str)>,
    /// Only runs carrying every one of these tags (key and value).
    pub tags: &'a [(String, String)],
    /// The most runs the page holds.
    pub limit: usize,
}

/// Where a record sits in a run's list: the `seq` of its last tracking event (of the event
/// before it, when it holds none), then a counter that grows with every record of the run. The
/// seq is at least 1: a run's first record holds its `run-started` event.
pub type RecordKey = (u64, u32);

/// A run's definition as it is stored: the serialized graph and its sha256, the name of the
/// blob that holds it. Made once per workflow (`LoadedWorkflow::shared`),
/// not hashed again for each run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    bytes: Vec<u8>,
    digest: String,
}

impl Definition {
    /// The definition of serialized graph `bytes`.
    pub fn new(bytes: Vec<u8>) -> Self {
        let digest = sha256_hex(&bytes);
        Definition { bytes, digest }
    }

    /// The serialized graph.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Its sha256, hex.
    pub fn digest(&self) -> &str {
        &self.digest
    }
}

/// The hex sha256 of `bytes`: the name of their blob.
fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A new run and everything stored with it (S10).
pub struct NewRun<'a> {
    /// Its summary; written last, so a run exists only once all of it is stored.
    pub summary: &'a RunSummary,
    /// The serialized graph, with its digest.
    pub definition: &'a Definition,
    /// The components it uses, by digest (their sha256, hex).
    pub plugins: &'a [(&'a str, &'a [u8])],
    /// The run's first state, from which its records fold.
    pub base: &'a [u8],
    /// Whether the run id was made here (a ULID: 48 bits of time, 80 random), so that no
    /// stored run has it and a backend may skip looking; a given id is looked for
    /// ([`StoreError::RunExists`]).
    pub fresh_id: bool,
}

/// What [`Store::collect_garbage`] gave back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reclaimed {
    /// Blobs (definitions and components) that no stored run names any more, removed.
    pub blobs: u64,
    /// Bytes given back to the file system: removed blobs and compacted values files. A
    /// backend whose server keeps the room of deleted rows for its own reuse (PostgreSQL)
    /// counts the blobs' bytes only.
    pub bytes: u64,
}

/// What [`Store::collect_garbage`] is given to read the digests of the components a stored
/// definition names.
pub type PluginsOf = dyn Fn(&[u8]) -> Result<Vec<String>, StoreError>;

/// The statuses of runs that have ended, as the stores name them: the only runs a prune may
/// delete.
pub(crate) const ENDED: [RunStatus; 4] = [
    RunStatus::Success,
    RunStatus::Failed,
    RunStatus::Cancelled,
    RunStatus::Tripwire,
];

/// What every backend provides.
///
/// A run is a list of records, each written by one atomic `append`: a transition (its
/// orchestration event and the tracking events it emitted, S100) or a batch of events a step
/// wrote. Snapshots and summaries are derived from the records and may lag behind them.
pub trait Store: Send + Sync + 'static {
    /// Stores a new run; refuses an id that exists.
    fn create_run(&self, run: NewRun<'_>) -> Result<(), StoreError>;
    /// Appends one record atomically.
    fn append(&self, run_id: &str, key: RecordKey, record: &[u8]) -> Result<(), StoreError>;
    /// Appends one record and, when given, replaces the run's snapshot and its summary, as one
    /// write where the backend can (a transition's whole write).
    fn append_all(
        &self,
        run_id: &str,
        key: RecordKey,
        record: &[u8],
        snapshot: Option<&[u8]>,
        summary: Option<&RunSummary>,
    ) -> Result<(), StoreError> {
        self.append(run_id, key, record)?;
        if let Some(snapshot) = snapshot {
            self.put_snapshot(run_id, snapshot)?;
        }
        if let Some(summary) = summary {
            self.put_summary(summary)?;
        }
        Ok(())
    }
    /// Replaces the run's latest snapshot.
    fn put_snapshot(&self, run_id: &str, snapshot: &[u8]) -> Result<(), StoreError>;
    /// Replaces the run's summary.
    fn put_summary(&self, summary: &RunSummary) -> Result<(), StoreError>;
    /// Makes every write so far durable (fsync).
    fn sync(&self) -> Result<(), StoreError>;
    /// Moves what the store keeps in a log into its long-term place, so that a process that
    /// ends now leaves nothing to replay when the store opens again. A no-op for a backend
    /// without such a log.
    fn checkpoint(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// The latest snapshot.
    fn snapshot(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// The run's first state.
    fn base(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// The stored definition.
    fn definition(&self, run_id: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// A component by digest.
    fn plugin(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// The run's records from `from` on, in order.
    fn records(
        &self,
        run_id: &str,
        from: RecordKey,
    ) -> Result<Vec<(RecordKey, Vec<u8>)>, StoreError>;
    /// The key of the run's last record.
    fn last_record(&self, run_id: &str) -> Result<Option<RecordKey>, StoreError>;
    /// The summary of one run.
    fn summary(&self, run_id: &str) -> Result<Option<RunSummary>, StoreError>;
    /// Every run's summary, newest first.
    fn runs(&self) -> Result<Vec<RunSummary>, StoreError>;
    /// One page of the listing ([`RunsPage`]): it costs in proportion to the page, not to the
    /// runs stored (an index in creation order, read from the cursor on).
    fn runs_page(&self, page: &RunsPage<'_>) -> Result<Vec<RunSummary>, StoreError>;
    /// Deletes each run of `run_ids` whose stored status is ended (success, failed, cancelled,
    /// tripwire), all of it at once (its summary, listing entries, first state, snapshot and
    /// records: a crash leaves a run whole or gone, never half); returns the ids it deleted. A run that is not stored,
    /// not ended, or (on a shared store) still held by a live process is left as it is.
    fn delete_ended(&self, run_ids: &[&str]) -> Result<Vec<String>, StoreError>;
    /// Removes the blobs that no stored run names (each run's definition, and the components
    /// that definition names, which `plugins_of` reads from its bytes) and gives back the room
    /// of deleted runs where the backend keeps it itself (sled's values files). A run created
    /// meanwhile keeps its blobs. A definition `plugins_of` cannot read stops the collection
    /// with its error before anything is removed: what it names cannot be told.
    fn collect_garbage(&self, plugins_of: &PluginsOf) -> Result<Reclaimed, StoreError>;
    /// Takes `run_id` for this process: on a store shared by many processes, only the process
    /// holding a run writes it, and a claim fences out a holder presumed gone. A store only one
    /// process opens (sled) answers [`Claim::Ours`] always.
    fn claim(&self, _run_id: &str) -> Result<Claim, StoreError> {
        Ok(Claim::Ours)
    }
    /// Lets `run_id` go, for another process to claim; a no-op where nobody else could.
    fn release(&self, _run_id: &str) -> Result<(), StoreError> {
        Ok(())
    }
    /// What a store shared by many processes also offers; `None` for one only this process
    /// opens.
    fn shared(&self) -> Option<&dyn SharedStore> {
        None
    }
}

/// The answer to [`Store::claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This process holds the run (or no run has that id).
    Ours,
    /// A live process holds it: the worker id.
    Elsewhere(String),
}

/// What a shared store tells the processes on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// Records were appended to this run.
    Records(String),
    /// A request for this process is waiting ([`SharedStore::take_requests`]).
    Request,
    /// The request with this id has its answer.
    Answer(i64),
    /// A run was left for any process to drive.
    Work,
    /// The notification connection was made again: notices may have been missed meanwhile.
    Reconnected,
}

/// A request one process hands to the process driving a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Its id.
    pub id: i64,
    /// The run.
    pub run_id: String,
    /// What is asked, encoded by the driver.
    pub body: String,
}

/// How the processes on one shared store (PostgreSQL) work together: heartbeats, hand-overs of
/// requests to a run's process, notices of new records and of runs left to anyone.
pub trait SharedStore: Send + Sync {
    /// This process's id among the store's workers.
    fn worker_id(&self) -> &str;
    /// How long a process that stops beating keeps its runs.
    fn lease(&self) -> std::time::Duration;
    /// The store's notices from now on.
    fn notices(&self) -> tokio::sync::broadcast::Receiver<Notice>;
    /// Hands `body` to `worker`, which drives `run_id`; returns the request's id.
    fn send_request(&self, run_id: &str, worker: &str, body: &str) -> Result<i64, StoreError>;
    /// The requests handed to this process that it has not taken yet, taken now.
    fn take_requests(&self) -> Result<Vec<Request>, StoreError>;
    /// Answers request `id`.
    fn answer(&self, id: i64, answer: &str) -> Result<(), StoreError>;
    /// The answer to request `id` once given (the request is removed then).
    fn answer_of(&self, id: i64) -> Result<Option<String>, StoreError>;
    /// Withdraws request `id` unless its worker took it already; whether it was withdrawn.
    fn withdraw(&self, id: i64) -> Result<bool, StoreError>;
    /// Whether `worker`'s heartbeat is current.
    fn is_alive(&self, worker: &str) -> Result<bool, StoreError>;
    /// Until when `worker`'s last heartbeat keeps it alive (the server's time, in microseconds
    /// since 2000), `None` for a worker not on the store: a live worker moves it on every beat.
    fn alive_until(&self, worker: &str) -> Result<Option<i64>, StoreError>;
    /// Up to `limit` pending or running runs that no live process drives.
    fn claimable(&self, limit: usize) -> Result<Vec<String>, StoreError>;
    /// Lets every run of this process go and leaves the store's workers.
    fn close(&self) -> Result<(), StoreError>;
}
