//! Many `weft` processes on one PostgreSQL store (`--store postgres://...`): a run started by one
//! process is finished by a `weft worker` in another (S101, S102), workers killed again and again
//! finish every run with each step completed once (S100, S102, S104, S129), two workers never
//! both advance a run (S127), a cancel from another process reaches the step a worker runs (S77,
//! S128), a server restart is survived (S100, S127), and `weft watch` follows a run driven
//! elsewhere (S106, S128).
//!
//! Every process of a test shares one schema of the harness's throwaway cluster
//! (`backend::postgres_url`), with a short lease so a killed process's runs are taken up soon.
//! The tests pass with the harness's note when PostgreSQL is not installed.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::backend;
use crate::common::{effects, plugin_paths, read_log};
use crate::torture::{HANG, Rng, seed};

/// The lease of every process of these tests: a killed process's runs are taken up this long
/// after its last heartbeat.
const LEASE_MS: u64 = 1000;

/// Held for writing by a test that restarts the cluster, for reading by every other test here,
/// so that no test of this file sees a restart it did not ask for.
static RESTART: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// How long a test waits for a state it polls the store for (a hang detector: every wait ends
/// on an event long before).
const DEADLINE: Duration = Duration::from_secs(120);

/// One test's schema on the harness's cluster, a home (only the plugin cache lives there on a
/// shared store) and a directory for workflow files and the granted `data/`.
struct Shared {
    url: String,
    dir: tempfile::TempDir,
    /// Held for reading (see [`RESTART`]); `None` in a test that restarts the cluster.
    _steady: Option<std::sync::RwLockReadGuard<'static, ()>>,
}

impl Shared {
    /// A fresh schema, or `None` (the harness has said why) without PostgreSQL; no restart of
    /// the cluster happens while it lives.
    fn new() -> Option<Shared> {
        let mut shared = Shared::restarting()?;
        shared._steady = Some(RESTART.read().unwrap_or_else(|e| e.into_inner()));
        Some(shared)
    }

    /// [`Shared::new`] for a test that restarts the cluster (holding [`RESTART`] itself).
    fn restarting() -> Option<Shared> {
        let url = backend::postgres_url()?;
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("data")).expect("data dir");
        Some(Shared {
            url: format!("{url}&lease_ms={LEASE_MS}"),
            dir,
            _steady: None,
        })
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// Writes `yaml` (plugin placeholders replaced) as `name`.
    fn file(&self, name: &str, yaml: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, plugin_paths(yaml)).expect("write workflow");
        path.to_str().expect("a UTF-8 path").to_owned()
    }

    /// A run's effect log in the granted directory.
    fn log(&self, run: &str) -> Vec<String> {
        read_log(&self.dir.path().join("data").join(format!("{run}.log")))
    }

    /// `weft --home HOME --plugin-cache SHARED --store URL ARGS...`, output piped.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weft"));
        for var in [
            "WEFT_HOME",
            "WEFT_STORE",
            "WEFT_LOG",
            "WEFT_PLUGIN_CACHE",
            "WEFT_CRASH_AFTER_COMMITS",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ] {
            cmd.env_remove(var);
        }
        cmd.current_dir(self.dir.path())
            .arg("--home")
            .arg(self.home())
            .arg("--plugin-cache")
            .arg(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache"))
            .args(["--store", &self.url])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    fn start(&self, args: &[&str]) -> Proc {
        Proc::start(self.cmd(args))
    }

    /// Runs a command to its end.
    fn run(&self, args: &[&str]) -> Out {
        self.start(args).finish()
    }

    /// The run's record, `None` when it is not stored.
    fn record(&self, run: &str) -> Option<Value> {
        let out = self.run(&["show", run, "--json"]);
        (out.code == 0).then(|| serde_json::from_str(out.stdout.trim()).expect("a JSON record"))
    }

    /// How many stored runs have `status`.
    fn count(&self, status: &str) -> usize {
        let out = self.run(&["runs", "--status", status]);
        assert_eq!(out.code, 0, "weft runs: {out:?}");
        out.stdout.lines().filter(|l| !l.trim().is_empty()).count()
    }

    /// Every stored event of an ended run, printed by a fresh `weft watch`.
    fn events(&self, run: &str) -> Vec<Value> {
        let out = self.run(&["watch", run]);
        assert_eq!(out.code, 0, "weft watch {run}: {out:?}");
        out.json_lines()
    }
}

/// What a finished `weft` printed.
#[derive(Debug)]
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?} is not JSON ({e})")))
            .collect()
    }
}

