//! The host-wide guest memory budget ([`HostConfig::guest_memory_mib`]): every invocation
//! reserves its `limits.memory-mib` before its instance is made and gives it back when it ends,
//! so the guests of one process together never hold more than the budget. An invocation that
//! does not fit waits, first come first served, without holding a thread; one that could never
//! fit is refused at once.
//!
//! [`HostConfig::guest_memory_mib`]: super::HostConfig::guest_memory_mib

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The budget when neither the settings nor the machine say: 8 GiB.
pub(crate) const FALLBACK_GUEST_MEMORY_MIB: u64 = 8 << 10;

/// The smallest budget taken from the machine: one invocation at the default `memory-mib`.
const MIN_MACHINE_MIB: u64 = super::sandbox::DEFAULT_MEMORY_MIB;

/// The memory the guests of one host may reserve, in MiB, and who waits for it.
pub(crate) struct MemoryBudget {
    total_mib: u64,
    permits: Arc<Semaphore>,
    /// The MiB reserved by invocations that hold their reservation (not what the first waiter
    /// has been set aside so far).
    held: Arc<AtomicU64>,
    waiting: AtomicU64,
}

/// Memory an invocation holds until it is dropped (when the invocation ends, whatever ends it).
pub(crate) struct Reservation {
    _permit: OwnedSemaphorePermit,
    mib: u64,
    held: Arc<AtomicU64>,
}

impl Reservation {
    fn new(permit: OwnedSemaphorePermit, mib: u64, held: &Arc<AtomicU64>) -> Self {
        held.fetch_add(mib, Ordering::Relaxed);
        Self {
            _permit: permit,
            mib,
            held: held.clone(),
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.held.fetch_sub(self.mib, Ordering::Relaxed);
    }
}

/// An invocation whose own `memory-mib` is more than the whole budget: it could never run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OverBudget {
    /// What the invocation asks for, in MiB.
    pub(crate) wanted_mib: u64,
    /// The whole budget, in MiB.
    pub(crate) budget_mib: u64,
}

impl MemoryBudget {
    /// A budget of `total_mib` (at most what a semaphore counts).
    pub(crate) fn new(total_mib: u64) -> Self {
        let total_mib = total_mib
            .min(u64::from(u32::MAX))
            .min(Semaphore::MAX_PERMITS as u64);
        Self {
            total_mib,
            permits: Arc::new(Semaphore::new(total_mib as usize)),
            held: Arc::new(AtomicU64::new(0)),
            waiting: AtomicU64::new(0),
        }
    }

    /// The whole budget, in MiB.
    pub(crate) fn total_mib(&self) -> u64 {
        self.total_mib
    }

    /// The MiB the invocations under way have reserved.
    pub(crate) fn in_use_mib(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// How many invocations wait for memory.
    pub(crate) fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Reserves `mib`, waiting (in turn with the others that wait) until that much is free.
    /// Dropping the future gives up the wait and reserves nothing.
    pub(crate) async fn reserve(&self, mib: u64) -> Result<Reservation, OverBudget> {
        let over = OverBudget {
            wanted_mib: mib,
            budget_mib: self.total_mib,
        };
        let n = u32::try_from(mib).map_err(|_| over)?;
        if mib > self.total_mib {
            return Err(over);
        }
        let permits = self.permits.clone();
        if let Ok(permit) = permits.clone().try_acquire_many_owned(n) {
            return Ok(Reservation::new(permit, mib, &self.held));
        }
        let _waits = Waiting::new(&self.waiting);
        match permits.acquire_many_owned(n).await {
            Ok(permit) => Ok(Reservation::new(permit, mib, &self.held)),
            // Not reached: the semaphore is never closed.
            Err(_) => Err(over),
        }
    }
}

/// Counts one waiting invocation while it lives.
struct Waiting<'a>(&'a AtomicU64);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicU64) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The budget the machine suggests: half of the memory this process may use (the smaller of
/// `MemTotal` in `/proc/meminfo` and a cgroup v2 `memory.max`), or
/// [`FALLBACK_GUEST_MEMORY_MIB`] where neither can be read.
pub(crate) fn machine_default_mib() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| meminfo_total_mib(&text));
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .map(|bytes| bytes >> 20);
    let usable = match (total, cgroup) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    match usable {
        Some(mib) => (mib / 2).max(MIN_MACHINE_MIB),
        None => FALLBACK_GUEST_MEMORY_MIB,
    }
}

/// `MemTotal` of a `/proc/meminfo` text, in MiB.
fn meminfo_total_mib(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib >> 10)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn meminfo_gives_its_total_in_mib() {
        let text = "MemTotal:       24683520 kB\nMemFree:        23155200 kB\n";
        assert_eq!(meminfo_total_mib(text), Some(24105));
        assert_eq!(meminfo_total_mib("nothing"), None);
        assert!(machine_default_mib() >= MIN_MACHINE_MIB);
    }

    #[test]
    fn a_host_with_no_guest_memory_is_refused() {
        let config = crate::plugin::HostConfig::default().with_guest_memory_mib(Some(0));
        let err = crate::plugin::PluginHost::new(config).expect_err("refused");
        assert!(
            err.to_string().contains("guest memory budget of 0 MiB"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn reservations_wait_in_turn_and_come_back_when_dropped() {
        let budget = Arc::new(MemoryBudget::new(100));
        let a = budget.reserve(60).await.expect("fits");
        assert_eq!(budget.in_use_mib(), 60);
        assert_eq!(
            budget.reserve(101).await.err(),
            Some(OverBudget {
                wanted_mib: 101,
                budget_mib: 100
            })
        );
        let b = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.reserve(50).await.map(|_| ()) })
        };
        while budget.waiting() == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(budget.in_use_mib(), 60, "the second waits");
        drop(a);
        b.await
            .expect("joined")
            .expect("reserved once the first ended");
        assert_eq!(budget.in_use_mib(), 0);
        assert_eq!(budget.waiting(), 0);
    }
}
