//! The agent machine (S123–S126): the model decides, tools act, a person approves what is
//! risky, until the model answers without calling a tool.
//!
//! Every model call and every tool call is a step execution of its own, driven by the step
//! machine under a path of its own (`AGENT.model-N`, `AGENT.tool-CALLID`) with its own record,
//! events, retries and timeout. The agent keeps the conversation in its state, so a recovery
//! issues again only the calls that were in flight: none that ended runs twice.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::engine::context::{Cx, Frame};
use crate::engine::lifecycle::{end_node, mark_cancelled, mark_suspended, start_block};
use crate::engine::machines::step;
use crate::engine::model::{AgentDef, EntryDef, EntryId, EntryKind, MODEL_PLUGIN, StepDef};
use crate::engine::nodes::{
    AgentNode, AgentNow, AgentUsage, End, Node, NodeKind, Phase, ToolRun, ToolState,
};
use crate::engine::records::SuspendedEntry;
use crate::engine::schema;

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
                    Phase::New | Phase::Running | Phase::Suspended => Next::Wait(Phase::Running),
                    Phase::Done(End::Success(reply)) => {
                        let reply = reply.clone();
                        took_reply(agent, id, entry, def, &path, &reply, frame, cx)
                    }
                    Phase::Done(end) => Next::End(end.clone()),
                }
            }
            AgentNow::Tools(runs) => {
                for run in runs.iter_mut() {
                    drive_tool(run, id, entry, def, &sub, cx);
                }
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

/// What the agent does after a pass over what it waits for.
enum Next {
    /// Waits, standing at this phase.
    Wait(Phase),
    /// Drives again: a new model call or tool calls were set up.
    Again,
    /// Ends.
    End(End),
}

/// Starts an agent: its record and event, its conversation from the input, and the first
/// model call. False when it ended at once.
fn start(node: &mut Node, entry: &EntryDef, def: &AgentDef, frame: &Frame, cx: &mut Cx) -> bool {
    let mut made = Ok(());
    if let Some(expr) = def.input.as_ref().filter(|_| !node.made) {
        let scope = cx.expr_input(frame, &node.input);
        match expr.eval_one(&scope) {
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
        node.kind = NodeKind::Agent(Box::new(agent));
        end_node(node, entry, frame, cx, End::Cancelled);
        return false;
    }
    match messages {
        Ok(messages) => {
            agent.messages = messages;
            next_model_call(&mut agent, node.entry, def);
            node.kind = NodeKind::Agent(Box::new(agent));
            true
        }
        Err((code, message)) => {
            node.kind = NodeKind::Agent(Box::new(agent));
            let err = cx.error(frame, &entry.path, code, message);
            end_node(node, entry, frame, cx, End::Failed(err));
            false
        }
    }
}

/// The conversation an agent starts with: `{prompt}`, `{messages}`, or a string (a prompt).
fn conversation(input: &Value, entry: &EntryDef) -> Result<Vec<Value>, String> {
    let wrong = || {
        format!(
            "agent {}: input: give {{\"prompt\": TEXT}} or {{\"messages\": [{{\"role\", \"content\"}}, ...]}}",
            entry.path
        )
    };
    let prompt = |p: &str| vec![json!({ "role": "user", "content": p })];
    match input {
        Value::String(p) => Ok(prompt(p)),
        Value::Object(map) => match (map.get("prompt"), map.get("messages")) {
            (Some(Value::String(p)), None) => Ok(prompt(p)),
            (None, Some(Value::Array(messages))) if !messages.is_empty() => {
                let roles = ["system", "user", "assistant", "tool"];
                let ok = messages.iter().all(|m| {
                    m.get("role")
                        .and_then(Value::as_str)
                        .is_some_and(|r| roles.contains(&r))
                });
                if ok {
                    Ok(messages.clone())
                } else {
                    Err(format!(
                        "agent {}: input: every message needs a role: system, user, assistant or tool",
                        entry.path
                    ))
                }
            }
            _ => Err(wrong()),
        },
        _ => Err(wrong()),
    }
}

/// Sets up the agent's next model call, with the conversation so far.
fn next_model_call(agent: &mut AgentNode, id: EntryId, def: &AgentDef) {
    agent.turns += 1;
    let mut system = def.instructions.clone().unwrap_or_default();
    if let Some(schema) = &def.output_schema {
        if !system.is_empty() {
            system.push_str("\n\n");
        }
        system.push_str(&format!(
            "Answer with only a JSON value (no other text) that satisfies this JSON Schema: {}",
            schema.value()
        ));
    }
    let tools: Vec<Value> = def
        .tools
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "description": t.description,
                "input_schema": t.parameters,
            })
        })
        .collect();
    let mut input = json!({ "messages": agent.messages });
    if !system.is_empty() {
        input["system"] = json!(system);
    }
    if !tools.is_empty() {
        input["tools"] = json!(tools);
    }
    agent.now = AgentNow::Model(Box::new(Node::new(id, input)));
}

