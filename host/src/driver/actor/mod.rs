//! One task per live run: it owns the run's state, applies events, commits, and carries out
//! commands.
//!
//! This file holds what reaches the actor ([`Msg`]), what it keeps ([`Actor`], [`Position`]),
//! its loop and how it answers requests; `transitions` advances and stores transitions,
//! `syncing` makes them durable and publishes them, `invoke` carries out commands and
//! invocations, and `spans` holds the tracing spans of a run and its steps.

mod invoke;
mod spans;
mod syncing;
mod transitions;

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::{mpsc, oneshot, watch};

use super::executors::RunExecutors;
use super::live_events::LiveEvents;
use super::live_run::Progress;
use super::starting::Creating;
use super::unpublished::Unpublished;
use super::unrecoverable::panic_message;
use super::{RunRecord, Runtime, RuntimeError};
use crate::engine::{self, Event, Graph, KeyHasher, ResumeRequest, RunState, RunStatus};
use crate::executor::GuestEvent;

use invoke::{InFlight, Local, Working};
use spans::run_span;
use syncing::Syncing;
use transitions::Defer;

/// What reaches a run's actor.
pub(super) enum Msg {
    /// An orchestration event.
    Event(Event),
    /// Something a running invocation wrote or logged.
    Guest(u64, GuestEvent),
    /// Start a new run, whose creation is logged but not yet durable; answered once it is, or
    /// with a `waiter` once the first transition is stored (the waiter is answered after a
    /// sync that covers both).
    Start {
        /// When it starts.
        at: engine::Millis,
        /// Ok once the run's creation is durable, with its first transition when that applied
        /// (with a `waiter`: once that transition is stored).
        reply: oneshot::Sender<Result<(), RuntimeError>>,
        /// Keeps the run out of listings until its creation is durable.
        creating: Creating,
        /// Answered as [`Msg::Wait`] is, after the start (one message: nothing can come
        /// between them).
        waiter: Option<Waiter>,
    },
    /// Read the record.
    Show(oneshot::Sender<RunRecord>),
    /// Answer with the record once the run is settled (suspended or ended) and that is
    /// durable: at once when it is, else at its next suspension or end.
    Wait(Waiter),
    /// Resume.
    Resume(ResumeRequest, oneshot::Sender<Result<(), RuntimeError>>),
    /// Resume, then answer as [`Msg::Wait`] does; a refused resume is answered at once.
    ResumeWait(ResumeRequest, Waiter),
    /// Cancel.
    Cancel(oneshot::Sender<Result<(), RuntimeError>>),
    /// A watcher subscribed: the events stored since the last sync are synced now, for it,
    /// rather than when the run next needs a sync ([`RuntimeConfig::background_sync_after`]).
    ///
    /// [`RuntimeConfig::background_sync_after`]: super::RuntimeConfig::background_sync_after
    Watched,
}

/// Where the record of a settled run goes ([`Msg::Wait`]).
pub(super) type Waiter = oneshot::Sender<Result<RunRecord, RuntimeError>>;

/// The most transitions one fsync covers for a run: events queued beyond it wait for the next.
const MAX_BATCH: usize = 256;

