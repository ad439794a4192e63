//! Workflows offered to a model as tools (S125): a call starts a child run and answers with the
//! child's *first yield* — its first writer chunk, its suspension, or its end, whichever comes
//! first — and a reference to it, `{run_id, status, yield}`. The child goes on by itself and
//! is watched, resumed and cancelled by that id like any run.
//!
//! The child's id is made from the parent's run id and the call's path (with its item and
//! iteration), so an attempt issued again after a crash finds the child it started and waits
//! for its first yield instead of starting another; each call has an id of its own. Such ids
//! are refused to runs started from outside (`run_id::check_new_run_id`), and the child's
//! first state names the call that started it: a run found under the id is taken for the
//! child only when it names this very call, so no run that another run's agent happened to
//! start under the same id is taken for it.

use std::sync::{Arc, Weak};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::engine::invocation::{InvocationResult, StepCall, StepFailure, StepOutcome};
use crate::engine::{EventKind, Graph, ToolCallOf};
use crate::executor::{StepExecutor, StepRequest, until_aborted};
use crate::run_id::MAX_RUN_ID_LEN;
use crate::store::{Definition, StoreError};

use super::runtime::Inner;
use super::starting::{Launch, NewId};
use super::{Runtime, RuntimeError};

/// Runs one workflow of a graph's `workflow_tools` as child runs.
pub(super) struct WorkflowTool {
    runtime: Weak<Inner>,
    graph: Arc<Graph>,
    /// The graph as each child run stores it, encoded and hashed once for every call.
    definition: Result<Definition, String>,
}

impl WorkflowTool {
    /// Child runs of `graph` on `runtime`.
    pub(super) fn new(runtime: Weak<Inner>, graph: Arc<Graph>) -> Self {
        let definition = serde_json::to_vec(&*graph)
            .map(Definition::new)
            .map_err(|e| e.to_string());
        WorkflowTool {
            runtime,
            graph,
            definition,
        }
    }

    /// Starts the child (unless an earlier attempt did) and waits for its first yield.
    #[allow(
        clippy::result_large_err,
        reason = "StepFailure is the contract's failure type, what the executor answers with"
    )]
    async fn call(&self, request: &StepRequest) -> Result<Value, StepFailure> {
        let Some(inner) = self.runtime.upgrade() else {
            return Err(StepFailure::new(
                "unavailable",
                "the runtime is shutting down",
            ));
        };
        let runtime = Runtime { inner };
        let child = child_run_id(&request.call);
        let this_call = ToolCallOf {
            run_id: request.call.run_id.clone(),
            path: request.call.step_path.clone(),
            foreach_index: request.call.foreach_index,
            iteration: request.call.iteration,
        };
        let definition = self.definition.as_ref().map_err(|e| {
            StepFailure::new("internal", format!("the workflow does not encode: {e}"))
        })?;
        match runtime
            .start_graph(
                self.graph.clone(),
                definition,
                None,
                Value::clone(&request.call.input),
                // Each call's child has an id of its own, made from the call: a call issued
                // again finds its child stored (S125).
                NewId {
                    run_id: child.clone(),
                    fresh: false,
                    tool_call_of: Some(this_call.clone()),
                    tags: Default::default(),
                },
                Launch::Drive,
            )
            .await
        {
            Ok(_) => {}
            Err(RuntimeError::Store(StoreError::RunExists(_))) => {
                adopt(&runtime, &child, &this_call)?;
            }
            Err(RuntimeError::InvalidInput(violations)) => {
                return Err(StepFailure::new(
                    "invalid-input",
                    format!(
                        "workflow {}: input: {}",
                        self.graph.workflow_id(),
                        crate::engine::schema::summarize(&violations)
                    ),
                )
                .with_details(crate::engine::schema::details(&violations))
                .not_retryable());
            }
            Err(e) => {
                return Err(StepFailure::new(
                    "child-not-started",
                    format!("the child run {child} did not start: {e}"),
                ));
            }
        }
        let mut events = runtime.watch_settled(&child, 1).map_err(|e| {
            StepFailure::new(
                "child-lost",
                format!("cannot follow the child run {child}: {e}"),
            )
        })?;
        while let Some(event) = events.recv().await {
            let (status, first) = match event.kind {
                EventKind::StepOutput | EventKind::StepCustom => (
                    "running",
                    json!({
                        "kind": if event.kind == EventKind::StepOutput { "output" } else { "custom" },
                        "path": event.path,
                        "data": event.data,
                    }),
                ),
                EventKind::RunSuspended => (
                    "suspended",
                    json!({ "kind": "suspended", "suspended": event.data["suspended"] }),
                ),
                EventKind::RunSucceeded => (
                    "success",
                    json!({ "kind": "ended", "result": event.data["result"] }),
                ),
                EventKind::RunFailed => (
                    "failed",
                    json!({ "kind": "ended", "error": event.data["error"] }),
                ),
                EventKind::RunCancelled => ("cancelled", json!({ "kind": "ended" })),
                EventKind::RunTripwire => (
                    "tripwire",
                    json!({ "kind": "ended", "tripwire": event.data["tripwire"] }),
                ),
                _ => continue,
            };
            return Ok(json!({ "run_id": child, "status": status, "yield": first }));
        }
        Err(StepFailure::new(
            "child-lost",
            format!("the child run {child} stopped before its first yield"),
        ))
    }
}

