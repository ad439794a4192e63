//! Approvals: a tool call that needs one suspends before it runs until a person approves or
//! refuses it; the run's `suspended` list shows it, and a cancel ends it (S124, S74).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::engine::context::{Cx, Frame};
use crate::engine::lifecycle::{mark_cancelled, mark_suspended};
use crate::engine::model::EntryDef;
use crate::engine::nodes::{AgentNode, AgentNow, Node, NodeKind, ToolRun, ToolState};
use crate::engine::records::SuspendedEntry;
use crate::engine::transitions::transition;

use super::paths::{sub_entry, sub_frame};

/// The data a resume of an approval gives (S124): `approved`, and optionally `reason` (told
/// to the model on a refusal) and `arguments` (run instead of the model's).
pub(crate) fn approval_schema() -> Value {
    json!({
        "type": "object",
        "required": ["approved"],
        "properties": {
            "approved": { "type": "boolean" },
            "reason": { "type": "string" },
            "arguments": { "type": "object" }
        },
        "additionalProperties": false
    })
}

/// Suspends a tool call until a person approves or refuses it (S124): its record is
/// suspended with `{tool, arguments}` as the payload and the call's id as the label.
pub(super) fn ask_approval(run: &mut ToolRun, at: &EntryDef, sub: &Frame, cx: &mut Cx) {
    let payload = json!({ "tool": run.name, "arguments": run.arguments });
    cx.record_start(sub, at, &Arc::new(run.arguments.clone()));
    mark_suspended(sub, at, cx, &payload, std::slice::from_ref(&run.id));
    run.state = ToolState::Approval;
}

/// The tool calls of `agent` that wait for an approval, as the run's `suspended` list shows
/// them: path, the call's id as the label, `{tool, arguments}` as the payload (S124).
pub(crate) fn approvals(agent: &AgentNode, index: Option<u32>) -> Vec<(String, SuspendedEntry)> {
    let AgentNow::Tools(runs) = &agent.now else {
        return Vec::new();
    };
    runs.iter()
        .filter(|r| matches!(r.state, ToolState::Approval))
        .map(|r| {
            (
                r.path.clone(),
                SuspendedEntry {
                    path: r.path.clone(),
                    labels: vec![r.id.clone()],
                    payload: json!({ "tool": r.name, "arguments": r.arguments }),
                    foreach_index: index,
                },
            )
        })
        .collect()
}

/// Ends the approvals a suspended agent waits for `cancelled` (S74), when a cancel reaches it.
pub(crate) fn cancel_approvals(node: &mut Node, frame: &Frame, cx: &mut Cx) {
    let entry = cx.graph.entry(node.entry);
    let NodeKind::Agent(agent) = &mut node.kind else {
        return;
    };
    let AgentNow::Tools(runs) = &mut agent.now else {
        return;
    };
    let sub = sub_frame(frame, entry);
    runs.iter_mut()
        .for_each(|run| cancel_call(run, entry, &sub, cx));
    agent.now = AgentNow::Nothing;
}

/// Ends a call that waits for an approval `cancelled` (S74); any other call is left as it is.
pub(super) fn cancel_call(run: &mut ToolRun, entry: &EntryDef, sub: &Frame, cx: &mut Cx) {
    if !matches!(run.state, ToolState::Approval) {
        return;
    }
    transition!("agent", "approval-cancelled");
    let now = cx.ts();
    mark_cancelled(sub, &sub_entry(entry, &run.path), cx, now);
    run.state = ToolState::Done(json!({ "error": { "code": "cancelled" } }));
}

