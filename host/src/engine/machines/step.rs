//! The step machine: invoke, take the result, apply patches, retry after a wait, suspend and
//! resume (S12–S17, S51–S56, S62–S73).

// Step failures travel by value through a few internal helpers; boxing them buys nothing here.
#![allow(clippy::result_large_err)]

use serde_json::{Value, json};

use crate::engine::commands::{Command, EventKind, Invoke, StepsView};
use crate::engine::context::{Cx, Frame};
use crate::engine::drive::end_node;
use crate::engine::invocation::{InvocationResult, Resumption, StepCall, StepFailure, StepOutcome};
use crate::engine::model::{EntryDef, StepDef};
use crate::engine::nodes::{End, Node, NodeKind, Phase, StepNode, StepWait};
use crate::engine::patches::apply_patches;
use crate::engine::records::{StepStatus, TripwireInfo};
use crate::engine::schema;

/// Drives a plugin step: starts it, takes its invocation's result, retries after a wait,
/// resumes it when selected, and ends it on a cancel.
pub(crate) fn drive_step(
    node: &mut Node,
    entry: &EntryDef,
    def: &StepDef,
    frame: &Frame,
    cx: &mut Cx,
) {
    if node.phase == Phase::New {
        node.phase = Phase::Running;
        let mut input = std::mem::take(&mut node.input);
        let invalid = def
            .schemas
            .input
            .as_ref()
            .and_then(|s| s.fill_and_check(&mut input).err());
        node.input = input;
        cx.record_start(frame, entry, &node.input);
        cx.record(frame, entry, |rec, _| rec.attempts = Some(0));
        if !frame.in_item {
            cx.emit(
                frame,
                EventKind::StepStarted,
                &entry.path,
                json!({ "input": node.input }),
            );
        }
        node.kind = NodeKind::Step(StepNode {
            attempt: 0,
            resume: None,
            wait: StepWait::Nothing,
        });
        if cx.cancelling {
            end_node(node, entry, frame, cx, End::Cancelled);
            return;
        }
        if let Some(violations) = invalid {
            let mut err = cx.error(
                frame,
                &entry.path,
                "invalid-input",
                format!(
                    "step {}: input: {}",
                    entry.path,
                    schema::summarize(&violations)
                ),
            );
            err.details = Some(schema::details(&violations));
            end_node(node, entry, frame, cx, End::Failed(err));
            return;
        }
        invoke(node, entry, def, frame, cx);
        return;
    }
    let NodeKind::Step(step) = &mut node.kind else {
        return;
    };
    match &step.wait {
        StepWait::Invocation { token, state } => {
            let token = *token;
            if cx.reissue {
                if cx.cancelling {
                    end_node(node, entry, frame, cx, End::Cancelled);
                    return;
                }
                let state = state.clone();
                let attempt = step.attempt;
                cx.reissued
                    .push(format!("{} (attempt {})", entry.path, attempt));
                issue(node, entry, def, frame, cx, token, state);
                return;
            }
            if let Some(result) = cx.inbox.remove(&token) {
                handle_result(node, entry, def, frame, cx, result);
            }
        }
        StepWait::Retry { token, until } => {
            let (token, until) = (*token, *until);
            if cx.cancelling {
                end_node(node, entry, frame, cx, End::Cancelled);
            } else if cx.reissue {
                cx.cmds.push(Command::Timer { token, at: until });
            } else if cx.fired.remove(&token) {
                invoke(node, entry, def, frame, cx);
            }
        }
        StepWait::Resume { payload, .. } => {
            if cx.cancelling {
                step.wait = StepWait::Nothing;
                end_node(node, entry, frame, cx, End::Cancelled);
                return;
            }
            let selected = cx.resume.as_ref().is_some_and(|sel| {
                sel.path == entry.path
                    && (sel.indexes.is_empty()
                        || frame
                            .foreach_index
                            .is_some_and(|i| sel.indexes.contains(&i)))
            });
            if !selected {
                return;
            }
            let Some(sel) = cx.resume.as_ref() else {
                return;
            };
            let data = sel.data.clone();
            step.resume = Some(Resumption {
                data: data.clone(),
                suspend_payload: payload.clone(),
            });
            step.attempt = 0;
            step.wait = StepWait::Nothing;
            node.phase = Phase::Running;
            let now = cx.ts();
            cx.record(frame, entry, |rec, item| {
                rec.status = StepStatus::Running;
                rec.resumed_at = Some(now);
                rec.resume_data = Some(data);
                rec.ended_at = None;
                if let Some(item) = item {
                    item.status = StepStatus::Running;
                }
            });
            if !frame.in_item {
                cx.emit(
                    frame,
                    EventKind::StepStarted,
                    &entry.path,
                    json!({ "input": node.input, "resume": true }),
                );
            }
            invoke(node, entry, def, frame, cx);
        }
        StepWait::Nothing => {}
    }
}

