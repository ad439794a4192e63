//! The step machine: invoke, take the result, apply patches, retry after a wait, suspend and
//! resume (S12–S17, S51–S56, S62–S73). An agent's model and tool calls are steps too.
//!
//! ## Transitions of `step`
//!
//! | Row | From | Event or condition | To | Issues |
//! |-----|------|--------------------|----|--------|
//! | `start` | new | the pass reaches it | invoking | record `running`, `step-started`, `Invoke` |
//! | `start-cancelled` | new | a cancel was accepted | cancelled | record, `step-cancelled` |
//! | `input-error` | new | its `input:` expression fails (S119) | failed | record, `step-failed` (`expression-error`) |
//! | `invalid-input` | new | its input breaks the input schema | failed | record, `step-failed` (`invalid-input`) |
//! | `succeed` | invoking | its result: an output the output schema takes, patches that apply | succeeded | state patched, record, `step-succeeded`, `.steps` |
//! | `suspend` | invoking | its result: a suspension whose payload checks, patches that apply | suspended | state patched, record `suspended`, `step-suspended` |
//! | `bail` | invoking | its result: a bail, patches that apply (S79) | bailed | state patched, the file's bail value, record, `step-succeeded` with `bail` |
//! | `late-result` | invoking | its result, after a cancel (S77) | cancelled | nothing of it; record, `step-cancelled` |
//! | `retry-at-once` | invoking | a failed attempt that may retry, no delay (S51) | invoking | `step-retrying`, `Invoke` of the next attempt |
//! | `retry-after-wait` | invoking | a failed attempt that may retry after a delay (S52) | retry-wait | `step-retrying`, `Timer` |
//! | `fail` | invoking | a failed attempt that may not retry (S51, S53) | failed | record, `step-failed` |
//! | `tripwire` | invoking | a tripped guardrail (S82) | tripwire | record, `step-failed` with the tripwire |
//! | `reissue` | invoking | a recovery (S102) | invoking | the same `Invoke` again, logged |
//! | `reissue-cancelled` | invoking | a recovery after a cancel | cancelled | record, `step-cancelled` |
//! | `wait-over` | retry-wait | its timer fires | invoking | `Invoke` of the next attempt |
//! | `wait-reissued` | retry-wait | a recovery | retry-wait | the same `Timer` again |
//! | `wait-cancelled` | retry-wait | a cancel (S76) | cancelled | record, `step-cancelled` |
//! | `resume` | suspended | a resume selects it (S67) | invoking | record `running`, `step-started` with `resume`, `Invoke` at attempt 0 |
//! | `suspend-cancelled` | suspended | a cancel (S74) | cancelled | record, `step-cancelled` |
//!
//! Each row is marked where the code takes it (`transition!`, see `engine::transitions`).

// Step failures travel by value through a few internal helpers; boxing them buys nothing here.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use serde_json::{Value, json};

use crate::engine::commands::{Command, EventKind, Invoke, StepsView};
use crate::engine::context::{Cx, Frame};
use crate::engine::event_data::EventData;
use crate::engine::invocation::{InvocationResult, Resumption, StepCall, StepFailure, StepOutcome};
use crate::engine::lifecycle::{end_node, mark_suspended};
use crate::engine::model::{EntryDef, EntryKind, StepDef};
use crate::engine::nodes::{End, Node, NodeKind, Phase, StepNode, StepWait};
use crate::engine::patches::apply_patches;
use crate::engine::records::{StepStatus, TripwireInfo};
use crate::engine::schema;
use crate::engine::transitions::transition;

/// Drives a plugin step by its entry's definition.
pub(crate) fn drive(node: &mut Node, entry: &EntryDef, frame: &Frame, cx: &mut Cx) {
    let EntryKind::Step(def) = &entry.kind else {
        return;
    };
    drive_with(node, entry, def, frame, cx);
}