/// A running `weft` whose stdout and stderr arrive line by line.
struct Proc {
    child: Child,
    out: mpsc::Receiver<String>,
    err: mpsc::Receiver<String>,
    stdout: Vec<String>,
    stderr: Vec<String>,
}

fn lines_of(pipe: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// The first line of `seen` containing `needle`, or the first that `rx` delivers, each kept in
/// `seen`; `None` when none came within [`HANG`].
fn wait_line(seen: &mut Vec<String>, rx: &mpsc::Receiver<String>, needle: &str) -> Option<String> {
    let deadline = Instant::now() + HANG;
    loop {
        if let Some(line) = seen.iter().find(|l| l.contains(needle)) {
            return Some(line.clone());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        seen.push(rx.recv_timeout(left).ok()?);
    }
}

impl Proc {
    fn start(mut cmd: Command) -> Proc {
        let mut child = cmd.spawn().expect("start weft");
        let out = lines_of(child.stdout.take().expect("piped stdout"));
        let err = lines_of(child.stderr.take().expect("piped stderr"));
        Proc {
            child,
            out,
            err,
            stdout: Vec::new(),
            stderr: Vec::new(),
        }
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// The first stderr line containing `needle`, printed already or waited for.
    fn expect_err(&mut self, needle: &str) -> String {
        wait_line(&mut self.stderr, &self.err, needle).unwrap_or_else(|| {
            panic!(
                "weft never printed {needle:?}; stderr:\n{}",
                self.stderr.join("\n")
            )
        })
    }

    /// The first stdout line containing `needle`, printed already or waited for.
    fn expect_out(&mut self, needle: &str) -> String {
        wait_line(&mut self.stdout, &self.out, needle).unwrap_or_else(|| {
            panic!(
                "weft never printed {needle:?} on stdout; stdout:\n{}\nstderr:\n{}",
                self.stdout.join("\n"),
                self.stderr.join("\n")
            )
        })
    }

    /// Sends a signal (`TERM`, `STOP`, `CONT`) with kill(1).
    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{sig} {}", self.pid());
    }

    /// SIGKILL, then reap.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether the process has ended.
    fn ended(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Waits for the process to end (failing after [`HANG`]) and collects its output.
    fn finish(mut self) -> Out {
        let deadline = Instant::now() + HANG;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait for weft") {
                break status;
            }
            if Instant::now() >= deadline {
                self.kill();
                panic!(
                    "weft hung: no end within {HANG:?}; stdout:\n{}\nstderr:\n{}",
                    self.stdout.join("\n"),
                    self.stderr.join("\n")
                );
            }
            // Block on stderr meanwhile: it ends when the process does.
            if let Ok(line) = self.err.recv_timeout(Duration::from_millis(20)) {
                self.stderr.push(line);
            }
        };
        self.stdout.extend(self.out.iter());
        self.stderr.extend(self.err.iter());
        Out {
            code: status.code().unwrap_or(-1),
            stdout: std::mem::take(&mut self.stdout).join("\n"),
            stderr: std::mem::take(&mut self.stderr).join("\n"),
        }
    }

    /// SIGTERM (a worker lets its runs go and exits 0), then [`Proc::finish`].
    fn stop(self) -> Out {
        self.signal("TERM");
        self.finish()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill();
        }
    }
}

/// An event's type.
fn kind(e: &Value) -> &str {
    e["type"].as_str().unwrap_or_default()
}

/// `type:path[item][iteration]` of each event, `log` events left out.
fn shape(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| kind(e) != "log")
        .map(|e| {
            format!(
                "{}:{}{}{}",
                kind(e),
                e["path"].as_str().unwrap_or_default(),
                e.get("foreach_index")
                    .map(|i| format!("[{i}]"))
                    .unwrap_or_default(),
                e.get("iteration")
                    .map(|i| format!("@{i}"))
                    .unwrap_or_default()
            )
        })
        .collect()
}

