//! The loop machine: `do-until` and `do-while`, iteration by iteration (S32–S36).
//!
//! ## Transitions of `loop`
//!
//! | Row | From | Event or condition | To | Issues |
//! |-----|------|--------------------|----|--------|
//! | `start` | new | the pass reaches it | running | record, `step-started`; iteration 1 starts with its input |
//! | `wait` | running, suspended | after a pass, the iteration still runs | running | — |
//! | `suspend` | running | the iteration suspended | suspended | nothing (S90) |
//! | `body-ended` | running, suspended | the iteration ended otherwise (failure, tripwire, bail, cancel) | as the iteration | record, the closing event |
//! | `cancelled` | running | an iteration succeeded after a cancel | cancelled | record, `step-cancelled` |
//! | `bailed` | running | an iteration succeeded after its file bailed (S79) | bailed | record, `step-succeeded` with the bail value |
//! | `test-error` | running | the test errs after an iteration | failed | record, `step-failed` (`expression-error`) |
//! | `done` | running | after an iteration, `until` holds or `while` does not (S32, S33) | succeeded | record, `step-succeeded` with the iteration's output, `.steps` |
//! | `max-iterations` | running | the test wants one more than `max-iterations` (S34) | failed | record, `step-failed` (`max-iterations`) |
//! | `next` | running | the test wants another iteration | running | the next iteration starts with the last one's output (S32) |
//! | `yield` | running | one pass ran as many iterations as it may | running | `Timer` at once: the next pass goes on |
//!
//! Each row is marked where the code takes it (`transition!`, see `engine::transitions`).

use serde_json::{Value, json};

use crate::engine::commands::Command;
use crate::engine::context::{Cx, Frame};
use crate::engine::drive::{drive_seq, first_body, follow_seq};
use crate::engine::lifecycle::{end_node, start_block};
use crate::engine::model::{EntryDef, EntryKind};
use crate::engine::nodes::{End, ListRef, Node, NodeKind, Phase, Seq};
use crate::engine::transitions::transition;

/// Iterations a loop may run in one drive pass before the rest waits for an immediate timer.
const LOOP_ITERATIONS_PER_PASS: u32 = 10_000;

/// Drives the current iteration; after each one that succeeds, tests whether to go on (S32–S35).
pub(crate) fn drive(node: &mut Node, entry: &EntryDef, frame: &Frame, cx: &mut Cx) {
    let EntryKind::Loop {
        test,
        until,
        max_iterations,
        ..
    } = &entry.kind
    else {
        return;
    };
    let (until, max_iterations) = (*until, *max_iterations);
    if node.phase == Phase::New {
        transition!("loop", "start");
        start_block(node, entry, frame, cx);
        node.kind = NodeKind::Loop {
            iteration: 1,
            body: Seq::new(
                ListRef::Body(node.entry),
                first_body(cx.graph, node.entry),
                node.input.clone(),
            ),
        };
    }
    let mut passes = 0;
    loop {
        let NodeKind::Loop { iteration, body } = &mut node.kind else {
            return;
        };
        let mut f = frame.clone();
        f.iteration = Some(*iteration);
        drive_seq(body, &f, cx);
        let Phase::Done(End::Success(out)) = &body.phase else {
            follow_seq(node, entry, frame, cx);
            // The row this pass took, by where it left the execution.
            #[cfg(test)]
            match &node.phase {
                Phase::New | Phase::Running => transition!("loop", "wait"),
                Phase::Suspended => transition!("loop", "suspend"),
                Phase::Done(_) => transition!("loop", "body-ended"),
            }
            return;
        };
        let out = out.clone();
        if cx.cancelling {
            transition!("loop", "cancelled");
            end_node(node, entry, frame, cx, End::Cancelled);
            return;
        }
        if let Some(b) = cx.bailed(frame) {
            transition!("loop", "bailed");
            end_node(node, entry, frame, cx, End::Bail(b.into()));
            return;
        }
        let n = *iteration;
        let mut input = cx.expr_input(&f, &node.input, &test.reads());
        input["output"] = Value::clone(&out);
        input["iteration"] = json!(n);
        let holds = match test.holds(&input, cx.value_limit) {
            Ok(h) => h,
            Err(e) => {
                transition!("loop", "test-error");
                let err = cx.error(
                    &f,
                    &entry.path,
                    "expression-error",
                    format!("loop {}: `{}`: {e}", entry.path, test.source),
                );
                end_node(node, entry, frame, cx, End::Failed(err));
                return;
            }
        };
        if holds == until {
            transition!("loop", "done");
            end_node(node, entry, frame, cx, End::Success(out));
            return;
        }
        if let Some(max) = max_iterations
            && n >= max
        {
            transition!("loop", "max-iterations");
            let err = cx.error(
                &f,
                &entry.path,
                "max-iterations",
                format!(
                    "loop {} wanted iteration {} but max-iterations is {max}",
                    entry.path,
                    n + 1
                ),
            );
            end_node(node, entry, frame, cx, End::Failed(err));
            return;
        }
        transition!("loop", "next");
        passes += 1;
        let NodeKind::Loop { iteration, body } = &mut node.kind else {
            return;
        };
        *iteration = n + 1;
        *body = Seq::new(
            ListRef::Body(node.entry),
            first_body(cx.graph, node.entry),
            out,
        );
        if passes >= LOOP_ITERATIONS_PER_PASS {
            // Keep one pass bounded: the next iterations continue on an immediate timer.
            transition!("loop", "yield");
            node.phase = Phase::Running;
            let token = cx.token();
            cx.cmds.push(Command::Timer { token, at: cx.now });
            return;
        }
    }
}

