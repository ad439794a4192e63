//! The agent machine (S123–S126): the model decides, tools act, a person approves what is
//! risky, until the model answers without calling a tool.
//!
//! Every model call and every tool call is a step execution of its own, driven by the step
//! machine under a path of its own (`AGENT.model-N`, `AGENT.tool-CALLID`) with its own record,
//! events, retries and timeout. The agent keeps the conversation in its state, so a recovery
//! issues again only the calls that were in flight: none that ended runs twice.
//!
//! Here the loop (start, then a model call or a round of tool calls until the agent ends);
//! `conversation` the model's side (the messages, each model call, its reply and the final
//! answer); `tools` the tool calls of a round; `approvals` the calls a person must approve;
//! `paths` where each call sits. The table below is the whole machine's: its rows are marked
//! in all four files.
//!
//! ## Transitions of `agent`
//!
//! | Row | From | Event or condition | To | Issues |
//! |-----|------|--------------------|----|--------|
//! | `start` | new | its input gives a conversation | model call | record, `step-started`; model call 1 (a `step` at `AGENT.model-1`) |
//! | `start-cancelled` | new | a cancel was accepted | cancelled | record, `step-started`, `step-cancelled` |
//! | `bad-input` | new | its `input:` fails, or the input is no prompt and no messages | failed | record, `step-started`, `step-failed` (`expression-error`, `invalid-input`) |
//! | `model-wait` | model call | after a pass, the call still runs | running | — |
//! | `model-ended` | model call | the call ended otherwise: failure, tripwire, cancel | as the call | record, the closing event |
//! | `answer` | model call | the reply calls no tool, and no output schema is asked | succeeded | record, `step-succeeded` with `{text, messages, usage, steps}` |
//! | `structured-answer` | model call | the reply calls no tool and its JSON checks against the output schema (S126) | succeeded | record, `step-succeeded` with the value |
//! | `repair` | model call | the answer breaks the output schema, for the first time (S126) | model call | the next model call, told what is wrong |
//! | `invalid-output` | model call | the answer breaks the output schema after the repair | failed | record, `step-failed` (`invalid-output`) |
//! | `max-steps` | model call | the reply calls tools after `max-steps` model calls | failed | record, `step-failed` (`max-steps`) |
//! | `tool-calls` | model call | the reply calls tools | tool calls | each call pending, under a path of its own (S125) |
//! | `unknown-tool` | tool call pending | it names no tool | tool call done | record, `step-failed` (`unknown-tool`); nothing invoked |
//! | `ask-approval` | tool call pending | its tool needs approval (S124) | tool call waiting | record `suspended`, `step-suspended` with `{tool, arguments}`, its id as the label |
//! | `tool-held` | tool call pending | `max-parallel-tools` calls of the reply are in flight (running or waiting for approval), or one tripped | tool call pending | nothing: the pending calls start as earlier ones end, in the reply's order |
//! | `tool-start` | tool call pending | its tool needs no approval | tool call running | a `step` at `AGENT.tool-ID` |
//! | `approved` | tool call waiting | a resume approves it | tool call running | its `step`, with the arguments the resume gives if any |
//! | `refused` | tool call waiting | a resume refuses it | tool call done | record, `step-succeeded` with the refusal; nothing invoked |
//! | `approval-cancelled` | tool call waiting | a cancel, or a sibling's tripwire (S74) | tool call done | record, `step-cancelled` |
//! | `tool-ended` | tool call running | its step ended | tool call done | what the model is told: its output or its error; a tripwire kept |
//! | `tools-wait` | tool calls | after a pass, a call still runs | running | — |
//! | `tools-cancelled` | tool calls | no call runs, after a cancel | cancelled | record, `step-cancelled` |
//! | `tool-tripwire` | tool calls | no call runs, and one tripped (S82) | tripwire | calls waiting for approval `step-cancelled`; record, `step-failed` with the tripwire |
//! | `await-approval` | tool calls | no call runs, and some wait for approval | suspended | nothing (S90) |
//! | `results` | tool calls | every call is done | model call | the next model call, with each result as a `tool` message |
//!
//! Each row is marked where the code takes it (`transition!`, see `engine::transitions`).

mod approvals;
mod conversation;
mod paths;
mod tools;

use crate::engine::context::{Cx, Frame};
use crate::engine::lifecycle::{end_node, start_block};
use crate::engine::machines::step;
use crate::engine::model::{AgentDef, EntryDef, EntryKind};
use crate::engine::nodes::{AgentNode, AgentNow, AgentUsage, End, Node, NodeKind, Phase};
use crate::engine::transitions::transition;