/// The events of a run that ended `closing`: seqs 1, 2, 3... with no gap and no duplicate, the
/// closing event once and last (S88, S103), every step execution (and foreach item) completed
/// exactly once; returns how many times each completion appears.
fn check_history(run: &str, events: &[Value], closing: &str) -> BTreeMap<String, usize> {
    let seqs: Vec<u64> = events
        .iter()
        .map(|e| e["seq"].as_u64().unwrap_or(0))
        .collect();
    let expected: Vec<u64> = (1..=events.len() as u64).collect();
    assert_eq!(seqs, expected, "run {run}: seqs with a gap or a duplicate");
    assert!(
        events.iter().all(|e| e["run_id"] == run),
        "run {run}: an event of another run"
    );
    let closings: Vec<&str> = events
        .iter()
        .map(kind)
        .filter(|k| {
            matches!(
                *k,
                "run-succeeded" | "run-failed" | "run-cancelled" | "run-tripwire"
            )
        })
        .collect();
    assert_eq!(closings, [closing], "run {run}: closing events");
    assert_eq!(events.last().map(kind), Some(closing), "run {run}");
    let mut completions: BTreeMap<String, usize> = BTreeMap::new();
    for e in events {
        let key = match kind(e) {
            "step-succeeded" => format!(
                "{}{}",
                e["path"].as_str().unwrap_or_default(),
                e.get("iteration")
                    .map(|i| format!("@{i}"))
                    .unwrap_or_default()
            ),
            "step-progress" if e["data"]["status"] == "success" => format!(
                "{}[{}]{}",
                e["path"].as_str().unwrap_or_default(),
                e["data"]["index"],
                e.get("iteration")
                    .map(|i| format!("@{i}"))
                    .unwrap_or_default()
            ),
            _ => continue,
        };
        *completions.entry(key).or_default() += 1;
    }
    let twice: Vec<_> = completions.iter().filter(|(_, n)| **n != 1).collect();
    assert!(
        twice.is_empty(),
        "run {run}: completions recorded more than once: {twice:?}\n{}",
        shape(events).join("\n")
    );
    completions
}

/// The invocations of `path` the record shows started, and ended (foreach items and loop
/// iterations counted one by one), as `torture.rs` counts them.
fn invocations(record: &Value, path: &str) -> (usize, usize) {
    let Some(step) = record["steps"].get(path) else {
        return (0, 0);
    };
    let ended = |s: &Value| usize::from(s["status"] == "success");
    if let Some(items) = step["items"].as_array() {
        return (items.len(), items.iter().map(ended).sum());
    }
    match step["iteration"].as_u64() {
        // Earlier iterations all ended, or the loop would not have gone on.
        Some(k) => (k as usize, k as usize - 1 + ended(step)),
        None => (1, ended(step)),
    }
}

/// Two increments around a step that takes a while, a step with an effect, and a sleep.
const HANDOVER: &str = r#"
id: handover
plugins:
  kit:
    wasm: "{testkit}"
    grants: { dirs: [ { host: "./data", guest: /data, mode: rw } ] }
steps:
  - { id: a, plugin: kit, step: inc }
  - { id: slow, plugin: kit, step: wait-abort, config: { max-ms: 600 } }
  - { id: mark, plugin: kit, step: append, config: { file: /data/RUN.log } }
  - sleep: { id: nap, ms: 1500 }
  - map: { id: again, expr: '.steps.a' }
  - { id: b, plugin: kit, step: inc }
  - map: { id: out, expr: '{ a: .steps.a.n, b: .steps.b.n, slow: .steps.slow }' }
"#;

