//! How the actor's stored transitions become durable: the sync it waits for before an effect
//! outside weft, the one it leaves in the background when nothing waits on them, and the
//! publishing of their events and of the run's status once a sync covers them (S100).

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use futures::StreamExt;

use super::Actor;
use crate::driver::RuntimeError;
use crate::driver::unpublished::Durable;
use crate::driver::watch::stored_events;

/// A sync under way in the background, for transitions whose events wait for it.
pub(super) type Syncing = Pin<Box<dyn Future<Output = Result<(), RuntimeError>> + Send>>;

impl Actor {
    /// Waits until every transition stored so far is durable, running the local invocations
    /// meanwhile (their ends are kept for [`Actor::next_msg`]), then publishes their events.
    pub(super) async fn flush(&mut self) -> Result<(), RuntimeError> {
        // A sync taken now covers what the one under way does, and more.
        self.syncing = None;
        self.all_covered();
        let covers = self.at.next_sub;
        let rt = self.rt.clone();
        let sync = rt.durable();
        tokio::pin!(sync);
        let synced = loop {
            if self.local.is_empty() {
                break sync.await;
            }
            tokio::select! {
                biased;
                r = &mut sync => break r,
                Some(ended) = self.local.next() => self.local_ended.push_back(ended),
            }
        };
        if let Err(e) = synced {
            self.halt(&e);
            return Err(e);
        }
        self.rt.committed();
        self.durable_sub = covers;
        self.creating = None;
        let durable = self.unpublished.take_all();
        self.publish(durable);
        self.publish_status();
        Ok(())
    }

    /// The sync under way ended: publishes the events it covers, and starts the next for
    /// those stored since.
    pub(super) fn synced(&mut self) {
        let Some((_, covered, sub)) = self.syncing.take() else {
            return;
        };
        self.durable_sub = self.durable_sub.max(sub);
        self.rt.committed();
        self.creating = None;
        let durable = self.unpublished.take_first(covered);
        self.publish(durable);
        if self.durable_sub >= self.at.next_sub {
            // Everything stored is durable, and so the run's status: a change of it may have
            // waited for this sync ([`Defer::UntilSettled`]).
            self.publish_status();
        } else if self.sync_due() {
            self.start_syncing();
        }
    }

    /// Whether the transitions stored since the last sync started are to be synced in the
    /// background now, none being under way. At once when somebody watches the run (their
    /// events reach the watchers after the sync), when the store is shared (other processes
    /// see them after it), or without [`RuntimeConfig::background_sync_after`]; else once the
    /// first of them has waited that long ([`Actor::next_msg`] starts it then). Sooner when
    /// something waits on them (an effect outside weft, a settled status, an answer, a
    /// `show`) or a watcher subscribes ([`Msg::Watched`](super::Msg::Watched)).
    ///
    /// [`RuntimeConfig::background_sync_after`]: crate::driver::RuntimeConfig::background_sync_after
    pub(super) fn sync_due(&mut self) -> bool {
        if self.syncing.is_some() {
            return false;
        }
        let after = self.rt.inner.config.background_sync_after;
        if after.is_zero()
            || self.events.receiver_count() > 0
            || self.rt.inner.store.shared().is_some()
        {
            return true;
        }
        let now = Instant::now();
        now.duration_since(*self.unsynced_since.get_or_insert(now)) >= after
    }

    /// Every transition stored so far is covered by a sync started: none waits for the
    /// background sync, whose timer stops.
    fn all_covered(&mut self) {
        self.unsynced_since = None;
        self.sync_timer = None;
    }

    /// Starts a sync of every write made so far, in the background, for `unpublished`.
    pub(super) fn start_syncing(&mut self) {
        self.all_covered();
        let rt = self.rt.clone();
        let ticket = rt.sync_ticket();
        let sync: Syncing = Box::pin(async move { rt.durable_at(ticket).await });
        self.syncing = Some((sync, self.unpublished.len(), self.at.next_sub));
    }

    /// Publishes events a sync made durable to the run's watchers; those staged while nobody
    /// watched are read back from the store for a watcher that came since.
    fn publish(&self, durable: Durable) {
        let (store, run) = (&*self.rt.inner.store, &self.state.run_id);
        durable.publish(&self.events, |from, through| {
            stored_events(store, run, from, Some(through))
        });
    }
}
