//! The sleep machine: a timer at an absolute instant (S37, S38).
//!
//! ## Transitions of `sleep`
//!
//! | Row | From | Event or condition | To | Issues |
//! |-----|------|--------------------|----|--------|
//! | `wait` | new | its instant is still to come | waiting | record `waiting`, `step-started`, `step-waiting`, `Timer` |
//! | `passed` | new | its instant has passed, or it names none | succeeded | record, `step-started`, `step-succeeded` (its input) |
//! | `start-cancelled` | new | a cancel was accepted | cancelled | record, `step-started`, `step-cancelled` |
//! | `until-error` | new | `until:` gives no RFC 3339 instant | failed | record, `step-started`, `step-failed` (`expression-error`) |
//! | `fired` | waiting | its timer fires | succeeded | record, `step-succeeded` (its input) |
//! | `reissued` | waiting | a recovery (S38) | waiting | the same `Timer` again |
//! | `cancelled` | waiting | a cancel (S76) | cancelled | record, `step-cancelled` |
//!
//! Each row is marked where the code takes it (`transition!`, see `engine::transitions`).

use serde_json::{Value, json};

use crate::engine::commands::{Command, EventKind};
use crate::engine::context::{Cx, Frame};
use crate::engine::lifecycle::{end_node, start_block};
use crate::engine::model::{EntryDef, EntryKind};
use crate::engine::nodes::{End, Node, NodeKind, Phase};
use crate::engine::records::StepStatus;
use crate::engine::time::rfc3339;
use crate::engine::transitions::transition;

/// Sets the timer when the sleep starts; ends it when the timer fires or a cancel comes (S37, S38).
pub(crate) fn drive(node: &mut Node, entry: &EntryDef, frame: &Frame, cx: &mut Cx) {
    let EntryKind::Sleep { ms, until } = &entry.kind else {
        return;
    };
    let (ms, until) = (*ms, until.as_ref());
    if node.phase == Phase::New {
        start_block(node, entry, frame, cx);
        let wake = match (ms, until) {
            (Some(ms), _) => Ok(cx.now.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX))),
            (None, Some(expr)) => {
                let input = cx.expr_input(frame, &node.input, &expr.reads());
                expr.eval_one(&input, cx.value_limit).and_then(|v| match v {
                    Value::String(s) => chrono::DateTime::parse_from_rfc3339(&s)
                        .map(|d| d.timestamp_millis())
                        .map_err(|e| format!("`{s}` is not an RFC 3339 instant: {e}")),
                    other => Err(format!("expected an RFC 3339 string, got {other}")),
                })
            }
            (None, None) => Ok(cx.now),
        };
        match wake {
            Err(e) => {
                transition!("sleep", "until-error");
                let err = cx.error(
                    frame,
                    &entry.path,
                    "expression-error",
                    format!("sleep {}: until: {e}", entry.path),
                );
                end_node(node, entry, frame, cx, End::Failed(err));
            }
            Ok(at) if at <= cx.now || cx.cancelling => {
                let end = if cx.cancelling {
                    transition!("sleep", "start-cancelled");
                    End::Cancelled
                } else {
                    transition!("sleep", "passed");
                    End::Success(node.input.clone())
                };
                end_node(node, entry, frame, cx, end);
            }
            Ok(at) => {
                transition!("sleep", "wait");
                let token = cx.token();
                node.kind = NodeKind::Sleep { token, until: at };
                cx.record(frame, entry, |rec, item| {
                    rec.status = StepStatus::Waiting;
                    if let Some(item) = item {
                        item.status = StepStatus::Waiting;
                    }
                });
                cx.emit(
                    frame,
                    EventKind::StepWaiting,
                    &entry.path,
                    json!({ "until": rfc3339(at) }),
                );
                cx.cmds.push(Command::Timer { token, at });
            }
        }
        return;
    }
    let NodeKind::Sleep { token, until } = node.kind else {
        return;
    };
    if cx.cancelling {
        transition!("sleep", "cancelled");
        end_node(node, entry, frame, cx, End::Cancelled);
    } else if cx.take_fired(token) {
        transition!("sleep", "fired");
        let out = node.input.clone();
        end_node(node, entry, frame, cx, End::Success(out));
    } else if cx.reissue {
        transition!("sleep", "reissued");
        cx.cmds.push(Command::Timer { token, at: until });
    }
}