/// The scenarios of this file: its tests, and a part of the corpus the machines' transition
/// tables are checked against (`engine::transitions`).
#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use crate::engine::sim::{Answer, Sim, bail, do_until, done, file, map, parallel, step};
    use crate::engine::transitions::scenarios;
    use crate::engine::{RunStatus, StepStatus};

    #[test]
    fn s32_each_iteration_takes_the_previous_output_until_the_test_holds() {
        let sim = Sim::new(
            file(
                "w",
                vec![do_until("l", ".output.n >= 3", None, vec![step("s")])],
            ),
            json!({"n": 0}),
        )
        .on_call("l.s", |call| {
            done(json!({"n": call.input["n"].as_i64().unwrap_or_default() + 1}))
        })
        .started();
        assert_eq!(sim.status(), RunStatus::Success);
        let iterations: Vec<_> = sim.calls_to("l.s").iter().map(|c| c.iteration).collect();
        assert_eq!(iterations, [Some(1), Some(2), Some(3)]);
        assert_eq!(sim.run.result, Some(json!({"n": 3})));
    }

    #[test]
    fn s34_a_loop_that_wants_iteration_n_plus_one_fails_with_max_iterations_and_never_starts_it() {
        let sim = Sim::new(
            file("w", vec![do_until("l", "false", Some(3), vec![step("s")])]),
            json!({}),
        )
        .started();
        assert_eq!(sim.status(), RunStatus::Failed);
        assert_eq!(sim.calls_to("l.s").len(), 3);
        let rec = sim.record("l");
        assert_eq!(rec.status, StepStatus::Failed);
        let error = rec.error.as_ref().expect("an error");
        assert_eq!(error.code, "max-iterations");
        assert_eq!(error.iteration, Some(3));
    }

    #[test]
    fn s35_a_test_that_errs_fails_the_loop_with_expression_error() {
        let sim = Sim::new(
            file(
                "w",
                vec![do_until("l", ".output | error", None, vec![step("s")])],
            ),
            json!({}),
        )
        .started();
        assert_eq!(sim.status(), RunStatus::Failed);
        assert_eq!(
            sim.record("l").error.as_ref().map(|e| e.code.as_str()),
            Some("expression-error")
        );
        assert_eq!(sim.calls_to("l.s").len(), 1);
    }

    #[test]
    fn s75_s76_a_loop_a_cancel_reaches_before_it_starts_runs_no_second_iteration() {
        let mut sim = Sim::new(
            file(
                "w",
                vec![do_until("l", "false", None, vec![map("m", ".input")])],
            ),
            json!({}),
        );
        sim.cancel().expect("accepted");
        assert_eq!(sim.status(), RunStatus::Cancelled);
        assert_eq!(sim.record("l").status, StepStatus::Cancelled);
        assert_eq!(sim.record("l.m").iteration, Some(1), "no second iteration");
    }

    #[test]
    fn s79_a_loop_whose_file_bailed_meanwhile_ends_with_the_bail_after_its_iteration() {
        let arms = vec![do_until("l", "false", None, vec![step("s")]), step("b")];
        let mut sim = Sim::new(
            file("w", vec![parallel("p", arms), step("after")]),
            json!({}),
        )
        .on("p.l.s", [Answer::Hold])
        .on("p.b", [bail(json!("out"))])
        .started();
        assert_eq!(sim.status(), RunStatus::Running, "the iteration runs on");
        sim.answer("p.l.s", None, done(json!(1)));
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(sim.run.result, Some(json!("out")));
        assert_eq!(sim.calls_to("p.l.s").len(), 1, "no second iteration");
        assert!(sim.calls_to("after").is_empty());
    }

    #[test]
    fn s32_a_pass_runs_ten_thousand_iterations_at_most_and_an_immediate_timer_goes_on() {
        let sim = Sim::new(
            file(
                "w",
                vec![do_until(
                    "l",
                    ".iteration >= 10001",
                    None,
                    vec![map("m", ".input")],
                )],
            ),
            json!(7),
        )
        .started();
        assert_eq!(sim.status(), RunStatus::Success);
        let timers: Vec<_> = sim.timers_set.iter().map(|t| t.1).collect();
        assert_eq!(timers, [1_000], "one timer, due at once");
        assert_eq!(sim.record("l.m").iteration, Some(10_001));
        assert_eq!(sim.run.result, Some(json!(7)));
    }

    /// Every test above, by name.
    pub(crate) const SCENARIOS: &[(&str, fn())] = scenarios![
        s32_each_iteration_takes_the_previous_output_until_the_test_holds,
        s34_a_loop_that_wants_iteration_n_plus_one_fails_with_max_iterations_and_never_starts_it,
        s35_a_test_that_errs_fails_the_loop_with_expression_error,
        s75_s76_a_loop_a_cancel_reaches_before_it_starts_runs_no_second_iteration,
        s79_a_loop_whose_file_bailed_meanwhile_ends_with_the_bail_after_its_iteration,
        s32_a_pass_runs_ten_thousand_iterations_at_most_and_an_immediate_timer_goes_on,
    ];
}
