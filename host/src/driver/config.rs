//! How a runtime is set up: every limit, size and wait the driver, the command line and the
//! HTTP API use, each with its default.
//!
//! ```
//! use std::time::Duration;
//! use weft::{ManualClock, RuntimeConfig};
//!
//! let config = RuntimeConfig::default()
//!     .with_cache_mib(16)
//!     .with_clock(ManualClock::new(0))
//!     .with_held_home_wait(Duration::from_secs(2));
//! assert_eq!(config.cache_mib, 16);
//! ```

use std::sync::Arc;
use std::time::Duration;

use super::{Clock, SystemClock};
use crate::engine::expr::{DEFAULT_MEMORY_BUDGET, DEFAULT_STEP_BUDGET};
use crate::limits::{DEFAULT_MAX_RUN_BYTES, DEFAULT_MAX_VALUE_BYTES, SizeLimit};
use crate::models::ModelConfig;
use crate::plugin::HostConfig;

/// How the runtime is set up. Every limit is configurable: start from
/// [`RuntimeConfig::default`] and change fields, or chain the `with_*` methods; new fields
/// come with defaults, so neither way breaks when weft adds one.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RuntimeConfig {
    /// The plugin host's settings.
    pub host: HostConfig,
    /// The bounds of every model call: the default deadline, the longest line of a stream,
    /// the most streamed pieces a call may emit ([`ModelConfig`]).
    pub models: ModelConfig,
    /// Fsync every transition before its effects (default true). Off, a crash of the machine
    /// (not just the process) may lose the last transitions.
    pub sync_writes: bool,
    /// The embedded store's page cache, in MiB (default 64).
    pub cache_mib: u64,
    /// Where the driver reads the time and waits for sleeps and retry waits (default: the
    /// system clock).
    pub clock: Arc<dyn Clock>,
    /// How many events a run's live feed keeps for watchers that lag behind (default 4096, at
    /// least 1). A watcher further behind catches up from the store, so this trades memory
    /// per followed run against store reads; it never loses an event. The feed is made when a
    /// run's first watcher subscribes: a run nobody watches keeps no buffer.
    pub watch_buffer: usize,
    /// Record bytes written before a snapshot is due, at least (default 16 KiB). Beyond it, a
    /// snapshot is written once the records since the last one outweigh it
    /// [`RuntimeConfig::snapshot_ratio`] times, so loading a run folds at most this much, or
    /// that many times its snapshot's size, of records. A run that suspends or ends takes no
    /// snapshot for that: it is read rarely, and a snapshot would cost every run.
    pub snapshot_min_bytes: usize,
    /// How many times its last snapshot's size the records written since must weigh before a
    /// long run's next snapshot (default 2, at least 1). A run's state is bulkier to encode
    /// than its records, byte for byte: at 1 a long `foreach` spent more encoding snapshots
    /// than records, at 2 about as much on each, and a load (rare: a `show`, a recovery) folds
    /// up to twice its snapshot's size of records.
    pub snapshot_ratio: usize,
    /// How many times a resume or cancel is offered to a run's driver, a new one each time
    /// when the last stopped meanwhile, before it fails (default 3).
    pub ask_attempts: u32,
    /// How long a `weft` command keeps trying to open a home that another process holds
    /// without serving it yet (starting up, or a short command ending), default 10 s.
    pub held_home_wait: Duration,
    /// The pause between two such tries (default 20 ms).
    pub held_home_pause: Duration,
    /// The most bytes of an event's data a progress line of `weft run` and `weft resume`
    /// shows (default 200); longer data is cut at a character boundary and ends with `…`.
    pub progress_data_bytes: usize,
    /// The largest run input accepted, in bytes of compact JSON (default 2 MiB); also bounds
    /// the input a re-run gives its first step.
    pub max_input_bytes: u64,
    /// The largest value a run makes, in bytes of compact JSON (default 2 MiB): what an
    /// invocation returns (an output, suspend payload, bail value, failure, or each state
    /// patch; over it the step fails with `output-limit`, never retried) and what an expression
    /// yields (a `map`'s value, a step's input; over it the entry fails with
    /// `expression-error`). A run keeps the limit it was started with, whichever process
    /// resumes or recovers it.
    pub max_output_bytes: u64,
    /// The largest a workflow file's state may grow by an invocation's patches, in bytes
    /// (default 2 MiB). Over it the step fails with `output-limit` and its patches are dropped.
    pub max_state_bytes: u64,
    /// The largest resume data accepted, in bytes (default 2 MiB).
    pub max_resume_bytes: u64,
    /// The most bytes of records (orchestration events, the events they emit, what steps
    /// write) one run may store in all (default 512 MiB). A run past it is stopped: what is
    /// under way is cancelled and the run ends `failed` with `run-limit`, so a loop or retry
    /// policy gone wrong cannot fill the disk.
    pub max_run_bytes: u64,
    /// The most steps one jq expression may take before it fails with `expression-error`
    /// (default 500,000, at least 1). [`Runtime::open`](super::Runtime::open) applies it: the
    /// budget is process-wide, so when one process opens several runtimes, the last one opened
    /// sets it for all of them.
    pub expr_steps: u64,
    /// The most memory one jq expression may hold while it is evaluated, in bytes, before it
    /// fails with `expression-error` (default 256 MiB, at least 1 MiB); process-wide as
    /// [`RuntimeConfig::expr_steps`] is. Measured where [`crate::MeteredAlloc`] is the global
    /// allocator (the `weft` binary installs it); without it, only what writing a value out
    /// (`tojson`, `tostring`, formats, interpolation) and repeating a string would build is
    /// held to it.
    pub expr_memory_bytes: u64,
    /// For crash tests: the process aborts (as abruptly as a SIGKILL: no destructor, no
    /// flush) right after its `n`-th commit of transitions is durable, before their events are
    /// published or their commands carried out (default `None`). A test that runs a workflow
    /// with every `n` in turn and recovers it afterwards kills the host at every checkpoint.
    pub crash_after_commits: Option<u64>,
    /// Above how many runs with a step invocation in flight a run's invocations all run on
    /// its own task instead of a task each (default `None`: the tokio runtime's number of
    /// worker threads). The other runs then keep every thread busy, and a task per
    /// invocation would only add hand-offs; below it a run's invocations spread over the
    /// threads. A run's only invocation runs on its own task whatever this says.
    pub own_task_above: Option<usize>,
    /// How long a run's transitions that nothing waits on may stay unsynced, while nobody
    /// watches the run, before a sync in the background covers them (default 5 ms;
    /// `Duration::ZERO` syncs each at once, as a watched run does). Their events, and a
    /// change of the run's status that nobody is answered at (a `resume_and_wait`'s resume),
    /// are published once it does. Such transitions are those
    /// of steps that can change nothing outside weft, which start before their transitions
    /// sync (S100): a run of fast steps stores them all and syncs once, when something waits
    /// on them (its end or suspension, an effect outside weft, an answer, a `show`) or a
    /// watcher subscribes, instead of keeping a sync under way the whole time. Should the
    /// machine crash meanwhile, the run is recovered from its last durable transition and
    /// runs those steps again, as it would have with the sync still under way. A store shared
    /// with other processes syncs at once: they follow the run through it.
    pub background_sync_after: Duration,
    /// How many graphs of runs loaded from the store (a `wait` or `show` after a run's end, a
    /// resume or recovery after a restart) are kept parsed, one per definition (default 64;
    /// 0 keeps none). Every run of a workflow loaded here then shares one graph, whose schemas
    /// compile once, instead of parsing its definition and compiling them again at each load.
    pub graph_cache: usize,
    /// How long an ended run is kept before the runtime deletes it in the background
    /// (`weft serve --retention`; default `None`: kept until pruned). A workflow's own
    /// `retention:` applies to its runs instead. Pending, running and suspended runs are never
    /// deleted.
    pub retention: Option<Duration>,
    /// Where runs are stored: `None` (the default) for the embedded store in the home
    /// directory, which one process holds at a time; a PostgreSQL URL
    /// (`postgres://USER@HOST/DB`, or `host=/run/postgresql dbname=DB`, with weft's own
    /// `schema=` and `lease_ms=` parameters: docs/POSTGRES.md) for a database that any number
    /// of processes share. The home then holds only the compiled-plugin cache.
    pub store: Option<StoreUrl>,
}

