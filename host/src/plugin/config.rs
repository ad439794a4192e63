//! Settings of the plugin host, one per process.
//!
//! ```
//! use std::time::Duration;
//! use weft::PoolConfig;
//! use weft::HostConfig;
//!
//! let host = HostConfig::default()
//!     .with_abort_grace(Duration::from_millis(500))
//!     .with_pool(PoolConfig::default().with_slots(16));
//! assert_eq!(host.pool.slots, 16);
//! ```

use std::path::PathBuf;
use std::time::Duration;

/// How the plugin host is set up. Start from [`HostConfig::default`] and change fields, or
/// chain the `with_*` methods; new fields come with defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostConfig {
    /// Where compiled plugins are cached (`<digest>-<engine fingerprint>.cwasm` plus a `.mac`
    /// that authenticates it under the cache key). `None`: compile in memory only.
    pub cache_dir: Option<PathBuf>,
    /// The file holding the secret key (32 random bytes, mode 0600, made when missing) that
    /// authenticates cached native code. `None`: `<cache_dir>.key`, next to the cache directory
    /// (for a home, `<home>/cache.key`). Keep it where no plugin is granted access.
    pub cache_key: Option<PathBuf>,
    /// The weft home the host serves. No plugin may be granted a directory that is the home,
    /// lies inside it, or contains it (nor one overlapping the plugin cache or its key): the
    /// guest could rewrite runs or cached native code. `None`: only the cache is protected.
    pub home: Option<PathBuf>,
    /// How often the epoch advances: the granularity of deadlines, and how often a busy guest
    /// yields to the tokio runtime (default 1 ms).
    pub epoch_tick: Duration,
    /// How long an aborted or overdue invocation may keep running before the host stops it
    /// (S77, default 2000 ms).
    pub abort_grace: Duration,
    /// The pooling instance allocator.
    pub pool: PoolConfig,
    /// Largest linear memory of a pooled instance, in MiB (default 1024). A plugin whose
    /// `limits.memory-mib` is larger runs with on-demand allocation.
    pub max_memory_mib: u64,
    /// Deadline of the `describe` call made when a plugin is loaded (default 10 s).
    pub describe_timeout: Duration,
    /// The largest compiled artifact read back from the cache, in MiB (default 1024); a larger
    /// entry, like one that is not a regular file, is ignored with a warning and the component
    /// compiled again.
    pub max_cache_entry_mib: u64,
    /// The memory the guests of this host may hold at once, in MiB (`--guest-memory-mib`).
    /// Every invocation reserves its `limits.memory-mib` from it before its instance is made
    /// and gives it back when it ends; one that does not fit waits (in turn, its cancel and
    /// deadline still applying), and one asking for more than the whole budget fails
    /// `memory-limit` at once. `None` (the default): half the memory of the machine (the
    /// smaller of `MemTotal` and a cgroup v2 `memory.max`), 8 GiB where neither can be read;
    /// [`PluginHost::guest_memory_budget_mib`](super::PluginHost::guest_memory_budget_mib)
    /// says what a host took. `Some(0)` is refused when the host is made.
    pub guest_memory_mib: Option<u64>,
    /// Told, before the host compiles a component of at least [`CompileNotice::MIN_BYTES`]
    /// that is not in the cache, what it compiles: a Python or JavaScript plugin takes seconds
    /// the first time, and a person waiting should know why (the `weft` command line prints it
    /// on stderr). `None` (the default): nobody is told.
    pub compile_notice: Option<CompileNotice>,
}

/// Whom [`HostConfig::compile_notice`] tells: a function given one sentence, such as
/// `compiling plugin examples/python/wordstats.wasm (38.2 MiB) to native code, once: later
/// runs load it from the cache`. Two notices are equal when they are the same function.
#[derive(Clone)]
pub struct CompileNotice(pub std::sync::Arc<dyn Fn(&str) + Send + Sync>);

impl CompileNotice {
    /// The smallest component the notice is given for: smaller ones (a Rust plugin is a few
    /// hundred KiB) compile in well under a second.
    pub const MIN_BYTES: usize = 1024 * 1024;
}

impl std::fmt::Debug for CompileNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CompileNotice(..)")
    }
}

impl PartialEq for CompileNotice {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for CompileNotice {}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            cache_dir: None,
            cache_key: None,
            home: None,
            epoch_tick: Duration::from_millis(1),
            abort_grace: Duration::from_millis(2000),
            pool: PoolConfig::default(),
            max_memory_mib: 1024,
            describe_timeout: Duration::from_secs(10),
            max_cache_entry_mib: 1024,
            guest_memory_mib: None,
            compile_notice: None,
        }
    }
}