/// The scenarios of this file: its tests, and a part of the corpus the machines' transition
/// tables are checked against (`engine::transitions`).
#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use crate::engine::sim::{Sim, file, sleep_ms, sleep_until, step};
    use crate::engine::transitions::scenarios;
    use crate::engine::{EventKind, RunStatus, StepStatus, rfc3339};

    #[test]
    fn s37_s38_a_sleep_waits_its_milliseconds_as_waiting_and_outputs_its_input() {
        let mut sim = Sim::new(file("w", vec![sleep_ms("z", 250), step("after")]), json!(7));
        sim.feed(crate::engine::Event::Start { at: sim.now })
            .expect("started");
        assert_eq!(sim.record("z").status, StepStatus::Waiting);
        let waiting = sim
            .events
            .iter()
            .find(|t| t.kind == EventKind::StepWaiting)
            .expect("step-waiting");
        assert_eq!(waiting.data["until"], json!(rfc3339(1_250)));
        sim.settle();
        assert_eq!(sim.timers_set.len(), 1);
        assert_eq!(sim.timers_set[0].1, 1_250);
        assert_eq!(*sim.calls_to("after")[0].input, json!(7));
        assert_eq!(sim.status(), RunStatus::Success);
    }

    #[test]
    fn s37_a_sleep_until_waits_for_the_absolute_instant_and_not_at_all_once_it_passed() {
        let until = rfc3339(60_000);
        let sim = Sim::new(
            file("w", vec![sleep_until("z", ".input.at")]),
            json!({"at": until}),
        )
        .started();
        assert_eq!(
            sim.timers_set.iter().map(|t| t.1).collect::<Vec<_>>(),
            [60_000]
        );
        assert_eq!(sim.now, 60_000);
        let past = rfc3339(10);
        let sim = Sim::new(
            file("w", vec![sleep_until("z", ".input.at")]),
            json!({"at": past}),
        )
        .started();
        assert!(sim.timers_set.is_empty());
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(sim.record("z").status, StepStatus::Success);
    }

    #[test]
    fn s38_the_wake_instant_survives_a_restart_and_an_overdue_sleep_ends_at_recovery() {
        let mut sim = Sim::new(file("w", vec![sleep_ms("z", 500)]), json!({}));
        sim.feed(crate::engine::Event::Start { at: sim.now })
            .expect("started");
        sim.set_clock(9_000);
        sim.crash_and_recover();
        assert_eq!(
            sim.timers_set.iter().map(|t| t.1).collect::<Vec<_>>(),
            [1_500, 1_500]
        );
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(sim.now, 9_000, "overdue: fired at once");
    }

    #[test]
    fn s37_an_until_that_is_not_an_instant_fails_with_expression_error() {
        let sim = Sim::new(file("w", vec![sleep_until("z", "3")]), json!({})).started();
        assert_eq!(
            sim.record("z").error.as_ref().map(|e| e.code.as_str()),
            Some("expression-error")
        );
    }

    #[test]
    fn s75_s76_a_sleep_a_cancel_reaches_before_it_starts_sets_no_timer() {
        let mut sim = Sim::new(
            file("w", vec![sleep_ms("z", 500), step("after")]),
            json!({}),
        );
        sim.cancel().expect("accepted");
        assert_eq!(sim.status(), RunStatus::Cancelled);
        assert!(sim.timers_set.is_empty(), "no timer is set");
        assert_eq!(sim.record("z").status, StepStatus::Cancelled);
        assert!(sim.calls_to("after").is_empty());
    }

    /// Every test above, by name.
    pub(crate) const SCENARIOS: &[(&str, fn())] = scenarios![
        s37_s38_a_sleep_waits_its_milliseconds_as_waiting_and_outputs_its_input,
        s37_a_sleep_until_waits_for_the_absolute_instant_and_not_at_all_once_it_passed,
        s38_the_wake_instant_survives_a_restart_and_an_overdue_sleep_ends_at_recovery,
        s37_an_until_that_is_not_an_instant_fails_with_expression_error,
        s75_s76_a_sleep_a_cancel_reaches_before_it_starts_sets_no_timer,
    ];
}
