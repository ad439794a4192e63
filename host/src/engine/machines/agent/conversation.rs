//! The agent's conversation with its model: the messages it starts from, each model call
//! (its path, its step and its input), the reply it takes, and the final answer, checked
//! against the output schema after at most one repair (S123, S126).

use serde_json::{Value, json};

use crate::engine::context::{Cx, Frame};
use crate::engine::model::{AgentDef, EntryDef, EntryId, MODEL_PLUGIN, StepDef};
use crate::engine::nodes::{AgentNode, AgentNow, End, Node, Phase, ToolRun, ToolState};
use crate::engine::schema;
use crate::engine::transitions::transition;

use super::paths::tool_path;

/// What the agent does after a pass over what it waits for.
pub(super) enum Next {
    /// Waits, standing at this phase.
    Wait(Phase),
    /// Drives again: a new model call or tool calls were set up.
    Again,
    /// Ends.
    End(End),
}

/// The conversation an agent starts with: `{prompt}`, `{messages}`, or a string (a prompt).
pub(super) fn conversation(input: &Value, entry: &EntryDef) -> Result<Vec<Value>, String> {
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
pub(super) fn next_model_call(agent: &mut AgentNode, id: EntryId, def: &AgentDef) {
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

/// The step the agent's model calls are executions of.
pub(super) fn model_step(def: &AgentDef) -> StepDef {
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

/// Takes a model call's reply: usage, conversation, and then the end, a repair, or the tool
/// calls it asks for.
#[allow(clippy::too_many_arguments)]
pub(super) fn took_reply(
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
        transition!("agent", "max-steps");
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
    transition!("agent", "tool-calls");
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
        transition!("agent", "answer");
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
            Ok(()) => {
                transition!("agent", "structured-answer");
                return Next::End(End::Success(value.into()));
            }
            Err(violations) => (
                schema::summarize(&violations),
                Some(schema::details(&violations)),
            ),
        },
        None => ("the answer is not JSON".to_owned(), None),
    };
    if !agent.repaired && agent.turns < def.max_steps {
        transition!("agent", "repair");
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
    transition!("agent", "invalid-output");
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

/// The scenarios of this file: its tests, and a part of the corpus the machines' transition
/// tables are checked against (`engine::transitions`).
#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use crate::engine::RunStatus;
    use crate::engine::sim::{Sim, agent, fail, fail_final, file, says};
    use crate::engine::transitions::scenarios;

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

    /// Every test above, by name.
    pub(crate) const SCENARIOS: &[(&str, fn())] = scenarios![
        s123_a_model_call_that_fails_fails_the_agent_and_one_that_is_retried_waits_durably,
        s123_max_steps_bounds_the_model_calls,
        s126_a_structured_output_is_checked_and_repaired_once,
    ];
}
