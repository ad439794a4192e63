//! The sleep machine: a timer at an absolute instant (S37, S38).

use serde_json::{Value, json};

use crate::engine::commands::{Command, EventKind};
use crate::engine::context::{Cx, Frame};
use crate::engine::drive::{end_node, start_block};
use crate::engine::expr::Expr;
use crate::engine::model::EntryDef;
use crate::engine::nodes::{End, Node, NodeKind, Phase};
use crate::engine::records::StepStatus;
use crate::engine::time::rfc3339;

/// Sets the timer when the sleep starts; ends it when the timer fires or a cancel comes (S37, S38).
pub(crate) fn drive_sleep(
    node: &mut Node,
    entry: &EntryDef,
    ms: Option<u64>,
    until: Option<&Expr>,
    frame: &Frame,
    cx: &mut Cx,
) {
    if node.phase == Phase::New {
        start_block(node, entry, frame, cx);
        let wake = match (ms, until) {
            (Some(ms), _) => Ok(cx.now.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX))),
            (None, Some(expr)) => {
                let input = cx.expr_input(frame, &node.input);
                expr.eval_one(&input).and_then(|v| match v {
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
                    End::Cancelled
                } else {
                    End::Success(node.input.clone())
                };
                end_node(node, entry, frame, cx, end);
            }
            Ok(at) => {
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
        end_node(node, entry, frame, cx, End::Cancelled);
    } else if cx.fired.remove(&token) {
        let out = node.input.clone();
        end_node(node, entry, frame, cx, End::Success(out));
    } else if cx.reissue {
        cx.cmds.push(Command::Timer { token, at: until });
    }
}
