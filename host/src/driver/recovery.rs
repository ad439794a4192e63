//! Recovering runs that no process drives (S101, S114): one ([`Runtime::recover`]) or every
//! such run of the store ([`Runtime::recover_all`]); their drivers start here and issue again
//! what was in flight (S102, S103).

#[cfg(feature = "server")]
use serde_json::Value;

use super::unrecoverable::is_unloadable;
use super::{Recovery, Runtime, RuntimeError, Unrecovered};
#[cfg(feature = "server")]
use crate::engine::ResumeRequest;
use crate::engine::RunStatus;
use crate::run_id::check_run_id;

impl Runtime {
    /// Recovers a `pending` or `running` run that no process drives (S101, S114): its driver
    /// starts here and issues again what was in flight (S102, S103). A run this process (or,
    /// on a shared store, another live one) drives already is left as it is; a suspended or
    /// ended one is refused with [`RuntimeError::NotRecoverable`].
    pub async fn recover(&self, run_id: &str) -> Result<(), RuntimeError> {
        check_run_id(run_id)?;
        let summary = self
            .inner
            .store
            .summary(run_id)?
            .ok_or_else(|| RuntimeError::UnknownRun(run_id.into()))?;
        if !matches!(summary.status, RunStatus::Running | RunStatus::Pending) {
            return Err(RuntimeError::NotRecoverable {
                run: run_id.into(),
                status: summary.status,
            });
        }
        match self.ensure_live(run_id) {
            Ok(_) => Ok(()),
            // Another process holds it: recovered here once it shows itself gone, else it is
            // driven there and needs nothing (S127).
            Err(RuntimeError::Elsewhere { worker, .. }) => {
                self.take_up_when_gone(run_id, &worker).await
            }
            Err(e) => Err(e),
        }
    }

    /// What `weft resume` and `POST /runs/{id}/resume` do: resume with `request`; without one
    /// (no selector, no data), recover a running or pending run that no process drives (S101),
    /// else resume every suspension with `{}`.
    #[cfg(feature = "server")]
    pub(crate) async fn resume_or_recover(
        &self,
        run_id: &str,
        request: Option<ResumeRequest>,
    ) -> Result<(), RuntimeError> {
        let request = match request {
            Some(request) => request,
            None => match self.recover(run_id).await {
                Err(RuntimeError::NotRecoverable { .. }) => ResumeRequest {
                    step: None,
                    label: None,
                    foreach_index: None,
                    data: Value::Object(Default::default()),
                },
                recovered => return recovered,
            },
        };
        self.resume(run_id, request).await
    }

    /// Recovers every `pending` or `running` run that no live process drives (S101, S114), each
    /// on its own: a run whose stored data does not load is marked failed, and one the core
    /// fails on while recovering it ends failed (by its actor), while the others go on.
    pub async fn recover_all(&self) -> Result<Recovery, RuntimeError> {
        let mut report = Recovery::default();
        for run in self.inner.store.runs()? {
            if !matches!(run.status, RunStatus::Running | RunStatus::Pending)
                || self.live(&run.run_id).is_some()
            {
                continue;
            }
            self.recover_one(&run.run_id, &mut report).await;
        }
        Ok(report)
    }

    /// Recovers `run_id` into `report`, unless another live process drives it.
    pub(super) async fn recover_one(&self, run_id: &str, report: &mut Recovery) {
        let error = match self.ensure_live(run_id) {
            Ok(_) => {
                report.recovered.push(run_id.to_owned());
                return;
            }
            Err(RuntimeError::Elsewhere { .. }) => return,
            Err(e) => e,
        };
        let mut marked_failed = false;
        if is_unloadable(&error) {
            match self
                .end_undrivable(run_id, RunStatus::Failed, &error.to_string())
                .await
            {
                Ok(_) => marked_failed = true,
                Err(e) => tracing::error!(run = %run_id, "cannot mark the run failed: {e}"),
            }
        }
        report.failed.push(Unrecovered {
            run_id: run_id.to_owned(),
            error,
            marked_failed,
        });
    }
}
