//! Property tests of the core: random graphs, random step outcomes, a simulated driver.
//!
//! For every generated workflow and sequence of outcomes: the run ends or suspends (and ends
//! once every suspension is resumed), no succeeded step execution is invoked again, the closing
//! event comes last and once, and folding the event log rebuilds exactly the live state, from
//! the first state or, as the driver recovers, from a snapshot taken anywhere.

use std::collections::{HashSet, VecDeque};

use indexmap::IndexMap;
use proptest::prelude::*;
use proptest::test_runner::{RngAlgorithm, TestCaseError, TestRng, TestRunner};
use serde_json::json;

use super::expr::Expr;
use super::invocation::{InvocationResult, StepFailure, StepOutcome};
use super::model::*;
use super::{Command, Event, EventKind, ResumeRequest, RunStatus, advance, fold, new_run, replay};

/// A generated entry shape.
#[derive(Debug, Clone)]
pub(super) enum Shape {
    Step,
    Map,
    Sleep,
    Parallel(Vec<Shape>),
    Branch(Vec<(bool, Shape)>),
    Foreach(u32, u8, Vec<Shape>),
    Loop(u8, Vec<Shape>),
}

fn shape() -> impl Strategy<Value = Shape> {
    let leaf = prop_oneof![4 => Just(Shape::Step), 1 => Just(Shape::Map), 1 => Just(Shape::Sleep)];
    leaf.prop_recursive(3, 16, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..3).prop_map(Shape::Parallel),
            prop::collection::vec((any::<bool>(), inner.clone()), 1..3).prop_map(Shape::Branch),
            (1u32..3, 0u8..4, prop::collection::vec(inner.clone(), 1..3))
                .prop_map(|(c, n, b)| Shape::Foreach(c, n, b)),
            (1u8..3, prop::collection::vec(inner, 1..3)).prop_map(|(n, b)| Shape::Loop(n, b)),
        ]
    })
}

struct Build {
    graph: Graph,
    next: u32,
}

impl Build {
    fn id(&mut self) -> String {
        self.next += 1;
        format!("e{}", self.next)
    }

    fn list(&mut self, shapes: &[Shape], prefix: &str) -> Vec<EntryId> {
        shapes.iter().map(|s| self.entry(s, prefix)).collect()
    }

    /// Blocks whose body sees an array get a map first that makes one.
    fn entry(&mut self, shape: &Shape, prefix: &str) -> EntryId {
        let id = self.id();
        let path = if prefix.is_empty() {
            id.clone()
        } else {
            format!("{prefix}.{id}")
        };
        let eid = self.graph.entries.len() as EntryId;
        self.graph.entries.push(EntryDef {
            id: id.clone(),
            path: path.clone(),
            file: 0,
            kind: EntryKind::Group { body: vec![] },
        });
        let kind = match shape {
            Shape::Step => EntryKind::Step(Box::new(StepDef {
                plugin: "p".into(),
                step: "s".into(),
                config: json!({}).into(),
                retry: RetryPolicy {
                    attempts: 2,
                    ..RetryPolicy::default()
                },
                timeout_ms: None,
                schemas: StepSchemas::default(),
                kind: StepKind::Step,
                input: None,
            })),
            Shape::Map => EntryKind::Map {
                expr: Expr::new("{m: 1}"),
            },
            Shape::Sleep => EntryKind::Sleep {
                ms: Some(5),
                until: None,
            },
            Shape::Parallel(arms) => EntryKind::Parallel {
                arms: self.list(arms, &path),
            },
            Shape::Branch(arms) => EntryKind::Branch {
                arms: arms
                    .iter()
                    .map(|(take, s)| BranchArm {
                        when: Expr::new(if *take { "true" } else { "false" }),
                        entry: self.entry(s, &path),
                    })
                    .collect(),
            },
            Shape::Foreach(c, n, body) => {
                // The foreach takes `[0..n]` from a map inside a group.
                let items: Vec<u8> = (0..*n).collect();
                let arr = self.graph.entries.len() as EntryId;
                let arr_id = self.id();
                self.graph.entries.push(EntryDef {
                    id: arr_id.clone(),
                    path: format!("{path}.{arr_id}"),
                    file: 0,
                    kind: EntryKind::Map {
                        expr: Expr::new(serde_json::to_string(&items).unwrap_or_default()),
                    },
                });
                let fe = self.graph.entries.len() as EntryId;
                let fe_id = self.id();
                let fe_path = format!("{path}.{fe_id}");
                self.graph.entries.push(EntryDef {
                    id: fe_id,
                    path: fe_path.clone(),
                    file: 0,
                    kind: EntryKind::Group { body: vec![] },
                });
                let body = self.list(body, &fe_path);
                self.graph.entries[fe as usize].kind = EntryKind::Foreach {
                    concurrency: *c,
                    body,
                };
                EntryKind::Group {
                    body: vec![arr, fe],
                }
            }
            Shape::Loop(n, body) => EntryKind::Loop {
                test: Expr::new(format!(".iteration >= {n}")),
                until: true,
                max_iterations: Some(10),
                body: self.list(body, &path),
            },
        };
        self.graph.entries[eid as usize].kind = kind;
        eid
    }
}

