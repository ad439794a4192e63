//! How the actor makes a transition: advances the state by an event, stores its record (and a
//! snapshot when one is due) before anything it caused takes effect (S100), and commits the
//! transitions staged together; also the batches of guest events, stored as they come, and the
//! stop when storing fails.

use serde_json::json;

use super::{Actor, RECORD_ROOM, settled};
use crate::driver::RuntimeError;
use crate::driver::codec::{self, SnapshotOut};
use crate::driver::error::encode_failed;
use crate::driver::limits;
use crate::driver::new_events::{NewEvent, NewEvents};
use crate::driver::runtime::summary;
use crate::engine::{self, Command, Event, EventKind, Tracking};
use crate::executor::GuestEvent;
use crate::limits::LimitError;
use crate::store::StoreError;

/// The code of a run stopped for writing more than it may
/// ([`RuntimeConfig::max_run_bytes`](crate::driver::RuntimeConfig)).
const RUN_LIMIT: &str = "run-limit";

/// When staged transitions may take effect before their sync ([`Actor::commit`]).
#[derive(Clone, Copy)]
pub(super) enum Defer {
    /// Never: a caller waits for them to be durable (a start, a resume or cancel answered once
    /// applied).
    No,
    /// When nothing outside weft waits on them: no command but invocations that start before
    /// their sync, and no change of the run's status.
    Unseen,
    /// As [`Defer::Unseen`], and also after a change to a status that is not settled: the only
    /// caller waits for the run to settle ([`Msg::ResumeWait`](super::Msg::ResumeWait), [`Msg::Start`](super::Msg::Start) with a waiter),
    /// and is answered after a sync that covers these. The status is published once a sync
    /// does.
    UntilSettled,
}

/// A transition stored but not yet durable: what it emitted, and the commands it asks for
/// (with the stop that followed it, when it took the run past the bytes it may write: two
/// records).
pub(super) struct Staged {
    stored: Vec<NewEvents>,
    effects: Vec<Command>,
    /// The run's status changed: waiters are told, once it is durable.
    status_changed: bool,
}

impl Actor {
    /// One transition: advance, store (S100), publish, then carry out the commands.
    pub(super) async fn apply(&mut self, event: Event) -> Result<(), RuntimeError> {
        let staged = self.stage_or_refuse(event).await?;
        self.commit(vec![staged], Defer::No).await
    }

