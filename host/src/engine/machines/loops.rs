//! The loop machine: `do-until` and `do-while`, iteration by iteration (S32–S36).

use serde_json::{Value, json};

use crate::engine::commands::Command;
use crate::engine::context::{Cx, Frame};
use crate::engine::drive::{drive_seq, first_body, follow_seq};
use crate::engine::lifecycle::{end_node, start_block};
use crate::engine::model::{EntryDef, EntryKind};
use crate::engine::nodes::{End, ListRef, Node, NodeKind, Phase, Seq};

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
            return;
        };
        let out = out.clone();
        if cx.cancelling {
            end_node(node, entry, frame, cx, End::Cancelled);
            return;
        }
        if let Some(b) = cx.bailed(frame) {
            end_node(node, entry, frame, cx, End::Bail(b.into()));
            return;
        }
        let n = *iteration;
        let mut input = cx.expr_input(&f, &node.input);
        input["output"] = Value::clone(&out);
        input["iteration"] = json!(n);
        let holds = match test.holds(&input) {
            Ok(h) => h,
            Err(e) => {
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
            end_node(node, entry, frame, cx, End::Success(out));
            return;
        }
        if let Some(max) = max_iterations
            && n >= max
        {
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
            node.phase = Phase::Running;
            let token = cx.token();
            cx.cmds.push(Command::Timer { token, at: cx.now });
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::engine::sim::{Sim, do_until, done, file, step};
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
}
