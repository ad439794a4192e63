//! The loop machine: `do-until` and `do-while`, iteration by iteration (S32–S36).

use serde_json::json;

use crate::engine::commands::Command;
use crate::engine::context::{Cx, Frame};
use crate::engine::drive::{drive_seq, end_node, first_body, follow_seq, start_block};
use crate::engine::expr::Expr;
use crate::engine::model::EntryDef;
use crate::engine::nodes::{End, ListRef, Node, NodeKind, Phase, Seq};

/// Iterations a loop may run in one drive pass before the rest waits for an immediate timer.
const LOOP_ITERATIONS_PER_PASS: u32 = 10_000;

/// Drives the current iteration; after each one that succeeds, tests whether to go on (S32–S35).
#[allow(clippy::too_many_arguments)]
pub(crate) fn drive_loop(
    node: &mut Node,
    entry: &EntryDef,
    test: &Expr,
    until: bool,
    max_iterations: Option<u32>,
    frame: &Frame,
    cx: &mut Cx,
) {
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
            end_node(node, entry, frame, cx, End::Bail(b));
            return;
        }
        let n = *iteration;
        let mut input = cx.expr_input(&f, &node.input);
        input["output"] = out.clone();
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