    /// [`Actor::stage`], except that a refusal is told only once what it rests on is durable:
    /// a transition still syncing (a resume whose caller waits for the run to settle,
    /// [`Defer::UntilSettled`]) must not show through a refusal before it is (S100).
    pub(super) async fn stage_or_refuse(&mut self, event: Event) -> Result<Staged, RuntimeError> {
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
    pub(super) async fn apply_all(&mut self, events: Vec<Event>) {
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
    /// to carry out once it is durable. When the run's records are now past
    /// [`RuntimeConfig::max_run_bytes`](crate::driver::RuntimeConfig), the run is stopped too
    /// ([`Actor::over_run_limit`]), in a record of its own.
    pub(super) fn stage(&mut self, event: Event) -> Result<Staged, RuntimeError> {
        let at = event.at();
        let mut staged = self.stage_event(event)?;
        if let Some(stop) = self.over_run_limit(at) {
            let stopped = self.stage_event(stop)?;
            staged.stored.extend(stopped.stored);
            staged.effects.extend(stopped.effects);
            staged.status_changed |= stopped.status_changed;
        }
        Ok(staged)
    }

    /// The stop of a run whose records are past the bytes it may write, unless it is stopping
    /// or has ended already: a cancel that ends it `failed` with `run-limit`.
    fn over_run_limit(&self, at: engine::Millis) -> Option<Event> {
        let limit = self.rt.inner.config.max_run_bytes;
        if self.at.written <= limit || self.state.cancelling || self.state.status.is_ended() {
            return None;
        }
        let step = self
            .state
            .records
            .keys()
            .last()
            .cloned()
            .unwrap_or_default();
        Some(Event::Cancel {
            at,
            failure: Some(engine::ErrorInfo {
                message: format!(
                    "run {} stopped: its records take {} bytes, past the {} one run may write \
                     (raise it with --max-run-mib or RuntimeConfig::max_run_bytes)",
                    self.state.run_id,
                    self.at.written,
                    crate::limits::bytes_text(limit)
                ),
                code: RUN_LIMIT.into(),
                step,
                details: None,
                foreach_index: None,
                iteration: None,
            }),
        })
    }

    /// [`Actor::stage`] of one event.
    fn stage_event(&mut self, mut event: Event) -> Result<Staged, RuntimeError> {
        // The invocation that ended, with its step's path when it succeeded with state
        // patches (they may have grown the state over the limit); its result is checked
        // against the value limits as it arrives.
        let mut ended = None;
        if let Event::StepEnded { token, result, .. } = &mut event {
            let value_limit = self.state.value_limit;
            let path = self.in_flight.get(token).and_then(|f| {
                limits::enforce(result, &f.path, value_limit);
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
            at: self.event_instant(at),
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
            stored: vec![stored],
            effects,
            status_changed,
        })
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

    /// Makes the staged transitions take effect once they are durable: publishes their events
    /// and the run's status, and carries out their commands in order.
    ///
    /// Invocations that can change nothing outside weft ([`RunExecutors::contained`](crate::driver::executors::RunExecutors::contained)) start at
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
    pub(super) async fn commit(
        &mut self,
        staged: Vec<Staged>,
        defer: Defer,
    ) -> Result<(), RuntimeError> {
        let mut effects = Vec::new();
        let mut status_changed = false;
        for s in staged {
            for stored in s.stored {
                self.unpublished
                    .push(stored, &self.state.run_id, &self.events);
            }
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

    /// A new record holding `event` ([`codec::begin_record`]), with room for about as much as
    /// the last one held.
    fn begin_record(&self, event: Option<&Event>) -> Result<Vec<u8>, RuntimeError> {
        let room = self.record_len.min(RECORD_ROOM);
        let mut bytes = Vec::with_capacity(room + room / 4);
        codec::begin_record(&mut bytes, event).map_err(|e| encode_failed(&self.state.run_id, e))?;
        Ok(bytes)
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
        codec::end_record(&mut bytes, &stored.written())
            .map_err(|e| encode_failed(&self.state.run_id, e))?;
        self.record_len = bytes.len();
        let written = self.at.written.saturating_add(bytes.len() as u64);
        let rt = &self.rt;
        let min = rt.inner.config.snapshot_min_bytes;
        let ratio = rt.inner.config.snapshot_ratio.max(1);
        let due = self.at.snapshot_len.saturating_mul(ratio).max(min);
        let snap = if self.at.since_snapshot + bytes.len() >= due {
            Some(
                serde_json::to_vec(&SnapshotOut {
                    covers: at,
                    state: &self.state,
                    written,
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
        self.at.written = written;
        match snap {
            Some(snap) => {
                self.at.since_snapshot = 0;
                self.at.snapshot_len = snap.len();
            }
            None => self.at.since_snapshot += bytes.len(),
        }
        Ok(())
    }

    /// The instant of the next record's events, `at` or, when earlier, the last one given
    /// ([`super::Position::last_event_at`]).
    fn event_instant(&mut self, at: engine::Millis) -> String {
        let at = at.max(self.at.last_event_at);
        self.at.last_event_at = at;
        engine::rfc3339(at)
    }

    /// Numbers `tracking` with the run's next `seq`.
    fn stamp(&mut self, tracking: Tracking) -> NewEvent {
        let seq = self.at.next_seq;
        self.at.next_seq += 1;
        NewEvent { seq, tracking }
    }

    /// Stores what invocations wrote, in the order they wrote it (S91, S111), for publishing
    /// once it is durable.
    pub(super) fn guest_events(&mut self, batch: Vec<(u64, GuestEvent)>) {
        let now = self.rt.now();
        let mut stored = NewEvents {
            at: self.event_instant(now),
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

    /// Stops driving the run because storing its progress failed with `e` (S100: nothing
    /// unstored takes effect). What is stored stays, and the run is recovered from it.
    pub(super) fn halt(&mut self, e: &RuntimeError) {
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
}