use conversation::{Next, conversation, model_step, next_model_call, took_reply};
use paths::{model_path, sub_entry, sub_frame};
use tools::{drive_tools, tools_settled};

pub(crate) use approvals::{approval_schema, approvals, cancel_approvals};

/// Drives an agent: starts it, drives its model call or tool calls, and moves the
/// conversation on when they end.
pub(crate) fn drive(node: &mut Node, entry: &EntryDef, frame: &Frame, cx: &mut Cx) {
    let EntryKind::Agent(def) = &entry.kind else {
        return;
    };
    if node.phase == Phase::New && !start(node, entry, def, frame, cx) {
        return;
    }
    let sub = sub_frame(frame, entry);
    let id = node.entry;
    loop {
        let NodeKind::Agent(agent) = &mut node.kind else {
            return;
        };
        let next = match &mut agent.now {
            AgentNow::Model(call) => {
                let path = model_path(entry, agent.turns);
                let step = model_step(def);
                step::drive_with(call, &sub_entry(entry, &path), &step, &sub, cx);
                cx.results.remove(&sub.scopes[0]);
                match &call.phase {
                    Phase::New | Phase::Running | Phase::Suspended => {
                        transition!("agent", "model-wait");
                        Next::Wait(Phase::Running)
                    }
                    Phase::Done(End::Success(reply)) => {
                        let reply = reply.clone();
                        took_reply(agent, id, entry, def, &path, &reply, frame, cx)
                    }
                    Phase::Done(end) => {
                        transition!("agent", "model-ended");
                        Next::End(end.clone())
                    }
                }
            }
            AgentNow::Tools(runs) => {
                drive_tools(runs, id, entry, def, &sub, cx);
                cx.results.remove(&sub.scopes[0]);
                tools_settled(agent, id, entry, def, &sub, cx)
            }
            AgentNow::Nothing => return,
        };
        match next {
            Next::Wait(phase) => {
                node.phase = phase;
                return;
            }
            Next::Again => {}
            Next::End(end) => {
                let end = if cx.cancelling { End::Cancelled } else { end };
                agent.now = AgentNow::Nothing;
                end_node(node, entry, frame, cx, end);
                return;
            }
        }
    }
}

/// Starts an agent: its record and event, its conversation from the input, and the first
/// model call. False when it ended at once.
fn start(node: &mut Node, entry: &EntryDef, def: &AgentDef, frame: &Frame, cx: &mut Cx) -> bool {
    let mut made = Ok(());
    if let Some(expr) = def.input.as_ref().filter(|_| !node.made) {
        let scope = cx.expr_input(frame, &node.input, &expr.reads());
        match expr.eval_one(&scope, cx.value_limit) {
            Ok(v) => node.input = v.into(),
            Err(e) => {
                made = Err((
                    "expression-error",
                    format!("agent {}: input: {e}", entry.path),
                ))
            }
        }
    }
    start_block(node, entry, frame, cx);
    let messages = made.and_then(|()| {
        conversation(&node.input, entry).map_err(|message| ("invalid-input", message))
    });
    let mut agent = AgentNode {
        messages: Vec::new(),
        turns: 0,
        usage: AgentUsage::default(),
        steps: Vec::new(),
        repaired: false,
        tool_paths: Vec::new(),
        now: AgentNow::Nothing,
    };
    if cx.cancelling {
        transition!("agent", "start-cancelled");
        node.kind = NodeKind::Agent(Box::new(agent));
        end_node(node, entry, frame, cx, End::Cancelled);
        return false;
    }
    match messages {
        Ok(messages) => {
            transition!("agent", "start");
            agent.messages = messages;
            next_model_call(&mut agent, node.entry, def);
            node.kind = NodeKind::Agent(Box::new(agent));
            true
        }
        Err((code, message)) => {
            transition!("agent", "bad-input");
            node.kind = NodeKind::Agent(Box::new(agent));
            let err = cx.error(frame, &entry.path, code, message);
            end_node(node, entry, frame, cx, End::Failed(err));
            false
        }
    }
}

/// The scenarios of this file: its tests, and a part of the corpus the machines' transition
/// tables are checked against (`engine::transitions`).
#[cfg(test)]
pub(crate) mod tests {
    use serde_json::{Value, json};