/// Issues a new invocation of the step at its current attempt.
fn invoke(node: &mut Node, entry: &EntryDef, def: &StepDef, frame: &Frame, cx: &mut Cx) {
    let token = cx.token();
    let state = cx.file_state(frame).state.clone();
    issue(node, entry, def, frame, cx, token, state);
}

fn issue(
    node: &mut Node,
    entry: &EntryDef,
    def: &StepDef,
    frame: &Frame,
    cx: &mut Cx,
    token: u64,
    state: Value,
) {
    let NodeKind::Step(step) = &mut node.kind else {
        return;
    };
    let attempt = step.attempt;
    let call = StepCall {
        run_id: cx.run_id.to_owned(),
        workflow_id: cx.graph.file(entry.file).id.clone(),
        step_path: entry.path.clone(),
        attempt,
        input: node.input.clone(),
        config: def.config.clone(),
        state: state.clone(),
        resume: step.resume.clone(),
        foreach_index: frame.foreach_index,
        iteration: frame.iteration,
    };
    step.wait = StepWait::Invocation { token, state };
    let view = StepsView {
        init: cx.file_state(frame).input.clone(),
        steps: cx.visible_steps(frame),
    };
    cx.record(frame, entry, |rec, item| {
        rec.attempts = Some(attempt + 1);
        rec.status = StepStatus::Running;
        if let Some(item) = item {
            item.attempts = attempt + 1;
            item.status = StepStatus::Running;
        }
    });
    cx.cmds.push(Command::Invoke(Box::new(Invoke {
        token,
        plugin: def.plugin.clone(),
        step: def.step.clone(),
        call,
        timeout_ms: def.timeout_ms,
        view,
    })));
}

fn handle_result(
    node: &mut Node,
    entry: &EntryDef,
    def: &StepDef,
    frame: &Frame,
    cx: &mut Cx,
    result: InvocationResult,
) {
    if cx.cancelling {
        // S77: whatever returns after a cancel is discarded.
        if let NodeKind::Step(s) = &mut node.kind {
            s.wait = StepWait::Nothing;
        }
        end_node(node, entry, frame, cx, End::Cancelled);
        return;
    }
    let failure = match result.outcome {
        Ok(StepOutcome::Done(output)) => {
            let checked = match &def.schemas.output {
                Some(schema) => schema.check(&output).map_err(|v| {
                    StepFailure::new(
                        "invalid-output",
                        format!("step {}: output: {}", entry.path, schema::summarize(&v)),
                    )
                    .with_details(schema::details(&v))
                }),
                None => Ok(()),
            };
            match checked.and_then(|()| apply_patches(cx, frame, entry, &result.patches)) {
                Ok(()) => {
                    set_wait(node, StepWait::Nothing);
                    end_node(node, entry, frame, cx, End::Success(output));
                    return;
                }
                Err(f) => f,
            }
        }
        Ok(StepOutcome::Suspend { payload, labels }) => {
            let checked = match &def.schemas.suspend {
                Some(schema) => schema.check(&payload).map_err(|v| {
                    StepFailure::new(
                        "invalid-suspend-payload",
                        format!(
                            "step {}: suspend payload: {}",
                            entry.path,
                            schema::summarize(&v)
                        ),
                    )
                    .with_details(schema::details(&v))
                }),
                None => Ok(()),
            };
            match checked.and_then(|()| apply_patches(cx, frame, entry, &result.patches)) {
                Ok(()) => {
                    suspend(node, entry, frame, cx, payload, labels);
                    return;
                }
                Err(f) => f,
            }
        }
        Ok(StepOutcome::Bail(value)) => match apply_patches(cx, frame, entry, &result.patches) {
            Ok(()) => {
                if let Some(file) = cx.files.get_mut(&frame.file_key) {
                    file.bailed.get_or_insert_with(|| value.clone());
                }
                set_wait(node, StepWait::Nothing);
                end_node(node, entry, frame, cx, End::Bail(value));
                return;
            }
            Err(f) => f,
        },
        Err(f) => f,
    };
    fail_attempt(node, entry, def, frame, cx, failure);
}