#[test]
fn s101_s102_s129_a_run_whose_weft_run_was_killed_is_finished_by_a_worker_elsewhere_alike() {
    let Some(db) = Shared::new() else { return };
    let started = Instant::now();
    // The reference: the same workflow, uninterrupted.
    let file = db.file("ref.yaml", &HANDOVER.replace("RUN", "ref"));
    let reference = db.run(&["run", &file, "--run-id", "ref", "--input", "{\"n\": 40}"]);
    assert_eq!(reference.code, 0, "{reference:?}");
    let reference_events = db.events("ref");

    // Killed while the run sleeps, and while a step runs.
    for (run, moment) in [
        ("asleep", "step-waiting nap"),
        ("busy", "step-started slow"),
    ] {
        let file = db.file(&format!("{run}.yaml"), &HANDOVER.replace("RUN", run));
        let mut driver = db.start(&["run", &file, "--run-id", run, "--input", "{\"n\": 40}"]);
        driver.expect_err(moment);
        driver.kill();
        let record = db.record(run).expect("stored");
        assert_eq!(record["status"], "running", "{run}: {record}");
    }
    let worker = db.start(&["worker"]);
    for run in ["asleep", "busy"] {
        // `weft watch` ends at the closing event, which the worker writes.
        let watched = db.run(&["watch", run]);
        assert_eq!(watched.code, 0, "{watched:?}");
    }
    let stopped = worker.stop();
    assert_eq!(stopped.code, 0, "{stopped:?}");

    let want = db.record("ref").expect("the reference");
    for run in ["asleep", "busy"] {
        let record = db.record(run).expect("stored");
        assert_eq!(record["status"], "success", "{run}: {record}");
        assert_eq!(record["result"], want["result"], "{run}");
        assert_eq!(record["result"]["a"], 41, "{run}");
        assert_eq!(record["result"]["b"], 42, "{run}");
        assert_eq!(record["result"]["slow"]["aborted"], false, "{run}");
        for (path, step) in want["steps"].as_object().expect("steps") {
            assert_eq!(
                record["steps"][path]["status"], step["status"],
                "{run} {path}"
            );
            assert_eq!(
                record["steps"][path]["output"], step["output"],
                "{run} {path}"
            );
        }
        let events = db.events(run);
        check_history(run, &events, "run-succeeded");
        assert_eq!(
            shape(&events),
            shape(&reference_events),
            "{run}: another history than the uninterrupted run's"
        );
        // The effect of `mark` happened once: before the kill (asleep), or after it (busy).
        let log = db.log(run);
        assert_eq!((log.len(), effects(&log, "mark")), (1, 1), "{run}: {log:?}");
        let logs: Vec<&Value> = events.iter().filter(|e| kind(e) == "log").collect();
        if run == "busy" {
            // The step in flight at the kill was issued again, and the recovery says so (S103).
            assert_eq!(logs.len(), 1, "{run}: {logs:?}");
            assert_eq!(logs[0]["data"]["level"], "warn", "{logs:?}");
            assert!(
                logs[0]["data"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("slow")),
                "{logs:?}"
            );
        } else {
            assert!(logs.is_empty(), "{run}: nothing was in flight: {logs:?}");
        }
    }
    eprintln!("s101 handover: {:?}", started.elapsed());
}

/// Many plugin steps with effects: a sequence, a parallel, a foreach, a loop and a sleep.
const MANY: &str = r#"
id: many
plugins:
  kit:
    wasm: "{testkit}"
    grants: { dirs: [ { host: "./data", guest: /data, mode: rw } ] }
steps:
  - { id: s1, plugin: kit, step: append, config: { file: /data/RUN.log } }
  - { id: s2, plugin: kit, step: append, config: { file: /data/RUN.log } }
  - parallel:
      id: fan
      steps:
        - { id: left, plugin: kit, step: append, config: { file: /data/RUN.log } }
        - { id: right, plugin: kit, step: append, config: { file: /data/RUN.log } }
  - map: { id: items, expr: '[range(0; 3)]' }
  - foreach:
      id: each
      concurrency: 2
      do: { id: item, plugin: kit, step: append, config: { file: /data/RUN.log } }
  - map: { id: zero, expr: '{ n: 0 }' }
  - loop:
      id: count
      do-until: '.output.n >= 3'
      do:
        - { id: tick, plugin: kit, step: append, config: { file: /data/RUN.log } }
        - map: { id: bump, expr: '{ n: (.input.n + 1) }' }
  - { id: s3, plugin: kit, step: append, config: { file: /data/RUN.log } }
  - sleep: { id: nap, ms: 5 }
  - { id: s4, plugin: kit, step: append, config: { file: /data/RUN.log } }
  - { id: s5, plugin: kit, step: append, config: { file: /data/RUN.log } }
  - map: { id: out, expr: '{ n: .init.n, count: .steps.count.n, items: (.steps.each | length) }' }
"#;

/// The plugin steps of [`MANY`] that append a line, with how many times each runs.
const MANY_EFFECTS: &[(&str, usize)] = &[
    ("s1", 1),
    ("s2", 1),
    ("fan.left", 1),
    ("fan.right", 1),
    ("each.item", 3),
    ("count.tick", 3),
    ("s3", 1),
    ("s4", 1),
    ("s5", 1),
];