/// A store URL, which may hold a password: shown without it.
#[derive(Clone, PartialEq, Eq)]
pub struct StoreUrl(pub String);

impl StoreUrl {
    /// The URL as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<String> for StoreUrl {
    fn from(url: String) -> Self {
        StoreUrl(url)
    }
}

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redacted(&self.0))
    }
}

/// `url` with any password replaced by `***`: `user:secret@host` and `password=secret`.
pub(crate) fn redacted(url: &str) -> String {
    let mut url = url.to_owned();
    if let Some((scheme, rest)) = url.split_once("://") {
        let auth_end = rest.find(['/', '?']).unwrap_or(rest.len());
        if let Some((userinfo, host)) = rest[..auth_end].rsplit_once('@')
            && let Some((user, _)) = userinfo.split_once(':')
        {
            url = format!("{scheme}://{user}:***@{host}{}", &rest[auth_end..]);
        }
    }
    let mut out = String::with_capacity(url.len());
    let mut rest = url.as_str();
    while let Some(i) = rest.find("password=") {
        let value = i + "password=".len();
        out.push_str(&rest[..value]);
        out.push_str("***");
        let end = rest[value..]
            .find(['&', ' '])
            .map_or(rest.len(), |j| value + j);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            host: HostConfig::default(),
            models: ModelConfig::default(),
            sync_writes: true,
            cache_mib: 64,
            clock: Arc::new(SystemClock),
            watch_buffer: 4096,
            snapshot_min_bytes: 16 << 10,
            snapshot_ratio: 2,
            ask_attempts: 3,
            held_home_wait: Duration::from_secs(10),
            held_home_pause: Duration::from_millis(20),
            progress_data_bytes: 200,
            max_input_bytes: DEFAULT_MAX_VALUE_BYTES,
            max_output_bytes: DEFAULT_MAX_VALUE_BYTES,
            max_state_bytes: DEFAULT_MAX_VALUE_BYTES,
            max_resume_bytes: DEFAULT_MAX_VALUE_BYTES,
            max_run_bytes: DEFAULT_MAX_RUN_BYTES,
            expr_steps: DEFAULT_STEP_BUDGET,
            expr_memory_bytes: DEFAULT_MEMORY_BUDGET,
            crash_after_commits: None,
            own_task_above: None,
            background_sync_after: Duration::from_millis(5),
            graph_cache: 64,
            retention: None,
            store: None,
        }
    }
}

