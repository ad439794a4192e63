//! The tool calls of one model reply: each a step execution under a path of its own, driven
//! until all have ended, and their results given back to the model (S123, S125).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::engine::context::{Cx, Frame};
use crate::engine::lifecycle::end_node;
use crate::engine::machines::step;
use crate::engine::model::{AgentDef, EntryDef, EntryId};
use crate::engine::nodes::{AgentNode, AgentNow, End, Node, Phase, ToolRun, ToolState};

use crate::engine::transitions::transition;

use super::approvals::{ask_approval, cancel_call};
use super::conversation::{Next, next_model_call};
use super::paths::sub_entry;

/// Drives the tool calls of a round: first those already under way, in the reply's order, then
/// the pending ones in that order while fewer than `max-parallel-tools` are in flight (running
/// or waiting for an approval) and none tripped. The calls that have started are always the
/// first of the reply, so this issues in the order one pass over every call would.
pub(super) fn drive_tools(
    runs: &mut [ToolRun],
    id: EntryId,
    entry: &EntryDef,
    def: &AgentDef,
    sub: &Frame,
    cx: &mut Cx,
) {
    for run in runs
        .iter_mut()
        .filter(|r| !matches!(r.state, ToolState::Pending))
    {
        drive_tool(run, id, entry, def, sub, cx);
    }
    if cx.cancelling {
        return;
    }
    let cap = def.max_parallel_tools.max(1) as usize;
    let mut in_flight = runs.iter().filter(|r| holds_place(r)).count();
    let tripped = runs
        .iter()
        .any(|r| matches!(r.state, ToolState::Tripped(_)));
    for run in runs
        .iter_mut()
        .filter(|r| matches!(r.state, ToolState::Pending))
    {
        if tripped || in_flight >= cap {
            transition!("agent", "tool-held");
            return;
        }
        drive_tool(run, id, entry, def, sub, cx);
        if holds_place(run) {
            in_flight += 1;
        }
    }
}

/// True while a call holds one of the reply's `max-parallel-tools` places: it runs, or waits
/// for an approval (once approved it runs at once, in the same place).
fn holds_place(run: &ToolRun) -> bool {
    matches!(run.state, ToolState::Running(_) | ToolState::Approval)
}

/// Drives one tool call: starts it (or suspends it for approval), takes an approval's answer,
/// and takes its end.
fn drive_tool(
    run: &mut ToolRun,
    id: EntryId,
    entry: &EntryDef,
    def: &AgentDef,
    sub: &Frame,
    cx: &mut Cx,
) {
    let at = sub_entry(entry, &run.path);
    let tool = def.tools.iter().find(|t| t.name == run.name);
    match &run.state {
        ToolState::Pending => {
            if cx.cancelling {
                return;
            }
            let Some(tool) = tool else {
                transition!("agent", "unknown-tool");
                let names: Vec<&str> = def.tools.iter().map(|t| t.name.as_str()).collect();
                let message = format!(
                    "there is no tool `{}`; the tools are: {}",
                    run.name,
                    names.join(", ")
                );
                // Recorded like a step that failed at once; nothing is invoked.
                let err = cx.error(sub, &run.path, "unknown-tool", message.clone());
                let mut call = Node::new(id, run.arguments.clone());
                cx.record_start(sub, &at, &Arc::new(run.arguments.clone()));
                end_node(&mut call, &at, sub, cx, End::Failed(err));
                run.state = ToolState::Done(
                    json!({ "error": { "code": "unknown-tool", "message": message } }),
                );
                return;
            };
            if tool.approve {
                transition!("agent", "ask-approval");
                ask_approval(run, &at, sub, cx);
                return;
            }
            transition!("agent", "tool-start");
            run.state = ToolState::Running(Box::new(Node::new(id, run.arguments.clone())));
        }
        ToolState::Approval => {
            if cx.cancelling {
                cancel_call(run, entry, sub, cx);
                return;
            }
            let Some(data) = cx
                .resume
                .as_ref()
                .filter(|sel| sel.selects(&run.path, sub))
                .map(|s| s.data.clone())
            else {
                return;
            };
            let now = cx.ts();
            if data["approved"] != json!(true) {
                // Refused: the call ends with the refusal as its output, nothing invoked.
                transition!("agent", "refused");
                let reason = data["reason"].as_str().unwrap_or("refused by a person");
                let told = json!({ "approved": false, "reason": reason });
                let mut call = Node::new(id, run.arguments.clone());
                end_node(&mut call, &at, sub, cx, End::Success(told.clone().into()));
                cx.record(sub, &at, |rec, _| {
                    rec.resumed_at = Some(now);
                    rec.resume_data = Some(data);
                });
                run.state = ToolState::Done(told);
                return;
            }
            transition!("agent", "approved");
            if let Some(arguments) = data.get("arguments") {
                run.arguments = arguments.clone();
            }
            run.state = ToolState::Running(Box::new(Node::new(id, run.arguments.clone())));
            let ToolState::Running(node) = &mut run.state else {
                return;
            };
            let Some(tool) = tool else {
                return;
            };
            step::drive_with(node, &at, &tool.call, sub, cx);
            cx.record(sub, &at, |rec, _| {
                rec.resumed_at = Some(now);
                rec.resume_data = Some(data);
            });
            took_tool_end(run);
            return;
        }
        ToolState::Running(_) | ToolState::Done(_) | ToolState::Tripped(_) => {}
    }
    if let (ToolState::Running(node), Some(tool)) = (&mut run.state, tool) {
        step::drive_with(node, &at, &tool.call, sub, cx);
        took_tool_end(run);
    }
}

