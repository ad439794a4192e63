//! Settings of the plugin host, one per process.

use std::path::PathBuf;
use std::time::Duration;

/// How the plugin host is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
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
}

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
        }
    }
}

/// Sizing of the pooling instance allocator. Invocations beyond the pool's capacity run with
/// on-demand allocation (slower to instantiate, otherwise the same).
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Freed slots whose memory is decommitted in one batch (default 32).
    pub decommit_batch: usize,
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
            decommit_batch: 32,
        }
    }
}
