//! A simulated driver for the core's unit tests: graphs written in a few lines, scripted step
//! answers, virtual time, collected tracking events. No wasmtime, no store: each construct's
//! semantics are checked in milliseconds, beside its machine.
//!
//! [`Sim`] feeds events to [`advance`] the way the real driver does: it answers each
//! invocation with what the test scripted for its step (by default the step echoes its input),
//! fires timers in instant order by moving its clock forward, and after every settle checks
//! that [`replay`] of its log rebuilds exactly the live state.

use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::{Value, json};

use super::expr::Expr;
use super::invocation::{InvocationResult, StepCall, StepFailure, StepOutcome, Tripwire};
use super::model::{
    AgentDef, AgentTool, BranchArm, EntryDef, EntryId, EntryKind, FileDef, FileId, Graph,
    RetryPolicy, StepDef, StepKind, StepSchemas,
};
use super::schema::Schema;
use super::{
    Command, Event, EventKind, Invoke, Millis, Refusal, ResumeRequest, RunState, RunStatus,
    StepRecord, Tracking, advance, new_run, replay,
};

/// One entry of a test workflow.
pub(crate) struct Spec {
    id: String,
    kind: SpecKind,
}

enum SpecKind {
    Step {
        retry: RetryPolicy,
        schemas: Box<StepSchemas>,
        input: Option<String>,
    },
    Map(String),
    Sleep {
        ms: Option<u64>,
        until: Option<String>,
    },
    Parallel(Vec<Spec>),
    Branch(Vec<(String, Spec)>),
    Group(Vec<Spec>),
    Foreach(u32, Vec<Spec>),
    Loop {
        test: String,
        until: bool,
        max: Option<u32>,
        body: Vec<Spec>,
    },
    Workflow(FileSpec),
    Agent(Box<AgentDef>),
}

/// One workflow file of a test workflow.
pub(crate) struct FileSpec {
    id: String,
    input_schema: Option<Value>,
    initial_state: Value,
    body: Vec<Spec>,
}

/// A file with these top-level entries.
pub(crate) fn file(id: &str, body: Vec<Spec>) -> FileSpec {
    FileSpec {
        id: id.into(),
        input_schema: None,
        initial_state: json!({}),
        body,
    }
}

impl FileSpec {
    /// The file's `input-schema:`.
    pub(crate) fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = Some(schema);
        self
    }

    /// The file's `initial-state:`.
    pub(crate) fn initial_state(mut self, state: Value) -> Self {
        self.initial_state = state;
        self
    }
}

fn spec(id: &str, kind: SpecKind) -> Spec {
    Spec {
        id: id.into(),
        kind,
    }
}

/// A plugin step (no retry unless [`Spec::retry`] says so).
pub(crate) fn step(id: &str) -> Spec {
    spec(
        id,
        SpecKind::Step {
            retry: RetryPolicy::default(),
            schemas: Box::default(),
            input: None,
        },
    )
}

/// A `map`.
pub(crate) fn map(id: &str, expr: &str) -> Spec {
    spec(id, SpecKind::Map(expr.into()))
}

/// A `sleep` of `ms` milliseconds.
pub(crate) fn sleep_ms(id: &str, ms: u64) -> Spec {
    spec(
        id,
        SpecKind::Sleep {
            ms: Some(ms),
            until: None,
        },
    )
}

/// A `sleep` until the instant `expr` yields.
pub(crate) fn sleep_until(id: &str, expr: &str) -> Spec {
    spec(
        id,
        SpecKind::Sleep {
            ms: None,
            until: Some(expr.into()),
        },
    )
}

/// A `parallel`.
pub(crate) fn parallel(id: &str, arms: Vec<Spec>) -> Spec {
    spec(id, SpecKind::Parallel(arms))
}

/// A `branch`: each arm with its `when`.
pub(crate) fn branch(id: &str, arms: Vec<(&str, Spec)>) -> Spec {
    spec(
        id,
        SpecKind::Branch(arms.into_iter().map(|(w, s)| (w.into(), s)).collect()),
    )
}