/// The path of model call `turn` (1-based).
fn model_path(entry: &EntryDef, turn: u32) -> String {
    format!("{}.model-{turn}", entry.path)
}

/// The path of the tool call with the provider's id `id`: characters other than ASCII
/// letters, digits, `-` and `_` become `_`, so the path stays one segment, and `-2`, `-3`...
/// follow an id the agent has seen before (`taken`: the paths used so far).
fn tool_path(entry: &EntryDef, id: &str, taken: &[String]) -> String {
    let safe: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let base = format!("{}.tool-{safe}", entry.path);
    let mut path = base.clone();
    let mut n = 1;
    while taken.contains(&path) {
        n += 1;
        path = format!("{base}-{n}");
    }
    path
}

/// The step the agent's model calls are executions of.
fn model_step(def: &AgentDef) -> StepDef {
    StepDef {
        plugin: MODEL_PLUGIN.to_owned(),
        step: def.model.clone(),
        config: std::sync::Arc::clone(&def.config),
        retry: def.retry,
        timeout_ms: def.timeout_ms,
        schemas: Default::default(),
        kind: Default::default(),
        input: None,
    }
}

/// The entry a sub-step is driven as: its own path, the agent's file. The step machine reads
/// only these of an entry; the kind is the step definition it is given beside.
fn sub_entry(entry: &EntryDef, path: &str) -> EntryDef {
    EntryDef {
        id: path.rsplit('.').next().unwrap_or(path).to_owned(),
        path: path.to_owned(),
        file: entry.file,
        kind: EntryKind::Group { body: Vec::new() },
    }
}

/// The frame of an agent's sub-steps: the agent's, with a scope of their own, so that their
/// outputs never show in `.steps` (the agent drops it after each pass).
fn sub_frame(frame: &Frame, entry: &EntryDef) -> Frame {
    let mut sub = frame.clone();
    sub.scopes = vec![format!("{}\u{0}agent:{}", frame.scopes[0], entry.path)];
    sub
}

