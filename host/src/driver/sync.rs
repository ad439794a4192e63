//! Group commit: every transition waits for an fsync that covers it, and transitions that
//! arrive while one fsync runs share the next. One fsync runs at a time. The runs waiting on it
//! do not leave the CPUs idle: a run's actor starts the steps its transition issued before the
//! fsync when they can change nothing outside weft, so they run while the disk syncs, and the
//! next fsync, started when this one ends, covers every transition made meanwhile. (Two fsyncs
//! at once, which helped before steps started early, then made each cover about half as many
//! transitions: 7,000 instead of 3,800 fsyncs for 8,000 `seq10` runs at 64 in flight, and
//! more CPU per step.)
//!
//! When other requests that no started fsync covers are waiting, the caller that takes a slot
//! does not start its fsync at once: it first lets every task that is ready on its worker run
//! (one [`tokio::task::yield_now`], which tokio resumes only once the worker has nothing else
//! to do), so the runs that the last fsync released append their next transitions before this
//! one starts, and one fsync covers them all instead of one or two each. An fsync costs far
//! more CPU than appending a transition (the block layer, the interrupt, the wake-ups), so with
//! many runs in flight fewer and fuller fsyncs leave more CPU to the runs. A request alone
//! starts its fsync at once: a run alone waits for nothing more than the disk.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use prometheus_client::metrics::counter::Counter;
use tokio::sync::watch;

use crate::store::{Store, StoreError};

/// The most fsyncs in flight at once (see the module docs).
const IN_FLIGHT: usize = 1;

/// What makes every write made so far durable: the store's `sync`.
type SyncFn = Arc<dyn Fn() -> Result<(), StoreError> + Send + Sync>;

/// Shares fsyncs among the runs of one store.
pub(super) struct Syncer {
    fsync: SyncFn,
    /// Sync requests so far; a request's number orders it after the writes made before it.
    requested: AtomicU64,
    started: Mutex<Started>,
    /// The highest request number every write before which is durable.
    done: watch::Sender<u64>,
}

/// The fsyncs under way.
#[derive(Default)]
struct Started {
    /// The highest request number a started fsync covers.
    covers: u64,
    in_flight: usize,
    /// A slot's holder is letting ready tasks run before it starts its fsync, which will cover
    /// every request made meanwhile: callers wait for it instead of taking the other slot.
    gathering: bool,
}

/// One fsync in flight: given back when it ends or its caller goes away.
struct Slot<'a> {
    syncer: &'a Syncer,
    covers: u64,
    gathering: bool,
    ended: bool,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut started = self.syncer.started();
        started.in_flight -= 1;
        if self.gathering {
            started.gathering = false;
        }
        if self.ended {
            drop(started);
            self.syncer.done.send_modify(|d| *d = (*d).max(self.covers));
        } else {
            // Failed or abandoned: what it covers is not durable, so the next caller syncs.
            started.covers = *self.syncer.done.borrow();
            drop(started);
            self.syncer.done.send_modify(|_| {});
        }
    }
}

impl Syncer {
    /// A syncer for `store`, counting its syncs in `syncs`.
    pub(super) fn new(store: Arc<dyn Store>, syncs: Counter) -> Self {
        Self::over(Arc::new(move || {
            store.sync()?;
            syncs.inc();
            Ok(())
        }))
    }

    /// A syncer that makes writes durable with `fsync`.
    fn over(fsync: SyncFn) -> Self {
        Syncer {
            fsync,
            requested: AtomicU64::new(0),
            started: Mutex::default(),
            done: watch::Sender::new(0),
        }
    }

    fn started(&self) -> MutexGuard<'_, Started> {
        self.started.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A ticket that orders a sync after every write made so far: [`Syncer::until`] with it
    /// returns once they are durable.
    pub(super) fn ticket(&self) -> u64 {
        self.requested.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Returns once every write made before the ticket `mine` was taken is durable.
    pub(super) async fn until(&self, mine: u64) -> Result<(), StoreError> {
        let mut done = self.done.subscribe();
        loop {
            if *done.borrow_and_update() >= mine {
                return Ok(());
            }
            let slot = {
                let mut started = self.started();
                (started.covers < mine && !started.gathering && started.in_flight < IN_FLIGHT).then(
                    || {
                        // Other requests that no started fsync covers: runs are computing
                        // beside this one, so gather; a request alone starts its fsync now.
                        let gather = self.requested.load(Ordering::SeqCst) > started.covers + 1;
                        started.in_flight += 1;
                        started.gathering = gather;
                        started.covers = self.requested.load(Ordering::SeqCst);
                        Slot {
                            syncer: self,
                            covers: started.covers,
                            gathering: gather,
                            ended: false,
                        }
                    },
                )
            };
            let Some(mut slot) = slot else {
                // A started or gathering fsync covers this call, or two run: wait for one to
                // end.
                let _ = done.changed().await;
                continue;
            };
            if slot.gathering {
                tokio::task::yield_now().await;
                let mut started = self.started();
                started.gathering = false;
                started.covers = self.requested.load(Ordering::SeqCst);
                slot.covers = started.covers;
                slot.gathering = false;
            }
            let fsync = self.fsync.clone();
            tokio::task::spawn_blocking(move || fsync())
                .await
                .map_err(|e| StoreError::Backend(e.to_string()))??;
            slot.ended = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::store::SledStore;

    const TASKS: u64 = 16;
    const ROUNDS: u64 = 20;

    /// S100: a transition's effects wait for an fsync that covers it. Tasks each "write" (take
    /// the next number) and sync, many at once and with fsyncs gathered; every sync must return
    /// only after a real fsync that began once its write was made.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn s100_a_sync_returns_only_after_an_fsync_begun_after_its_write() {
        let home = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(SledStore::open(home.path(), 8).expect("open"));
        let written = Arc::new(AtomicU64::new(0));
        let durable = Arc::new(AtomicU64::new(0));
        let fsyncs = Arc::new(AtomicUsize::new(0));
        let syncer = Arc::new(Syncer::over(Arc::new({
            let (written, durable, fsyncs) = (written.clone(), durable.clone(), fsyncs.clone());
            move || {
                let covers = written.load(Ordering::SeqCst);
                store.sync()?;
                durable.fetch_max(covers, Ordering::SeqCst);
                fsyncs.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })));
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let (syncer, written, durable) = (syncer.clone(), written.clone(), durable.clone());
                tokio::spawn(async move {
                    for _ in 0..ROUNDS {
                        let mine = written.fetch_add(1, Ordering::SeqCst) + 1;
                        syncer.until(syncer.ticket()).await.expect("sync");
                        let covered = durable.load(Ordering::SeqCst);
                        assert!(
                            covered >= mine,
                            "write {mine} returned with only {covered} durable"
                        );
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
        assert_eq!(durable.load(Ordering::SeqCst), TASKS * ROUNDS);
        let fsyncs = fsyncs.load(Ordering::SeqCst) as u64;
        assert!(
            fsyncs < TASKS * ROUNDS,
            "{fsyncs} fsyncs for {} concurrent syncs: none was shared",
            TASKS * ROUNDS
        );
    }
}