/// A branch arm's `do:` list with an id of its own.
pub(crate) fn group(id: &str, body: Vec<Spec>) -> Spec {
    spec(id, SpecKind::Group(body))
}

/// A `foreach`.
pub(crate) fn foreach(id: &str, concurrency: u32, body: Vec<Spec>) -> Spec {
    spec(id, SpecKind::Foreach(concurrency, body))
}

/// A `do-until` loop.
pub(crate) fn do_until(id: &str, test: &str, max: Option<u32>, body: Vec<Spec>) -> Spec {
    spec(
        id,
        SpecKind::Loop {
            test: test.into(),
            until: true,
            max,
            body,
        },
    )
}

/// An `agent:` over model `m` offering `tools` (name, needs approval), with `max_steps`.
pub(crate) fn agent(id: &str, tools: &[(&str, bool)], max_steps: u32) -> Spec {
    let tools = tools
        .iter()
        .map(|(name, approve)| AgentTool {
            name: (*name).into(),
            description: format!("the {name} tool"),
            parameters: json!({ "type": "object" }),
            approve: *approve,
            call: StepDef {
                plugin: "kit".into(),
                step: (*name).into(),
                config: json!({}).into(),
                retry: RetryPolicy::default(),
                timeout_ms: None,
                schemas: StepSchemas::default(),
                kind: StepKind::Tool,
                input: None,
            },
        })
        .collect();
    spec(
        id,
        SpecKind::Agent(Box::new(AgentDef {
            model: "m".into(),
            instructions: Some("be brief".into()),
            tools,
            max_steps,
            output_schema: None,
            config: json!({}).into(),
            retry: RetryPolicy::default(),
            timeout_ms: None,
            input: None,
            max_parallel_tools: crate::engine::model::DEFAULT_MAX_PARALLEL_TOOLS,
        })),
    )
}

/// A `workflow:` entry running `file`.
pub(crate) fn workflow(id: &str, file: FileSpec) -> Spec {
    spec(id, SpecKind::Workflow(file))
}

impl Spec {
    /// The step's retry policy.
    pub(crate) fn retry(
        mut self,
        attempts: u32,
        delay_ms: u64,
        backoff: f64,
        max: Option<u64>,
    ) -> Self {
        if let SpecKind::Step { retry, .. } = &mut self.kind {
            *retry = RetryPolicy {
                attempts,
                delay_ms,
                backoff,
                max_delay_ms: max,
            };
        }
        self
    }

    /// The step's `input:` expression (S119).
    pub(crate) fn input(mut self, expr: &str) -> Self {
        if let SpecKind::Step { input, .. } = &mut self.kind {
            *input = Some(expr.into());
        }
        self
    }

    /// The agent's output schema (S126).
    pub(crate) fn output_schema(mut self, schema: Value) -> Self {
        if let SpecKind::Agent(def) = &mut self.kind {
            def.output_schema = Some(Schema::new(schema));
        }
        self
    }

    /// The agent's `max-parallel-tools`.
    pub(crate) fn max_parallel_tools(mut self, n: u32) -> Self {
        if let SpecKind::Agent(def) = &mut self.kind {
            def.max_parallel_tools = n;
        }
        self
    }

    /// The retry policy of the agent's model calls.
    pub(crate) fn model_retry(mut self, attempts: u32, delay_ms: u64) -> Self {
        if let SpecKind::Agent(def) = &mut self.kind {
            def.retry = RetryPolicy {
                attempts,
                delay_ms,
                backoff: 1.0,
                max_delay_ms: None,
            };
        }
        self
    }

    /// The step's resume schema.
    pub(crate) fn resume_schema(mut self, schema: Value) -> Self {
        if let SpecKind::Step { schemas, .. } = &mut self.kind {
            schemas.resume = Some(Schema::new(schema));
        }
        self
    }
}

/// The graph of a test workflow, with paths and file instances as the loader makes them.
pub(crate) fn graph(top: FileSpec) -> Graph {
    let mut g = Graph::empty();
    add_file(&mut g, top, "");
    g
}