impl RuntimeConfig {
    /// Sets [`RuntimeConfig::store`].
    pub fn with_store(mut self, url: impl Into<String>) -> Self {
        self.store = Some(StoreUrl(url.into()));
        self
    }

    /// Sets [`RuntimeConfig::retention`].
    pub fn with_retention(mut self, retention: Duration) -> Self {
        self.retention = Some(retention);
        self
    }

    /// Sets [`RuntimeConfig::host`].
    pub fn with_host(mut self, host: HostConfig) -> Self {
        self.host = host;
        self
    }

    /// Sets [`RuntimeConfig::models`].
    pub fn with_models(mut self, models: ModelConfig) -> Self {
        self.models = models;
        self
    }

    /// Sets [`RuntimeConfig::own_task_above`].
    pub fn with_own_task_above(mut self, runs: usize) -> Self {
        self.own_task_above = Some(runs);
        self
    }

    /// Sets [`RuntimeConfig::background_sync_after`].
    pub fn with_background_sync_after(mut self, after: Duration) -> Self {
        self.background_sync_after = after;
        self
    }

    /// Sets [`RuntimeConfig::sync_writes`].
    pub fn with_sync_writes(mut self, sync_writes: bool) -> Self {
        self.sync_writes = sync_writes;
        self
    }

    /// Sets [`RuntimeConfig::cache_mib`].
    pub fn with_cache_mib(mut self, cache_mib: u64) -> Self {
        self.cache_mib = cache_mib;
        self
    }

    /// Sets [`RuntimeConfig::clock`].
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Sets [`RuntimeConfig::watch_buffer`].
    pub fn with_watch_buffer(mut self, events: usize) -> Self {
        self.watch_buffer = events;
        self
    }

