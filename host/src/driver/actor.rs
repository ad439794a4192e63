//! One task per live run: it owns the run's state, applies events, commits, and carries out
//! commands.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::Instrument;

use super::error::encode_failed;
use super::executors::RunExecutors;
use super::limits;
use super::live_events::LiveEvents;
use super::live_run::Progress;
use super::new_events::{NewEvent, NewEvents};
use super::record::{self, SnapshotOut};
use super::runtime::summary;
use super::starting::Creating;
use super::unpublished::{Durable, Unpublished};
use super::unrecoverable::panic_message;
use super::watch::stored_events;
use super::{RunRecord, Runtime, RuntimeError};
use crate::engine::invocation::{InvocationResult, StepFailure};
use crate::engine::{
    self, Command, Event, EventKind, Graph, Invoke, KeyHasher, ResumeRequest, RunState, RunStatus,
    StepsView, Tracking,
};
use crate::executor::StepRequest;
use crate::limits::LimitError;
use crate::plugin::{AbortHandle, EventSink, GuestEvent, Invocation, RunAccess};
use crate::store::StoreError;

/// What reaches a run's actor.
pub enum Msg {
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
pub type Waiter = oneshot::Sender<Result<RunRecord, RuntimeError>>;

/// The most transitions one fsync covers for a run: events queued beyond it wait for the next.
const MAX_BATCH: usize = 256;

/// When staged transitions may take effect before their sync ([`Actor::commit`]).
#[derive(Clone, Copy)]
enum Defer {
    /// Never: a caller waits for them to be durable (a start, a resume or cancel answered once
    /// applied).
    No,
    /// When nothing outside weft waits on them: no command but invocations that start before
    /// their sync, and no change of the run's status.
    Unseen,
    /// As [`Defer::Unseen`], and also after a change to a status that is not settled: the only
    /// caller waits for the run to settle ([`Msg::ResumeWait`], [`Msg::Start`] with a waiter),
    /// and is answered after a sync that covers these. The status is published once a sync
    /// does.
    UntilSettled,
}

/// A transition stored but not yet durable: what it emitted, and the commands it asks for.
struct Staged {
    stored: NewEvents,
    effects: Vec<Command>,
    /// The run's status changed: waiters are told, once it is durable.
    status_changed: bool,
}

/// An invocation the actor's own task runs, to its `StepEnded`.
type Local = Pin<Box<dyn Future<Output = Event> + Send>>;

/// A sync under way in the background, for transitions whose events wait for it.
type Syncing = Pin<Box<dyn Future<Output = Result<(), RuntimeError>> + Send>>;

/// Where an invocation's guest events belong.
struct InFlight {
    abort: AbortHandle,
    path: String,
    foreach_index: Option<u32>,
    iteration: Option<u32>,
}

pub struct Actor {
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
}

impl Position {
    /// A new run's: nothing stored beyond its first state.
    pub const FRESH: Position = Position {
        next_seq: 1,
        next_sub: 0,
        since_snapshot: 0,
        snapshot_len: 0,
    };
}

impl Actor {
    pub fn new(
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

    /// Closes the run's span once the run has ended or suspended, with its outcome, and opens
    /// a new one when a resume set it running again.
    fn follow_span(&mut self) {
        let status = self.state.status;
        let settled = settled(status);
        if settled && !self.span.is_none() {
            self.span.record("weft.outcome", status.to_string());
            if matches!(status, RunStatus::Failed | RunStatus::Tripwire) {
                self.span.record("otel.status_code", "ERROR");
            }
            self.span = tracing::Span::none();
        } else if !settled && self.span.is_none() {
            self.span = run_span(&self.state);
        }
    }

    pub async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>) {
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

    /// The sync under way ended: publishes the events it covers, and starts the next for
    /// those stored since.
    fn synced(&mut self) {
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
    /// `show`) or a watcher subscribes ([`Msg::Watched`]).
    ///
    /// [`RuntimeConfig::background_sync_after`]: super::RuntimeConfig::background_sync_after
    fn sync_due(&mut self) -> bool {
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
    fn start_syncing(&mut self) {
        self.all_covered();
        let rt = self.rt.clone();
        let ticket = rt.sync_ticket();
        let sync: Syncing = Box::pin(async move { rt.durable_at(ticket).await });
        self.syncing = Some((sync, self.unpublished.len(), self.at.next_sub));
    }

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
                let r = self.apply(Event::Cancel { at: self.rt.now() }).await;
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

    /// Numbers `tracking` with the run's next `seq`.
    fn stamp(&mut self, tracking: Tracking) -> NewEvent {
        let seq = self.at.next_seq;
        self.at.next_seq += 1;
        NewEvent { seq, tracking }
    }

    /// Stores what invocations wrote, in the order they wrote it (S91, S111), for publishing
    /// once it is durable.
    fn guest_events(&mut self, batch: Vec<(u64, GuestEvent)>) {
        let mut stored = NewEvents {
            at: engine::rfc3339(self.rt.now()),
            events: Vec::with_capacity(batch.len()),
        };
        for (token, ev) in batch {
            let Some(f) = self.in_flight.get(&token) else {
                continue;
            };
            let (kind, data) = match ev {
                GuestEvent::Output(v) => (EventKind::StepOutput, v),
                GuestEvent::Custom { kind, data } => {
                    (EventKind::StepCustom, json!({"kind": kind, "data": data}))
                }
                GuestEvent::Log { level, message } => {
                    (EventKind::Log, json!({"level": level, "message": message}))
                }
            };
            let t = Tracking {
                kind,
                path: Some(f.path.clone()),
                foreach_index: f.foreach_index,
                iteration: f.iteration,
                data: data.into(),
            };
            stored.events.push(self.stamp(t));
        }
        let persisted = self
            .begin_record(None)
            .and_then(|record| self.persist(record, &stored, false));
        if let Err(e) = persisted {
            self.halt(&e);
            return;
        }
        // Published once a sync covers them, as a transition's are (S91): a watcher that saw
        // a seq finds it stored under that seq after a crash, never given to another event.
        // Behind the events of transitions still syncing, in seq order.
        self.unpublished
            .push(stored, &self.state.run_id, &self.events);
        if self.sync_due() {
            self.start_syncing();
        }
    }

    /// Appends one record (S100): the orchestration event, if any, with the events it emitted;
    /// then, when one is due, a snapshot covering it and the summary, and the summary alone
    /// when `status_changed`.
    ///
    /// The records alone rebuild the state (the core is deterministic), so a snapshot is due
    /// only once the records written since the last one outweigh it
    /// [`RuntimeConfig::snapshot_ratio`](crate::driver::RuntimeConfig) times (and at least
    /// [`RuntimeConfig::snapshot_min_bytes`](crate::driver::RuntimeConfig)): the snapshots
    /// written come to about the records' bytes divided by that ratio (half, by default), and
    /// a reload folds at most that many snapshots' worth of records. Not when the run suspends
    /// or ends: such a run is read rarely (a `show`, a resume in another process), and folding
    /// its last records then costs less than a snapshot written for every run.
    fn persist(
        &mut self,
        mut bytes: Vec<u8>,
        stored: &NewEvents,
        status_changed: bool,
    ) -> Result<(), RuntimeError> {
        let at = (
            stored.seqs().map_or(self.at.next_seq - 1, |(_, last)| last),
            self.at.next_sub,
        );
        self.at.next_sub += 1;
        record::end_record(&mut bytes, &stored.written())
            .map_err(|e| encode_failed(&self.state.run_id, e))?;
        self.record_len = bytes.len();
        let rt = &self.rt;
        let min = rt.inner.config.snapshot_min_bytes;
        let ratio = rt.inner.config.snapshot_ratio.max(1);
        let due = self.at.snapshot_len.saturating_mul(ratio).max(min);
        let snap = if self.at.since_snapshot + bytes.len() >= due {
            Some(
                serde_json::to_vec(&SnapshotOut {
                    covers: at,
                    state: &self.state,
                })
                .map_err(|e| encode_failed(&self.state.run_id, e))?,
            )
        } else {
            None
        };
        let new_summary = (snap.is_some() || status_changed).then(|| summary(&self.state));
        rt.inner
            .store
            .append_all(
                &self.state.run_id,
                at,
                &bytes,
                snap.as_deref(),
                new_summary.as_ref(),
            )
            .map_err(|e| rt.write_failed(e))?;
        match snap {
            Some(snap) => {
                self.at.since_snapshot = 0;
                self.at.snapshot_len = snap.len();
            }
            None => self.at.since_snapshot += bytes.len(),
        }
        Ok(())
    }

    /// Stops driving the run because storing its progress failed with `e` (S100: nothing
    /// unstored takes effect). What is stored stays, and the run is recovered from it.
    fn halt(&mut self, e: &RuntimeError) {
        let cause = match e {
            RuntimeError::StoreFailed { cause, .. } => cause.clone(),
            other => StoreError::Backend(other.to_string()),
        };
        let halted = RuntimeError::Halted {
            run: self.state.run_id.clone(),
            home: self.rt.home().to_path_buf(),
            cause: cause.clone(),
        };
        tracing::error!("{halted}");
        for f in self.in_flight.values() {
            f.abort.cancel();
        }
        self.in_flight.clear();
        self.halted = true;
        self.rt.halt(&self.state.run_id, cause);
        // Those waiting for the run to settle learn why it will not, here: a caller of
        // `resume_and_wait` whose resume was applied must not ask again (the resume would be
        // refused as if nothing were suspended, hiding the cause). Told once the runtime has
        // let the run go, so that what they do next reaches a new driver, not this one.
        for waiter in std::mem::take(&mut self.waiters) {
            if let Some(halted) = self.rt.halted(&self.state.run_id) {
                let _ = waiter.send(Err(halted));
            }
        }
    }

    /// One transition: advance, store (S100), publish, then carry out the commands.
    async fn apply(&mut self, event: Event) -> Result<(), RuntimeError> {
        let staged = self.stage_or_refuse(event).await?;
        self.commit(vec![staged], Defer::No).await
    }

    /// [`Actor::stage`], except that a refusal is told only once what it rests on is durable:
    /// a transition still syncing (a resume whose caller waits for the run to settle,
    /// [`Defer::UntilSettled`]) must not show through a refusal before it is (S100).
    async fn stage_or_refuse(&mut self, event: Event) -> Result<Staged, RuntimeError> {
        let refused = match self.stage(event) {
            Ok(staged) => return Ok(staged),
            Err(e) => e,
        };
        if !self.halted {
            self.all_durable().await;
        }
        Err(refused)
    }

    /// Transitions that arrived together: each advanced and stored in turn, then all made
    /// durable by one fsync, then published and carried out in order. S100 holds for each:
    /// none of their effects happens before all of them are on disk.
    async fn apply_all(&mut self, events: Vec<Event>) {
        let mut staged = Vec::with_capacity(events.len());
        for event in events {
            match self.stage(event) {
                Ok(s) => staged.push(s),
                Err(_) if self.halted => return,
                Err(e) => tracing::warn!(run = %self.state.run_id, "event not applied: {e}"),
            }
        }
        if !staged.is_empty()
            && let Err(e) = self.commit(staged, Defer::Unseen).await
            && !self.halted
        {
            tracing::warn!(run = %self.state.run_id, "events not applied: {e}");
        }
    }

    /// Advances the state by `event` and appends its record; what it emitted and the commands
    /// to carry out once it is durable.
    fn stage(&mut self, mut event: Event) -> Result<Staged, RuntimeError> {
        // The invocation that ended, with its step's path when it succeeded with state
        // patches (they may have grown the state over the limit); its result is checked
        // against the value limits as it arrives.
        let mut ended = None;
        if let Event::StepEnded { token, result, .. } = &mut event {
            let path = self.in_flight.get(token).and_then(|f| {
                limits::enforce(result, &f.path, &self.rt.inner.config);
                let patched = result.outcome.is_ok() && !result.patches.is_empty();
                patched.then(|| f.path.clone())
            });
            ended = Some((*token, path));
        }
        let before = self.state.status;
        let at = event.at();
        let mut record = self.begin_record(Some(&event))?;
        let mut cmds = engine::advance(&mut self.state, &self.graph, event)?;
        if let Some((token, Some(path))) = &ended
            && let Some(failed) = self.over_state_limit(path, *token, at)?
        {
            record = self.begin_record(Some(&failed))?;
            cmds = engine::advance(&mut self.state, &self.graph, failed)?;
        }
        if let Some((token, _)) = ended {
            self.in_flight.remove(&token);
        }
        let mut stored = NewEvents {
            at: engine::rfc3339(at),
            events: Vec::new(),
        };
        let mut effects = Vec::new();
        for cmd in cmds {
            match cmd {
                Command::Emit(t) => stored.events.push(self.stamp(t)),
                other => effects.push(other),
            }
        }
        let status_changed = self.state.status != before;
        if let Err(e) = self.persist(record, &stored, status_changed) {
            self.halt(&e);
            return Err(e);
        }
        self.rt.inner.metrics.transition();
        Ok(Staged {
            stored,
            effects,
            status_changed,
        })
    }

    /// Makes the staged transitions take effect once they are durable: publishes their events
    /// and the run's status, and carries out their commands in order.
    ///
    /// Invocations that can change nothing outside weft ([`RunExecutors::contained`]) start at
    /// once instead, so that they run while the disk syncs; their guest events and their ends
    /// come to the actor as messages, stored after the transitions that issued them. When
    /// nothing else waits on the transitions (as `defer` says: no other command, no change of
    /// status or none anybody is answered at, nobody to answer), the actor does not wait for
    /// their sync either: their events and the run's status are published once a sync in the
    /// background covers them ([`Actor::next_msg`]), and the run goes on meanwhile. Nothing
    /// outside the process sees a transition before it is durable (S100): a watcher gets its
    /// events after the sync, a waiter the run's status, any other command waits for it;
    /// should the process die before, the run is recovered from what is on disk, and no
    /// invocation it had started early left a trace.
    async fn commit(&mut self, staged: Vec<Staged>, defer: Defer) -> Result<(), RuntimeError> {
        let mut effects = Vec::new();
        let mut status_changed = false;
        for s in staged {
            self.unpublished
                .push(s.stored, &self.state.run_id, &self.events);
            effects.extend(s.effects);
            status_changed |= s.status_changed;
        }
        // An invocation with no other in flight or issued beside it runs on this task: no
        // task to spawn, and its end reaches the actor without waking another thread. So do
        // all of them while more runs have invocations in flight than there are worker
        // threads: the other runs keep the threads busy, and a task each would only add
        // hand-offs.
        let invocations = effects
            .iter()
            .filter(|c| matches!(c, Command::Invoke(_)))
            .count();
        if invocations > 0 {
            // The run counts itself among those with invocations in flight.
            self.working.set(true);
        }
        let local = self.rt.busy() || (self.in_flight.is_empty() && invocations == 1);
        let mut after = Vec::with_capacity(effects.len());
        for cmd in effects {
            match cmd {
                Command::Invoke(invoke) if self.executors.contained(&invoke.plugin) => {
                    self.rt.inner.metrics.started_early();
                    self.invoke(*invoke, local);
                }
                other => after.push(other),
            }
        }
        let unseen = match defer {
            Defer::No => false,
            Defer::Unseen => !status_changed,
            // A status nobody is answered at: published once a sync covers it.
            Defer::UntilSettled => !status_changed || !settled(self.state.status),
        };
        if unseen && after.is_empty() {
            if self.sync_due() {
                self.start_syncing();
            }
            return Ok(());
        }
        self.flush().await?;
        for cmd in after {
            self.carry_out(cmd, local);
        }
        Ok(())
    }

    /// Waits until every transition stored so far is durable, running the local invocations
    /// meanwhile (their ends are kept for [`Actor::next_msg`]), then publishes their events.
    async fn flush(&mut self) -> Result<(), RuntimeError> {
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

    /// Publishes events a sync made durable to the run's watchers; those staged while nobody
    /// watched are read back from the store for a watcher that came since.
    fn publish(&self, durable: Durable) {
        let (store, run) = (&*self.rt.inner.store, &self.state.run_id);
        durable.publish(&self.events, |from, through| {
            stored_events(store, run, from, Some(through))
        });
    }

    /// A new record holding `event` ([`record::begin_record`]), with room for about as much as
    /// the last one held.
    fn begin_record(&self, event: Option<&Event>) -> Result<Vec<u8>, RuntimeError> {
        let room = self.record_len.min(RECORD_ROOM);
        let mut bytes = Vec::with_capacity(room + room / 4);
        record::begin_record(&mut bytes, event)
            .map_err(|e| encode_failed(&self.state.run_id, e))?;
        Ok(bytes)
    }

    /// After step invocation `token` succeeded at `at`: when it grew a workflow file's state
    /// over the limit, puts back the state before it (the stored one) and returns the step's
    /// end as an `output-limit` failure to apply instead.
    fn over_state_limit(
        &mut self,
        path: &str,
        token: u64,
        at: engine::Millis,
    ) -> Result<Option<Event>, RuntimeError> {
        let limit = self.rt.inner.config.state_limit();
        let size = limits::largest_state(&self.state);
        if size <= limit.bytes {
            return Ok(None);
        }
        let (before, _) = self.rt.load(&self.state.run_id)?;
        if limits::largest_state(&before) >= size {
            // Over the limit already (a lowered limit, a large initial state): not this step.
            return Ok(None);
        }
        self.state = before;
        let e = LimitError::TooLarge {
            what: "the state after its patches".into(),
            size,
            limit: limit.bytes,
            setting: limit.setting,
        };
        Ok(Some(Event::StepEnded {
            token,
            result: Box::new(limits::over_limit(path, &e)),
            at,
        }))
    }

    /// Carries out `cmd`; an invocation runs on this task when `local`.
    fn carry_out(&mut self, cmd: Command, local: bool) {
        match cmd {
            Command::Invoke(invoke) => self.invoke(*invoke, local),
            Command::Timer { token, at } => {
                let tx = self.tx.clone();
                let clock = self.rt.clock();
                let wait = clock.sleep_until(at);
                tokio::spawn(async move {
                    wait.await;
                    let _ = tx.send(Msg::Event(Event::TimerFired {
                        token,
                        at: clock.now_ms(),
                    }));
                });
            }
            Command::Abort { tokens } => {
                for t in tokens {
                    if let Some(f) = self.in_flight.get(&t) {
                        f.abort.cancel();
                    }
                }
            }
            Command::Emit(_) => {}
        }
    }

    /// Starts an invocation: on a task of its own, or with `local` on this actor's task, which
    /// polls it while it waits for messages ([`Actor::next_msg`]). Either way its guest events
    /// reach the actor through its channel before its end.
    fn invoke(&mut self, cmd: Invoke, local: bool) {
        let token = cmd.token;
        let abort = AbortHandle::new();
        if self.state.cancelling {
            abort.cancel();
        }
        self.in_flight.insert(
            token,
            InFlight {
                abort: abort.clone(),
                path: cmd.call.step_path.clone(),
                foreach_index: cmd.call.foreach_index,
                iteration: cmd.call.iteration,
            },
        );
        let tx = self.tx.clone();
        let clock = self.rt.clock();
        let executors = self.executors.clone();
        let rt = self.rt.clone();
        let span = step_span(&self.span, &self.state.run_id, &cmd);
        rt.inner.metrics.invocation_started();
        let started = std::time::Instant::now();
        let task = async move {
            let resolved = match executors.ready(&cmd.plugin) {
                Some(executor) => Ok(executor),
                // Boxed: the future of loading a plugin is large, and held inline it would
                // make every invocation's future as large, copied at each move.
                None => Box::pin(executors.resolve(&cmd.plugin, &cmd.step)).await,
            };
            let result = match resolved {
                Ok(executor) => {
                    let sink = Arc::new(Sink {
                        tx: tx.clone(),
                        token,
                    });
                    let io = Invocation::new(sink, Arc::new(View(cmd.view)))
                        .with_abort(abort)
                        .with_deadline(cmd.timeout_ms.map(Duration::from_millis));
                    let request = StepRequest {
                        step: cmd.step,
                        kind: cmd.kind,
                        call: cmd.call,
                        io,
                    };
                    // A panicking executor fails its step instead of leaving the run waiting
                    // for an end that never comes (S84 for what is not a plugin).
                    AssertUnwindSafe(async { executor.execute(request).await })
                        .catch_unwind()
                        .await
                        .unwrap_or_else(|panic| panicked(&*panic))
                }
                Err(e) => unavailable(e.to_string()),
            };
            rt.inner
                .metrics
                .invocation_ended(&result, started.elapsed());
            let span = tracing::Span::current();
            let outcome = super::metrics::outcome(&result);
            span.record("weft.outcome", outcome);
            if matches!(outcome, "failed" | "tripwire") {
                span.record("otel.status_code", "ERROR");
            }
            Event::StepEnded {
                token,
                result: Box::new(result),
                at: clock.now_ms(),
            }
        };
        if local {
            self.rt.inner.metrics.on_run_task();
            self.local.push(Box::pin(task.instrument(span)));
        } else {
            let tx = self.tx.clone();
            // Boxed, so that spawning moves a pointer rather than the whole invocation's
            // future (a few kilobytes, copied into the task and again on its first poll).
            let task = Box::pin(task);
            tokio::spawn(
                async move {
                    let _ = tx.send(Msg::Event(task.await));
                }
                .instrument(span),
            );
        }
    }
}

/// Counts a run in [`super::Runtime::busy`]'s number of runs with an invocation in flight
/// while it has one, and no longer once the actor is gone.
struct Working {
    runs: Arc<AtomicUsize>,
    counted: bool,
}

impl Working {
    fn new(runs: Arc<AtomicUsize>) -> Self {
        Working {
            runs,
            counted: false,
        }
    }

    /// Counts the run when `working`, else not.
    fn set(&mut self, working: bool) {
        if working != self.counted {
            self.counted = working;
            if working {
                self.runs.fetch_add(1, Ordering::Relaxed);
            } else {
                self.runs.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

impl Drop for Working {
    fn drop(&mut self) {
        self.set(false);
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

/// The span of one drive of a run (see [`Actor::follow_span`]).
fn run_span(state: &RunState) -> tracing::Span {
    tracing::info_span!(
        "weft.run",
        otel.name = %format!("run {}", state.workflow_id),
        weft.run_id = %state.run_id,
        weft.workflow_id = %state.workflow_id,
        weft.outcome = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// The span of one step attempt, inside its run's span.
fn step_span(run: &tracing::Span, run_id: &str, cmd: &Invoke) -> tracing::Span {
    let call = &cmd.call;
    tracing::info_span!(
        parent: run,
        "weft.step",
        otel.name = %format!("step {}", call.step_path),
        weft.run_id = %run_id,
        weft.step.path = %call.step_path,
        weft.step.attempt = call.attempt,
        weft.step.foreach_index = call.foreach_index.map(i64::from),
        weft.step.iteration = call.iteration.map(i64::from),
        weft.outcome = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// The failure of a step whose executor panicked: a `trap` with the panic's first line.
fn panicked(panic: &(dyn std::any::Any + Send)) -> InvocationResult {
    let reason = panic_message(panic);
    let reason = reason.lines().next().unwrap_or_default();
    tracing::error!(%reason, "a step executor panicked");
    InvocationResult {
        outcome: Err(StepFailure::new("trap", format!("step panicked: {reason}"))),
        patches: Vec::new(),
    }
}

fn unavailable(message: String) -> InvocationResult {
    InvocationResult {
        outcome: Err(StepFailure::new("plugin-unavailable", message).not_retryable()),
        patches: Vec::new(),
    }
}

/// Sends an invocation's guest events to its run's actor, in call order.
struct Sink {
    tx: mpsc::UnboundedSender<Msg>,
    token: u64,
}

impl EventSink for Sink {
    fn emit(&self, event: GuestEvent) {
        let _ = self.tx.send(Msg::Guest(self.token, event));
    }
}

/// What an invocation may read of its run (S8).
struct View(StepsView);

impl RunAccess for View {
    fn init_data(&self) -> Value {
        Value::clone(&self.0.init)
    }

    fn step_result(&self, step: &str) -> Option<Value> {
        self.0.get(step).map(|v| Value::clone(v))
    }
}
