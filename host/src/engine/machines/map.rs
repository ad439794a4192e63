//! The map machine: one expression, one value, recorded and evented like a step (S40).
//!
//! ## Transitions of `map`
//!
//! | Row | From | Event or condition | To | Issues |
//! |-----|------|--------------------|----|--------|
//! | `value` | new | its expression gives one value | succeeded | record, `step-started`, `step-succeeded`, `.steps` |
//! | `expression-error` | new | its expression fails, or gives no value or several | failed | record, `step-started`, `step-failed` (`expression-error`) |
//!
//! Each row is marked where the code takes it (`transition!`, see `engine::transitions`).

use crate::engine::context::{Cx, Frame};
use crate::engine::lifecycle::{end_node, start_block};
use crate::engine::model::{EntryDef, EntryKind};
use crate::engine::nodes::{End, Node};
use crate::engine::transitions::transition;

/// Evaluates the map's expression and ends it with the value or an `expression-error`.
pub(crate) fn drive(node: &mut Node, entry: &EntryDef, frame: &Frame, cx: &mut Cx) {
    let EntryKind::Map { expr } = &entry.kind else {
        return;
    };
    start_block(node, entry, frame, cx);
    let input = cx.expr_input(frame, &node.input, &expr.reads());
    let end = match expr.eval_one(&input, cx.value_limit) {
        Ok(v) => {
            transition!("map", "value");
            End::Success(v.into())
        }
        Err(e) => {
            transition!("map", "expression-error");
            End::Failed(cx.error(
                frame,
                &entry.path,
                "expression-error",
                format!("map {}: {e}", entry.path),
            ))
        }
    };
    end_node(node, entry, frame, cx, end);
}

/// The scenarios of this file: its tests, and a part of the corpus the machines' transition
/// tables are checked against (`engine::transitions`).
#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use crate::engine::sim::{Sim, file, map, step};
    use crate::engine::transitions::scenarios;
    use crate::engine::{EventKind, RunStatus, StepStatus};

    #[test]
    fn s40_a_map_outputs_its_one_value_and_is_recorded_and_evented_like_a_step() {
        let sim = Sim::new(
            file(
                "w",
                vec![step("a"), map("m", "{x: .input.n, s: .steps.a.n}")],
            ),
            json!({"n": 2}),
        )
        .started();
        assert_eq!(sim.run.result, Some(json!({"x": 2, "s": 2})));
        assert_eq!(sim.record("m").status, StepStatus::Success);
        assert_eq!(
            sim.kinds_of("m"),
            [EventKind::StepStarted, EventKind::StepSucceeded]
        );
    }

    #[test]
    fn s40_an_error_no_value_or_several_values_fail_with_expression_error() {
        for expr in [".input | error", "empty", "1, 2"] {
            let sim = Sim::new(file("w", vec![map("m", expr), step("after")]), json!({})).started();
            assert_eq!(sim.status(), RunStatus::Failed, "{expr}");
            let rec = sim.record("m");
            assert_eq!(rec.status, StepStatus::Failed);
            assert_eq!(
                rec.error.as_ref().map(|e| e.code.as_str()),
                Some("expression-error"),
                "{expr}"
            );
            assert!(sim.calls_to("after").is_empty());
        }
    }

    /// Every test above, by name.
    pub(crate) const SCENARIOS: &[(&str, fn())] = scenarios![
        s40_a_map_outputs_its_one_value_and_is_recorded_and_evented_like_a_step,
        s40_an_error_no_value_or_several_values_fail_with_expression_error,
    ];
}