impl HostConfig {
    /// Sets [`HostConfig::cache_dir`].
    pub fn with_cache_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.cache_dir = dir;
        self
    }

    /// Sets [`HostConfig::cache_key`].
    pub fn with_cache_key(mut self, file: Option<PathBuf>) -> Self {
        self.cache_key = file;
        self
    }

    /// Sets [`HostConfig::home`].
    pub fn with_home(mut self, home: Option<PathBuf>) -> Self {
        self.home = home;
        self
    }

    /// Sets [`HostConfig::epoch_tick`].
    pub fn with_epoch_tick(mut self, tick: Duration) -> Self {
        self.epoch_tick = tick;
        self
    }

    /// Sets [`HostConfig::abort_grace`].
    pub fn with_abort_grace(mut self, grace: Duration) -> Self {
        self.abort_grace = grace;
        self
    }

    /// Sets [`HostConfig::pool`].
    pub fn with_pool(mut self, pool: PoolConfig) -> Self {
        self.pool = pool;
        self
    }

    /// Sets [`HostConfig::max_memory_mib`].
    pub fn with_max_memory_mib(mut self, mib: u64) -> Self {
        self.max_memory_mib = mib;
        self
    }

    /// Sets [`HostConfig::max_cache_entry_mib`].
    pub fn with_max_cache_entry_mib(mut self, mib: u64) -> Self {
        self.max_cache_entry_mib = mib;
        self
    }

    /// Sets [`HostConfig::guest_memory_mib`].
    pub fn with_guest_memory_mib(mut self, mib: Option<u64>) -> Self {
        self.guest_memory_mib = mib;
        self
    }

    /// Sets [`HostConfig::compile_notice`].
    pub fn with_compile_notice(mut self, notice: Option<CompileNotice>) -> Self {
        self.compile_notice = notice;
        self
    }

    /// Sets [`HostConfig::describe_timeout`].
    pub fn with_describe_timeout(mut self, timeout: Duration) -> Self {
        self.describe_timeout = timeout;
        self
    }
}

/// Sizing of the pooling instance allocator. Invocations beyond the pool's capacity run with
/// on-demand allocation (slower to instantiate, otherwise the same). Start from
/// [`PoolConfig::default`] and change fields, or chain the `with_*` methods.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolConfig {
    /// Use the pooling allocator at all (default true). False: every instance is allocated on
    /// demand.
    pub enabled: bool,
    /// How many component instances may be live at once (default 1000).
    pub slots: u32,
    /// Core instances in the pool per slot (default 8; a Rust component uses 3).
    pub core_instances_per_slot: u32,
    /// Linear memories in the pool per slot (default 1, what a Rust component uses). Each one
    /// reserves 4 GiB + 32 MiB of address space (not memory): 1000 slots reserve about 4 TiB, so
    /// a process holding many hosts at once (tests) should use fewer slots.
    pub memories_per_slot: u32,
    /// Tables in the pool per slot (default 4; a Rust component uses 2).
    pub tables_per_slot: u32,
    /// Elements per table (default 20 000).
    pub table_elements: u32,
    /// Bytes of each freed linear memory, table and async stack reset with `memset` and kept
    /// resident instead of returned to the kernel (default 64 KiB): fewer page faults and TLB
    /// shootdowns when slots are reused.
    pub keep_resident: usize,
    /// Freed slots whose memory is decommitted in one batch (default 1: at once). A freed
    /// guest's memory stays resident until its batch is decommitted, outside the guest memory
    /// budget ([`HostConfig::guest_memory_mib`]): with a batch of 32, 24 guests of 512 MiB run
    /// four at a time under a 2 GiB budget still left the process at 11.9 GB, and at once it
    /// peaks at 2.1 GB. Small guests measured no faster batched (the `floor`, `seq10` and
    /// `foreach1000` benches, alternating rounds), so a larger batch buys nothing the budget is
    /// worth; with one, up to that many freed guests' memory may be resident beyond it.
    pub decommit_batch: usize,
    /// Find the pages a freed linear memory or table dirtied with Linux's `PAGEMAP_SCAN`
    /// (kernel 6.7 and later; ignored where missing) and reset only those, up to
    /// [`PoolConfig::keep_resident`] bytes, leaving them resident (default true). Not used
    /// where the process's pages may be swapped out (a swap area is active and no cgroup v2
    /// `memory.swap.max` of the process is 0): wasmtime 48's scan misses dirty pages that are
    /// swapped out, which would leave one instance's data to the next.
    pub pagemap_scan: bool,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            slots: 1000,
            core_instances_per_slot: 8,
            memories_per_slot: 1,
            tables_per_slot: 4,
            table_elements: 20_000,
            keep_resident: 64 << 10,
            decommit_batch: 1,
            pagemap_scan: true,
        }
    }
}

impl PoolConfig {
    /// Sets [`PoolConfig::enabled`].
    pub fn with_enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// Sets [`PoolConfig::slots`].
    pub fn with_slots(mut self, slots: u32) -> Self {
        self.slots = slots;
        self
    }

    /// Sets [`PoolConfig::core_instances_per_slot`].
    pub fn with_core_instances_per_slot(mut self, instances: u32) -> Self {
        self.core_instances_per_slot = instances;
        self
    }

    /// Sets [`PoolConfig::memories_per_slot`].
    pub fn with_memories_per_slot(mut self, memories: u32) -> Self {
        self.memories_per_slot = memories;
        self
    }

    /// Sets [`PoolConfig::tables_per_slot`].
    pub fn with_tables_per_slot(mut self, tables: u32) -> Self {
        self.tables_per_slot = tables;
        self
    }

    /// Sets [`PoolConfig::table_elements`].
    pub fn with_table_elements(mut self, elements: u32) -> Self {
        self.table_elements = elements;
        self
    }

    /// Sets [`PoolConfig::keep_resident`].
    pub fn with_keep_resident(mut self, bytes: usize) -> Self {
        self.keep_resident = bytes;
        self
    }

    /// Sets [`PoolConfig::pagemap_scan`].
    pub fn with_pagemap_scan(mut self, enabled: bool) -> Self {
        self.pagemap_scan = enabled;
        self
    }

    /// Sets [`PoolConfig::decommit_batch`].
    pub fn with_decommit_batch(mut self, slots: usize) -> Self {
        self.decommit_batch = slots;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::PoolConfig;

    #[test]
    fn a_freed_guests_memory_is_returned_at_once_by_default_so_the_memory_budget_holds() {
        // Batched, freed memories stay resident outside the budget (see the field's doc).
        assert_eq!(PoolConfig::default().decommit_batch, 1);
    }
}
