//! Retention: deleting ended runs ([`Runtime::prune`]) and doing it in the background for the
//! runtime's and each workflow's retention ([`Runtime::prune_expired`]).
//!
//! Only an ended run is deleted (success, failed, cancelled, tripwire), never one that is
//! pending, running or suspended, nor one whose actor is still here, nor a workflow tool's
//! child run whose parent has not ended (a retried call finds its child by id). The store
//! deletes each run whole ([`Store::delete_ended`](crate::store::Store::delete_ended)), in
//! batches, and then removes the blobs no run names and gives the room back.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::runtime::{Inner, lock};
use super::{Runtime, RuntimeError};
use crate::engine::RunStatus;
use crate::run_id::in_child_namespace;
use crate::store::{RunSummary, StoreError};

/// The most runs one call of the store deletes: one batch, one transaction on PostgreSQL.
const BATCH: usize = 256;

/// The longest wait between two background prunes.
const EVERY_AT_MOST: Duration = Duration::from_secs(60);

/// The shortest wait between two background prunes.
const EVERY_AT_LEAST: Duration = Duration::from_millis(100);

/// How long a prune waits for the actors of runs that just ended to let them go.
const RETIRE_WAIT: Duration = Duration::from_secs(2);

/// Which runs a prune deletes: ended ones that ended at least `older_than` ago, of `status`
/// and `workflow` when given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PruneFilter {
    /// Only runs whose last change (their end) is at least this long ago.
    pub older_than: Duration,
    /// Only runs of this status, which must be an ended one.
    pub status: Option<RunStatus>,
    /// Only runs of this top-level workflow id.
    pub workflow: Option<String>,
    /// Only runs carrying every one of these tags.
    #[serde(default)]
    pub tags: Vec<(String, String)>,
    /// Count what would be deleted, and delete nothing.
    pub dry_run: bool,
}

impl PruneFilter {
    /// The runs that ended at least `older_than` ago.
    pub fn older_than(older_than: Duration) -> Self {
        PruneFilter {
            older_than,
            ..PruneFilter::default()
        }
    }

    /// Only runs of `status`.
    pub fn with_status(mut self, status: RunStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// Only runs of workflow `workflow`.
    pub fn with_workflow(mut self, workflow: impl Into<String>) -> Self {
        self.workflow = Some(workflow.into());
        self
    }

    /// Only runs carrying tag `key: value` (and the others given).
    pub fn with_tag(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.tags.push((key.into(), value.into()));
        self
    }

    /// Counts only.
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }
}

/// What a prune did, or in a dry run would do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PruneReport {
    /// The runs deleted (in a dry run: that would be).
    pub deleted: u64,
    /// Runs the filter matched that were kept: still driven here, written a moment ago, or
    /// a workflow tool's child whose parent has not ended.
    pub kept: u64,
    /// Blobs (definitions and components) no remaining run names, removed.
    pub blobs: u64,
    /// Bytes given back to the file system (see [`Reclaimed`](crate::internal::Reclaimed)).
    pub bytes: u64,
    /// Whether this was a dry run.
    pub dry_run: bool,
}

impl Runtime {
    /// Deletes the ended runs `filter` matches, whole (records, events, snapshots, first
    /// state), then the blobs no remaining run names, and gives the room back (sled's values
    /// files are compacted). A run that is pending, running or suspended is never deleted; a
    /// prune cut short by a crash leaves each run whole or gone.
    pub async fn prune(&self, filter: &PruneFilter) -> Result<PruneReport, RuntimeError> {
        if let Some(status) = filter.status
            && !status.is_ended()
        {
            return Err(RuntimeError::NotPrunable(status));
        }
        for (k, v) in &filter.tags {
            crate::tags::check_tag(k, v)?;
        }
        let cutoff = self
            .now()
            .saturating_sub(i64::try_from(filter.older_than.as_millis()).unwrap_or(i64::MAX));
        let filter = filter.clone();
        let dry_run = filter.dry_run;
        self.prune_matching(
            move |run| {
                run.updated_at <= cutoff
                    && filter.status.is_none_or(|s| s == run.status)
                    && filter
                        .workflow
                        .as_deref()
                        .is_none_or(|w| w == run.workflow_id)
                    && run.has_tags(&filter.tags)
            },
            dry_run,
        )
        .await
    }

