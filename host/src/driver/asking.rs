//! What callers ask of a run once it exists: wait for it to settle, show its record, resume it,
//! cancel it. A request goes to the run's actor, started from the store when this process has
//! none; a run another process drives is asked through the store, and a run nobody answers for
//! is read from the store.

use super::actor::Msg;
use super::live_run::NotSent;
use super::unrecoverable::is_unloadable;
use super::{RunRecord, Runtime, RuntimeError, shared};
use crate::engine::{Refusal, ResumeRequest, RunStatus};
use crate::run_id::check_run_id;

impl Runtime {
    /// Waits until the run has ended or suspended, and returns its record.
    pub async fn wait(&self, run_id: &str) -> Result<RunRecord, RuntimeError> {
        check_run_id(run_id)?;
        if let Some(live) = self.live(run_id)
            && let Ok(Some(answer)) = live.ask(Msg::Wait).await
        {
            return answer;
        }
        self.wait_stored(run_id).await
    }

    /// [`Runtime::wait`] for a run this process does not drive, or whose actor went away
    /// without answering (it retired, or halted): the store has the final word.
    pub(super) async fn wait_stored(&self, run_id: &str) -> Result<RunRecord, RuntimeError> {
        if let Some(halted) = self.halted(run_id) {
            return Err(halted);
        }
        if self.is_shared() {
            // Another process may drive it: follow it until it settles.
            let mut events = self.watch_settled(run_id, 1)?;
            while events.recv().await.is_some() {}
        }
        self.show(run_id).await
    }

    /// The run's record (WORKFLOW-FORMAT.md §3).
    pub async fn show(&self, run_id: &str) -> Result<RunRecord, RuntimeError> {
        check_run_id(run_id)?;
        if let Some(live) = self.live(run_id)
            && let Ok(Some(record)) = live.ask(Msg::Show).await
        {
            return Ok(record);
        }
        let (state, graph) = self.load(run_id)?;
        Ok(RunRecord::from_state(state, &graph))
    }

    /// Resumes suspended steps (S67–S70).
    pub async fn resume(&self, run_id: &str, request: ResumeRequest) -> Result<(), RuntimeError> {
        self.check_resume(run_id, &request)?;
        self.ask(run_id, &shared::Ask::Resume(request), true).await
    }

    /// Resumes suspended steps as [`Runtime::resume`] does, then waits until the run ends or
    /// suspends again, as [`Runtime::wait`] does: one call, answered once, by the run's record
    /// (a refused resume is answered at once, with its error).
    pub async fn resume_and_wait(
        &self,
        run_id: &str,
        request: ResumeRequest,
    ) -> Result<RunRecord, RuntimeError> {
        self.check_resume(run_id, &request)?;
        match self.ensure_live(run_id) {
            Ok(live) => {
                let resume = |tx| Msg::ResumeWait(request.clone(), tx);
                if let Ok(Some(answer)) = live.ask(resume).await {
                    return answer;
                }
            }
            // Driven by another process: asked there, then followed.
            Err(RuntimeError::Elsewhere { .. }) => {}
            Err(e) => return Err(e),
        }
        // Its actor went away without answering: asked again, as `resume` does.
        self.resume(run_id, request).await?;
        self.wait(run_id).await
    }

    /// Refuses a resume of a malformed run id, or whose data is over the limit.
    fn check_resume(&self, run_id: &str, request: &ResumeRequest) -> Result<(), RuntimeError> {
        check_run_id(run_id)?;
        self.inner
            .config
            .resume_limit()
            .check_value("resume data", &request.data)?;
        Ok(())
    }

    /// Cancels a pending, running or suspended run (S75–S78). A run whose stored data does not
    /// load ends `cancelled` without running anything more of it.
    pub async fn cancel(&self, run_id: &str) -> Result<(), RuntimeError> {
        check_run_id(run_id)?;
        match self.ask(run_id, &shared::Ask::Cancel, true).await {
            Err(e) if is_unloadable(&e) => {
                let Some(s) = self.inner.store.summary(run_id)? else {
                    return Err(e);
                };
                if s.status.is_ended() {
                    return Err(Refusal::AlreadyEnded {
                        run: run_id.into(),
                        status: s.status,
                    }
                    .into());
                }
                tracing::warn!(
                    run = %run_id,
                    "the run cannot be loaded ({e}); it ends cancelled without running anything more"
                );
                self.end_undrivable(run_id, RunStatus::Cancelled, &e.to_string())
                    .await?;
                Ok(())
            }
            other => other,
        }
    }

    /// Sends a request to the run's actor; when the actor retires meanwhile, asks a new one.
    /// A run another process drives (a shared store) gets the request through the store when
    /// `forward`, else [`RuntimeError::Elsewhere`].
    pub(super) async fn ask(
        &self,
        run_id: &str,
        ask: &shared::Ask,
        forward: bool,
    ) -> Result<(), RuntimeError> {
        let mut attempt = 0;
        while attempt < self.inner.config.ask_attempts {
            let live = match self.ensure_live(run_id) {
                Err(RuntimeError::Elsewhere { worker, .. }) if forward => {
                    match self.ask_elsewhere(run_id, &worker, ask).await? {
                        Some(answer) => return answer,
                        // It moved on: look again (not an attempt: the run was not there).
                        None => continue,
                    }
                }
                other => other?,
            };
            attempt += 1;
            match live.ask(|tx| ask.msg(tx)).await {
                Ok(Some(answer)) => return answer,
                Ok(None) => {}
                Err(NotSent) => self.retire(run_id),
            }
        }
        Err(RuntimeError::DriverStopped { run: run_id.into() })
    }
}