    use crate::engine::sim::{Answer, Sim, agent, done, file, foreach, says, step};
    use crate::engine::transitions::scenarios;
    use crate::engine::{EventKind, RunStatus, StepStatus};

    /// Two tool rounds, the first a parallel pair, then a final answer. Every call answers the
    /// same each time it is issued, as a recovery may issue one again.
    fn two_rounds() -> Sim {
        Sim::new(
            file(
                "w",
                vec![
                    agent("a", &[("add", false), ("mul", false)], 10),
                    step("next"),
                ],
            ),
            json!({"prompt": "compute"}),
        )
        .on_call("a.model-1", |_| {
            says(
                "",
                &[
                    ("c1", "add", json!({"x": 1})),
                    ("c2", "mul", json!({"x": 2})),
                ],
                (10, 5),
            )
        })
        .on_call("a.tool-c1", |_| done(json!(3)))
        .on_call("a.tool-c2", |_| done(json!({"product": 4})))
        .on_call("a.model-2", |_| {
            says("", &[("c3", "add", json!({"x": 3}))], (20, 6))
        })
        .on_call("a.tool-c3", |_| done(json!(5)))
        .on_call("a.model-3", |_| says("done: 5", &[], (30, 7)))
    }

    const SUB_STEPS: [&str; 6] = [
        "a.model-1",
        "a.tool-c1",
        "a.tool-c2",
        "a.model-2",
        "a.tool-c3",
        "a.model-3",
    ];