fn set_wait(node: &mut Node, wait: StepWait) {
    if let NodeKind::Step(s) = &mut node.kind {
        s.wait = wait;
    }
}

fn suspend(
    node: &mut Node,
    entry: &EntryDef,
    frame: &Frame,
    cx: &mut Cx,
    payload: Value,
    labels: Vec<String>,
) {
    let now = cx.ts();
    cx.record(frame, entry, |rec, item| {
        rec.status = StepStatus::Suspended;
        rec.suspend_payload = Some(payload.clone());
        rec.labels = Some(labels.clone());
        rec.suspended_at = Some(now);
        if let Some(item) = item {
            item.status = StepStatus::Suspended;
        }
    });
    cx.emit(
        frame,
        EventKind::StepSuspended,
        &entry.path,
        json!({ "payload": payload, "labels": labels }),
    );
    set_wait(node, StepWait::Resume { payload, labels });
    node.phase = Phase::Suspended;
}

/// A failed attempt: retry when allowed (S51–S56), else end the step `failed` (or tripwire).
fn fail_attempt(
    node: &mut Node,
    entry: &EntryDef,
    def: &StepDef,
    frame: &Frame,
    cx: &mut Cx,
    failure: StepFailure,
) {
    let mut error = cx.error(frame, &entry.path, &failure.code, failure.message.clone());
    error.details = failure.details.clone().map(|d| match d {
        Value::Object(_) => d,
        other => json!({ "value": other }),
    });
    if let Some(t) = &failure.tripwire {
        let info = TripwireInfo {
            reason: t.reason.clone(),
            retry: t.retry,
            metadata: t.metadata.clone().unwrap_or(Value::Null),
            processor_id: t.processor_id.clone(),
        };
        cx.record(frame, entry, |rec, _| rec.error = Some(error.clone()));
        set_wait(node, StepWait::Nothing);
        end_node(node, entry, frame, cx, End::Tripwire(info));
        return;
    }
    let NodeKind::Step(step) = &mut node.kind else {
        return;
    };
    let retryable =
        failure.retryable && failure.code != "invalid-input" && failure.code != "cancelled";
    let next = step.attempt + 1;
    if retryable && next < def.retry.attempts {
        let delay = def.retry.delay_before(next);
        step.attempt = next;
        cx.emit(
            frame,
            EventKind::StepRetrying,
            &entry.path,
            json!({ "attempt": next, "delay_ms": delay, "error": error }),
        );
        if delay == 0 {
            invoke(node, entry, def, frame, cx);
        } else {
            let token = cx.token();
            let until = cx
                .now
                .saturating_add(i64::try_from(delay).unwrap_or(i64::MAX));
            step.wait = StepWait::Retry { token, until };
            cx.cmds.push(Command::Timer { token, at: until });
        }
        return;
    }
    step.wait = StepWait::Nothing;
    end_node(node, entry, frame, cx, End::Failed(error));
}
