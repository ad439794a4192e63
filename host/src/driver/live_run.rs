//! The runs that have an actor in this process: the handle the runtime keeps of each
//! ([`LiveRun`]), how a request is asked of it and what it publishes ([`Progress`]), and how the
//! runtime starts, finds and retires actors.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};

use super::actor::{Actor, Msg, Position};
use super::live_events::LiveEvents;
use super::runtime::lock;
use super::{Runtime, RuntimeError};
use crate::engine::{Event, Graph, RunState, RunStatus};
use crate::store::Claim;

/// A run that has an actor in this process.
#[derive(Clone)]
pub(super) struct LiveRun {
    /// The actor's queue.
    pub(super) tx: mpsc::UnboundedSender<Msg>,
    /// Closed once the actor has stopped (it holds the sender).
    pub(super) status: watch::Receiver<Progress>,
}

/// A request [`LiveRun::ask`] could not send: the actor had stopped reading.
pub(super) struct NotSent;

impl LiveRun {
    /// Sends the actor the request that `msg` makes of a reply channel and waits for the
    /// answer: `None` when the actor stopped without giving one.
    ///
    /// The actor's end is watched, not only the reply channel. A request sent just as the
    /// actor stops can land in its queue after the actor's last read of it; the queue then
    /// keeps the reply channel open, unanswered, for as long as any sender of the queue lives
    /// (a pending timer's, or this caller's), and waiting on the reply alone would never end.
    pub(super) async fn ask<T>(
        self,
        msg: impl FnOnce(oneshot::Sender<T>) -> Msg,
    ) -> Result<Option<T>, NotSent> {
        let LiveRun { tx, mut status } = self;
        let (reply, mut answer) = oneshot::channel();
        tx.send(msg(reply)).map_err(|_| NotSent)?;
        drop(tx);
        Ok(tokio::select! {
            biased;
            answered = &mut answer => answered.ok(),
            () = stopped(&mut status) => answer.try_recv().ok(),
        })
    }
}

/// Returns once the actor that publishes `status` has stopped.
async fn stopped(status: &mut watch::Receiver<Progress>) {
    while status.changed().await.is_ok() {}
}

/// Where a live run stands, as its actor publishes it once durable (S100): what listings
/// show of it.
#[derive(Clone)]
pub(super) struct Progress {
    /// The run's status.
    pub(super) status: RunStatus,
    /// When the run last changed, as of `status`.
    pub(super) updated_at: i64,
}

impl Progress {
    /// The progress of a run in `state`.
    pub(super) fn of(state: &RunState) -> Self {
        Progress {
            status: state.status,
            updated_at: state.updated_at,
        }
    }
}

impl Runtime {
    pub(super) fn live(&self, run_id: &str) -> Option<LiveRun> {
        lock(&self.inner.live).get(run_id).cloned()
    }

    /// The run's actor, started from the store when this process has none.
    pub(super) fn ensure_live(&self, run_id: &str) -> Result<LiveRun, RuntimeError> {
        if let Some(live) = self.live(run_id) {
            return Ok(live);
        }
        if let Claim::Elsewhere(worker) = self.inner.store.claim(run_id)? {
            return Err(RuntimeError::Elsewhere {
                run: run_id.into(),
                worker,
            });
        }
        let (state, graph, at) = self.load_counted(run_id)?;
        let recover = matches!(state.status, RunStatus::Running | RunStatus::Pending);
        let recover = recover.then(|| Msg::Event(Event::Recover { at: self.now() }));
        Ok(self.spawn_with(state, graph, at, recover))
    }

    pub(super) fn spawn(
        &self,
        state: RunState,
        graph: Arc<Graph>,
        at: Position,
    ) -> Result<LiveRun, RuntimeError> {
        Ok(self.spawn_with(state, graph, at, None))
    }