/// Whether a foreach or loop sits inside another: then a step's call names only the innermost
/// item or iteration, and "the same execution" cannot be told from the call alone.
fn nested_repeat(shape: &Shape, inside: bool) -> bool {
    match shape {
        Shape::Step | Shape::Map | Shape::Sleep => false,
        Shape::Parallel(arms) => arms.iter().any(|a| nested_repeat(a, inside)),
        Shape::Branch(arms) => arms.iter().any(|(_, a)| nested_repeat(a, inside)),
        Shape::Foreach(_, _, body) | Shape::Loop(_, body) => {
            inside || body.iter().any(|b| nested_repeat(b, true))
        }
    }
}

pub(super) fn graph(shapes: &[Shape]) -> Graph {
    let mut b = Build {
        graph: Graph {
            format: GRAPH_FORMAT,
            files: vec![FileDef {
                id: "prop".into(),
                source: "prop".into(),
                description: None,
                prefix: String::new(),
                input_schema: None,
                state_schema: None,
                initial_state: json!({}),
                body: vec![],
            }],
            entries: vec![],
            plugins: IndexMap::new(),
            models: IndexMap::new(),
            workflow_tools: IndexMap::new(),
        },
        next: 0,
    };
    let body = b.list(shapes, "");
    b.graph.files[0].body = body;
    b.graph
}

/// What an invocation answers, drawn from the test's random bytes.
fn outcome(byte: u8, attempt: u32, resumed: bool) -> InvocationResult {
    let outcome = match byte % 10 {
        0 if !resumed => Ok(StepOutcome::Suspend {
            payload: json!({"b": byte}),
            labels: vec![],
        }),
        1 => Err(StepFailure::new("boom", "failed")),
        2 if attempt == 0 => Err(StepFailure::new("flaky", "once")),
        3 => Ok(StepOutcome::Bail(json!({"bail": byte}))),
        4 if byte > 200 => Err(StepFailure::new("nope", "no retry").not_retryable()),
        _ => Ok(StepOutcome::Done(json!({"v": byte}))),
    };
    InvocationResult {
        outcome,
        patches: vec![json!({"last": byte})],
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, max_global_rejects: 100_000, ..ProptestConfig::default() })]

    #[test]
    fn prop_runs_end_never_repeat_success_and_replay_from_the_log(
        shapes in prop::collection::vec(shape(), 1..4),
        bytes in prop::collection::vec(any::<u8>(), 64),
    ) {
        run_case(shapes, bytes)?;
    }
}

/// Runs `cases` cases of the property from a fixed seed: the property tests' part of the corpus
/// the machines' transition tables are checked against (`engine::transitions`).
pub(super) fn fixed_seed_cases(cases: u32) {
    let config = ProptestConfig {
        cases,
        max_global_rejects: 100_000,
        ..ProptestConfig::default()
    };
    let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let cases = (
        prop::collection::vec(shape(), 1..4),
        prop::collection::vec(any::<u8>(), 64),
    );
    if let Err(e) = runner.run(&cases, |(shapes, bytes)| run_case(shapes, bytes)) {
        panic!("the property fails from the fixed seed: {e}");
    }
}