/// Moves a tool call whose execution ended to what the model is told: its result, or its
/// failure (the model may try otherwise); a tripwire is kept to end the agent.
fn took_tool_end(run: &mut ToolRun) {
    let ToolState::Running(node) = &run.state else {
        return;
    };
    let Phase::Done(end) = &node.phase else {
        return;
    };
    transition!("agent", "tool-ended");
    run.state = match end {
        End::Success(v) | End::Bail(v) => ToolState::Done(Value::clone(v)),
        End::Failed(e) => ToolState::Done(json!({
            "error": { "code": e.code, "message": e.message }
        })),
        End::Tripwire(t) => ToolState::Tripped(t.clone()),
        End::Cancelled => ToolState::Done(json!({ "error": { "code": "cancelled" } })),
    };
}

/// After a pass over the tool calls: wait while one runs; then end on a tripwire, suspend
/// while an approval is pending, or give the model the results and call it again.
pub(super) fn tools_settled(
    agent: &mut AgentNode,
    id: EntryId,
    entry: &EntryDef,
    def: &AgentDef,
    sub: &Frame,
    cx: &mut Cx,
) -> Next {
    let AgentNow::Tools(runs) = &mut agent.now else {
        return Next::Wait(Phase::Running);
    };
    if runs
        .iter()
        .any(|r| matches!(r.state, ToolState::Running(_)))
    {
        transition!("agent", "tools-wait");
        return Next::Wait(Phase::Running);
    }
    // A cancel ended the calls waiting for approval as they were driven.
    if cx.cancelling {
        transition!("agent", "tools-cancelled");
        return Next::End(End::Cancelled);
    }
    if let Some(tripped) = runs.iter().find_map(|r| match &r.state {
        ToolState::Tripped(t) => Some(t.clone()),
        _ => None,
    }) {
        transition!("agent", "tool-tripwire");
        runs.iter_mut()
            .for_each(|run| cancel_call(run, entry, sub, cx));
        return Next::End(End::Tripwire(tripped));
    }
    if runs
        .iter()
        .any(|r| matches!(r.state, ToolState::Approval | ToolState::Pending))
    {
        transition!("agent", "await-approval");
        return Next::Wait(Phase::Suspended);
    }
    transition!("agent", "results");
    let mut results = Vec::with_capacity(runs.len());
    for run in runs.iter() {
        let ToolState::Done(result) = &run.state else {
            continue;
        };
        let content = match result {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        agent.messages.push(json!({
            "role": "tool",
            "tool_call_id": run.id,
            "content": content,
        }));
        results.push(json!({ "id": run.id, "path": run.path, "result": result }));
    }
    if let Some(last) = agent.steps.last_mut() {
        last["tool_results"] = json!(results);
    }
    next_model_call(agent, id, def);
    Next::Again
}

/// The scenarios of this file: its tests, and a part of the corpus the machines' transition
/// tables are checked against (`engine::transitions`).
#[cfg(test)]
pub(crate) mod tests {
    use serde_json::{Value, json};

    use crate::engine::sim::{Answer, Sim, agent, done, fail_final, file, says, trip};
    use crate::engine::transitions::scenarios;
    use crate::engine::{RunStatus, StepStatus};

    #[test]
    fn s123_s125_a_call_id_given_again_gets_a_path_of_its_own() {
        let sim = Sim::new(
            file("w", vec![agent("a", &[("add", false)], 5)]),
            json!("go"),
        )
        .on(
            "a.model-1",
            [says("", &[("call_0", "add", json!({"n": 1}))], (1, 1))],
        )
        .on(
            "a.model-2",
            [says("", &[("call_0", "add", json!({"n": 2}))], (1, 1))],
        )
        .on("a.model-3", [says("done", &[], (1, 1))])
        .started();
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(*sim.calls_to("a.tool-call_0")[0].input, json!({"n": 1}));
        assert_eq!(*sim.calls_to("a.tool-call_0-2")[0].input, json!({"n": 2}));
        let messages = &sim.calls_to("a.model-3")[0].input["messages"];
        assert_eq!(
            messages[2]["tool_call_id"], "call_0",
            "the provider's id, as it gave it"
        );
        assert_eq!(messages[4]["tool_call_id"], "call_0");
    }

    #[test]
    fn s123_a_failed_or_unknown_tool_is_told_to_the_model_which_goes_on() {
        let sim = Sim::new(
            file("w", vec![agent("a", &[("add", false)], 5)]),
            json!("go"),
        )
        .on(
            "a.model-1",
            [says(
                "",
                &[("c1", "add", json!({})), ("c2", "nope", json!({}))],
                (1, 1),
            )],
        )
        .on("a.tool-c1", [fail_final("boom")])
        .on("a.model-2", [says("sorry", &[], (1, 1))])
        .started();
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(sim.record("a.tool-c1").status, StepStatus::Failed);
        let unknown = sim.record("a.tool-c2");
        assert_eq!(unknown.status, StepStatus::Failed);
        assert_eq!(
            unknown.error.as_ref().map(|e| e.code.as_str()),
            Some("unknown-tool")
        );
        let messages = &sim.calls_to("a.model-2")[0].input["messages"];
        let told: Value =
            serde_json::from_str(messages[2]["content"].as_str().expect("text")).expect("json");
        assert_eq!(told["error"]["code"], "boom");
        let told: Value =
            serde_json::from_str(messages[3]["content"].as_str().expect("text")).expect("json");
        assert_eq!(told["error"]["code"], "unknown-tool");
    }

    #[test]
    fn s123_s82_a_tools_tripwire_ends_the_run_tripwire_once_its_siblings_end() {
        let mut sim = Sim::new(
            file("w", vec![agent("a", &[("add", false), ("mul", false)], 5)]),
            json!("go"),
        )
        .on(
            "a.model-1",
            [says(
                "",
                &[("c1", "add", json!({})), ("c2", "mul", json!({}))],
                (1, 1),
            )],
        )
        .on("a.tool-c1", [trip("no adding")])
        .on("a.tool-c2", [Answer::Hold])
        .started();
        assert_eq!(sim.status(), RunStatus::Running, "the sibling still runs");
        sim.answer("a.tool-c2", None, done(json!(1)));
        assert_eq!(sim.status(), RunStatus::Tripwire);
        assert_eq!(
            sim.run.tripwire.as_ref().map(|t| t.reason.as_str()),
            Some("no adding")
        );
        assert!(sim.calls_to("a.model-2").is_empty());
    }

    /// The tool paths in flight, in the order they were issued.
    fn tools_in_flight(sim: &Sim) -> Vec<String> {
        sim.in_flight()
            .into_iter()
            .filter(|p| p.starts_with("a.tool-"))
            .collect()
    }

    #[test]
    fn s123_a_reply_has_at_most_max_parallel_tools_calls_in_flight_the_rest_in_order() {
        let ids: Vec<String> = (1..=20).map(|i| format!("c{i}")).collect();
        let calls: Vec<(&str, &str, Value)> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), "add", json!({ "n": i + 1 })))
            .collect();
        let mut sim = Sim::new(
            file(
                "w",
                vec![agent("a", &[("add", false)], 5).max_parallel_tools(3)],
            ),
            json!("go"),
        )
        .on("a.model-1", [says("", &calls, (1, 1))])
        .on("a.model-2", [says("done", &[], (1, 1))]);
        for id in &ids {
            sim = sim.on_call(&format!("a.tool-{id}"), |_| Answer::Hold);
        }
        let mut sim = sim.started();
        assert_eq!(
            tools_in_flight(&sim),
            ["a.tool-c1", "a.tool-c2", "a.tool-c3"],
            "three issued, the first three of the reply"
        );
        // A call that ends lets the next of the reply start, whichever ended.
        sim.answer("a.tool-c2", None, done(json!(2)));
        assert_eq!(
            tools_in_flight(&sim),
            ["a.tool-c1", "a.tool-c3", "a.tool-c4"]
        );
        // A restart issues again the calls in flight, and the held ones still wait.
        sim.crash_and_recover();
        let mut again = tools_in_flight(&sim);
        again.sort();
        assert_eq!(again, ["a.tool-c1", "a.tool-c3", "a.tool-c4"]);
        let mut ended = 1;
        while let Some(oldest) = tools_in_flight(&sim).first().cloned() {
            sim.answer(&oldest, None, done(json!(1)));
            ended += 1;
            let now = tools_in_flight(&sim);
            assert!(now.len() <= 3, "{now:?}");
            assert_eq!(now.len(), (20 - ended).min(3), "{now:?}");
        }
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(sim.max_in_flight, 3);
        let mut issued: Vec<&str> = Vec::new();
        for call in &sim.calls {
            let path = call.step_path.as_str();
            if path.starts_with("a.tool-") && !issued.contains(&path) {
                issued.push(path);
            }
        }
        let expected: Vec<String> = ids.iter().map(|id| format!("a.tool-{id}")).collect();
        assert_eq!(issued, expected, "issued in the reply's order");
        let messages = &sim.calls_to("a.model-2")[0].input["messages"];
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(messages[2 + i]["tool_call_id"], id.as_str());
        }
    }

    #[test]
    fn s123_s82_no_held_call_starts_after_a_tripwire() {
        let sim = Sim::new(
            file(
                "w",
                vec![agent("a", &[("add", false)], 5).max_parallel_tools(1)],
            ),
            json!("go"),
        )
        .on(
            "a.model-1",
            [says(
                "",
                &[("c1", "add", json!({})), ("c2", "add", json!({}))],
                (1, 1),
            )],
        )
        .on("a.tool-c1", [trip("no adding")])
        .started();
        assert_eq!(sim.status(), RunStatus::Tripwire);
        assert!(sim.calls_to("a.tool-c2").is_empty());
    }

    #[test]
    fn s123_s124_a_call_waiting_for_approval_holds_its_place() {
        let mut sim = Sim::new(
            file(
                "w",
                vec![agent("a", &[("add", false), ("rm", true)], 5).max_parallel_tools(2)],
            ),
            json!("go"),
        )
        .on(
            "a.model-1",
            [says(
                "",
                &[
                    ("c1", "add", json!({})),
                    ("c2", "rm", json!({})),
                    ("c3", "add", json!({})),
                ],
                (1, 1),
            )],
        )
        .on("a.tool-c1", [Answer::Hold])
        .on("a.model-2", [says("done", &[], (1, 1))])
        .started();
        assert_eq!(tools_in_flight(&sim), ["a.tool-c1"]);
        assert_eq!(sim.record("a.tool-c2").status, StepStatus::Suspended);
        assert!(sim.calls_to("a.tool-c3").is_empty(), "c1 and c2 hold both");
        sim.answer("a.tool-c1", None, done(json!(1)));
        assert_eq!(sim.calls_to("a.tool-c3").len(), 1);
        assert_eq!(sim.status(), RunStatus::Suspended);
        sim.resume(None, Some("c2"), None, json!({"approved": true}))
            .expect("approved");
        assert_eq!(sim.calls_to("a.tool-c2").len(), 1);
        assert_eq!(sim.status(), RunStatus::Success);
    }

    /// Every test above, by name.
    pub(crate) const SCENARIOS: &[(&str, fn())] = scenarios![
        s123_s125_a_call_id_given_again_gets_a_path_of_its_own,
        s123_a_failed_or_unknown_tool_is_told_to_the_model_which_goes_on,
        s123_s82_a_tools_tripwire_ends_the_run_tripwire_once_its_siblings_end,
        s123_a_reply_has_at_most_max_parallel_tools_calls_in_flight_the_rest_in_order,
        s123_s82_no_held_call_starts_after_a_tripwire,
        s123_s124_a_call_waiting_for_approval_holds_its_place,
    ];
}