fn add_file(g: &mut Graph, f: FileSpec, prefix: &str) -> FileId {
    let id = g.files.len() as FileId;
    g.files.push(FileDef {
        id: f.id.clone(),
        source: format!("{}.yaml", f.id),
        description: None,
        prefix: prefix.into(),
        input_schema: f.input_schema.map(Schema::new),
        state_schema: None,
        initial_state: f.initial_state,
        body: Vec::new(),
    });
    let body = add_list(g, f.body, prefix, id);
    g.files[id as usize].body = body;
    id
}

fn add_list(g: &mut Graph, specs: Vec<Spec>, prefix: &str, file: FileId) -> Vec<EntryId> {
    specs
        .into_iter()
        .map(|s| add_entry(g, s, prefix, file))
        .collect()
}

/// Adds an entry before its children, so entry ids follow workflow order (S66).
fn add_entry(g: &mut Graph, s: Spec, prefix: &str, file: FileId) -> EntryId {
    let path = if prefix.is_empty() {
        s.id.clone()
    } else {
        format!("{prefix}.{}", s.id)
    };
    let eid = g.entries.len() as EntryId;
    g.entries.push(EntryDef {
        id: s.id,
        path: path.clone(),
        file,
        kind: EntryKind::Group { body: Vec::new() },
    });
    let kind = match s.kind {
        SpecKind::Step {
            retry,
            schemas,
            input,
        } => EntryKind::Step(Box::new(StepDef {
            plugin: "kit".into(),
            step: "test".into(),
            config: json!({}).into(),
            retry,
            timeout_ms: None,
            schemas: *schemas,
            kind: StepKind::Step,
            input: input.map(Expr::new),
        })),
        SpecKind::Map(expr) => EntryKind::Map {
            expr: Expr::new(expr),
        },
        SpecKind::Sleep { ms, until } => EntryKind::Sleep {
            ms,
            until: until.map(Expr::new),
        },
        SpecKind::Parallel(arms) => EntryKind::Parallel {
            arms: add_list(g, arms, &path, file),
        },
        SpecKind::Branch(arms) => EntryKind::Branch {
            arms: arms
                .into_iter()
                .map(|(when, s)| BranchArm {
                    when: Expr::new(when),
                    entry: add_entry(g, s, &path, file),
                })
                .collect(),
        },
        SpecKind::Group(body) => EntryKind::Group {
            body: add_list(g, body, &path, file),
        },
        SpecKind::Foreach(concurrency, body) => EntryKind::Foreach {
            concurrency,
            body: add_list(g, body, &path, file),
        },
        SpecKind::Loop {
            test,
            until,
            max,
            body,
        } => EntryKind::Loop {
            test: Expr::new(test),
            until,
            max_iterations: max,
            body: add_list(g, body, &path, file),
        },
        SpecKind::Workflow(nested) => EntryKind::Workflow {
            file: add_file(g, nested, &path),
        },
        SpecKind::Agent(def) => EntryKind::Agent(def),
    };
    g.entries[eid as usize].kind = kind;
    eid
}

/// How the simulated plugin answers one invocation.
pub(crate) enum Answer {
    /// With this result.
    Reply(Box<InvocationResult>),
    /// Not yet: the invocation stays in flight until [`Sim::answer`] (or an abort) ends it.
    Hold,
}

/// `done` with this output.
pub(crate) fn done(output: Value) -> Answer {
    reply(Ok(StepOutcome::Done(output)))
}

/// A retryable failure with this code.
pub(crate) fn fail(code: &str) -> Answer {
    reply(Err(StepFailure::new(code, format!("{code} failure"))))
}

/// A failure that is never retried.
pub(crate) fn fail_final(code: &str) -> Answer {
    reply(Err(
        StepFailure::new(code, format!("{code} failure")).not_retryable()
    ))
}

/// A tripped guardrail.
pub(crate) fn trip(reason: &str) -> Answer {
    let mut failure = StepFailure::new("tripwire", reason);
    failure.tripwire = Some(Tripwire {
        reason: reason.into(),
        retry: false,
        metadata: None,
        processor_id: None,
    });
    reply(Err(failure))
}