/// One case of the property: the run of `shapes` with outcomes drawn from `bytes`.
fn run_case(shapes: Vec<Shape>, bytes: Vec<u8>) -> Result<(), TestCaseError> {
    prop_assume!(!shapes.iter().any(|s| nested_repeat(s, false)));
    let g = graph(&shapes);
    let mut run = new_run(&g, "r".into(), json!({"n": 0}), 0);
    let mut log = Vec::new();
    let mut emitted: Vec<EventKind> = Vec::new();
    let mut pending: VecDeque<Command> = VecDeque::new();
    let mut succeeded: HashSet<(String, Option<u32>, Option<u32>)> = HashSet::new();
    let mut invoked: HashSet<u64> = HashSet::new();
    let feed = |run: &mut super::RunState,
                ev: Event,
                log: &mut Vec<Event>,
                pending: &mut VecDeque<Command>,
                emitted: &mut Vec<EventKind>| {
        log.push(ev.clone());
        let cmds = advance(run, &g, ev).expect("event accepted");
        for c in cmds {
            if let Command::Emit(t) = &c {
                emitted.push(t.kind);
            }
            pending.push_back(c);
        }
    };
    feed(
        &mut run,
        Event::Start { at: 1 },
        &mut log,
        &mut pending,
        &mut emitted,
    );
    let mut i = 0usize;
    let mut at = 1;
    let mut resumes = 0;
    while !run.status.is_ended() {
        i += 1;
        prop_assert!(i < 5_000, "the run never ended");
        at += 1;
        let Some(cmd) = pending.pop_front() else {
            prop_assert_eq!(
                run.status,
                RunStatus::Suspended,
                "nothing pending but the run is {}",
                run.status
            );
            resumes += 1;
            prop_assert!(resumes < 200);
            let req = ResumeRequest {
                step: None,
                label: None,
                foreach_index: None,
                data: json!({}),
            };
            // Resume one suspended path at a time (several paths are ambiguous, S68).
            let first = super::suspended(&run, &g).first().map(|s| s.path.clone());
            let req = ResumeRequest { step: first, ..req };
            feed(
                &mut run,
                Event::Resume { request: req, at },
                &mut log,
                &mut pending,
                &mut emitted,
            );
            continue;
        };
        match cmd {
            Command::Invoke(inv) => {
                prop_assert!(
                    invoked.insert(inv.token),
                    "token {} issued twice",
                    inv.token
                );
                let key = (
                    inv.call.step_path.clone(),
                    inv.call.foreach_index,
                    inv.call.iteration,
                );
                prop_assert!(
                    !succeeded.contains(&key),
                    "{:?} invoked again after it succeeded",
                    key
                );
                let r = outcome(
                    bytes[i % bytes.len()].wrapping_add(i as u8),
                    inv.call.attempt,
                    inv.call.resume.is_some(),
                );
                if matches!(r.outcome, Ok(StepOutcome::Done(_) | StepOutcome::Bail(_))) {
                    succeeded.insert(key);
                }
                feed(
                    &mut run,
                    Event::StepEnded {
                        token: inv.token,
                        result: Box::new(r),
                        at,
                    },
                    &mut log,
                    &mut pending,
                    &mut emitted,
                );
            }
            Command::Timer { token, .. } => {
                feed(
                    &mut run,
                    Event::TimerFired { token, at },
                    &mut log,
                    &mut pending,
                    &mut emitted,
                );
            }
            Command::Abort { .. } | Command::Emit(_) => {}
        }
    }
    prop_assert_eq!(emitted.first(), Some(&EventKind::RunStarted));
    let closing: Vec<&EventKind> = emitted.iter().filter(|k| k.is_closing()).collect();
    prop_assert_eq!(closing.len(), 1);
    prop_assert!(emitted.last().is_some_and(|k| k.is_closing()));
    // As the driver recovers: a snapshot taken anywhere, then the records after it.
    let cut = usize::from(bytes[0]) % (log.len() + 1);
    let snapshot = replay(&g, "r".into(), json!({"n": 0}), 0, log[..cut].to_vec());
    let stored = serde_json::to_vec(&snapshot).expect("snapshot serializes");
    let mut recovered: super::RunState =
        serde_json::from_slice(&stored).expect("snapshot reads back");
    fold(&mut recovered, &g, log[cut..].to_vec());
    prop_assert_eq!(&recovered, &run);
    let rebuilt = replay(&g, "r".into(), json!({"n": 0}), 0, log);
    prop_assert_eq!(&rebuilt, &run);
    let stored = serde_json::to_value(&run).expect("state serializes");
    let back: super::RunState = serde_json::from_value(stored).expect("state deserializes");
    prop_assert_eq!(&back, &run);
    Ok(())
}
