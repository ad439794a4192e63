//! A run's events that are stored but not yet known to be durable: watchers get them once a
//! sync covers them (S100).
//!
//! An event staged while nobody watches the run is not kept until then, only its `seq`: it is
//! in the store already, and keeping every event of every run for the length of a sync made
//! each step dearer (the events were cold by the time they were dropped). Should a watcher
//! subscribe before the sync ends, the batch is read back from the store and sent whole, in
//! order. A watcher that subscribes after reads them from the store itself, since they are
//! marked durable before anyone is looked for.

use std::sync::atomic::{Ordering, fence};

use super::StoredEvent;
use super::live_events::LiveEvents;
use super::new_events::NewEvents;

/// Events waiting for a sync, in `seq` order.
#[derive(Default)]
pub(super) struct Unpublished {
    entries: Vec<Entry>,
}

/// One transition's events: kept, or only their `seq`s when nobody watched.
enum Entry {
    Kept(Vec<StoredEvent>),
    Unwatched { from: u64, through: u64 },
}

impl Entry {
    fn last_seq(&self) -> Option<u64> {
        match self {
            Entry::Kept(events) => events.last().map(|e| e.seq),
            Entry::Unwatched { through, .. } => Some(*through),
        }
    }
}

impl Unpublished {
    /// Adds the events one record of run `run_id` stored, `channel` telling whether anybody
    /// watches now.
    pub(super) fn push(&mut self, events: NewEvents, run_id: &str, channel: &LiveEvents) {
        let Some((from, through)) = events.seqs() else {
            return;
        };
        let entry = if channel.receiver_count() > 0 {
            Entry::Kept(events.into_stored(run_id))
        } else {
            Entry::Unwatched { from, through }
        };
        self.entries.push(entry);
    }

    /// How many records' events wait: a sync started now covers this many.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing waits.
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Takes the first `n` records' events (a sync covered them), leaving the rest.
    pub(super) fn take_first(&mut self, n: usize) -> Durable {
        let rest = self.entries.split_off(n.min(self.entries.len()));
        Durable(std::mem::replace(&mut self.entries, rest))
    }

    /// Takes every record's events (a sync covered them all).
    pub(super) fn take_all(&mut self) -> Durable {
        Durable(std::mem::take(&mut self.entries))
    }
}

/// Events a sync has made durable, to publish.
pub(super) struct Durable(Vec<Entry>);

impl Durable {
    /// Marks the events durable on `channel`, then sends them to its watchers: those not kept
    /// are read back with `read` (from, through), and the batch is sent whole from the first of
    /// them. A read that fails (the store failing) is logged, and its events are not sent.
    pub(super) fn publish<E: std::fmt::Display>(
        self,
        channel: &LiveEvents,
        read: impl FnOnce(u64, u64) -> Result<Vec<StoredEvent>, E>,
    ) {
        let Some(through) = self.0.iter().rev().find_map(Entry::last_seq) else {
            return;
        };
        channel.mark_durable(through);
        // A watcher that subscribes after this point reads the store up to `through` (it
        // subscribes, then reads the bound); one before is counted below.
        fence(Ordering::SeqCst);
        let watched = channel.receiver_count() > 0;
        for entry in self.0 {
            match entry {
                Entry::Kept(events) => events.into_iter().for_each(|e| channel.send(e)),
                Entry::Unwatched { from, .. } if watched => {
                    match read(from, through) {
                        Ok(events) => events.into_iter().for_each(|e| channel.send(e)),
                        Err(e) => tracing::warn!(
                            "cannot read back events {from} to {through} for a watcher that \
                             came while they synced ({e}); they are not sent"
                        ),
                    }
                    break;
                }
                Entry::Unwatched { .. } => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::live_events::event;
    use crate::driver::new_events::NewEvent;
    use crate::engine::{EventKind, Tracking};

    /// `log` events numbered `seqs`, as a record stores them.
    fn batch(seqs: &[u64]) -> NewEvents {
        let log = || Tracking {
            kind: EventKind::Log,
            path: None,
            foreach_index: None,
            iteration: None,
            data: serde_json::Value::Null.into(),
        };
        NewEvents {
            at: String::new(),
            events: seqs
                .iter()
                .map(|&seq| NewEvent {
                    seq,
                    tracking: log(),
                })
                .collect(),
        }
    }

    /// The stored events `from..=through`, as the store would return them.
    fn stored(from: u64, through: u64) -> Result<Vec<StoredEvent>, String> {
        Ok((from..=through).map(event).collect())
    }

    fn received(
        rx: &mut tokio::sync::broadcast::Receiver<std::sync::Arc<StoredEvent>>,
    ) -> Vec<u64> {
        std::iter::from_fn(|| rx.try_recv().ok().map(|e| e.seq)).collect()
    }

    #[test]
    fn s100_events_nobody_watches_are_only_marked_durable() {
        let channel = LiveEvents::new(16);
        let mut waiting = Unpublished::default();
        waiting.push(batch(&[1, 2]), "r", &channel);
        waiting.push(batch(&[]), "r", &channel);
        waiting.push(batch(&[3]), "r", &channel);
        assert_eq!(waiting.len(), 2, "a record with no event waits for nothing");
        waiting
            .take_first(1)
            .publish(&channel, |_, _| -> Result<_, String> {
                panic!("nobody watches: nothing is read back")
            });
        assert_eq!(channel.durable_through(), 2);
        assert_eq!(waiting.len(), 1);
        waiting.take_all().publish(&channel, stored);
        assert_eq!(channel.durable_through(), 3);
        assert!(waiting.is_empty());
    }

    #[test]
    fn s100_a_watcher_that_comes_while_they_sync_gets_every_event_in_order() {
        let channel = LiveEvents::new(16);
        let mut waiting = Unpublished::default();
        waiting.push(batch(&[1, 2]), "r", &channel);
        let mut rx = channel.subscribe();
        // Kept from now on; the first two are read back, and the batch goes whole from there.
        waiting.push(batch(&[3]), "r", &channel);
        waiting.push(batch(&[4]), "r", &channel);
        let mut reads = Vec::new();
        waiting.take_all().publish(&channel, |from, through| {
            reads.push((from, through));
            stored(from, through)
        });
        assert_eq!(reads, vec![(1, 4)]);
        assert_eq!(received(&mut rx), vec![1, 2, 3, 4]);
        assert_eq!(channel.durable_through(), 4);
    }

    #[test]
    fn s100_events_staged_while_watched_are_sent_as_kept() {
        let channel = LiveEvents::new(16);
        let mut rx = channel.subscribe();
        let mut waiting = Unpublished::default();
        waiting.push(batch(&[1]), "r", &channel);
        waiting.push(batch(&[2, 3]), "r", &channel);
        waiting
            .take_all()
            .publish(&channel, |_, _| -> Result<_, String> {
                panic!("every event was kept: nothing is read back")
            });
        assert_eq!(received(&mut rx), vec![1, 2, 3]);
    }

    #[test]
    fn a_failed_read_back_still_marks_the_events_durable_for_the_store() {
        let channel = LiveEvents::new(16);
        let mut waiting = Unpublished::default();
        waiting.push(batch(&[1]), "r", &channel);
        let mut rx = channel.subscribe();
        waiting.take_all().publish(&channel, |_, _| {
            Err::<Vec<StoredEvent>, _>("the disk is gone")
        });
        assert_eq!(channel.durable_through(), 1);
        assert!(received(&mut rx).is_empty());
    }
}