    /// Deletes the ended runs past the retention that applies to them: their workflow's
    /// `retention:` as this runtime last loaded it, else the runtime's
    /// ([`Runtime::set_retention`], [`RuntimeConfig::retention`]); runs of neither are kept.
    ///
    /// [`RuntimeConfig::retention`]: super::RuntimeConfig::retention
    pub async fn prune_expired(&self) -> Result<PruneReport, RuntimeError> {
        let now = self.now();
        let default = *lock(&self.inner.default_retention);
        let by_workflow = lock(&self.inner.retention).clone();
        if default.is_none() && by_workflow.is_empty() {
            return Ok(PruneReport::default());
        }
        self.prune_matching(
            move |run| {
                let retention = by_workflow.get(&run.workflow_id).copied().or(default);
                retention.is_some_and(|r| {
                    run.updated_at
                        <= now.saturating_sub(i64::try_from(r.as_millis()).unwrap_or(i64::MAX))
                })
            },
            false,
        )
        .await
    }

    /// Sets how long ended runs are kept (the default [`RuntimeConfig::retention`] gives):
    /// `None` keeps them until pruned. Starts the background prune when one is set.
    ///
    /// [`RuntimeConfig::retention`]: super::RuntimeConfig::retention
    pub fn set_retention(&self, retention: Option<Duration>) {
        *lock(&self.inner.default_retention) = retention;
        if retention.is_some() {
            self.start_pruning();
        }
    }

    /// Sets how long the ended runs of workflow `workflow` are kept, instead of the runtime's
    /// retention (`None`: the runtime's applies); loading a workflow file sets its
    /// `retention:`.
    pub fn set_workflow_retention(&self, workflow: &str, retention: Option<Duration>) {
        {
            let mut map = lock(&self.inner.retention);
            match retention {
                Some(r) => map.insert(workflow.to_owned(), r),
                None => map.remove(workflow),
            };
        }
        if retention.is_some() {
            self.start_pruning();
        }
    }

    /// Starts the background prune unless it runs already; outside a tokio runtime it
    /// cannot, and says so.
    pub(super) fn start_pruning(&self) {
        if self.inner.pruning.swap(true, Ordering::AcqRel) {
            return;
        }
        if tokio::runtime::Handle::try_current().is_ok() {
            Runtime::prune_in_background(Arc::downgrade(&self.inner));
        } else {
            self.inner.pruning.store(false, Ordering::Release);
            tracing::warn!(
                "the runtime is opened outside a tokio runtime: ended runs past their \
                 retention are deleted only by `Runtime::prune_expired` (or `weft prune`)"
            );
        }
    }

    /// Deletes the ended runs `matches` picks, in batches; in a dry run, counts them.
    async fn prune_matching(
        &self,
        matches: impl Fn(&RunSummary) -> bool + Send + 'static,
        dry_run: bool,
    ) -> Result<PruneReport, RuntimeError> {
        let _one_at_a_time = self.inner.prune_lock.lock().await;
        let store = self.inner.store.clone();
        let runs = blocking(move || store.runs()).await?;
        let status: HashMap<&str, RunStatus> =
            runs.iter().map(|r| (r.run_id.as_str(), r.status)).collect();
        let mut report = PruneReport {
            dry_run,
            ..PruneReport::default()
        };
        let mut doomed = Vec::new();
        for run in runs.iter().filter(|r| r.status.is_ended() && matches(r)) {
            let id = run.run_id.as_str();
            if has_unended_parent(id, &status) {
                report.kept += 1;
            } else {
                doomed.push(id.to_owned());
            }
        }
        if dry_run {
            report.deleted = doomed.len() as u64;
            return Ok(report);
        }
        // The actor of a run that just ended lets it go a moment later: waited for, briefly.
        self.until_retired(&doomed).await;
        {
            let live = lock(&self.inner.live);
            let before = doomed.len();
            doomed.retain(|id| !live.contains_key(id));
            report.kept += (before - doomed.len()) as u64;
        }
        let total = doomed.len();
        for batch in doomed.chunks(BATCH) {
            let store = self.inner.store.clone();
            let ids = batch.to_vec();
            let deleted = blocking(move || {
                let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                store.delete_ended(&ids)
            })
            .await
            .map_err(|e| self.write_failed(e))?;
            report.deleted += deleted.len() as u64;
            report.kept += (batch.len() - deleted.len()) as u64;
            {
                let mut channels = lock(&self.inner.channels);
                for id in &deleted {
                    channels.remove(id);
                }
            }
            tracing::info!(
                deleted = report.deleted,
                of = total,
                "pruned a batch of ended runs"
            );
        }
        let store = self.inner.store.clone();
        let reclaimed = blocking(move || store.collect_garbage(&plugins_named))
            .await
            .map_err(|e| self.write_failed(e))?;
        report.blobs = reclaimed.blobs;
        report.bytes = reclaimed.bytes;
        Ok(report)
    }

