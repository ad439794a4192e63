//! Group commit: every transition waits for an fsync that covers it, and transitions that
//! arrive while one fsync runs share the next.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::store::{Store, StoreError};

/// Shares fsyncs among the runs of one store.
pub struct Syncer {
    store: Arc<dyn Store>,
    requested: AtomicU64,
    done: AtomicU64,
    lock: tokio::sync::Mutex<()>,
}

impl Syncer {
    /// A syncer for `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Syncer {
            store,
            requested: AtomicU64::new(0),
            done: AtomicU64::new(0),
            lock: tokio::sync::Mutex::new(()),
        }
    }

    /// Returns once every write made before the call is durable.
    pub async fn sync(&self) -> Result<(), StoreError> {
        let mine = self.requested.fetch_add(1, Ordering::SeqCst) + 1;
        let _guard = self.lock.lock().await;
        if self.done.load(Ordering::SeqCst) >= mine {
            return Ok(());
        }
        let target = self.requested.load(Ordering::SeqCst);
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.sync())
            .await
            .map_err(|e| StoreError::Backend(e.to_string()))??;
        self.done.fetch_max(target, Ordering::SeqCst);
        Ok(())
    }
}