/// The scenarios of this file: its tests, and a part of the corpus the machines' transition
/// tables are checked against (`engine::transitions`).
#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use crate::engine::sim::{Sim, agent, file, says};
    use crate::engine::transitions::scenarios;
    use crate::engine::{EventKind, Refusal, RunStatus, StepStatus};

    /// An agent whose `rm` tool needs approval, and a model that calls `add` once and `rm`
    /// twice in its first reply.
    fn approvals() -> Sim {
        Sim::new(
            file("w", vec![agent("a", &[("add", false), ("rm", true)], 5)]),
            json!({"prompt": "clean up"}),
        )
        .on(
            "a.model-1",
            [says(
                "",
                &[
                    ("c1", "add", json!({"x": 1})),
                    ("c2", "rm", json!({"path": "x"})),
                    ("c3", "rm", json!({"path": "y"})),
                ],
                (1, 1),
            )],
        )
        .on("a.model-2", [says("cleaned", &[], (1, 1))])
    }

    #[test]
    fn s124_a_tool_that_needs_approval_suspends_before_it_runs_and_each_approval_is_resolved_alone()
    {
        let mut sim = approvals().started();
        assert_eq!(sim.status(), RunStatus::Suspended);
        assert_eq!(sim.record("a.tool-c1").status, StepStatus::Success);
        assert!(
            sim.calls_to("a.tool-c2").is_empty(),
            "nothing ran before approval"
        );
        let rec = sim.record("a.tool-c2");
        assert_eq!(rec.status, StepStatus::Suspended);
        assert_eq!(rec.labels, Some(vec!["c2".to_owned()]));
        assert_eq!(
            rec.suspend_payload,
            Some(json!({"tool": "rm", "arguments": {"path": "x"}}))
        );
        let suspended = sim
            .events
            .iter()
            .rfind(|e| e.kind == EventKind::RunSuspended)
            .expect("run-suspended");
        assert_eq!(
            suspended.data["suspended"].as_array().map(Vec::len),
            Some(2)
        );
        // Ambiguous without a label; refused data changes nothing.
        assert!(matches!(
            sim.resume(None, None, None, json!({"approved": true})),
            Err(Refusal::Other(m)) if m.contains("ambiguous")
        ));
        assert!(matches!(
            sim.resume(None, Some("c2"), None, json!({"approved": "yes"})),
            Err(Refusal::InvalidData { .. })
        ));
        // Approvals survive a restart.
        sim.crash_and_recover();
        assert_eq!(sim.status(), RunStatus::Suspended);
        // Approved with edited arguments: the tool runs with them; c3 still waits.
        sim.resume(
            None,
            Some("c2"),
            None,
            json!({"approved": true, "arguments": {"path": "z"}}),
        )
        .expect("approved");
        assert_eq!(*sim.calls_to("a.tool-c2")[0].input, json!({"path": "z"}));
        assert_eq!(sim.status(), RunStatus::Suspended);
        assert!(sim.calls_to("a.model-2").is_empty());
        // Refused: the model is told the reason as the tool's result.
        sim.resume(
            None,
            Some("c3"),
            None,
            json!({"approved": false, "reason": "keep y"}),
        )
        .expect("refused");
        assert!(sim.calls_to("a.tool-c3").is_empty());
        assert_eq!(sim.status(), RunStatus::Success);
        let messages = &sim.calls_to("a.model-2")[0].input["messages"];
        assert_eq!(messages[4]["tool_call_id"], "c3");
        assert_eq!(
            messages[4]["content"],
            r#"{"approved":false,"reason":"keep y"}"#
        );
        assert_eq!(
            sim.record("a.tool-c3")
                .resume_data
                .as_ref()
                .map(|d| &d["reason"]),
            Some(&json!("keep y"))
        );
    }

    #[test]
    fn s124_s74_cancelling_an_agent_that_waits_for_approval_cancels_the_approvals() {
        let mut sim = approvals().started();
        sim.cancel().expect("accepted");
        assert_eq!(sim.status(), RunStatus::Cancelled);
        assert_eq!(sim.record("a.tool-c2").status, StepStatus::Cancelled);
        assert_eq!(sim.record("a.tool-c3").status, StepStatus::Cancelled);
        assert_eq!(sim.record("a").status, StepStatus::Cancelled);
        assert!(sim.calls_to("a.model-2").is_empty());
    }

    /// Every test above, by name.
    pub(crate) const SCENARIOS: &[(&str, fn())] = scenarios![
        s124_a_tool_that_needs_approval_suspends_before_it_runs_and_each_approval_is_resolved_alone,
        s124_s74_cancelling_an_agent_that_waits_for_approval_cancels_the_approvals,
    ];
}
