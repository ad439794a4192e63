//! What a runtime counts, in the Prometheus text format (`weft serve` answers it at `/metrics`):
//! runs by status, runs being driven, invocations in flight, those started before the
//! transition that issued them was durable, those run on their run's own task, transitions,
//! the store syncs they waited for, and each step invocation's latency by outcome.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::engine::RunStatus;
use crate::engine::invocation::{InvocationResult, StepOutcome};

/// The content type of the text [`Runtime::metrics`](crate::Runtime::metrics) returns
/// (`GET /metrics`): Prometheus' text format.
pub const METRICS_CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The label of a step invocation's latency.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

/// The label of a run count.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: String,
}

/// Step latency buckets: 0.25 ms to about 8 s.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
}

/// A runtime's counters.
pub(crate) struct Metrics {
    registry: Mutex<Registry>,
    runs: Family<StatusLabel, Gauge>,
    driven: Gauge,
    in_flight: Gauge,
    started_early: Counter,
    on_run_task: Counter,
    transitions: Counter,
    syncs: Counter,
    /// The latency histogram of each outcome, in the order of [`OUTCOMES`]: kept rather than
    /// looked up in their family (under its lock) at every invocation. All of them show from
    /// the start, at zero until an invocation ends so.
    step_seconds: [Histogram; OUTCOMES.len()],
}

/// Every outcome an invocation's latency is labelled with (see [`outcome`]).
const OUTCOMES: [&str; 5] = ["success", "suspended", "bail", "tripwire", "failed"];

impl Metrics {
    /// Fresh counters, registered.
    pub(crate) fn new() -> Self {
        let mut registry = Registry::with_prefix("weft");
        let runs = Family::<StatusLabel, Gauge>::default();
        let driven = Gauge::default();
        let in_flight = Gauge::default();
        let started_early = Counter::default();
        let on_run_task = Counter::default();
        let transitions = Counter::default();
        let syncs = Counter::default();
        let family = Family::<OutcomeLabel, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        registry.register("runs", "Stored runs by status", runs.clone());
        registry.register(
            "runs_driven",
            "Runs this process drives now (being run, or waiting on a step or timer)",
            driven.clone(),
        );
        registry.register(
            "steps_in_flight",
            "Step invocations under way in this process",
            in_flight.clone(),
        );
        registry.register(
            "steps_started_early",
            "Step invocations started while the transition that issued them was being made durable (steps of plugins granted no read-write directory and no HTTP host, S100)",
            started_early.clone(),
        );
        registry.register(
            "steps_on_run_task",
            "Step invocations run on their run's own task instead of a task each (a run's only invocation, or any while more runs have one in flight than RuntimeConfig::own_task_above)",
            on_run_task.clone(),
        );
        registry.register(
            "transitions",
            "Transitions stored by this process",
            transitions.clone(),
        );
        registry.register(
            "store_syncs",
            "Syncs (fsyncs) of the store that this process's transitions waited for; transitions of runs in flight share them",
            syncs.clone(),
        );
        let step_seconds =
            OUTCOMES.map(|outcome| family.get_or_create(&OutcomeLabel { outcome }).clone());
        registry.register(
            "step_duration_seconds",
            "Time from a step invocation's start to its end, by outcome",
            family,
        );
        Metrics {
            registry: Mutex::new(registry),
            runs,
            driven,
            in_flight,
            started_early,
            on_run_task,
            transitions,
            syncs,
            step_seconds,
        }
    }

    /// A run's driver started; dropping the guard says it stopped.
    pub(crate) fn driving(&self) -> DrivenGuard {
        self.driven.inc();
        DrivenGuard(self.driven.clone())
    }

    /// A step invocation started.
    pub(crate) fn invocation_started(&self) {
        self.in_flight.inc();
    }

    /// A step invocation started on its run's own task.
    pub(crate) fn on_run_task(&self) {
        self.on_run_task.inc();
    }

    /// A step invocation started before the transition that issued it was durable.
    pub(crate) fn started_early(&self) {
        self.started_early.inc();
    }

    /// A step invocation ended with `result` after `took`.
    pub(crate) fn invocation_ended(&self, result: &InvocationResult, took: Duration) {
        self.in_flight.dec();
        self.step_seconds[outcome_index(result)].observe(took.as_secs_f64());
    }

    /// A transition was stored.
    pub(crate) fn transition(&self) {
        self.transitions.inc();
    }

    /// The counter of store syncs, for the [`Syncer`](super::sync::Syncer) to count them.
    pub(crate) fn syncs(&self) -> Counter {
        self.syncs.clone()
    }

    /// The text of every metric, with the run counts set from `statuses` (every stored run's).
    pub(crate) fn render(&self, statuses: impl IntoIterator<Item = RunStatus>) -> String {
        let mut counts = std::collections::BTreeMap::new();
        for s in [
            RunStatus::Pending,
            RunStatus::Running,
            RunStatus::Suspended,
            RunStatus::Success,
            RunStatus::Failed,
            RunStatus::Tripwire,
            RunStatus::Cancelled,
        ] {
            counts.insert(s.to_string(), 0);
        }
        for s in statuses {
            *counts.entry(s.to_string()).or_default() += 1;
        }
        for (status, n) in counts {
            self.runs.get_or_create(&StatusLabel { status }).set(n);
        }
        let mut text = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        // Writing into a String does not fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &registry);
        text
    }
}

/// Counts a run as driven while it lives.
pub(crate) struct DrivenGuard(Gauge);

impl Drop for DrivenGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The outcome of an invocation, as a label and a span attribute.
pub(crate) fn outcome(result: &InvocationResult) -> &'static str {
    OUTCOMES[outcome_index(result)]
}

/// The place of an invocation's outcome in [`OUTCOMES`].
fn outcome_index(result: &InvocationResult) -> usize {
    match &result.outcome {
        Ok(StepOutcome::Done(_)) => 0,
        Ok(StepOutcome::Suspend { .. }) => 1,
        Ok(StepOutcome::Bail(_)) => 2,
        Err(f) if f.tripwire.is_some() => 3,
        Err(_) => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::invocation::StepFailure;
    use serde_json::json;

    fn count(text: &str, outcome: &str) -> Option<u64> {
        let name = format!("weft_step_duration_seconds_count{{outcome=\"{outcome}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(name.as_str()))
            .and_then(|n| n.parse().ok())
    }

    #[test]
    fn each_outcome_is_counted_under_its_own_label_and_shows_from_the_start() {
        let m = Metrics::new();
        let fresh = m.render([]);
        for o in OUTCOMES {
            assert_eq!(count(&fresh, o), Some(0), "{o} in {fresh}");
        }
        let failed = InvocationResult {
            outcome: Err(StepFailure {
                message: "no".into(),
                code: "step-failed".into(),
                retryable: false,
                details: None,
                tripwire: None,
            }),
            patches: vec![],
        };
        let done = InvocationResult {
            outcome: Ok(StepOutcome::Done(json!(1))),
            patches: vec![],
        };
        for r in [&failed, &done, &done] {
            m.invocation_started();
            m.invocation_ended(r, Duration::from_millis(1));
        }
        let text = m.render([]);
        assert_eq!(count(&text, "failed"), Some(1));
        assert_eq!(count(&text, "success"), Some(2));
        assert_eq!(count(&text, "tripwire"), Some(0));
        assert_eq!(outcome(&failed), "failed");
    }
}
