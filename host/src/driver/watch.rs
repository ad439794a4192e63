//! Watching a run's events ([`Runtime::watch`], [`Runtime::watch_settled`]): the stored ones,
//! then live ones as this process drives the run, or as the store's notices tell of a run
//! another process drives, without gap or duplicate (S87).

use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};

use super::actor::Msg;
use super::live_events::LiveEvents;
use super::load::read_records;
use super::runtime::lock;
use super::{Runtime, RuntimeError, StoredEvent};
use crate::engine::EventKind;
use crate::run_id::check_run_id;
use crate::store::{Notice, Store};

/// Where a watch ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Until {
    /// After the closing event.
    Closed,
    /// After the closing event or a `run-suspended` the run stands at.
    Settled,
}

impl Until {
    /// Whether a watch ends after an event of `kind` that is the run's latest.
    fn stops_at(self, kind: EventKind) -> bool {
        kind.is_closing() || (self == Until::Settled && kind == EventKind::RunSuspended)
    }
}

impl Runtime {
    /// The run's events from `from_seq` on: the stored ones, then live ones as this process
    /// drives the run, without gap or duplicate (S87). The receiver ends after the run's closing
    /// event, at once when the run has closed before `from_seq`.
    pub fn watch(
        &self,
        run_id: &str,
        from_seq: u64,
    ) -> Result<mpsc::UnboundedReceiver<Arc<StoredEvent>>, RuntimeError> {
        self.watch_until(run_id, from_seq, Until::Closed)
    }

    /// [`Runtime::watch`] that also ends at a suspension that is the run's current state, as a
    /// plain `weft watch` does (S106): after the `run-suspended` the run stands at, when it is
    /// suspended, and at once when that event lies before `from_seq`. A `run-suspended` that a
    /// resume or cancel has already followed is passed like any other event.
    pub fn watch_settled(
        &self,
        run_id: &str,
        from_seq: u64,
    ) -> Result<mpsc::UnboundedReceiver<Arc<StoredEvent>>, RuntimeError> {
        check_run_id(run_id)?;
        self.watch_until(run_id, from_seq, Until::Settled)
    }

