//! The map machine: one expression, one value, recorded and evented like a step (S40).

use crate::engine::context::{Cx, Frame};
use crate::engine::drive::{end_node, start_block};
use crate::engine::expr::Expr;
use crate::engine::model::EntryDef;
use crate::engine::nodes::{End, Node};

/// Evaluates the map's expression and ends it with the value or an `expression-error`.
pub(crate) fn drive_map(
    node: &mut Node,
    entry: &EntryDef,
    expr: &Expr,
    frame: &Frame,
    cx: &mut Cx,
) {
    start_block(node, entry, frame, cx);
    let input = cx.expr_input(frame, &node.input);
    let end = match expr.eval_one(&input) {
        Ok(v) => End::Success(v),
        Err(e) => End::Failed(cx.error(
            frame,
            &entry.path,
            "expression-error",
            format!("map {}: {e}", entry.path),
        )),
    };
    end_node(node, entry, frame, cx, end);
}