/// A live run's actor: the run's state and graph, where its records stand, its invocations in
/// flight, the transitions not yet durable, and the callers waiting for it to settle.
pub(super) struct Actor {
    rt: Runtime,
    state: RunState,
    graph: Arc<Graph>,
    tx: mpsc::UnboundedSender<Msg>,
    events: Arc<LiveEvents>,
    status: watch::Sender<Progress>,
    /// Where the run's records stand: the next key, and the bytes since the last snapshot,
    /// counted from before this actor took the run up.
    at: Position,
    in_flight: HashMap<u64, InFlight, KeyHasher>,
    /// Invocations run on this task instead of a task each (see [`Actor::commit`]).
    local: FuturesUnordered<Local>,
    /// The ends of local invocations, in the order they came, each applied once the messages
    /// queued before it are.
    local_ended: VecDeque<Event>,
    /// Counts the run among those with an invocation in flight while it has one.
    working: Working,
    /// Events of transitions stored but not yet known to be durable, in order: published once
    /// a sync covers them (see [`Actor::commit`]).
    unpublished: Unpublished,
    /// The sync under way for the first `.1` of `unpublished`, and the records before `.2`.
    syncing: Option<(Syncing, usize, u32)>,
    /// The records before this one (their key's counter, [`Position::next_sub`]) are durable.
    /// A transition inside a foreach item can store a record with no event, which
    /// `unpublished` does not show.
    durable_sub: u32,
    /// Since when transitions are stored that no sync started covers, while nobody watches
    /// ([`Actor::sync_due`]).
    unsynced_since: Option<Instant>,
    /// The timer of that background sync, made at the first wait for it and dropped with
    /// `unsynced_since` ([`Actor::all_covered`]): one made afresh at every wait would register
    /// with the runtime's timer wheel (and wake its driver) once a step.
    sync_timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// What runs each step of the run.
    executors: Arc<RunExecutors>,
    /// Storing failed: the actor stops (see [`Actor::halt`]).
    halted: bool,
    /// Callers waiting for the run to settle ([`Msg::Wait`]), answered once it has and that
    /// is durable. Told the store's failure when the actor halts ([`Actor::halt`]).
    waiters: Vec<Waiter>,
    /// The span of this drive of the run: open while the run runs here, closed (and exported)
    /// once it ends or suspends; a resume opens the next.
    span: tracing::Span,
    /// Counts the run as driven while the actor lives.
    _driven: super::metrics::DrivenGuard,
    /// The size of the last record encoded: the next one starts with room for about as much
    /// (up to [`RECORD_ROOM`]), rather than growing its buffer from nothing.
    record_len: usize,
    /// Keeps a new run out of listings until a sync covers its creation ([`Msg::Start`]):
    /// dropped at the actor's first sync, which covers the creation logged before anything
    /// the actor stored.
    creating: Option<Creating>,
}

/// The most room a record's buffer starts with: a record that carried a very large output
/// does not make the next ones start as large.
const RECORD_ROOM: usize = 64 << 10;

/// Where a run's stored records stand when an actor takes the run up: the key its next record
/// gets, and how far its records are past its last snapshot.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Position {
    /// The `seq` of the run's next tracking event.
    pub next_seq: u64,
    /// The counter part of the run's next record key.
    pub next_sub: u32,
    /// Record bytes stored since the last snapshot (since the first state, when there is none).
    pub since_snapshot: usize,
    /// The size of the last snapshot; 0 when there is none.
    pub snapshot_len: usize,
    /// The bytes of all the run's records ([`crate::driver::RuntimeConfig::max_run_bytes`]).
    pub written: u64,
    /// The latest instant an event was stamped with here: the events of a record never bear an
    /// earlier one, so `at` never decreases along `seq` (an invocation's writes are stamped
    /// when staged, a transition with the instant of what it records, which may be earlier).
    pub last_event_at: crate::engine::Millis,
}

impl Position {
    /// A new run's: nothing stored beyond its first state.
    pub(super) const FRESH: Position = Position {
        next_seq: 1,
        next_sub: 0,
        since_snapshot: 0,
        snapshot_len: 0,
        written: 0,
        last_event_at: 0,
    };
}