/// Every completion a run of [`MANY`] records: steps and blocks by path (loop members by
/// iteration), foreach items by index.
fn many_completions() -> Vec<String> {
    let mut all: Vec<String> = [
        "s1",
        "s2",
        "fan",
        "fan.left",
        "fan.right",
        "items",
        "each",
        "zero",
        "count",
        "s3",
        "nap",
        "s4",
        "s5",
        "out",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    for i in 1..=3 {
        all.push(format!("count.tick@{i}"));
        all.push(format!("count.bump@{i}"));
    }
    for i in 0..3 {
        all.push(format!("each[{i}]"));
    }
    all.sort();
    all
}

/// `(run, path)` → (invocations started, ended) by the record, and effects counted.
type Tally = BTreeMap<(String, String), (usize, usize, usize)>;

fn tally(db: &Shared, runs: &[String]) -> Tally {
    let mut out = Tally::new();
    for run in runs {
        let record = db.record(run).unwrap_or(Value::Null);
        let log = db.log(run);
        for &(path, _) in MANY_EFFECTS {
            let (started, ended) = invocations(&record, path);
            out.insert(
                (run.clone(), path.to_owned()),
                (started, ended, effects(&log, path)),
            );
        }
    }
    out
}

#[test]
fn s100_s102_s104_s129_workers_killed_again_and_again_finish_every_run_completing_steps_once() {
    let Some(db) = Shared::new() else { return };
    let started = Instant::now();
    let seed = seed("distributed kill loop");
    let mut rng = Rng(seed);
    // Enough work that at least four workers die before it is done, however fast they run.
    let runs: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    // Each run is started by a `weft run` that dies right after one of its first commits.
    let starters: Vec<(String, u64, Proc)> = runs
        .iter()
        .enumerate()
        .map(|(i, run)| {
            let file = db.file(&format!("{run}.yaml"), &MANY.replace("RUN", run));
            let n = 1 + rng.below(6);
            let proc = db.start(&[
                "--crash-after-commits",
                &n.to_string(),
                "run",
                &file,
                "--run-id",
                run,
                "--input",
                &format!("{{\"n\": {i}}}"),
            ]);
            (run.clone(), n, proc)
        })
        .collect();
    for (run, n, proc) in starters {
        let out = proc.finish();
        assert!(
            out.code != 0 && out.stderr.contains(&format!("crashing after commit {n}")),
            "{run}: {out:?}"
        );
    }
    // `(run, path)` → invocations in flight at some kill, each of which may run once more.
    let mut in_flight: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut before = tally(&db, &runs);
    for (key, (started, ended, _)) in &before {
        *in_flight.entry(key.clone()).or_default() += started - ended;
    }
    let mut kills = 0;
    let mut round = 0;
    loop {
        let at = format!("seed {seed} round {round}");
        let last = round >= 30;
        let total_effects = |db: &Shared| runs.iter().map(|r| db.log(r).len()).sum::<usize>();
        let effects_then = total_effects(&db);
        let (mut worker, crash_at) = if round % 2 == 0 && !last {
            // Dies at its n-th commit, which may fall anywhere in any run it drives.
            let n = 1 + rng.below(20);
            let worker = db.start(&["--crash-after-commits", &n.to_string(), "worker"]);
            (worker, Some(n))
        } else {
            (db.start(&["worker"]), None)
        };
        // A plain worker is SIGKILLed once the runs have made this many more effects.
        let kill_after = 1 + rng.below(8) as usize;
        let mut polls = 0u64;
        let killed = loop {
            if worker.ended() {
                assert!(crash_at.is_some(), "{at}: a worker ended by itself");
                break true;
            }
            if crash_at.is_none() && !last && total_effects(&db) >= effects_then + kill_after {
                worker.kill();
                break true;
            }
            // Now and then (each look costs a process): have all runs ended?
            polls += 1;
            if polls.is_multiple_of(50) && db.count("success") == runs.len() {
                break false;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let out = if killed {
            kills += 1;
            worker.finish()
        } else {
            worker.stop()
        };
        if let (true, Some(n)) = (killed, crash_at) {
            assert!(
                out.stderr.contains(&format!("crashing after commit {n}")),
                "{at}: {out:?}"
            );
        } else if !killed {
            // A worker meant to crash may crash at the commit that ended the last run, after
            // the look that saw every run ended: that is its crash, not a failure.
            let crashed = crash_at
                .is_some_and(|n| out.stderr.contains(&format!("crashing after commit {n}")));
            if !crashed {
                assert_eq!(out.code, 0, "{at}: {out:?}");
            }
        }
        let after = tally(&db, &runs);
        for (key, &(started, ended, was)) in &before {
            let (started_now, ended_now, is) = after[key];
            let total = MANY_EFFECTS
                .iter()
                .find(|(p, _)| *p == key.1)
                .map(|(_, t)| *t)
                .unwrap_or_default();
            let context = format!(
                "{at}: {key:?}: {started} started, {ended} ended, {was} effects before the round; \
                 {started_now} started, {ended_now} ended, {is} effects after"
            );
            // An invocation whose end is stored left its effect, and never runs again (S102);
            // each of the others runs at most once in this worker's life.
            assert!(
                was >= ended,
                "{context}: an ended invocation left no effect"
            );
            assert!(
                is >= ended_now,
                "{context}: an ended invocation left no effect"
            );
            assert!(ended_now >= ended, "{context}: an end was lost");
            assert!(
                is - was <= total - ended,
                "{context}: an ended invocation ran again"
            );
            if killed {
                *in_flight.entry(key.clone()).or_default() += started_now - ended_now;
            }
        }
        before = after;
        round += 1;
        if !killed {
            break;
        }
    }
    assert!(
        kills >= 4,
        "seed {seed}: only {kills} workers were killed before the runs ended"
    );
    for (i, run) in runs.iter().enumerate() {
        let record = db.record(run).expect("stored");
        assert_eq!(record["status"], "success", "seed {seed} {run}: {record}");
        assert_eq!(
            record["result"],
            json!({ "n": i, "count": 3, "items": 3 }),
            "seed {seed} {run}"
        );
        let events = db.events(run);
        let completions = check_history(run, &events, "run-succeeded");
        assert_eq!(
            completions.keys().cloned().collect::<Vec<_>>(),
            many_completions(),
            "seed {seed} {run}"
        );
        let log = db.log(run);
        for &(path, total) in MANY_EFFECTS {
            let is = effects(&log, path);
            let slack = in_flight
                .get(&(run.clone(), path.to_owned()))
                .copied()
                .unwrap_or_default();
            // At least once; more only for invocations in flight at a kill, once each (S104).
            assert!(is >= total, "seed {seed} {run} {path}: {is} of {total} ran");
            assert!(
                is <= total + slack,
                "seed {seed} {run} {path}: {is} effects, {total} invocations, {slack} in flight at kills"
            );
        }
    }
    eprintln!(
        "s100 kill loop: {round} rounds, {kills} kills, {:?}",
        started.elapsed()
    );
}

/// Restarts the harness's cluster (`pg_ctl restart -m fast`: every session is ended), waiting
/// until it accepts connections again.
fn restart_cluster() {
    let (data, mut pg_ctl) = backend::pg_ctl().expect("the cluster runs");
    let dir = data.parent().expect("the cluster's directory");
    let restart = pg_ctl
        .current_dir(dir)
        .arg("-D")
        .arg(&data)
        .arg("-l")
        .arg(dir.join("postgres.log"))
        .args(["-m", "fast", "-w", "restart"])
        .stdin(Stdio::null())
        .output()
        .expect("run pg_ctl");
    assert!(
        restart.status.success(),
        "pg_ctl restart: {}{}",
        String::from_utf8_lossy(&restart.stdout),
        String::from_utf8_lossy(&restart.stderr)
    );
}

/// A run that takes a while (a sleep) around steps with effects.
const BUSY: &str = r#"
id: busy
plugins:
  kit:
    wasm: "{testkit}"
    grants: { dirs: [ { host: "./data", guest: /data, mode: rw } ] }
steps:
  - { id: a, plugin: kit, step: append, config: { file: /data/RUN.log } }
  - sleep: { id: nap, ms: 300 }
  - map: { id: items, expr: '[range(0; 2)]' }
  - foreach:
      id: each
      concurrency: 2
      do: { id: item, plugin: kit, step: append, config: { file: /data/RUN.log } }
  - { id: b, plugin: kit, step: append, config: { file: /data/RUN.log } }
  - map: { id: out, expr: '{ n: .init.n, items: (.steps.each | length) }' }
"#;

#[test]
fn s127_s129_two_workers_at_once_never_both_advance_a_run() {
    let Some(db) = Shared::new() else { return };
    let started = Instant::now();
    let runs: Vec<String> = (0..12).map(|i| format!("r{i}")).collect();
    // Left to the workers by `weft run`s that die right after their first commit.
    let starters: Vec<Proc> = runs
        .iter()
        .enumerate()
        .map(|(i, run)| {
            let file = db.file(&format!("{run}.yaml"), &BUSY.replace("RUN", run));
            db.start(&[
                "--crash-after-commits",
                "1",
                "run",
                &file,
                "--run-id",
                run,
                "--input",
                &format!("{{\"n\": {i}}}"),
            ])
        })
        .collect();
    for proc in starters {
        let out = proc.finish();
        assert!(out.stderr.contains("crashing after commit 1"), "{out:?}");
    }
    let first = db.start(&["worker", "--concurrency", "3"]);
    let second = db.start(&["worker", "--concurrency", "3"]);
    let deadline = Instant::now() + DEADLINE;
    while db.count("success") < 3 {
        assert!(Instant::now() < deadline, "no run ended");
    }
    // The first worker stops answering (its heartbeat too) with runs in hand: once its lease
    // runs out the second takes them over; when it comes back, its writes are refused.
    first.signal("STOP");
    while db.count("success") < runs.len() {
        assert!(Instant::now() < deadline, "the runs never ended");
    }
    first.signal("CONT");
    let (first, second) = (first.stop(), second.stop());
    assert_eq!(first.code, 0, "{first:?}");
    assert_eq!(second.code, 0, "{second:?}");
    for (i, run) in runs.iter().enumerate() {
        let record = db.record(run).expect("stored");
        assert_eq!(record["status"], "success", "{run}: {record}");
        assert_eq!(record["result"], json!({ "n": i, "items": 2 }), "{run}");
        let events = db.events(run);
        let completions = check_history(run, &events, "run-succeeded");
        assert_eq!(
            completions.keys().cloned().collect::<Vec<_>>(),
            [
                "a", "b", "each", "each[0]", "each[1]", "items", "nap", "out"
            ],
            "{run}"
        );
        // Every invocation ran; one in flight in the stopped worker may have run once more.
        let log = db.log(run);
        for (path, total) in [("a", 1), ("each.item", 2), ("b", 1)] {
            let n = effects(&log, path);
            assert!(
                (total..=2 * total).contains(&n),
                "{run} {path}: {n} effects: {log:?}"
            );
        }
    }
    eprintln!("s103 two workers: {:?}", started.elapsed());
}

const HOLD: &str = r#"
id: hold
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: w, plugin: kit, step: wait-abort, config: { max-ms: 600000 } }
  - { id: after, plugin: kit, step: echo }
"#;

#[test]
fn s75_s77_s128_a_cancel_from_another_process_aborts_the_step_a_worker_runs() {
    let Some(db) = Shared::new() else { return };
    let started = Instant::now();
    let file = db.file("hold.yaml", HOLD);
    let mut driver = db.start(&["run", &file, "--run-id", "held"]);
    driver.expect_err("step-started w");
    driver.kill();
    let worker = db.start(&["worker"]);
    let mut watcher = db.start(&["watch", "held"]);
    // The worker has taken the run up and issued the step in flight again (S102, S103).
    let line = watcher.expect_out("\"type\":\"log\"");
    assert!(line.contains("\"warn\""), "{line}");
    let cancel = db.run(&["cancel", "held"]);
    assert_eq!(cancel.code, 0, "{cancel:?}");
    assert!(
        cancel.stderr.contains("cancel of run held accepted"),
        "{cancel:?}"
    );
    let watched = watcher.finish();
    assert_eq!(watched.code, 0, "{watched:?}");
    let stopped = worker.stop();
    assert_eq!(stopped.code, 0, "{stopped:?}");

    let record = db.record("held").expect("stored");
    assert_eq!(record["status"], "cancelled", "{record}");
    assert_eq!(record["steps"]["w"]["status"], "cancelled", "{record}");
    assert!(
        record["steps"]["w"].get("output").is_none(),
        "what the step returned after the cancel is discarded: {record}"
    );
    assert!(
        record["steps"].get("after").is_none(),
        "nothing starts after a cancel: {record}"
    );
    assert!(record.get("result").is_none() && record.get("error").is_none());
    let events = db.events("held");
    assert_eq!(
        watched.json_lines(),
        events,
        "the watcher saw every event; its stderr: {}",
        watched.stderr
    );
    check_history("held", &events, "run-cancelled");
    let shapes = shape(&events);
    assert!(
        shapes.contains(&"step-cancelled:w".to_owned()),
        "{shapes:?}"
    );
    assert!(
        !shapes.contains(&"step-succeeded:w".to_owned()),
        "{shapes:?}"
    );
    eprintln!("s77 cancel elsewhere: {:?}", started.elapsed());
}

const NAPPER: &str = r#"
id: napper
plugins:
  kit:
    wasm: "{testkit}"
    grants: { dirs: [ { host: "./data", guest: /data, mode: rw } ] }
steps:
  - { id: a, plugin: kit, step: inc }
  - { id: mark, plugin: kit, step: append, config: { file: /data/RUN.log } }
  - sleep: { id: nap, ms: 4000 }
  - { id: b, plugin: kit, step: inc }
  - { id: mark2, plugin: kit, step: append, config: { file: /data/RUN.log } }
  - { id: c, plugin: kit, step: inc }
"#;

#[test]
fn s100_s127_a_postgres_restart_mid_run_is_survived_by_the_process_driving_it() {
    let Some(db) = Shared::restarting() else {
        return;
    };
    let _restarting = RESTART.write().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let file = db.file("napper.yaml", &NAPPER.replace("RUN", "napper"));
    let mut driver = db.start(&[
        "run",
        &file,
        "--run-id",
        "napper",
        "--input",
        "{\"n\": 1}",
        "--json",
    ]);
    driver.expect_err("step-waiting nap");
    restart_cluster();
    // The server went away while the run slept: it has not ended yet.
    let record = db.record("napper").expect("stored");
    assert_eq!(record["status"], "running", "{record}");
    let out = driver.finish();
    assert_eq!(out.code, 0, "{out:?}");
    let record: Value = serde_json::from_str(out.stdout.trim()).expect("a record");
    assert_eq!(record["result"], json!({ "n": 4 }), "{record}");
    let events = db.events("napper");
    let completions = check_history("napper", &events, "run-succeeded");
    assert_eq!(
        completions.keys().cloned().collect::<Vec<_>>(),
        ["a", "b", "c", "mark", "mark2", "nap"]
    );
    let log = db.log("napper");
    assert_eq!(
        (log.len(), effects(&log, "mark"), effects(&log, "mark2")),
        (2, 1, 1),
        "{log:?}"
    );
    eprintln!("s100 postgres restart: {:?}", started.elapsed());
}

#[test]
fn s106_s128_weft_watch_in_a_third_process_follows_a_run_across_the_processes_driving_it() {
    let Some(db) = Shared::new() else { return };
    let started = Instant::now();
    let file = db.file("followed.yaml", &HANDOVER.replace("RUN", "followed"));
    let mut driver = db.start(&[
        "run",
        &file,
        "--run-id",
        "followed",
        "--input",
        "{\"n\": 1}",
    ]);
    driver.expect_err("step-started a");
    let mut watcher = db.start(&["watch", "followed"]);
    // Live events of the first process reach the watcher...
    watcher.expect_out("\"step-waiting\"");
    driver.kill();
    // ...and so do those of the worker that takes the run up.
    let worker = db.start(&["worker"]);
    let watched = watcher.finish();
    assert_eq!(watched.code, 0, "{watched:?}");
    let stopped = worker.stop();
    assert_eq!(stopped.code, 0, "{stopped:?}");
    let seen = watched.json_lines();
    let stored = db.events("followed");
    check_history("followed", &seen, "run-succeeded");
    assert_eq!(
        seen, stored,
        "the watcher printed each stored event once, in order"
    );
    assert_eq!(
        seen.last().map(|e| e["data"]["result"]["b"].clone()),
        Some(json!(3))
    );
    eprintln!("s106 watch across processes: {:?}", started.elapsed());
}

/// A loop of quick plugin steps: a stream of writes, with short idle gaps between them.
const SPIN: &str = r#"
id: spin
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - map: { id: zero, expr: '{ n: 0 }' }
  - loop:
      id: spin
      do-until: '.output.n >= 400'
      do: { id: step, plugin: kit, step: inc }
"#;

#[test]
fn s100_s127_a_postgres_restart_while_processes_write_is_survived_by_every_one_of_them() {
    let Some(db) = Shared::restarting() else {
        return;
    };
    let _restarting = RESTART.write().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let file = db.file("spin.yaml", SPIN);
    let runs: Vec<String> = (0..8).map(|i| format!("spin{i}")).collect();
    let mut drivers: Vec<Proc> = runs
        .iter()
        .map(|run| db.start(&["run", &file, "--run-id", run, "--json"]))
        .collect();
    for driver in &mut drivers {
        driver.expect_err("[iteration 5]");
    }
    restart_cluster();
    // Every process's outcome first, so a failure names all the runs that stopped.
    let outcomes: Vec<(String, i32, Value, String)> = runs
        .iter()
        .zip(drivers)
        .map(|(run, driver)| {
            let out = driver.finish();
            let record = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
            let errors: Vec<&str> = out
                .stderr
                .lines()
                .filter(|l| l.starts_with("error:"))
                .collect();
            (run.clone(), out.code, record, errors.join("\n"))
        })
        .collect();
    let stopped: Vec<_> = outcomes
        .iter()
        .filter(|(_, code, record, _)| *code != 0 || record["result"] != json!({ "n": 400 }))
        .collect();
    assert!(
        stopped.is_empty(),
        "{} of {} runs did not survive the restart: {stopped:#?}",
        stopped.len(),
        runs.len()
    );
    eprintln!("s100 restart under writes: {:?}", started.elapsed());
}