    /// Waits until no run of `ids` has an actor here, or [`RETIRE_WAIT`] has passed.
    async fn until_retired(&self, ids: &[String]) {
        let deadline = tokio::time::Instant::now() + RETIRE_WAIT;
        loop {
            let retired = self.inner.retired.notified();
            tokio::pin!(retired);
            retired.as_mut().enable();
            if !ids.iter().any(|id| lock(&self.inner.live).contains_key(id)) {
                return;
            }
            if tokio::time::timeout_at(deadline, retired).await.is_err() {
                return;
            }
        }
    }

    /// Prunes in the background while this runtime lives, when a retention is set: at a
    /// tenth of the shortest retention, between [`EVERY_AT_LEAST`] and [`EVERY_AT_MOST`].
    fn prune_in_background(inner: Weak<Inner>) {
        tokio::spawn(async move {
            loop {
                let every = {
                    let Some(inner) = inner.upgrade() else {
                        return;
                    };
                    let shortest = lock(&inner.retention)
                        .values()
                        .copied()
                        .chain(*lock(&inner.default_retention))
                        .min();
                    shortest.map_or(EVERY_AT_MOST, |r| {
                        (r / 10).clamp(EVERY_AT_LEAST, EVERY_AT_MOST)
                    })
                };
                tokio::time::sleep(every).await;
                let Some(inner) = inner.upgrade() else {
                    return;
                };
                let rt = Runtime { inner };
                if let Err(e) = rt.prune_expired().await {
                    tracing::warn!("a background prune failed ({e}); it is tried again");
                }
            }
        });
    }
}

/// `f` on a blocking thread (the store's calls block).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Backend(format!("a prune's thread failed: {e}")))?
}

/// Whether `id` is a workflow tool's child run whose parent (a run whose id and a `.` start
/// `id`) is stored and has not ended.
fn has_unended_parent(id: &str, status: &HashMap<&str, RunStatus>) -> bool {
    in_child_namespace(id)
        && id
            .match_indices('.')
            .any(|(at, _)| status.get(&id[..at]).is_some_and(|s| !s.is_ended()))
}

/// The digests of the components a stored definition names, its workflow tools' too, read
/// leniently (only `plugins` and `workflow_tools`, whatever the graph's format); a definition
/// that does not read is an error, which stops the collection of blobs.
fn plugins_named(definition: &[u8]) -> Result<Vec<String>, StoreError> {
    /// What a graph names, read from a stored definition.
    #[derive(Deserialize)]
    struct Names {
        #[serde(default)]
        plugins: HashMap<String, Named>,
        #[serde(default)]
        workflow_tools: HashMap<String, Names>,
    }
    /// A plugin of a graph: its digest.
    #[derive(Deserialize)]
    struct Named {
        digest: String,
    }
    fn walk(names: Names, out: &mut Vec<String>) {
        out.extend(names.plugins.into_values().map(|p| p.digest));
        for tool in names.workflow_tools.into_values() {
            walk(tool, out);
        }
    }
    let names: Names = serde_json::from_slice(definition).map_err(|e| StoreError::Corrupt {
        key: "a stored definition".into(),
        message: format!(
            "it does not read ({e}), so the components it names cannot be told; no blob is \
             removed until it is"
        ),
    })?;
    let mut out = Vec::new();
    walk(names, &mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_run_is_kept_while_its_parent_has_not_ended() {
        let status = HashMap::from([("agent", RunStatus::Running), ("done", RunStatus::Success)]);
        assert!(has_unended_parent("agent.tool-call1", &status));
        assert!(!has_unended_parent("done.tool-call1", &status));
        // Not in the child namespace: a run of its own, whatever its id's prefix.
        assert!(!has_unended_parent("agent.other", &status));
        assert!(!has_unended_parent("gone.tool-x", &status));
    }

    #[test]
    fn a_definition_names_its_plugins_and_its_workflow_tools_plugins() {
        let definition = serde_json::json!({
            "format": 99,
            "plugins": { "a": { "digest": "d1", "other": 1 } },
            "workflow_tools": { "t": { "plugins": { "b": { "digest": "d2" } } } },
        });
        let mut named = plugins_named(definition.to_string().as_bytes()).expect("reads");
        named.sort();
        assert_eq!(named, ["d1", "d2"]);
        assert!(plugins_named(b"not json").is_err());
    }
}
