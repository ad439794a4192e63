//! Group commit: every transition waits for an fsync that covers it, and transitions that
//! arrive while one fsync runs share the next. Two fsyncs may run at once, so the runs that one
//! releases compute while the next covers those that came meanwhile, instead of all runs
//! waiting on the disk together and then all computing while it idles.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use crate::store::{Store, StoreError};

/// The most fsyncs in flight at once.
const IN_FLIGHT: usize = 2;

/// Shares fsyncs among the runs of one store.
pub struct Syncer {
    store: Arc<dyn Store>,
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
}

/// One fsync in flight: given back when it ends or its caller goes away.
struct Slot<'a> {
    syncer: &'a Syncer,
    covers: u64,
    ended: bool,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut started = self.syncer.started();
        started.in_flight -= 1;
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
    /// A syncer for `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Syncer {
            store,
            requested: AtomicU64::new(0),
            started: Mutex::default(),
            done: watch::Sender::new(0),
        }
    }

    fn started(&self) -> MutexGuard<'_, Started> {
        self.started.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Returns once every write made before the call is durable.
    pub async fn sync(&self) -> Result<(), StoreError> {
        let mine = self.requested.fetch_add(1, Ordering::SeqCst) + 1;
        let mut done = self.done.subscribe();
        loop {
            if *done.borrow_and_update() >= mine {
                return Ok(());
            }
            let slot = {
                let mut started = self.started();
                (started.covers < mine && started.in_flight < IN_FLIGHT).then(|| {
                    started.in_flight += 1;
                    started.covers = self.requested.load(Ordering::SeqCst);
                    Slot {
                        syncer: self,
                        covers: started.covers,
                        ended: false,
                    }
                })
            };
            let Some(mut slot) = slot else {
                // A started fsync covers this call, or two run: wait for one to end.
                let _ = done.changed().await;
                continue;
            };
            let store = self.store.clone();
            tokio::task::spawn_blocking(move || store.sync())
                .await
                .map_err(|e| StoreError::Backend(e.to_string()))??;
            slot.ended = true;
        }
    }
}
