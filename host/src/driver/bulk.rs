//! Operations on every run a filter matches: cancel them ([`Runtime::cancel_matching`]) or
//! resume them with one request ([`Runtime::resume_matching`]), with a dry run that counts.
//! Each run is asked as one call of [`Runtime::cancel`] or [`Runtime::resume`] would ask it; a
//! run refused (it ended meanwhile, nothing it has matches the resume) is reported, not fatal.

use serde::{Deserialize, Serialize};

use super::{Runtime, RuntimeError};
use crate::engine::{ResumeRequest, RunStatus};
use crate::store::RunSummary;

/// Which runs a bulk operation acts on: those matching every field given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunFilter {
    /// Only runs of this top-level workflow id.
    pub workflow: Option<String>,
    /// Only runs of this status.
    pub status: Option<RunStatus>,
    /// Only runs carrying every one of these tags.
    pub tags: Vec<(String, String)>,
    /// Only runs created at or after this instant (ms since the epoch).
    pub created_after: Option<i64>,
    /// Only runs created before this instant (ms since the epoch).
    pub created_before: Option<i64>,
}

impl RunFilter {
    /// Only runs of workflow `workflow`.
    pub fn with_workflow(mut self, workflow: impl Into<String>) -> Self {
        self.workflow = Some(workflow.into());
        self
    }

    /// Only runs of `status`.
    pub fn with_status(mut self, status: RunStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// Only runs carrying tag `key: value` (and the others given).
    pub fn with_tag(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.tags.push((key.into(), value.into()));
        self
    }

    /// Whether `run` matches.
    pub fn matches(&self, run: &RunSummary) -> bool {
        self.workflow
            .as_deref()
            .is_none_or(|w| w == run.workflow_id)
            && self.status.is_none_or(|s| s == run.status)
            && run.has_tags(&self.tags)
            && self.created_after.is_none_or(|t| run.created_at >= t)
            && self.created_before.is_none_or(|t| run.created_at < t)
    }

    /// Whether no field is given: a filter that matches every run.
    pub fn is_empty(&self) -> bool {
        *self == RunFilter::default()
    }
}

/// What a bulk operation did, or in a dry run would do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BulkReport {
    /// The runs the filter matched that the operation applies to (a cancel: those not ended;
    /// a resume: the suspended ones).
    pub matched: u64,
    /// Of them, those it was carried out on (in a dry run: none).
    pub done: u64,
    /// Those refused, with why (a run that ended meanwhile, a resume that matches nothing of
    /// the run).
    pub refused: Vec<(String, String)>,
    /// Whether this was a dry run.
    pub dry_run: bool,
}

impl Runtime {
    /// The runs `filter` matches, newest first; their statuses as published (S100).
    pub fn select(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, RuntimeError> {
        for (k, v) in &filter.tags {
            crate::tags::check_tag(k, v)?;
        }
        Ok(self
            .runs(filter.workflow.as_deref(), filter.status)?
            .into_iter()
            .filter(|r| filter.matches(r))
            .collect())
    }

    /// Cancels every run `filter` matches that has not ended; in a dry run, counts them.
    pub async fn cancel_matching(
        &self,
        filter: &RunFilter,
        dry_run: bool,
    ) -> Result<BulkReport, RuntimeError> {
        let runs = self.select_where(filter, |s| !s.is_ended())?;
        self.each(runs, dry_run, |id| async move { self.cancel(&id).await })
            .await
    }

    /// Resumes every suspended run `filter` matches with `request`; in a dry run, counts them.
    pub async fn resume_matching(
        &self,
        filter: &RunFilter,
        request: &ResumeRequest,
        dry_run: bool,
    ) -> Result<BulkReport, RuntimeError> {
        let runs = self.select_where(filter, |s| s == RunStatus::Suspended)?;
        self.each(runs, dry_run, |id| async move {
            self.resume(&id, request.clone()).await
        })
        .await
    }

    /// The ids of the runs `filter` matches whose status `applies` takes.
    fn select_where(
        &self,
        filter: &RunFilter,
        applies: impl Fn(RunStatus) -> bool,
    ) -> Result<Vec<String>, RuntimeError> {
        Ok(self
            .select(filter)?
            .into_iter()
            .filter(|r| applies(r.status))
            .map(|r| r.run_id)
            .collect())
    }

    /// Carries out `act` on each of `runs` in turn (none in a dry run), counting what it did
    /// and what was refused.
    async fn each<F: Future<Output = Result<(), RuntimeError>>>(
        &self,
        runs: Vec<String>,
        dry_run: bool,
        act: impl Fn(String) -> F,
    ) -> Result<BulkReport, RuntimeError> {
        let mut report = BulkReport {
            matched: runs.len() as u64,
            dry_run,
            ..BulkReport::default()
        };
        if dry_run {
            return Ok(report);
        }
        for id in runs {
            match act(id.clone()).await {
                Ok(()) => report.done += 1,
                Err(e) => report.refused.push((id, e.to_string())),
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_matches_runs_by_every_field_given() {
        let run = RunSummary {
            run_id: "r".into(),
            workflow_id: "w".into(),
            status: RunStatus::Suspended,
            created_at: 100,
            updated_at: 100,
            tags: [("team".to_string(), "a".to_string())].into(),
        };
        assert!(RunFilter::default().matches(&run));
        assert!(RunFilter::default().is_empty());
        let f = RunFilter::default()
            .with_workflow("w")
            .with_status(RunStatus::Suspended)
            .with_tag("team", "a");
        assert!(f.matches(&run) && !f.is_empty());
        assert!(!RunFilter::default().with_tag("team", "b").matches(&run));
        let mut window = RunFilter {
            created_after: Some(100),
            created_before: Some(101),
            ..RunFilter::default()
        };
        assert!(window.matches(&run));
        window.created_before = Some(100);
        assert!(!window.matches(&run), "the end of the window is left out");
    }
}