    fn watch_until(
        &self,
        run_id: &str,
        from_seq: u64,
        until: Until,
    ) -> Result<mpsc::UnboundedReceiver<Arc<StoredEvent>>, RuntimeError> {
        check_run_id(run_id)?;
        if self.inner.store.summary(run_id)?.is_none() {
            return Err(RuntimeError::UnknownRun(run_id.into()));
        }
        // Subscribe before reading the store: no event falls between the two.
        let channel = self.channel(run_id);
        let mut live_rx = channel.subscribe();
        // Its actor syncs what it stored meanwhile now, for this watcher, rather than when the
        // run next needs a sync.
        if let Some(live) = self.live(run_id) {
            let _ = live.tx.send(Msg::Watched);
        }
        // Paired with the actor's when it publishes (`unpublished`): either it finds this
        // watcher subscribed and sends it the events, or this watcher finds them durable below.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        let (tx, rx) = mpsc::unbounded_channel();
        let mut next = from_seq.max(1);
        let bound = self.durable_bound(run_id, &channel);
        let stored = stored_events(&*self.inner.store, run_id, next, bound)?;
        // Where the run stands is told by its last stored event, also when `from_seq` lies
        // past it: nothing follows a closing event (S88), and a `run-suspended` that nothing
        // follows is the suspension the run stands at.
        let last = match stored.last() {
            Some(event) => Some(event.kind),
            None => last_event(&*self.inner.store, run_id, bound)?.map(|e| e.kind),
        };
        for event in stored {
            next = event.seq + 1;
            let _ = tx.send(Arc::new(event));
        }
        // A run this process stopped driving because its store failed (and that no actor drives
        // again since) gets no more events here: the channel just subscribed to was made for
        // this watcher, and nothing would ever send on it or close it.
        let halted_here = {
            let live = lock(&self.inner.live);
            !live.contains_key(run_id) && lock(&self.inner.halted).contains_key(run_id)
        };
        if halted_here || last.is_some_and(|kind| until.stops_at(kind)) {
            // Nothing more will come: drop the channel unless a live run or watcher uses it.
            drop(live_rx);
            let live = lock(&self.inner.live).contains_key(run_id);
            let mut channels = lock(&self.inner.channels);
            if !live
                && channels
                    .get(run_id)
                    .is_some_and(|c| c.receiver_count() == 0)
            {
                channels.remove(run_id);
            }
        } else {
            let store = self.inner.store.clone();
            let run = run_id.to_owned();
            // Neither the channel nor the runtime itself: the channel's sender must go once the
            // run's actor and the runtime let it go, which ends this watch when the run halts,
            // and a watch keeps no runtime open.
            let (channel, inner, bounded) = (
                Arc::downgrade(&channel),
                Arc::downgrade(&self.inner),
                run.clone(),
            );
            let bound = move || {
                let (channel, inner) = (channel.upgrade()?, inner.upgrade()?);
                Runtime { inner }.durable_bound(&bounded, &channel)
            };
            // A run another process drives is followed by the store's notices.
            let mut notices = store.shared().map(|s| s.notices());
            if notices.is_some() && catch_up(&*store, &run, &mut next, &tx, until, &bound) {
                return Ok(rx);
            }
            tokio::spawn(async move {
                // A look at the store now and then, whatever the notices say.
                let mut tick = tokio::time::interval(FOLLOW_TICK);
                tick.tick().await;
                loop {
                    let shared = notices.is_some();
                    let noticed = async {
                        match &mut notices {
                            Some(n) => n.recv().await,
                            None => std::future::pending().await,
                        }
                    };
                    let ticked = async {
                        if shared {
                            tick.tick().await;
                        } else {
                            std::future::pending::<()>().await;
                        }
                    };
                    let received = tokio::select! {
                        r = live_rx.recv() => r,
                        n = noticed => match n {
                            Ok(Notice::Records(r)) if r != run => continue,
                            Ok(Notice::Records(_) | Notice::Reconnected)
                            | Err(broadcast::error::RecvError::Lagged(_)) => {
                                if catch_up(&*store, &run, &mut next, &tx, until, &bound) {
                                    return;
                                }
                                continue;
                            }
                            Ok(_) => continue,
                            Err(broadcast::error::RecvError::Closed) => {
                                notices = None;
                                continue;
                            }
                        },
                        () = ticked => {
                            if catch_up(&*store, &run, &mut next, &tx, until, &bound) {
                                return;
                            }
                            continue;
                        }
                        // The reader went away: stop following.
                        () = tx.closed() => return,
                    };
                    match received {
                        Ok(ev) if ev.seq >= next => {
                            next = ev.seq + 1;
                            let stop = until.stops_at(ev.kind);
                            if tx.send(ev).is_err() || stop {
                                return;
                            }
                        }
                        // Sent already, or before `from_seq`.
                        Ok(ev) if !until.stops_at(ev.kind) => {}
                        // A stop before `from_seq` (the store says whether the run still stands
                        // there), or the watcher fell behind the live buffer: everything
                        // published is stored, so catch up from the store, then go on live.
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {
                            if catch_up(&*store, &run, &mut next, &tx, until, &bound) {
                                return;
                            }
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                }
            });
        }
        Ok(rx)
    }

    /// How far a watcher may read the events of `run_id` from the store: up to the last one
    /// published, while this process drives the run. Its actor publishes a transition's events
    /// once a sync covers them (S100), and the store holds them from before; a watcher gets the
    /// rest live, once published. `None` (no bound) for a run driven elsewhere or not at all,
    /// whose stored events are all durable.
    fn durable_bound(&self, run_id: &str, channel: &LiveEvents) -> Option<u64> {
        lock(&self.inner.live)
            .contains_key(run_id)
            .then(|| channel.durable_through())
    }
}

/// How often a follower of a run on a shared store reads the store whatever the notices say.
const FOLLOW_TICK: std::time::Duration = std::time::Duration::from_secs(1);

/// Sends the run's stored events from `next` on; whether the watch is over: its reader went
/// away, the store failed, or the run's last stored event ends it. On a store that other
/// processes drive runs in, a failed read is not the end: the follower tries again at its next
/// notice or tick.
fn catch_up(
    store: &dyn Store,
    run_id: &str,
    next: &mut u64,
    tx: &mpsc::UnboundedSender<Arc<StoredEvent>>,
    until: Until,
    bound: &dyn Fn() -> Option<u64>,
) -> bool {
    let failed = |e: RuntimeError| {
        if store.shared().is_none() {
            return true;
        }
        tracing::warn!(run = %run_id, "cannot read the run's events, trying again: {e}");
        false
    };
    let (missed, last) = loop {
        let bound = bound();
        let missed = match stored_events(store, run_id, *next, bound) {
            Ok(missed) => missed,
            Err(e) => return failed(e),
        };
        if let Some(event) = missed.last() {
            let kind = event.kind;
            break (missed, Some(kind));
        }
        match last_event(store, run_id, bound) {
            // Stored after the read above (another process drives the run): read them too,
            // never judge the watch over on an event not sent.
            Ok(Some(event)) if event.seq >= *next => continue,
            Ok(event) => break (missed, event.map(|e| e.kind)),
            Err(e) => return failed(e),
        }
    };
    for ev in missed {
        *next = ev.seq + 1;
        if tx.send(Arc::new(ev)).is_err() {
            return true;
        }
    }
    last.is_some_and(|kind| until.stops_at(kind))
}

/// The run's last stored event, or the last up to `bound` (see [`Runtime::durable_bound`]).
fn last_event(
    store: &dyn Store,
    run_id: &str,
    bound: Option<u64>,
) -> Result<Option<StoredEvent>, RuntimeError> {
    match store.last_record(run_id)? {
        // The record's key holds the seq of the last event stored up to it.
        Some((seq, _)) => {
            let from = bound.map_or(seq, |b| seq.min(b));
            Ok(stored_events(store, run_id, from, bound)?.pop())
        }
        None => Ok(None),
    }
}

/// The stored events of a run with `seq >= from`, in order, and none past `bound` (see
/// [`Runtime::durable_bound`]).
pub(super) fn stored_events(
    store: &dyn Store,
    run_id: &str,
    from: u64,
    bound: Option<u64>,
) -> Result<Vec<StoredEvent>, RuntimeError> {
    Ok(read_records(store, run_id, (from, 0))?
        .into_iter()
        .flat_map(|(_, r)| r.events)
        .filter(|e| e.seq >= from)
        .take_while(|e| bound.is_none_or(|b| e.seq <= b))
        .collect())
}