/// `suspend` with this payload and labels.
pub(crate) fn suspend(payload: Value, labels: &[&str]) -> Answer {
    reply(Ok(StepOutcome::Suspend {
        payload,
        labels: labels.iter().map(|l| (*l).to_owned()).collect(),
    }))
}

/// `bail` with this value.
pub(crate) fn bail(value: Value) -> Answer {
    reply(Ok(StepOutcome::Bail(value)))
}

/// A model reply as the model executor gives it: text, tool calls `(id, name, arguments)`,
/// usage, and the assistant message.
pub(crate) fn says(text: &str, calls: &[(&str, &str, Value)], usage: (u64, u64)) -> Answer {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, arguments)| json!({"id": id, "name": name, "arguments": arguments}))
        .collect();
    let mut message = json!({"role": "assistant", "content": text});
    if !calls.is_empty() {
        message["tool_calls"] = json!(calls);
    }
    done(json!({
        "text": text,
        "tool_calls": calls,
        "usage": {"input_tokens": usage.0, "output_tokens": usage.1},
        "finish": if calls.is_empty() { "stop" } else { "tool_calls" },
        "message": message,
    }))
}

fn reply(outcome: Result<StepOutcome, StepFailure>) -> Answer {
    Answer::Reply(Box::new(InvocationResult {
        outcome,
        patches: Vec::new(),
    }))
}

impl Answer {
    /// The same answer, with a state patch given before it.
    pub(crate) fn patch(mut self, patch: Value) -> Self {
        if let Answer::Reply(r) = &mut self {
            r.patches.push(patch);
        }
        self
    }
}

type Script = Box<dyn FnMut(&StepCall) -> Answer>;

/// One invocation in flight.
struct InFlight {
    invoke: Invoke,
    answer: Answer,
    aborted: bool,
}

/// The most events one [`Sim::settle`] may take before the test calls the run endless.
const SETTLE_GUARD: usize = 10_000;

/// A run of a test workflow driven by a simulated driver.
pub(crate) struct Sim {
    /// The graph.
    pub(crate) graph: Graph,
    /// The run.
    pub(crate) run: RunState,
    /// The virtual clock.
    pub(crate) now: Millis,
    /// Every accepted event, in order.
    pub(crate) log: Vec<Event>,
    /// Every tracking event, in order.
    pub(crate) events: Vec<Tracking>,
    /// Every invocation issued, in order.
    pub(crate) calls: Vec<StepCall>,
    /// For every timer set: how long after the instant it was set at it is due.
    pub(crate) timer_waits: Vec<Millis>,
    /// Every timer set: its token and instant.
    pub(crate) timers_set: Vec<(u64, Millis)>,
    /// The tokens of every abort, in order.
    pub(crate) aborted: Vec<u64>,
    /// The most invocations in flight at once.
    pub(crate) max_in_flight: usize,
    /// The path of every invocation whose end was fed, in order.
    pub(crate) ended: Vec<String>,
    input: Value,
    created_at: Millis,
    in_flight: VecDeque<InFlight>,
    timers: Vec<(Millis, u64)>,
    scripts: HashMap<String, Script>,
}

impl Sim {
    /// A pending run of the workflow `top` with `input`, created at instant 1000.
    pub(crate) fn new(top: FileSpec, input: Value) -> Self {
        let graph = graph(top);
        let created_at = 1_000;
        let run = new_run(&graph, "run".into(), input.clone(), created_at);
        Sim {
            graph,
            run,
            now: created_at,
            log: Vec::new(),
            events: Vec::new(),
            calls: Vec::new(),
            timer_waits: Vec::new(),
            timers_set: Vec::new(),
            aborted: Vec::new(),
            max_in_flight: 0,
            ended: Vec::new(),
            input,
            created_at,
            in_flight: VecDeque::new(),
            timers: Vec::new(),
            scripts: HashMap::new(),
        }
    }

