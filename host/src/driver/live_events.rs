//! A run's live events, for watchers: the buffer is made when the first watcher subscribes, so
//! a run nobody watches costs no buffer (a broadcast channel allocates all its slots at once).
//!
//! An event is stored before it is sent here, and a watcher subscribes before it reads the
//! store: whichever comes first, a watcher sees every event once it dedupes by `seq`, from the
//! store or from here. An event is sent once a sync has made it durable (S100), and the channel
//! keeps the highest durable `seq`: the store also holds the events of a run driven here that
//! still wait for their sync, and a watcher reads it only up to there. Events staged while
//! nobody watched are marked durable without being kept to send (`unpublished`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::broadcast;

use super::StoredEvent;

/// One run's live event channel, made on first subscription.
pub(super) struct LiveEvents {
    capacity: usize,
    sender: OnceLock<broadcast::Sender<Arc<StoredEvent>>>,
    /// Every event up to this `seq` is durable.
    durable: AtomicU64,
}

impl LiveEvents {
    /// A channel that buffers `capacity` events per watcher once one subscribes; a watcher that
    /// falls further behind catches up from the store.
    pub(super) fn new(capacity: usize) -> Self {
        LiveEvents {
            capacity: capacity.max(1),
            sender: OnceLock::new(),
            durable: AtomicU64::new(0),
        }
    }

    /// A receiver of every event sent from now on.
    pub(super) fn subscribe(&self) -> broadcast::Receiver<Arc<StoredEvent>> {
        self.sender
            .get_or_init(|| broadcast::channel(self.capacity).0)
            .subscribe()
    }

    /// Sends a durable event to the watchers, if any has ever subscribed.
    pub(super) fn send(&self, event: StoredEvent) {
        self.mark_durable(event.seq);
        if let Some(sender) = self.sender.get() {
            let _ = sender.send(Arc::new(event));
        }
    }

    /// Every event up to `seq` is durable: those an actor found stored when it took the run up.
    pub(super) fn mark_durable(&self, seq: u64) {
        self.durable.fetch_max(seq, Ordering::AcqRel);
    }

    /// The highest `seq` up to which every event is durable.
    pub(super) fn durable_through(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// How many watchers are subscribed now.
    pub(super) fn receiver_count(&self) -> usize {
        self.sender
            .get()
            .map_or(0, broadcast::Sender::receiver_count)
    }
}

/// A `log` event of `seq` and nothing else, for the tests of what passes events on.
#[cfg(test)]
pub(super) fn event(seq: u64) -> StoredEvent {
    StoredEvent {
        seq,
        run_id: "r".into(),
        at: String::new(),
        kind: crate::engine::EventKind::Log,
        path: None,
        foreach_index: None,
        iteration: None,
        data: serde_json::Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_sent_before_any_subscription_are_dropped_and_later_ones_arrive() {
        let live = LiveEvents::new(4);
        live.send(event(1));
        assert_eq!(live.receiver_count(), 0);
        let mut rx = live.subscribe();
        live.send(event(2));
        assert_eq!(live.receiver_count(), 1);
        assert_eq!(
            rx.try_recv().expect("the event sent after subscribing").seq,
            2
        );
        assert!(
            rx.try_recv().is_err(),
            "nothing else was sent after subscribing"
        );
    }

    #[test]
    fn s100_the_channel_knows_how_far_the_events_are_durable() {
        let live = LiveEvents::new(4);
        assert_eq!(live.durable_through(), 0);
        live.mark_durable(3);
        live.send(event(5));
        assert_eq!(live.durable_through(), 5);
        live.mark_durable(4);
        assert_eq!(live.durable_through(), 5, "it never goes back");
    }
}
