//! Recovery in the core (S56, S102, S103, S114): what a `Recover` event issues again.

use serde_json::json;

use super::invocation::{InvocationResult, StepFailure};
use super::proptests::{Shape, graph};
use super::transitions::scenarios;
use super::{Command, Event, EventKind, RunState, RunStatus, advance, new_run};

fn invokes(cmds: &[Command]) -> Vec<(u64, u32)> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Invoke(i) => Some((i.token, i.call.attempt)),
            _ => None,
        })
        .collect()
}

/// The state as a new process reads it back from the store.
fn reload(run: &RunState) -> RunState {
    serde_json::from_value(serde_json::to_value(run).expect("serialize")).expect("deserialize")
}

#[test]
fn s114_a_pending_run_is_started_by_recovery() {
    let g = graph(&[Shape::Step]);
    let mut run = new_run(&g, "r".into(), json!({}), 0);
    assert_eq!(run.status, RunStatus::Pending);
    let cmds = advance(&mut run, &g, Event::Recover { at: 5 }).expect("recover");
    assert_eq!(run.status, RunStatus::Running);
    assert!(matches!(&cmds[0], Command::Emit(t) if t.kind == EventKind::RunStarted));
    assert_eq!(invokes(&cmds).len(), 1);
}

#[test]
fn s56_s102_s103_recovery_issues_the_in_flight_invocation_again_with_its_attempt_and_logs_it() {
    let g = graph(&[Shape::Step]);
    let mut run = new_run(&g, "r".into(), json!({}), 0);
    let cmds = advance(&mut run, &g, Event::Start { at: 1 }).expect("start");
    let (token, attempt) = invokes(&cmds)[0];
    assert_eq!(attempt, 0);
    // Attempt 0 fails; the step policy allows a second attempt at once.
    let failed = InvocationResult {
        outcome: Err(StepFailure::new("flaky", "once")),
        patches: vec![],
    };
    let cmds = advance(
        &mut run,
        &g,
        Event::StepEnded {
            token,
            result: Box::new(failed),
            at: 2,
        },
    )
    .expect("ended");
    let (token, attempt) = invokes(&cmds)[0];
    assert_eq!(attempt, 1);
    // The process dies; another reads the state back and recovers.
    let mut recovered = reload(&run);
    let cmds = advance(&mut recovered, &g, Event::Recover { at: 9 }).expect("recover");
    assert_eq!(
        invokes(&cmds),
        vec![(token, 1)],
        "same invocation, same attempt, no new attempt used"
    );
    let logs: Vec<_> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::Emit(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(logs.len(), 1, "the only event recovery adds is one log");
    assert_eq!(logs[0].kind, EventKind::Log);
    assert_eq!(logs[0].data["level"], "warn");
    assert!(
        logs[0].data["message"]
            .as_str()
            .unwrap_or_default()
            .contains("(attempt 1)")
    );
}

#[test]
fn s103_sleeps_keep_their_absolute_wake_instant_across_recovery() {
    let g = graph(&[Shape::Sleep]);
    let mut run = new_run(&g, "r".into(), json!({}), 0);
    let cmds = advance(&mut run, &g, Event::Start { at: 100 }).expect("start");
    let timer = cmds.iter().find_map(|c| match c {
        Command::Timer { token, at } => Some((*token, *at)),
        _ => None,
    });
    let (token, at) = timer.expect("a timer");
    assert_eq!(at, 105);
    let mut recovered = reload(&run);
    let cmds = advance(&mut recovered, &g, Event::Recover { at: 1_000 }).expect("recover");
    assert!(
        cmds.contains(&Command::Timer { token, at: 105 }),
        "{cmds:?}"
    );
    // Overdue: the driver fires it at once; the sleep then ends.
    advance(&mut recovered, &g, Event::TimerFired { token, at: 1_001 }).expect("fired");
    assert_eq!(recovered.status, RunStatus::Success);
}

#[test]
fn s103_a_suspended_run_stays_suspended_through_recovery() {
    let g = graph(&[Shape::Step]);
    let mut run = new_run(&g, "r".into(), json!({}), 0);
    let cmds = advance(&mut run, &g, Event::Start { at: 1 }).expect("start");
    let (token, _) = invokes(&cmds)[0];
    let suspend = InvocationResult {
        outcome: Ok(super::invocation::StepOutcome::Suspend {
            payload: json!({}),
            labels: vec![],
        }),
        patches: vec![],
    };
    advance(
        &mut run,
        &g,
        Event::StepEnded {
            token,
            result: Box::new(suspend),
            at: 2,
        },
    )
    .expect("ended");
    assert_eq!(run.status, RunStatus::Suspended);
    let before = run.clone();
    let cmds = advance(&mut run, &g, Event::Recover { at: 3 }).expect("recover");
    assert!(cmds.is_empty());
    assert_eq!(run, before);
}

/// Every test above, by name: a part of the corpus the machines' transition tables are
/// checked against (`engine::transitions`).
pub(super) const SCENARIOS: &[(&str, fn())] = scenarios![
    s114_a_pending_run_is_started_by_recovery,
    s56_s102_s103_recovery_issues_the_in_flight_invocation_again_with_its_attempt_and_logs_it,
    s103_sleeps_keep_their_absolute_wake_instant_across_recovery,
    s103_a_suspended_run_stays_suspended_through_recovery,
];