impl StepExecutor for WorkflowTool {
    fn execute(&self, request: StepRequest) -> BoxFuture<'_, InvocationResult> {
        Box::pin(async move {
            let outcome = until_aborted(
                self.call(&request),
                &request.io.abort,
                request.io.deadline,
                "cancelled while waiting for the child run's first yield",
                "no first yield of the child run within",
            )
            .await
            .map(StepOutcome::Done);
            InvocationResult {
                outcome,
                patches: Vec::new(),
            }
        })
    }
}

/// Checks that the run stored as `child` was started by `call` (an attempt of it before a
/// crash), so it may be followed as this call's child.
#[allow(
    clippy::result_large_err,
    reason = "StepFailure is the contract's failure type, what the executor answers with"
)]
fn adopt(runtime: &Runtime, child: &str, call: &ToolCallOf) -> Result<(), StepFailure> {
    let lost = |e: String| {
        StepFailure::new(
            "child-lost",
            format!("cannot read the child run {child}: {e}"),
        )
    };
    let base = runtime
        .inner
        .store
        .base(child)
        .map_err(|e| lost(e.to_string()))?
        .ok_or_else(|| lost("it has no stored state".into()))?;
    let started_by = super::checked::tool_call_of(child, &base).map_err(|e| lost(e.to_string()))?;
    if started_by.as_ref() == Some(call) {
        return Ok(());
    }
    let by = match started_by {
        Some(other) => format!("the call at {} of run {}", other.path, other.run_id),
        None => "no workflow tool call".to_owned(),
    };
    Err(StepFailure::new(
        "child-not-started",
        format!(
            "a run {child} exists but is not the child of this call (the call at {} of run {}): it was started by {by}; the call is not made, and that run's results are not taken for its own",
            call.path, call.run_id
        ),
    )
    .not_retryable())
}

/// The child run's id: the parent's run id and the call's path, with `.i` for its item and
/// `.n` for its iteration, characters a run id cannot hold as `_`; too long, the parent's id
/// cut and a digest of the whole.
fn child_run_id(call: &StepCall) -> String {
    let mut id = format!("{}.{}", call.run_id, call.step_path);
    if let Some(i) = call.foreach_index {
        id.push_str(&format!(".i{i}"));
    }
    if let Some(n) = call.iteration {
        id.push_str(&format!(".n{n}"));
    }
    let id: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if id.len() <= MAX_RUN_ID_LEN {
        return id;
    }
    let digest = hex::encode(Sha256::digest(id.as_bytes()));
    let keep: String = call.run_id.chars().take(MAX_RUN_ID_LEN - 34).collect();
    format!("{keep}.{}", &digest[..32])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(run: &str, path: &str, index: Option<u32>) -> StepCall {
        StepCall {
            run_id: run.into(),
            workflow_id: "w".into(),
            step_path: path.into(),
            attempt: 0,
            input: Value::Null.into(),
            config: Value::Null.into(),
            state: Value::Null.into(),
            resume: None,
            foreach_index: index,
            iteration: None,
        }
    }

    #[test]
    fn s125_each_call_has_a_child_id_of_its_own_and_an_attempt_again_the_same() {
        let a = child_run_id(&call("R1", "helper.tool-call_1", None));
        assert_eq!(a, "R1.helper.tool-call_1");
        assert_eq!(a, child_run_id(&call("R1", "helper.tool-call_1", None)));
        assert_ne!(a, child_run_id(&call("R1", "helper.tool-call_2", None)));
        assert_ne!(a, child_run_id(&call("R1", "helper.tool-call_1", Some(0))));
        let long = child_run_id(&call(&"r".repeat(120), "helper.tool-x", None));
        assert!(long.len() <= MAX_RUN_ID_LEN, "{long}");
        assert!(crate::run_id::check_run_id(&long).is_ok());
        assert_ne!(
            long,
            child_run_id(&call(&"r".repeat(120), "helper.tool-y", None))
        );
    }
}