/// Drives an execution of `def` at `entry`'s path: starts it, takes its invocation's result,
/// retries after a wait, resumes it when selected, and ends it on a cancel. An agent drives its
/// model and tool calls so, each under a path of its own (`entry`'s kind is not read).
pub(crate) fn drive_with(
    node: &mut Node,
    entry: &EntryDef,
    def: &StepDef,
    frame: &Frame,
    cx: &mut Cx,
) {
    if node.phase == Phase::New {
        node.phase = Phase::Running;
        // `input:` makes the invocation's input from the entry's (S119); it fails the step
        // like a map's expression fails the map.
        let mut made = None;
        if let Some(expr) = def.input.as_ref().filter(|_| !node.made) {
            let scope = cx.expr_input(frame, &node.input, &expr.reads());
            match expr.eval_one(&scope, cx.value_limit) {
                Ok(v) => node.input = v.into(),
                Err(e) => made = Some(format!("step {}: input: {e}", entry.path)),
            }
        }
        // Copied only when a default is missing while an output it came from shares it.
        let invalid = def
            .schemas
            .input
            .as_ref()
            .and_then(|s| s.fill_and_check_shared(&mut node.input).err());
        cx.record_start(frame, entry, &node.input);
        cx.record(frame, entry, |rec, _| rec.attempts = Some(0));
        if !frame.in_item {
            cx.emit(
                frame,
                EventKind::StepStarted,
                &entry.path,
                EventData::Keyed("input", Arc::clone(&node.input)),
            );
        }
        node.kind = NodeKind::Step(StepNode {
            attempt: 0,
            resume: None,
            wait: StepWait::Nothing,
        });
        if cx.cancelling {
            transition!("step", "start-cancelled");
            end_node(node, entry, frame, cx, End::Cancelled);
            return;
        }
        if let Some(message) = made {
            transition!("step", "input-error");
            let err = cx.error(frame, &entry.path, "expression-error", message);
            end_node(node, entry, frame, cx, End::Failed(err));
            return;
        }
        if let Some(violations) = invalid {
            transition!("step", "invalid-input");
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
        transition!("step", "start");
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
                    transition!("step", "reissue-cancelled");
                    end_node(node, entry, frame, cx, End::Cancelled);
                    return;
                }
                transition!("step", "reissue");
                let state = Arc::clone(state);
                let attempt = step.attempt;
                cx.reissued
                    .push(format!("{} (attempt {})", entry.path, attempt));
                issue(node, entry, def, frame, cx, token, state);
                return;
            }
            if let Some(result) = cx.take_result(token) {
                handle_result(node, entry, def, frame, cx, result);
            }
        }
        StepWait::Retry { token, until } => {
            let (token, until) = (*token, *until);
            if cx.cancelling {
                transition!("step", "wait-cancelled");
                end_node(node, entry, frame, cx, End::Cancelled);
            } else if cx.reissue {
                transition!("step", "wait-reissued");
                cx.cmds.push(Command::Timer { token, at: until });
            } else if cx.take_fired(token) {
                transition!("step", "wait-over");
                invoke(node, entry, def, frame, cx);
            }
        }
        StepWait::Resume { payload, .. } => {
            if cx.cancelling {
                transition!("step", "suspend-cancelled");
                step.wait = StepWait::Nothing;
                end_node(node, entry, frame, cx, End::Cancelled);
                return;
            }
            let selected = cx
                .resume
                .as_ref()
                .is_some_and(|sel| sel.selects(&entry.path, frame));
            if !selected {
                return;
            }
            let Some(sel) = cx.resume.as_ref() else {
                return;
            };
            transition!("step", "resume");
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
    let state = Arc::clone(&cx.file_state(frame).state);
    issue(node, entry, def, frame, cx, token, state);
}

