//! What goes out of the core: commands for the driver and the tracking events they carry.

use std::sync::Arc;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::event_data::EventData;
use super::invocation::StepCall;
use super::model::StepKind;
use super::time::Millis;

/// What the core asks the driver to do.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Command {
    /// Run a plugin step.
    Invoke(Box<Invoke>),
    /// Fire [`Event::TimerFired`](super::Event::TimerFired) with this token at this instant (at once when overdue).
    Timer {
        /// The timer.
        token: u64,
        /// When.
        at: Millis,
    },
    /// Tell these invocations they are cancelled (S76).
    Abort {
        /// The invocations.
        tokens: Vec<u64>,
    },
    /// Store and publish a tracking event.
    Emit(Tracking),
}

/// One invocation to carry out.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Invoke {
    /// Names the invocation in [`Event::StepEnded`](super::Event::StepEnded).
    pub token: u64,
    /// The plugin key in the graph.
    pub plugin: String,
    /// The step's name in the plugin.
    pub step: String,
    /// Whether `step` names a step or a tool (S120).
    pub kind: StepKind,
    /// The call.
    pub call: StepCall,
    /// The step's own timeout, overriding the plugin's.
    pub timeout_ms: Option<u64>,
    /// What `run.init-data` and `run.step-result` answer.
    pub view: StepsView,
}

/// What a step may read of its run (S8, S9).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct StepsView {
    /// The input of the step's own workflow file.
    pub init: Arc<Value>,
    /// Outputs of succeeded entries, by id and by path: the maps of the scopes the step sees,
    /// innermost first, shared with the run's state rather than merged into a copy.
    pub scopes: Vec<Arc<ScopeResults>>,
}

impl StepsView {
    /// The output of the entry `name` (an id or a path) as the step sees it: from the
    /// innermost scope that has one.
    pub(crate) fn get(&self, name: &str) -> Option<&Arc<Value>> {
        self.scopes.iter().find_map(|scope| scope.get(name))
    }
}

/// The outputs visible in one scope, by id and by path (S8).
pub(super) type ScopeResults = IndexMap<String, Arc<Value>, super::KeyHasher>;

/// The kinds of tracking events (WORKFLOW-FORMAT.md §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventKind {
    /// The run started.
    RunStarted,
    /// An entry started.
    StepStarted,
    /// A writer chunk.
    StepOutput,
    /// A custom writer event.
    StepCustom,
    /// A foreach item ended or suspended.
    StepProgress,
    /// An entry succeeded.
    StepSucceeded,
    /// An entry failed.
    StepFailed,
    /// A step will be tried again.
    StepRetrying,
    /// A step suspended.
    StepSuspended,
    /// A sleep waits.
    StepWaiting,
    /// An execution ended `cancelled`: by a cancel, or by the end of the run around it (S74).
    StepCancelled,
    /// A resume was accepted.
    RunResumed,
    /// The run succeeded.
    RunSucceeded,
    /// The run failed.
    RunFailed,
    /// The run suspended.
    RunSuspended,
    /// The run was cancelled.
    RunCancelled,
    /// A guardrail ended the run.
    RunTripwire,
    /// A log line.
    Log,
}

impl EventKind {
    /// Whether this event closes the run's stream (S88).
    pub fn is_closing(self) -> bool {
        matches!(
            self,
            Self::RunSucceeded | Self::RunFailed | Self::RunCancelled | Self::RunTripwire
        )
    }
}

/// A tracking event before the driver stamps it with `seq`, `run_id` and `at`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Tracking {
    /// The event's type.
    #[serde(rename = "type")]
    pub kind: EventKind,
    /// The entry it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The foreach item it comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreach_index: Option<u32>,
    /// The loop iteration it comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iteration: Option<u32>,
    /// Its data.
    #[serde(default, skip_serializing_if = "EventData::is_null")]
    pub data: EventData,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn s8_s9_a_step_sees_a_name_from_the_innermost_scope_that_has_it() {
        let scope = |pairs: &[(&str, Value)]| {
            Arc::new(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), Arc::new(v.clone())))
                    .collect::<ScopeResults>(),
            )
        };
        let view = StepsView {
            init: Arc::new(json!({})),
            scopes: vec![
                scope(&[("i", json!("item"))]),
                scope(&[("i", json!("outer")), ("a", json!("only outer"))]),
            ],
        };
        assert_eq!(view.get("i").map(|v| (**v).clone()), Some(json!("item")));
        assert_eq!(
            view.get("a").map(|v| (**v).clone()),
            Some(json!("only outer"))
        );
        assert_eq!(view.get("nothing"), None);
    }
}