impl Actor {
    /// The actor of the run in `state`, whose records stand `at`; `tx` sends to its own queue,
    /// `events` and `status` tell watchers and listings what it made durable.
    pub(super) fn new(
        rt: Runtime,
        state: RunState,
        graph: Arc<Graph>,
        tx: mpsc::UnboundedSender<Msg>,
        events: Arc<LiveEvents>,
        status: watch::Sender<Progress>,
        at: Position,
    ) -> Self {
        let executors = Arc::new(rt.inner.executors.for_run(graph.clone()));
        // A run loaded only to be read or resumed gets its span once it runs (follow_span).
        let span = if settled(state.status) {
            tracing::Span::none()
        } else {
            run_span(&state)
        };
        let _driven = rt.inner.metrics.driving();
        let working = Working::new(rt.inner.working.clone());
        Actor {
            rt,
            state,
            graph,
            tx,
            events,
            status,
            at,
            in_flight: HashMap::default(),
            local: FuturesUnordered::new(),
            local_ended: VecDeque::new(),
            working,
            unpublished: Unpublished::default(),
            syncing: None,
            durable_sub: at.next_sub,
            unsynced_since: None,
            sync_timer: None,
            executors,
            halted: false,
            waiters: Vec::new(),
            span,
            _driven,
            record_len: 0,
            creating: None,
        }
    }