fn issue(
    node: &mut Node,
    entry: &EntryDef,
    def: &StepDef,
    frame: &Frame,
    cx: &mut Cx,
    token: u64,
    state: Arc<Value>,
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
        input: Arc::clone(&node.input),
        config: Arc::clone(&def.config),
        state: Arc::clone(&state),
        resume: step.resume.clone(),
        foreach_index: frame.foreach_index,
        iteration: frame.iteration,
    };
    step.wait = StepWait::Invocation { token, state };
    let view = StepsView {
        init: Arc::clone(&cx.file_state(frame).input),
        scopes: cx.visible_scopes(frame),
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
        kind: def.kind,
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
        transition!("step", "late-result");
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
                    transition!("step", "succeed");
                    set_wait(node, StepWait::Nothing);
                    end_node(node, entry, frame, cx, End::Success(output.into()));
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
                    transition!("step", "suspend");
                    suspend(node, entry, frame, cx, payload, labels);
                    return;
                }
                Err(f) => f,
            }
        }
        Ok(StepOutcome::Bail(value)) => match apply_patches(cx, frame, entry, &result.patches) {
            Ok(()) => {
                transition!("step", "bail");
                if let Some(file) = cx.files.get_mut(&frame.file_key) {
                    file.bailed.get_or_insert_with(|| value.clone());
                }
                set_wait(node, StepWait::Nothing);
                end_node(node, entry, frame, cx, End::Bail(value.into()));
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
    mark_suspended(frame, entry, cx, &payload, &labels);
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
        transition!("step", "tripwire");
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
        // A failure that says how long to wait (a provider's `retry-after`, S121) waits at least
        // that long, within the policy's `max-delay-ms` or, without one, the default cap.
        let asked = failure
            .details
            .as_ref()
            .and_then(|d| d.get("retry_after_ms"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let asked = def.retry.asked_delay(asked);
        let delay = def.retry.delay_before(next).max(asked);
        step.attempt = next;
        cx.emit(
            frame,
            EventKind::StepRetrying,
            &entry.path,
            json!({ "attempt": next, "delay_ms": delay, "error": error }),
        );
        if delay == 0 {
            transition!("step", "retry-at-once");
            invoke(node, entry, def, frame, cx);
        } else {
            transition!("step", "retry-after-wait");
            let token = cx.token();
            let until = cx
                .now
                .saturating_add(i64::try_from(delay).unwrap_or(i64::MAX));
            step.wait = StepWait::Retry { token, until };
            cx.cmds.push(Command::Timer { token, at: until });
        }
        return;
    }
    transition!("step", "fail");
    step.wait = StepWait::Nothing;
    end_node(node, entry, frame, cx, End::Failed(error));
}

/// The scenarios of this file: its tests, and a part of the corpus the machines' transition
/// tables are checked against (`engine::transitions`).
#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use crate::engine::model::EntryKind;
    use crate::engine::schema::Schema;
    use crate::engine::sim::{
        Answer, Sim, bail, done, fail, fail_final, file, step, suspend, trip,
    };
    use crate::engine::transitions::scenarios;
    use crate::engine::{Event, EventKind, RunStatus, StepStatus};

    #[test]
    fn s119_an_input_expression_makes_the_invocations_input_and_its_error_invokes_nothing() {
        let made = "{n: (.input.n * 10), a: .steps.a.n}";
        let sim = Sim::new(file("w", vec![step("a"), step("b").input(made)]), json!({}))
            .on("a", [done(json!({"n": 3}))])
            .on("b", [done(json!("ok"))])
            .started();
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(*sim.calls_to("b")[0].input, json!({"n": 30, "a": 3}));
        assert_eq!(
            sim.record("b").input.as_deref(),
            Some(&json!({"n": 30, "a": 3}))
        );
        for bad in [".input | error", "empty", "1, 2"] {
            let sim = Sim::new(file("w", vec![step("b").input(bad)]), json!({})).started();
            assert!(sim.calls_to("b").is_empty(), "{bad}: nothing is invoked");
            let error = sim.run.error.as_ref().expect("failed");
            assert_eq!(error.code, "expression-error", "{bad}");
            assert!(
                error.message.starts_with("step b: input: "),
                "{}",
                error.message
            );
        }
    }

    #[test]
    fn s51_s53_a_failing_step_is_invoked_attempts_times_with_attempts_counted_from_zero() {
        let sim = Sim::new(file("w", vec![step("a").retry(3, 0, 1.0, None)]), json!({}))
            .on("a", [fail("boom"), fail("boom"), fail("boom")])
            .started();
        let attempts: Vec<u32> = sim.calls_to("a").iter().map(|c| c.attempt).collect();
        assert_eq!(attempts, [0, 1, 2]);
        assert_eq!(sim.status(), RunStatus::Failed);
        let rec = sim.record("a");
        assert_eq!(rec.status, StepStatus::Failed);
        assert_eq!(rec.attempts, Some(3));
        assert_eq!(rec.error.as_ref().map(|e| e.code.as_str()), Some("boom"));
        assert_eq!(
            sim.kinds_of("a"),
            [
                EventKind::StepStarted,
                EventKind::StepRetrying,
                EventKind::StepRetrying,
                EventKind::StepFailed
            ]
        );
    }

    #[test]
    fn s51_a_failure_that_is_not_retryable_is_never_retried() {
        let sim = Sim::new(file("w", vec![step("a").retry(5, 0, 1.0, None)]), json!({}))
            .on("a", [fail_final("nope")])
            .started();
        assert_eq!(sim.calls_to("a").len(), 1);
        assert_eq!(sim.status(), RunStatus::Failed);
    }

    #[test]
    fn s52_retry_waits_grow_by_backoff_are_capped_and_none_comes_before_the_first_attempt() {
        let sim = Sim::new(
            file("w", vec![step("a").retry(5, 100, 2.0, Some(300))]),
            json!({}),
        )
        .on(
            "a",
            [fail("x"), fail("x"), fail("x"), fail("x"), done(json!(1))],
        )
        .started();
        assert_eq!(sim.timer_waits, [100, 200, 300, 300]);
        let calls = sim.calls_to("a");
        assert_eq!(calls.len(), 5);
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(sim.run.result, Some(json!(1)));
        // The retry waits are virtual: the clock moved by exactly their sum.
        assert_eq!(sim.now, 1_000 + 100 + 200 + 300 + 300);
    }

    #[test]
    fn s53_a_resumed_step_starts_again_at_attempt_zero_with_a_full_budget() {
        let mut sim = Sim::new(file("w", vec![step("a").retry(2, 0, 1.0, None)]), json!({}))
            .on(
                "a",
                [
                    fail("x"),
                    suspend(json!({"ask": 1}), &[]),
                    fail("x"),
                    done(json!("ok")),
                ],
            )
            .started();
        assert_eq!(sim.status(), RunStatus::Suspended);
        assert_eq!(sim.record("a").attempts, Some(2));
        sim.resume(None, None, None, json!({"yes": true}))
            .expect("resumed");
        assert_eq!(sim.status(), RunStatus::Success);
        let calls = sim.calls_to("a");
        let attempts: Vec<u32> = calls.iter().map(|c| c.attempt).collect();
        assert_eq!(attempts, [0, 1, 0, 1]);
        let resume = calls[3]
            .resume
            .as_ref()
            .expect("the resumed call carries its resume");
        assert_eq!(resume.data, json!({"yes": true}));
        assert_eq!(resume.suspend_payload, json!({"ask": 1}));
        assert_eq!(sim.record("a").attempts, Some(2));
    }

    #[test]
    fn s16_s47_patches_apply_with_the_outcome_and_the_next_step_sees_them() {
        let sim = Sim::new(file("w", vec![step("a"), step("b")]), json!({}))
            .on(
                "a",
                [done(json!(1)).patch(json!({"x": 1})).patch(json!({"y": 2}))],
            )
            .started();
        assert_eq!(*sim.calls_to("b")[0].state, json!({"x": 1, "y": 2}));
        assert_eq!(*sim.run.files[""].state, json!({"x": 1, "y": 2}));
    }

    #[test]
    fn s48_a_patch_that_is_not_an_object_fails_the_attempt_and_nothing_of_it_applies() {
        let sim = Sim::new(file("w", vec![step("a")]), json!({}))
            .on("a", [done(json!(1)).patch(json!({"x": 1})).patch(json!(3))])
            .started();
        assert_eq!(sim.status(), RunStatus::Failed);
        assert_eq!(
            sim.record("a").error.as_ref().map(|e| e.code.as_str()),
            Some("invalid-state-patch")
        );
        assert_eq!(*sim.run.files[""].state, json!({}));
    }

    #[test]
    fn s79_a_bail_ends_the_file_with_its_value_and_later_entries_never_start() {
        let sim = Sim::new(file("w", vec![step("a"), step("b")]), json!({}))
            .on("a", [bail(json!({"early": true}))])
            .started();
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(sim.run.result, Some(json!({"early": true})));
        assert_eq!(sim.record("a").bail, Some(true));
        assert!(sim.calls_to("b").is_empty());
    }

    #[test]
    fn s82_a_tripwire_is_never_retried_and_ends_the_run_tripwire() {
        let sim = Sim::new(file("w", vec![step("a").retry(3, 0, 1.0, None)]), json!({}))
            .on("a", [trip("unsafe")])
            .started();
        assert_eq!(sim.calls_to("a").len(), 1);
        assert_eq!(sim.status(), RunStatus::Tripwire);
        assert_eq!(
            sim.run.tripwire.as_ref().map(|t| t.reason.as_str()),
            Some("unsafe")
        );
    }

    #[test]
    fn s65_a_suspension_is_recorded_and_evented_and_suspends_the_run() {
        let sim = Sim::new(file("w", vec![step("a")]), json!({}))
            .on("a", [suspend(json!({"q": 1}), &["boss"])])
            .started();
        assert_eq!(sim.status(), RunStatus::Suspended);
        let rec = sim.record("a");
        assert_eq!(rec.status, StepStatus::Suspended);
        assert_eq!(rec.suspend_payload, Some(json!({"q": 1})));
        assert_eq!(rec.labels, Some(vec!["boss".to_owned()]));
        assert_eq!(
            sim.kinds(),
            [
                EventKind::RunStarted,
                EventKind::StepStarted,
                EventKind::StepSuspended,
                EventKind::RunSuspended
            ]
        );
    }

    #[test]
    fn s59_an_input_breaking_the_input_schema_fails_the_step_with_invalid_input_and_invokes_nothing()
     {
        let mut sim = Sim::new(file("w", vec![step("a")]), json!({}));
        let entry = sim.graph.entries.iter_mut().find(|e| e.path == "a");
        if let Some(EntryKind::Step(def)) = entry.map(|e| &mut e.kind) {
            def.schemas.input = Some(Schema::new(json!({"required": ["id"]})));
        }
        let sim = sim.started();
        assert_eq!(sim.status(), RunStatus::Failed);
        assert!(sim.calls.is_empty(), "nothing is invoked");
        let rec = sim.record("a");
        assert_eq!(rec.attempts, Some(0));
        assert_eq!(
            rec.error.as_ref().map(|e| e.code.as_str()),
            Some("invalid-input")
        );
    }

    #[test]
    fn s76_s102_a_recovery_after_a_cancel_issues_nothing_again_and_ends_the_step_cancelled() {
        let mut sim = Sim::new(file("w", vec![step("a")]), json!({}))
            .on("a", [Answer::Hold])
            .started();
        sim.feed(Event::Cancel {
            at: sim.now,
            failure: None,
        })
        .expect("accepted");
        assert_eq!(sim.status(), RunStatus::Running, "a has not returned");
        sim.crash_and_recover();
        assert_eq!(sim.status(), RunStatus::Cancelled);
        assert_eq!(sim.calls_to("a").len(), 1, "nothing is issued again");
        assert_eq!(sim.record("a").status, StepStatus::Cancelled);
    }

    #[test]
    fn s56_s102_a_recovery_during_a_retry_wait_sets_its_timer_again() {
        let mut sim = Sim::new(
            file("w", vec![step("a").retry(2, 500, 1.0, None)]),
            json!({}),
        )
        .on("a", [fail("x"), done(json!("ok"))]);
        sim.feed(Event::Start { at: sim.now }).expect("started");
        sim.drain();
        assert_eq!(sim.timers_set.len(), 1, "a waits to retry");
        sim.crash_and_recover();
        let timers: Vec<_> = sim.timers_set.iter().map(|t| t.1).collect();
        assert_eq!(timers, [1_500, 1_500], "the same wait, set again");
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(sim.calls_to("a").len(), 2);
    }

    /// Every test above, by name.
    pub(crate) const SCENARIOS: &[(&str, fn())] = scenarios![
        s119_an_input_expression_makes_the_invocations_input_and_its_error_invokes_nothing,
        s51_s53_a_failing_step_is_invoked_attempts_times_with_attempts_counted_from_zero,
        s51_a_failure_that_is_not_retryable_is_never_retried,
        s52_retry_waits_grow_by_backoff_are_capped_and_none_comes_before_the_first_attempt,
        s53_a_resumed_step_starts_again_at_attempt_zero_with_a_full_budget,
        s16_s47_patches_apply_with_the_outcome_and_the_next_step_sees_them,
        s48_a_patch_that_is_not_an_object_fails_the_attempt_and_nothing_of_it_applies,
        s79_a_bail_ends_the_file_with_its_value_and_later_entries_never_start,
        s82_a_tripwire_is_never_retried_and_ends_the_run_tripwire,
        s65_a_suspension_is_recorded_and_evented_and_suspends_the_run,
        s59_an_input_breaking_the_input_schema_fails_the_step_with_invalid_input_and_invokes_nothing,
        s76_s102_a_recovery_after_a_cancel_issues_nothing_again_and_ends_the_step_cancelled,
        s56_s102_a_recovery_during_a_retry_wait_sets_its_timer_again,
    ];
}