    /// Sets [`RuntimeConfig::snapshot_min_bytes`].
    pub fn with_snapshot_min_bytes(mut self, bytes: usize) -> Self {
        self.snapshot_min_bytes = bytes;
        self
    }

    /// Sets [`RuntimeConfig::snapshot_ratio`] (at least 1).
    pub fn with_snapshot_ratio(mut self, ratio: usize) -> Self {
        self.snapshot_ratio = ratio.max(1);
        self
    }

    /// Sets [`RuntimeConfig::ask_attempts`].
    pub fn with_ask_attempts(mut self, attempts: u32) -> Self {
        self.ask_attempts = attempts;
        self
    }

    /// Sets [`RuntimeConfig::held_home_wait`].
    pub fn with_held_home_wait(mut self, wait: Duration) -> Self {
        self.held_home_wait = wait;
        self
    }

    /// Sets [`RuntimeConfig::held_home_pause`].
    pub fn with_held_home_pause(mut self, pause: Duration) -> Self {
        self.held_home_pause = pause;
        self
    }

    /// Sets [`RuntimeConfig::progress_data_bytes`].
    pub fn with_progress_data_bytes(mut self, bytes: usize) -> Self {
        self.progress_data_bytes = bytes;
        self
    }
}

impl RuntimeConfig {
    /// Sets [`RuntimeConfig::max_input_bytes`].
    pub fn with_max_input_bytes(mut self, bytes: u64) -> Self {
        self.max_input_bytes = bytes;
        self
    }

    /// Sets [`RuntimeConfig::max_run_bytes`].
    pub fn with_max_run_bytes(mut self, bytes: u64) -> Self {
        self.max_run_bytes = bytes;
        self
    }

    /// Sets [`RuntimeConfig::max_output_bytes`].
    pub fn with_max_output_bytes(mut self, bytes: u64) -> Self {
        self.max_output_bytes = bytes;
        self
    }

    /// Sets [`RuntimeConfig::max_state_bytes`].
    pub fn with_max_state_bytes(mut self, bytes: u64) -> Self {
        self.max_state_bytes = bytes;
        self
    }

    /// Sets [`RuntimeConfig::max_resume_bytes`].
    pub fn with_max_resume_bytes(mut self, bytes: u64) -> Self {
        self.max_resume_bytes = bytes;
        self
    }

    /// Sets [`RuntimeConfig::expr_steps`].
    pub fn with_expr_steps(mut self, steps: u64) -> Self {
        self.expr_steps = steps;
        self
    }

    /// Sets [`RuntimeConfig::expr_memory_bytes`].
    pub fn with_expr_memory_bytes(mut self, bytes: u64) -> Self {
        self.expr_memory_bytes = bytes;
        self
    }

    /// The limit on run inputs.
    pub(crate) fn input_limit(&self) -> SizeLimit {
        SizeLimit {
            bytes: self.max_input_bytes,
            setting: "RuntimeConfig::max_input_bytes / --max-input-mib",
        }
    }

    /// The limit on a workflow file's state.
    pub(crate) fn state_limit(&self) -> SizeLimit {
        SizeLimit {
            bytes: self.max_state_bytes,
            setting: "RuntimeConfig::max_state_bytes / --max-state-mib",
        }
    }

    /// The limit on resume data.
    pub(crate) fn resume_limit(&self) -> SizeLimit {
        SizeLimit {
            bytes: self.max_resume_bytes,
            setting: "RuntimeConfig::max_resume_bytes / --max-resume-mib",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn a_store_url_is_shown_without_its_password() {
        assert_eq!(
            redacted("postgres://weft:s3cret@db:5432/weft?schema=a"),
            "postgres://weft:***@db:5432/weft?schema=a"
        );
        assert_eq!(
            redacted("postgres://db/weft?password=s3cret&schema=a"),
            "postgres://db/weft?password=***&schema=a"
        );
        assert_eq!(
            redacted("host=/run/postgresql password=s3cret dbname=weft"),
            "host=/run/postgresql password=*** dbname=weft"
        );
        assert_eq!(
            redacted("postgres://weft@db/weft"),
            "postgres://weft@db/weft"
        );
    }
}