    /// Drives the run: handles the messages of `rx` until the run ends with nothing in flight,
    /// storing it fails, or the queue closes.
    pub(super) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>) {
        let mut next = rx.recv().await;
        while let Some(msg) = next.take() {
            // A run whose steps all end at once, without waiting for a sync, would otherwise
            // never give its worker back to other runs.
            tokio::task::consume_budget().await;
            let handled = match msg {
                Msg::Guest(token, ev) => {
                    let mut batch = vec![(token, ev)];
                    loop {
                        match rx.try_recv() {
                            Ok(Msg::Guest(t, e)) => batch.push((t, e)),
                            Ok(other) => {
                                next = Some(other);
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    std::panic::catch_unwind(AssertUnwindSafe(|| self.guest_events(batch)))
                }
                Msg::Event(event) => {
                    // Events already queued (steps and timers that ended together) are stored
                    // with one fsync.
                    let mut events = vec![event];
                    while events.len() < MAX_BATCH {
                        match rx.try_recv() {
                            Ok(Msg::Event(e)) => events.push(e),
                            Ok(other) => {
                                next = Some(other);
                                break;
                            }
                            // Nothing queued: the ends of local invocations come after all
                            // their guest events.
                            Err(_) => match self.local_ended.pop_front() {
                                Some(e) => events.push(e),
                                None => break,
                            },
                        }
                    }
                    AssertUnwindSafe(self.apply_all(events))
                        .catch_unwind()
                        .await
                }
                other => AssertUnwindSafe(self.handle(other)).catch_unwind().await,
            };
            if let Err(panic) = handled {
                // The state may be half changed: end the run from what is stored, and stop.
                // Requests still queued are dropped; their callers ask a new actor, which
                // answers from the stored end.
                self.undrivable(panic_message(&*panic)).await;
                self.rt.retire(&self.state.run_id);
                self.let_go();
                return;
            }
            self.follow_span();
            self.working.set(!self.in_flight.is_empty());
            if self.halted {
                // Requests still queued are dropped: their callers ask again, from the store.
                return;
            }
            if self.state.status.is_ended() && self.in_flight.is_empty() {
                self.rt.retire(&self.state.run_id);
                // Answer what is already queued, then stop.
                while let Ok(msg) = rx.try_recv() {
                    if !matches!(msg, Msg::Guest(..)) {
                        self.handle(msg).await;
                    }
                }
                self.let_go();
                return;
            }
            if next.is_none() {
                next = self.next_msg(&mut rx).await;
            }
        }
    }

    /// The next message, running the local invocations (if any) meanwhile. The end of one comes
    /// as an event once the messages queued before it ended are taken, so the guest events it
    /// sent are stored before it (S91). It is not sent through the channel: a send to the task
    /// that is running would wake it again for nothing, and the wake-up costs a worker hand-off.
    /// Once one ended, the others that end without waiting run too, so that one batch of
    /// transitions stores all their ends (the eight arms of a `parallel`, say, or the items of
    /// a `foreach` in flight together).
    ///
    /// Meanwhile it also waits for the sync under way, and publishes the events it covers.
    /// `None` once the channel closed, or a sync failed and the actor halted.
    async fn next_msg(&mut self, rx: &mut mpsc::UnboundedReceiver<Msg>) -> Option<Msg> {
        loop {
            if let Some(ended) = self.local_ended.pop_front() {
                return Some(match rx.try_recv() {
                    Ok(queued) => {
                        self.local_ended.push_front(ended);
                        queued
                    }
                    Err(_) => Msg::Event(ended),
                });
            }
            // Transitions stored unsynced while nobody watches are synced once the first is
            // `background_sync_after` old, whether or not the run stores another by then.
            let due = match (&self.syncing, self.unsynced_since) {
                (None, Some(since)) => {
                    since.checked_add(self.rt.inner.config.background_sync_after)
                }
                _ => None,
            };
            let local = async {
                match self.local.next().await {
                    Some(ended) => ended,
                    None => std::future::pending().await,
                }
            };
            let synced = async {
                match self.syncing.as_mut() {
                    Some((sync, ..)) => sync.await,
                    None => std::future::pending().await,
                }
            };
            let timer = &mut self.sync_timer;
            let sync_due = async {
                match due {
                    Some(at) => {
                        timer
                            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at.into())))
                            .as_mut()
                            .await
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                msg = rx.recv() => return msg,
                () = sync_due => self.start_syncing(),
                r = synced => {
                    if let Err(e) = r {
                        self.halt(&e);
                        return None;
                    }
                    self.synced();
                }
                ended = local => {
                    self.local_ended.push_back(ended);
                    // A plugin step mostly runs in one poll. A local invocation left waiting
                    // here is polled again, with this task's waker, before the actor waits.
                    while let Some(Some(more)) = self.local.next().now_or_never() {
                        self.local_ended.push_back(more);
                    }
                }
            }
        }
    }

    /// Handles one message that is not a batch of events or guest events.
    async fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Event(event) => self.apply_all(vec![event]).await,
            Msg::Guest(token, ev) => self.guest_events(vec![(token, ev)]),
            Msg::Start {
                at,
                reply,
                creating,
                waiter,
            } => {
                // The first transition's fsync covers the creation logged before it. A caller
                // that waits for the run to settle is answered after a sync that covers the
                // start: the start need not wait for one of its own, and the run stays out of
                // listings until one does ([`Actor::creating`]).
                let defer = if waiter.is_some() {
                    Defer::UntilSettled
                } else {
                    Defer::No
                };
                let started = match self.stage(Event::Start { at }) {
                    Ok(staged) => {
                        self.creating = Some(creating);
                        self.commit(vec![staged], defer).await
                    }
                    Err(e) if self.halted => Err(e),
                    Err(e) => {
                        tracing::warn!(run = %self.state.run_id, "event not applied: {e}");
                        let durable = self.rt.durable().await;
                        drop(creating);
                        durable
                    }
                };
                let _ = reply.send(started);
                if let Some(waiter) = waiter {
                    self.wait(waiter).await;
                }
            }
            Msg::Show(reply) => {
                // What it shows is durable (S100).
                if !self.all_durable().await {
                    return;
                }
                let _ = reply.send(RunRecord::new(&self.state, &self.graph));
            }
            Msg::Wait(waiter) => self.wait(waiter).await,
            Msg::Resume(request, reply) => {
                let r = self
                    .apply(Event::Resume {
                        request,
                        at: self.rt.now(),
                    })
                    .await;
                let _ = reply.send(r);
            }
            Msg::ResumeWait(request, waiter) => {
                let at = self.rt.now();
                // Its caller waits for the run to settle, which a sync covering the resume
                // will precede: the resume need not wait for one of its own.
                let applied = match self.stage_or_refuse(Event::Resume { request, at }).await {
                    Ok(staged) => self.commit(vec![staged], Defer::UntilSettled).await,
                    Err(e) => Err(e),
                };
                match applied {
                    Ok(()) => self.wait(waiter).await,
                    Err(e) => {
                        let _ = waiter.send(Err(e));
                    }
                }
            }
            Msg::Cancel(reply) => {
                let r = self
                    .apply(Event::Cancel {
                        at: self.rt.now(),
                        failure: None,
                    })
                    .await;
                let _ = reply.send(r);
            }
            Msg::Watched => {
                if self.syncing.is_none() && !self.unpublished.is_empty() {
                    self.start_syncing();
                }
            }
        }
    }

    /// Answers `waiter` with the record once the run is settled: now, when it is (after the
    /// transitions still syncing, S100), else when [`Actor::publish_status`] or
    /// [`Actor::let_go`] tells the waiters.
    async fn wait(&mut self, waiter: Waiter) {
        if !settled(self.state.status) {
            // Callers that gave up waiting leave their channel closed: not kept for nothing.
            self.waiters.retain(|w| !w.is_closed());
            self.waiters.push(waiter);
            return;
        }
        if !self.all_durable().await {
            return;
        }
        let _ = waiter.send(Ok(RunRecord::new(&self.state, &self.graph)));
    }

    /// Waits for the transitions still syncing; false when the sync failed (the actor halts).
    async fn all_durable(&mut self) -> bool {
        self.durable_sub >= self.at.next_sub || self.flush().await.is_ok()
    }

    /// Ends the run `failed` because driving it failed with `cause` (S101: the others go on).
    async fn undrivable(&mut self, cause: String) {
        let run = self.state.run_id.clone();
        tracing::error!(run = %run, "weft failed while driving the run ({cause}); it is marked failed");
        for f in self.in_flight.values() {
            f.abort.cancel();
        }
        self.in_flight.clear();
        match self
            .rt
            .end_undrivable(&run, RunStatus::Failed, &cause)
            .await
        {
            Ok(Some((state, (seq, sub)))) => {
                self.state = state;
                self.at.next_seq = seq + 1;
                self.at.next_sub = sub + 1;
            }
            Ok(None) => {}
            Err(e) => tracing::error!(run = %run, "cannot mark the run failed: {e}"),
        }
        self.publish_status();
    }

    /// Publishes the run's status when it changed, and answers the waiters once it is settled
    /// (suspended or ended). A run that ended with nothing in flight answers them when the
    /// actor retires, a moment later, with a record made of the state it lets go of rather
    /// than copied ([`Actor::let_go`]).
    fn publish_status(&mut self) {
        let status = self.state.status;
        self.status.send_if_modified(|s| {
            if s.status == status {
                return false;
            }
            *s = Progress {
                status,
                updated_at: self.state.updated_at,
            };
            true
        });
        let retiring = status.is_ended() && self.in_flight.is_empty();
        if settled(status) && !retiring && !self.waiters.is_empty() {
            let record = RunRecord::new(&self.state, &self.graph);
            answer(std::mem::take(&mut self.waiters), record);
        }
    }

    /// The actor of an ended run has retired and answered what was queued: the waiters get a
    /// record made of the run's state.
    fn let_go(self) {
        let Actor {
            state,
            graph,
            waiters,
            ..
        } = self;
        if state.status.is_ended() && !waiters.is_empty() {
            answer(waiters, RunRecord::from_state(state, &graph));
        }
    }
}

/// Gives `record` to `waiters`: a copy to each but the last, which gets it.
fn answer(mut waiters: Vec<Waiter>, record: RunRecord) {
    let last = waiters.pop();
    for w in waiters {
        let _ = w.send(Ok(record.clone()));
    }
    if let Some(w) = last {
        let _ = w.send(Ok(record));
    }
}

/// Whether a run with `status` waits for nothing this process does: ended or suspended.
fn settled(status: RunStatus) -> bool {
    status.is_ended() || status == RunStatus::Suspended
}