    /// The run's actor: a new one, given `first` as its first message, unless one runs already
    /// (which gets nothing: two recoveries of one run would issue its invocations twice).
    pub(super) fn spawn_with(
        &self,
        state: RunState,
        graph: Arc<Graph>,
        at: Position,
        first: Option<Msg>,
    ) -> LiveRun {
        let mut live = lock(&self.inner.live);
        if let Some(existing) = live.get(&state.run_id) {
            return existing.clone();
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let events = self.channel(&state.run_id);
        // What is stored when the actor takes the run up is durable.
        events.mark_durable(at.next_seq.saturating_sub(1));
        let (status_tx, status) = watch::channel(Progress::of(&state));
        let handle = LiveRun {
            tx: tx.clone(),
            status,
        };
        live.insert(state.run_id.clone(), handle.clone());
        lock(&self.inner.halted).remove(&state.run_id);
        if let Some(msg) = first {
            let _ = tx.send(msg);
        }
        let actor = Actor::new(self.clone(), state, graph, tx, events, status_tx, at);
        tokio::spawn(actor.run(rx));
        handle
    }

    pub(super) fn retire(&self, run_id: &str) {
        lock(&self.inner.live).remove(run_id);
        self.inner.freed.notify_one();
        self.inner.retired.notify_waiters();
        if let Err(e) = self.inner.store.release(run_id) {
            tracing::warn!(run = %run_id, "cannot let the run go: {e}");
        }
        let mut channels = lock(&self.inner.channels);
        if channels
            .get(run_id)
            .is_some_and(|c| c.receiver_count() == 0)
        {
            channels.remove(run_id);
        }
    }

    /// The run's live event channel, made when missing.
    pub(super) fn channel(&self, run_id: &str) -> Arc<LiveEvents> {
        lock(&self.inner.channels)
            .entry(run_id.to_owned())
            .or_insert_with(|| Arc::new(LiveEvents::new(self.inner.config.watch_buffer)))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    /// What a cancel asked of a live run answers.
    type Asked = Result<Option<Result<(), RuntimeError>>, NotSent>;

    /// A live run as the runtime holds it, with its actor's ends: its queue and the sender of
    /// its status, which the actor drops as it stops.
    fn live_run() -> (
        LiveRun,
        mpsc::UnboundedReceiver<Msg>,
        watch::Sender<Progress>,
    ) {
        let (tx, queue) = mpsc::unbounded_channel();
        let (status_tx, status) = watch::channel(Progress {
            status: RunStatus::Running,
            updated_at: 0,
        });
        (LiveRun { tx, status }, queue, status_tx)
    }

    /// A cancel asked of a live run, sent and not yet answered.
    struct Asking<F> {
        /// The waiting call.
        asked: std::pin::Pin<Box<F>>,
        /// The reply channel its request carries.
        reply: oneshot::Sender<Result<(), RuntimeError>>,
        /// The sender of the actor's status, dropped as the actor stops.
        status: watch::Sender<Progress>,
    }

    fn asked_a_cancel() -> Asking<impl Future<Output = Asked>> {
        let (live, mut queue, status) = live_run();
        let mut asked = Box::pin(live.ask(Msg::Cancel));
        assert!(
            (&mut asked).now_or_never().is_none(),
            "answered before asked"
        );
        let Ok(Msg::Cancel(reply)) = queue.try_recv() else {
            panic!("the request was not queued");
        };
        assert!(
            (&mut asked).now_or_never().is_none(),
            "unanswered, actor live"
        );
        Asking {
            asked,
            reply,
            status,
        }
    }

    /// A request that landed in the queue of an actor that had stopped reading it (sent as
    /// the actor retired) is not waited for once the actor is gone, although its reply channel
    /// is still open: `wait`, `show`, `resume` and `cancel` then ask the store. Waiting on
    /// the reply alone hung `Runtime::wait` about once in ten thousand runs under load.
    #[test]
    fn a_request_left_in_a_stopped_actors_queue_is_not_waited_for() {
        let Asking {
            asked,
            reply,
            status,
        } = asked_a_cancel();
        drop(status);
        match asked.now_or_never() {
            Some(Ok(None)) => {}
            Some(_) => panic!("an answer nobody gave"),
            None => panic!("still waiting on an actor that has stopped"),
        }
        assert!(reply.is_closed(), "the caller let go of the reply channel");
    }

    /// An answer given just before the actor stopped is the answer, not the store's.
    #[test]
    fn an_answer_given_as_the_actor_stops_is_kept() {
        let Asking {
            asked,
            reply,
            status,
        } = asked_a_cancel();
        let _ = reply.send(Ok(()));
        drop(status);
        assert!(matches!(asked.now_or_never(), Some(Ok(Some(Ok(()))))));
    }

    /// A request to an actor that no longer reads its queue is not sent.
    #[test]
    fn a_request_to_a_closed_queue_is_not_sent() {
        let (live, queue, _status) = live_run();
        drop(queue);
        assert!(matches!(
            live.ask(Msg::Cancel).now_or_never(),
            Some(Err(NotSent))
        ));
    }
}