/// Takes a model call's reply: usage, conversation, and then the end, a repair, or the tool
/// calls it asks for.
#[allow(clippy::too_many_arguments)]
fn took_reply(
    agent: &mut AgentNode,
    id: EntryId,
    entry: &EntryDef,
    def: &AgentDef,
    path: &str,
    reply: &Value,
    frame: &Frame,
    cx: &mut Cx,
) -> Next {
    let text = reply["text"].as_str().unwrap_or_default().to_owned();
    let usage = &reply["usage"];
    agent.usage.input_tokens += usage["input_tokens"].as_u64().unwrap_or(0);
    agent.usage.output_tokens += usage["output_tokens"].as_u64().unwrap_or(0);
    let message = match reply.get("message") {
        Some(m @ Value::Object(_)) => m.clone(),
        _ => json!({ "role": "assistant", "content": text }),
    };
    agent.messages.push(message);
    let calls: Vec<(String, String, Value)> = reply["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| {
                    (
                        c["id"].as_str().unwrap_or_default().to_owned(),
                        c["name"].as_str().unwrap_or_default().to_owned(),
                        c.get("arguments").cloned().unwrap_or_else(|| json!({})),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    agent.steps.push(json!({
        "model": path,
        "text": text,
        "tool_calls": calls.iter().map(|(id, name, arguments)| json!({
            "id": id, "name": name, "arguments": arguments,
        })).collect::<Vec<_>>(),
        "usage": usage,
    }));
    if cx.cancelling {
        return Next::End(End::Cancelled);
    }
    if calls.is_empty() {
        return finish(agent, id, entry, def, text, frame, cx);
    }
    if agent.turns >= def.max_steps {
        let err = cx.error(
            frame,
            &entry.path,
            "max-steps",
            format!(
                "agent {}: the model still calls tools after {} model calls (max-steps)",
                entry.path, agent.turns
            ),
        );
        return Next::End(End::Failed(err));
    }
    let mut runs: Vec<ToolRun> = Vec::with_capacity(calls.len());
    for (call_id, name, arguments) in calls {
        let path = tool_path(entry, &call_id, &agent.tool_paths);
        agent.tool_paths.push(path.clone());
        runs.push(ToolRun {
            id: call_id,
            name,
            arguments,
            path,
            state: ToolState::Pending,
        });
    }
    agent.now = AgentNow::Tools(runs);
    Next::Again
}

/// Ends the agent with the model's final answer: `{text, messages, usage, steps}`, or the
/// structured output, checked, after at most one repair (S126).
fn finish(
    agent: &mut AgentNode,
    id: EntryId,
    entry: &EntryDef,
    def: &AgentDef,
    text: String,
    frame: &Frame,
    cx: &mut Cx,
) -> Next {
    let Some(schema) = &def.output_schema else {
        return Next::End(End::Success(
            json!({
                "text": text,
                "messages": agent.messages,
                "usage": agent.usage,
                "steps": agent.steps,
            })
            .into(),
        ));
    };
    let problem = match parse_json_answer(&text) {
        Some(value) => match schema.check(&value) {
            Ok(()) => return Next::End(End::Success(value.into())),
            Err(violations) => (
                schema::summarize(&violations),
                Some(schema::details(&violations)),
            ),
        },
        None => ("the answer is not JSON".to_owned(), None),
    };
    if !agent.repaired && agent.turns < def.max_steps {
        agent.repaired = true;
        agent.messages.push(json!({
            "role": "user",
            "content": format!(
                "Your answer does not satisfy the required JSON Schema: {}. Answer again with only the JSON value.",
                problem.0
            ),
        }));
        next_model_call(agent, id, def);
        return Next::Again;
    }
    let mut err = cx.error(
        frame,
        &entry.path,
        "invalid-output",
        format!("agent {}: output: {}", entry.path, problem.0),
    );
    err.details = problem.1;
    Next::End(End::Failed(err))
}

/// The JSON value an answer holds: the whole text, or the inside of one fenced block.
fn parse_json_answer(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    if let Ok(v) = serde_json::from_str(trimmed) {
        return Some(v);
    }
    let inner = trimmed.strip_prefix("```")?.strip_suffix("```")?;
    let inner = inner.strip_prefix("json").unwrap_or(inner);
    serde_json::from_str(inner.trim()).ok()
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
                ask_approval(run, &at, sub, cx);
                return;
            }
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

/// Suspends a tool call until a person approves or refuses it (S124): its record is
/// suspended with `{tool, arguments}` as the payload and the call's id as the label.
fn ask_approval(run: &mut ToolRun, at: &EntryDef, sub: &Frame, cx: &mut Cx) {
    let payload = json!({ "tool": run.name, "arguments": run.arguments });
    cx.record_start(sub, at, &Arc::new(run.arguments.clone()));
    mark_suspended(sub, at, cx, &payload, std::slice::from_ref(&run.id));
    run.state = ToolState::Approval;
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
fn tools_settled(
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
        return Next::Wait(Phase::Running);
    }
    // A cancel ended the calls waiting for approval as they were driven.
    if cx.cancelling {
        return Next::End(End::Cancelled);
    }
    if let Some(tripped) = runs.iter().find_map(|r| match &r.state {
        ToolState::Tripped(t) => Some(t.clone()),
        _ => None,
    }) {
        runs.iter_mut()
            .for_each(|run| cancel_call(run, entry, sub, cx));
        return Next::End(End::Tripwire(tripped));
    }
    if runs
        .iter()
        .any(|r| matches!(r.state, ToolState::Approval | ToolState::Pending))
    {
        return Next::Wait(Phase::Suspended);
    }
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
fn cancel_call(run: &mut ToolRun, entry: &EntryDef, sub: &Frame, cx: &mut Cx) {
    if !matches!(run.state, ToolState::Approval) {
        return;
    }
    let now = cx.ts();
    mark_cancelled(sub, &sub_entry(entry, &run.path), cx, now);
    run.state = ToolState::Done(json!({ "error": { "code": "cancelled" } }));
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::engine::sim::{
        Answer, Sim, agent, done, fail, fail_final, file, foreach, step, trip,
    };
    use crate::engine::{EventKind, Refusal, RunStatus, StepStatus};

    /// A model reply as the model executor gives it: text, tool calls `(id, name, arguments)`,
    /// usage, and the assistant message.
    fn says(text: &str, calls: &[(&str, &str, Value)], usage: (u64, u64)) -> Answer {
        let calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, arguments)| json!({"id": id, "name": name, "arguments": arguments}))
            .collect();
        let mut message = json!({"role": "assistant", "content": text});
        if !calls.is_empty() {
            message["tool_calls"] = json!(calls);
        }
        done(json!({
            "text": text,
            "tool_calls": calls,
            "usage": {"input_tokens": usage.0, "output_tokens": usage.1},
            "finish": if calls.is_empty() { "stop" } else { "tool_calls" },
            "message": message,
        }))
    }

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

    #[test]
    fn s123_a_model_call_that_fails_fails_the_agent_and_one_that_is_retried_waits_durably() {
        let sim = Sim::new(file("w", vec![agent("a", &[], 5)]), json!("go"))
            .on("a.model-1", [fail_final("model-auth")])
            .started();
        assert_eq!(sim.status(), RunStatus::Failed);
        let error = sim.run.error.as_ref().expect("an error");
        assert_eq!(
            (error.code.as_str(), error.step.as_str()),
            ("model-auth", "a.model-1")
        );

        let sim = Sim::new(
            file("w", vec![agent("a", &[], 5).model_retry(2, 5_000)]),
            json!("go"),
        )
        .on("a.model-1", [fail("rate-limited"), says("hi", &[], (1, 1))])
        .started();
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(sim.timer_waits, [5_000]);
        assert_eq!(sim.record("a.model-1").attempts, Some(2));
    }

    #[test]
    fn s123_max_steps_bounds_the_model_calls() {
        let calls = |n: &str| says("", &[(n, "add", json!({}))], (1, 1));
        let sim = Sim::new(
            file("w", vec![agent("a", &[("add", false)], 2)]),
            json!("go"),
        )
        .on("a.model-1", [calls("c1")])
        .on("a.model-2", [calls("c2")])
        .started();
        assert_eq!(sim.status(), RunStatus::Failed);
        assert_eq!(
            sim.run.error.as_ref().map(|e| e.code.as_str()),
            Some("max-steps")
        );
        assert!(
            sim.calls_to("a.tool-c2").is_empty(),
            "no tool runs that no model call could read"
        );
    }

    #[test]
    fn s126_a_structured_output_is_checked_and_repaired_once() {
        let schema = json!({"type": "object", "required": ["n"]});
        let sim = Sim::new(
            file("w", vec![agent("a", &[], 5).output_schema(schema.clone())]),
            json!("go"),
        )
        .on("a.model-1", [says("n is 1", &[], (1, 1))])
        .on("a.model-2", [says("```json\n{\"n\": 1}\n```", &[], (1, 1))])
        .started();
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(sim.run.result, Some(json!({"n": 1})));
        let repair = &sim.calls_to("a.model-2")[0].input;
        assert!(
            repair["system"]
                .as_str()
                .is_some_and(|s| s.contains("JSON Schema"))
        );
        assert_eq!(repair["messages"][2]["role"], "user");

        let sim = Sim::new(
            file("w", vec![agent("a", &[], 5).output_schema(schema)]),
            json!("go"),
        )
        .on("a.model-1", [says("{}", &[], (1, 1))])
        .on("a.model-2", [says("{\"m\": 2}", &[], (1, 1))])
        .started();
        assert_eq!(sim.status(), RunStatus::Failed);
        assert_eq!(
            sim.run.error.as_ref().map(|e| e.code.as_str()),
            Some("invalid-output")
        );
        assert!(sim.calls_to("a.model-3").is_empty(), "one repair only");
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
}