    /// Answers the invocations of the step at `path` with `answers`, in turn; once they run
    /// out, the step echoes its input.
    pub(crate) fn on(mut self, path: &str, answers: impl IntoIterator<Item = Answer>) -> Self {
        let mut queue: VecDeque<Answer> = answers.into_iter().collect();
        self.scripts.insert(
            path.into(),
            Box::new(move |call| queue.pop_front().unwrap_or_else(|| echo(call))),
        );
        self
    }

    /// Answers the invocations of the step at `path` with what `f` says about each call.
    pub(crate) fn on_call(
        mut self,
        path: &str,
        f: impl FnMut(&StepCall) -> Answer + 'static,
    ) -> Self {
        self.scripts.insert(path.into(), Box::new(f));
        self
    }

    /// Starts the run and drives it until nothing more happens.
    pub(crate) fn started(mut self) -> Self {
        self.feed(Event::Start { at: self.now })
            .expect("start is never refused");
        self.settle();
        self
    }

    /// Feeds one event and takes its commands; a refused event is not logged.
    pub(crate) fn feed(&mut self, event: Event) -> Result<(), Refusal> {
        let cmds = advance(&mut self.run, &self.graph, event.clone())?;
        self.log.push(event);
        for cmd in cmds {
            match cmd {
                Command::Invoke(invoke) => {
                    let answer = match self.scripts.get_mut(&invoke.call.step_path) {
                        Some(script) => script(&invoke.call),
                        None => echo(&invoke.call),
                    };
                    self.calls.push(invoke.call.clone());
                    self.in_flight.push_back(InFlight {
                        invoke: *invoke,
                        answer,
                        aborted: false,
                    });
                }
                Command::Timer { token, at } => {
                    self.timer_waits.push(at - self.now);
                    self.timers_set.push((token, at));
                    self.timers.push((at, token));
                }
                Command::Abort { tokens } => {
                    for f in self.in_flight.iter_mut() {
                        f.aborted |= tokens.contains(&f.invoke.token);
                    }
                    self.aborted.extend(tokens);
                }
                Command::Emit(t) => self.events.push(t),
            }
        }
        self.max_in_flight = self.max_in_flight.max(self.in_flight.len());
        Ok(())
    }

    /// Answers the oldest invocation that has an answer (an aborted one that was held ends
    /// `cancelled`). False when none has.
    fn answer_one(&mut self) -> bool {
        let ready = self
            .in_flight
            .iter()
            .position(|f| f.aborted || matches!(f.answer, Answer::Reply(_)));
        let Some(f) = ready.and_then(|i| self.in_flight.remove(i)) else {
            return false;
        };
        let result = match f.answer {
            Answer::Reply(r) => *r,
            Answer::Hold => InvocationResult {
                outcome: Err(StepFailure::new("cancelled", "aborted").not_retryable()),
                patches: Vec::new(),
            },
        };
        self.feed(Event::StepEnded {
            token: f.invoke.token,
            result: Box::new(result),
            at: self.now,
        })
        .expect("an invocation's end is never refused");
        self.ended.push(f.invoke.call.step_path);
        true
    }

    /// Feeds the next thing that would happen (an invocation's end, else the earliest timer);
    /// false when nothing would.
    pub(crate) fn step_once(&mut self) -> bool {
        self.answer_one() || self.fire_one()
    }

    /// Fires the earliest timer, moving the clock to it. False when none is set.
    fn fire_one(&mut self) -> bool {
        let Some(i) = (0..self.timers.len()).min_by_key(|&i| self.timers[i]) else {
            return false;
        };
        let (at, token) = self.timers.remove(i);
        self.now = self.now.max(at);
        self.feed(Event::TimerFired {
            token,
            at: self.now,
        })
        .expect("a timer is never refused");
        true
    }

    /// Answers every invocation that has an answer, firing no timer.
    pub(crate) fn drain(&mut self) {
        let mut n = 0;
        while self.answer_one() {
            n += 1;
            assert!(n < SETTLE_GUARD, "the run never settles");
        }
    }