    #[test]
    fn s123_an_agent_loops_model_and_tool_calls_each_a_step_of_its_own_until_a_final_answer() {
        let sim = two_rounds().started();
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(sim.max_in_flight, 2, "the parallel pair runs at once");
        let out = sim
            .record("a")
            .output
            .as_deref()
            .cloned()
            .expect("an output");
        assert_eq!(out["text"], "done: 5");
        assert_eq!(
            out["usage"],
            json!({"input_tokens": 60, "output_tokens": 18})
        );
        assert_eq!(out["steps"].as_array().map(Vec::len), Some(3));
        assert_eq!(
            out["steps"][0]["tool_results"][1]["result"],
            json!({"product": 4})
        );
        let roles: Vec<&str> = out["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter_map(|m| m["role"].as_str())
            .collect();
        assert_eq!(
            roles,
            [
                "user",
                "assistant",
                "tool",
                "tool",
                "assistant",
                "tool",
                "assistant"
            ]
        );
        // Each call is a step with its own record and events; tools get their arguments.
        for path in SUB_STEPS {
            assert_eq!(sim.record(path).status, StepStatus::Success, "{path}");
            assert_eq!(
                sim.kinds_of(path),
                [EventKind::StepStarted, EventKind::StepSucceeded],
                "{path}"
            );
        }
        assert_eq!(*sim.calls_to("a.tool-c2")[0].input, json!({"x": 2}));
        // The model sees the conversation so far, tool results as `tool` messages.
        let second = &sim.calls_to("a.model-2")[0].input;
        assert_eq!(second["system"], "be brief");
        assert_eq!(second["tools"][0]["name"], "add");
        assert_eq!(second["messages"][3]["tool_call_id"], "c2");
        assert_eq!(second["messages"][3]["content"], r#"{"product":4}"#);
        // The agent's output goes on like any entry's; its calls stay out of `.steps`.
        assert_eq!(sim.calls_to("next")[0].input["text"], "done: 5");
        assert!(!sim.run.results[""].contains_key("model-1"));
    }

    #[test]
    fn s123_a_crash_at_any_checkpoint_repeats_no_call_that_ended_and_loses_none() {
        let mut clean = two_rounds();
        clean
            .feed(crate::engine::Event::Start { at: clean.now })
            .expect("start");
        let mut checkpoints = 0;
        while clean.step_once() {
            checkpoints += 1;
        }
        assert_eq!(clean.status(), RunStatus::Success);
        let result = clean.run.result.clone();
        for k in 0..=checkpoints {
            let mut sim = two_rounds();
            sim.feed(crate::engine::Event::Start { at: sim.now })
                .expect("start");
            for _ in 0..k {
                sim.step_once();
            }
            sim.crash_and_recover();
            assert_eq!(sim.status(), RunStatus::Success, "crash after {k}");
            assert_eq!(sim.run.result, result, "crash after {k}: the same result");
            let mut ended = sim.ended.clone();
            ended.retain(|p| p != "next");
            ended.sort();
            let mut want: Vec<String> = SUB_STEPS.iter().map(|p| (*p).to_owned()).collect();
            want.sort();
            assert_eq!(ended, want, "crash after {k}: each call ended exactly once");
        }
    }

    #[test]
    fn s123_s76_a_cancel_aborts_the_model_call_in_flight_and_ends_the_agent_cancelled() {
        let mut sim = Sim::new(
            file("w", vec![agent("a", &[("add", false)], 5)]),
            json!("go"),
        )
        .on("a.model-1", [Answer::Hold])
        .started();
        let token = *sim
            .in_flight_tokens()
            .iter()
            .next()
            .expect("the model call runs");
        sim.cancel().expect("accepted");
        assert_eq!(sim.aborted, [token]);
        assert_eq!(sim.status(), RunStatus::Cancelled);
        assert_eq!(sim.record("a.model-1").status, StepStatus::Cancelled);
        assert_eq!(sim.record("a").status, StepStatus::Cancelled);
        assert!(sim.calls_to("a.model-2").is_empty());
    }

    #[test]
    fn s123_a_bad_input_fails_the_agent_before_any_model_call() {
        let sim = Sim::new(file("w", vec![agent("a", &[], 5)]), json!({"text": 1})).started();
        assert_eq!(sim.status(), RunStatus::Failed);
        assert_eq!(
            sim.run.error.as_ref().map(|e| e.code.as_str()),
            Some("invalid-input")
        );
        assert!(sim.calls.is_empty());
    }

    #[test]
    fn s123_s31_agents_inside_foreach_items_keep_their_calls_apart() {
        let sim = Sim::new(
            file(
                "w",
                vec![foreach("f", 2, vec![agent("a", &[("add", false)], 5)])],
            ),
            json!(["one", "two"]),
        )
        .on_call("f.a.model-1", |call| {
            let prompt = call.input["messages"][0]["content"]
                .as_str()
                .unwrap_or_default();
            says("", &[(prompt, "add", json!({"p": prompt}))], (1, 1))
        })
        .on_call("f.a.model-2", |call| {
            let prompt = call.input["messages"][0]["content"]
                .as_str()
                .unwrap_or_default();
            says(prompt, &[], (1, 1))
        })
        .started();
        assert_eq!(sim.status(), RunStatus::Success);
        let texts: Vec<&Value> = sim
            .run
            .result
            .as_ref()
            .and_then(Value::as_array)
            .expect("items")
            .iter()
            .map(|o| &o["text"])
            .collect();
        assert_eq!(texts, [&json!("one"), &json!("two")]);
        assert_eq!(sim.calls_to("f.a.tool-one").len(), 1);
        assert_eq!(sim.calls_to("f.a.tool-two").len(), 1);
    }

    /// The scenarios of the agent's files, by file.
    pub(crate) const FILES: &[crate::engine::transitions::FileScenarios] = &[
        ("machines/agent/mod.rs", SCENARIOS),
        (
            "machines/agent/conversation.rs",
            super::conversation::tests::SCENARIOS,
        ),
        ("machines/agent/tools.rs", super::tools::tests::SCENARIOS),
        (
            "machines/agent/approvals.rs",
            super::approvals::tests::SCENARIOS,
        ),
    ];

    #[test]
    fn s123_s75_an_agent_a_cancel_reaches_before_it_starts_calls_no_model() {
        let mut sim = Sim::new(
            file("w", vec![agent("a", &[("add", false)], 5)]),
            json!("go"),
        );
        sim.cancel().expect("accepted");
        assert_eq!(sim.status(), RunStatus::Cancelled);
        assert!(sim.calls.is_empty(), "no model call");
        assert_eq!(sim.record("a").status, StepStatus::Cancelled);
    }

    /// Every test above, by name.
    const SCENARIOS: &[(&str, fn())] = scenarios![
        s123_an_agent_loops_model_and_tool_calls_each_a_step_of_its_own_until_a_final_answer,
        s123_a_crash_at_any_checkpoint_repeats_no_call_that_ended_and_loses_none,
        s123_s76_a_cancel_aborts_the_model_call_in_flight_and_ends_the_agent_cancelled,
        s123_a_bad_input_fails_the_agent_before_any_model_call,
        s123_s31_agents_inside_foreach_items_keep_their_calls_apart,
        s123_s75_an_agent_a_cancel_reaches_before_it_starts_calls_no_model,
    ];
}