    /// Drives the run until nothing more happens without the test, then checks that the log
    /// replays to exactly the live state.
    pub(crate) fn settle(&mut self) {
        let mut n = 0;
        while self.answer_one() || self.fire_one() {
            n += 1;
            assert!(n < SETTLE_GUARD, "the run never settles");
        }
        let rebuilt = replay(
            &self.graph,
            self.run.run_id.clone(),
            self.input.clone(),
            self.created_at,
            self.log.clone(),
        );
        assert_eq!(rebuilt, self.run, "the log replays to the live state");
    }

    /// Ends the held invocation of the step at `path` (the oldest, or that of item `index`) with
    /// `answer`, and settles.
    pub(crate) fn answer(&mut self, path: &str, index: Option<u32>, answer: Answer) {
        let i = self
            .in_flight
            .iter()
            .position(|f| {
                f.invoke.call.step_path == path
                    && (index.is_none() || f.invoke.call.foreach_index == index)
            })
            .unwrap_or_else(|| panic!("no invocation of {path} is in flight"));
        self.in_flight[i].answer = answer;
        self.settle();
    }

    /// Resumes the run and settles.
    pub(crate) fn resume(
        &mut self,
        step: Option<&str>,
        label: Option<&str>,
        foreach_index: Option<u32>,
        data: Value,
    ) -> Result<(), Refusal> {
        let request = ResumeRequest {
            step: step.map(Into::into),
            label: label.map(Into::into),
            foreach_index,
            data,
        };
        self.feed(Event::Resume {
            request,
            at: self.now,
        })?;
        self.settle();
        Ok(())
    }

    /// Cancels the run and settles.
    pub(crate) fn cancel(&mut self) -> Result<(), Refusal> {
        self.feed(Event::Cancel {
            at: self.now,
            failure: None,
        })?;
        self.settle();
        Ok(())
    }

    /// Moves the clock to `at`, without firing anything.
    pub(crate) fn set_clock(&mut self, at: Millis) {
        self.now = at;
    }

    /// The process dies at the current instant and another recovers the run from its stored
    /// state: whatever was in flight or waiting is lost and must be issued again.
    pub(crate) fn crash_and_recover(&mut self) {
        self.in_flight.clear();
        self.timers.clear();
        let stored = serde_json::to_value(&self.run).expect("state serializes");
        self.run = serde_json::from_value(stored).expect("state deserializes");
        self.feed(Event::Recover { at: self.now })
            .expect("recovery is never refused");
        self.settle();
    }

    /// The run's status.
    pub(crate) fn status(&self) -> RunStatus {
        self.run.status
    }

    /// The record of the entry at `path`.
    pub(crate) fn record(&self, path: &str) -> &StepRecord {
        self.run
            .records
            .get(path)
            .unwrap_or_else(|| panic!("no record for {path}: {:?}", self.run.records.keys()))
    }

    /// The kinds of the events about the entry at `path`, in order.
    pub(crate) fn kinds_of(&self, path: &str) -> Vec<EventKind> {
        self.events
            .iter()
            .filter(|t| t.path.as_deref() == Some(path))
            .map(|t| t.kind)
            .collect()
    }

    /// The kinds of every event, in order.
    pub(crate) fn kinds(&self) -> Vec<EventKind> {
        self.events.iter().map(|t| t.kind).collect()
    }

    /// The calls issued to the step at `path`, in order.
    pub(crate) fn calls_to(&self, path: &str) -> Vec<&StepCall> {
        self.calls.iter().filter(|c| c.step_path == path).collect()
    }

    /// The paths of the invocations in flight.
    pub(crate) fn in_flight(&self) -> Vec<String> {
        self.in_flight
            .iter()
            .map(|f| f.invoke.call.step_path.clone())
            .collect()
    }

    /// The tokens of the invocations in flight.
    pub(crate) fn in_flight_tokens(&self) -> HashSet<u64> {
        self.in_flight.iter().map(|f| f.invoke.token).collect()
    }
}

/// The default answer: `done` with the step's input.
fn echo(call: &StepCall) -> Answer {
    done(Value::clone(&call.input))
}
