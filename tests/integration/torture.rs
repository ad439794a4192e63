//! Real `weft` processes killed with SIGKILL at random moments: what was acknowledged survives
//! (S100), recovery goes on past a run it cannot load (S101), and completed steps never run
//! again (S102, S104).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{effects, plugin_paths, read_log};

/// How long a child may take before the test calls it hung (a hang detector, not a timing
/// assumption: every wait below ends on an event long before this).
pub const HANG: Duration = Duration::from_secs(60);

/// A small deterministic generator (xorshift), so a failing round can be replayed from its seed.
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A seed from the clock unless `WEFT_TORTURE_SEED` names one; printed so a failure can be
/// replayed.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("WEFT_TORTURE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0x5eed)
                | 1
        });
    eprintln!("{test}: seed {seed} (replay with WEFT_TORTURE_SEED={seed})");
    seed
}

/// A temporary directory holding a home (sharing the build's compiled-plugin cache) and the
/// workflow files.
pub struct Home {
    pub dir: tempfile::TempDir,
}

impl Home {
    /// A fresh home.
    pub fn new() -> Home {
        let dir = tempfile::tempdir().expect("temp dir");
        Home::link_cache(&dir.path().join("home"));
        Home { dir }
    }

    /// Makes `home` with the shared compiled-plugin cache linked in.
    pub fn link_cache(home: &Path) {
        std::fs::create_dir_all(home).expect("create home");
        let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache");
        std::fs::create_dir_all(&cache).expect("create the shared plugin cache");
        std::os::unix::fs::symlink(&cache, home.join("cache")).expect("link the plugin cache");
    }

    /// The home directory.
    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// Writes `yaml` (plugin placeholders replaced) as `name` next to the home.
    pub fn file(&self, name: &str, yaml: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, plugin_paths(yaml)).expect("write workflow");
        path
    }
}

/// `weft --home HOME ARGS...` on the tests' backend (`--store URL`, one schema per home, in
/// postgres mode), output piped, run in the home's parent directory.
pub fn weft(home: &Path, args: &[&str]) -> Command {
    let mut cmd = weft_sled(home, &[]);
    cmd.args(crate::common::store_args_for(home)).args(args);
    cmd
}

/// [`weft`] on the sled store in the home whatever the tests' backend, for what only sled has
/// (its database files, the home lock, the control socket).
pub fn weft_sled(home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weft"));
    cmd.env_remove("WEFT_HOME")
        .env_remove("WEFT_LOG")
        .env_remove("WEFT_STORE")
        .current_dir(home.parent().unwrap_or(home))
        .arg("--home")
        .arg(home)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// What a finished command printed.
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// A running `weft` whose stderr arrives line by line and whose stdout is collected.
pub struct Proc {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    stderr: Vec<String>,
    stdout: Option<std::thread::JoinHandle<String>>,
}

impl Proc {
    /// Starts `cmd`.
    pub fn start(mut cmd: Command) -> Proc {
        let mut child = cmd.spawn().expect("start weft");
        let (tx, lines) = mpsc::channel();
        let err = child.stderr.take().expect("piped stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stdout = child.stdout.take().map(|mut out| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = out.read_to_string(&mut s);
                s
            })
        });
        Proc {
            child,
            lines,
            stderr: Vec::new(),
            stdout,
        }
    }

    /// The first stderr line containing `needle`, printed already or waited for; panics when
    /// stderr ends first or after [`HANG`].
    pub fn expect_line(&mut self, needle: &str) -> String {
        if let Some(line) = self.stderr.iter().find(|l| l.contains(needle)) {
            return line.clone();
        }
        let deadline = Instant::now() + HANG;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.stderr.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "weft never printed {needle:?}; stderr so far:\n{}",
                    self.stderr.join("\n")
                ),
            }
        }
    }

    /// Waits until stderr has shown `n` lines in all; false when it ended first.
    pub fn read_lines(&mut self, n: usize) -> bool {
        let deadline = Instant::now() + HANG;
        while self.stderr.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.stderr.push(line),
                Err(mpsc::RecvTimeoutError::Disconnected) => return false,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("weft hung; stderr so far:\n{}", self.stderr.join("\n"))
                }
            }
        }
        true
    }

    /// SIGKILL, then reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the process to end (failing the test after [`HANG`]) and collects its output.
    pub fn finish(mut self) -> Out {
        let deadline = Instant::now() + HANG;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait for weft") {
                break status;
            }
            if Instant::now() >= deadline {
                self.kill();
                let rest: Vec<String> = self.lines.try_iter().collect();
                panic!(
                    "weft hung: no end within {HANG:?}; stderr:\n{}\n{}",
                    self.stderr.join("\n"),
                    rest.join("\n")
                );
            }
            // Block on stderr meanwhile: it ends when the process does.
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(50)) {
                self.stderr.push(line);
            }
        };
        self.stderr.extend(self.lines.iter());
        Out {
            code: status.code().unwrap_or(-1),
            stdout: self
                .stdout
                .take()
                .and_then(|h| h.join().ok())
                .unwrap_or_default(),
            stderr: std::mem::take(&mut self.stderr).join("\n"),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill();
        }
    }
}

/// Runs `weft --home HOME ARGS...` ([`weft`]) to its end.
pub fn run_weft(home: &Path, args: &[&str]) -> Out {
    Proc::start(weft(home, args)).finish()
}

/// [`run_weft`] on the sled store ([`weft_sled`]).
pub fn run_weft_sled(home: &Path, args: &[&str]) -> Out {
    Proc::start(weft_sled(home, args)).finish()
}

/// Starts `weft serve` ([`weft`]) on a free loopback port, starting workflows from
/// `workflows`; returns it and its address.
pub fn serve(home: &Path, workflows: &Path) -> (Proc, SocketAddr) {
    serve_with(weft(home, &[]), workflows)
}

/// [`serve`] on the sled store ([`weft_sled`]).
pub fn serve_sled(home: &Path, workflows: &Path) -> (Proc, SocketAddr) {
    serve_with(weft_sled(home, &[]), workflows)
}

fn serve_with(mut cmd: Command, workflows: &Path) -> (Proc, SocketAddr) {
    let workflows = workflows.to_str().expect("a UTF-8 path");
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--workflows", workflows]);
    let mut proc = Proc::start(cmd);
    let line = proc.expect_line("serving http://");
    let addr = line
        .split("serving http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    (proc, addr)
}

/// One HTTP/1.1 exchange over a fresh connection: the status and the body, or `None` when the
/// server went away before answering in full.
pub fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(HANG)).ok()?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status: u16 = text.split(' ').nth(1)?.parse().ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(body.len());
    // A response cut off by the kill is no answer.
    (body.len() >= length).then(|| (status, body[..length].to_owned()))
}

/// The directory a test home's workflow files are written in, beside the home.
pub fn workflows_of(home: &Path) -> PathBuf {
    home.parent().expect("a home in a temp dir").to_path_buf()
}

/// A workflow file's name, as `POST /runs` takes it relative to the workflows directory.
pub fn name_of(file: &Path) -> String {
    file.file_name()
        .and_then(|n| n.to_str())
        .expect("a UTF-8 file name")
        .to_owned()
}

/// The ids of every run stored in `home`, read by a fresh `weft runs`.
pub fn stored_runs(home: &Path) -> BTreeSet<String> {
    let out = run_weft(home, &["runs"]);
    assert_eq!(out.code, 0, "weft runs: {out:?}");
    out.stdout
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

const QUICK: &str = r#"
id: quick
steps:
  - map: { id: a, expr: '{ n: 1 }' }
  - sleep: { id: nap, ms: 200 }
  - map: { id: b, expr: '{ n: 2 }' }
"#;

#[test]
fn s100_every_run_acknowledged_with_201_survives_a_sigkill_right_after_the_acknowledgement() {
    let seed = seed("s100_every_run_acknowledged");
    let mut rng = Rng(seed);
    let home = Home::new();
    let file = home.file("quick.yaml", QUICK);
    let body = serde_json::json!({ "file": name_of(&file) }).to_string();
    for round in 0..4 {
        let (mut server, addr) = serve(&home.home(), &workflows_of(&home.home()));
        // Several clients start runs at once; the test kills the server the moment the
        // `kill_after`-th acknowledgement arrives.
        let kill_after = 10 + rng.below(30) as usize;
        let (tx, acks) = mpsc::channel::<String>();
        let clients: Vec<_> = (0..6)
            .map(|_| {
                let (tx, body) = (tx.clone(), body.clone());
                std::thread::spawn(move || {
                    while let Some((status, text)) = http(addr, "POST", "/runs", &body) {
                        assert_eq!(status, 201, "POST /runs: {text}");
                        let answer: Value = serde_json::from_str(&text).expect("JSON answer");
                        let id = answer["run_id"].as_str().expect("run_id").to_owned();
                        if tx.send(id).is_err() {
                            return;
                        }
                    }
                })
            })
            .collect();
        drop(tx);
        let mut acknowledged = BTreeSet::new();
        for id in acks.iter() {
            acknowledged.insert(id);
            if acknowledged.len() == kill_after {
                server.kill();
            }
        }
        for c in clients {
            c.join().expect("client thread");
        }
        let stored = stored_runs(&home.home());
        let lost: Vec<&String> = acknowledged.difference(&stored).collect();
        assert!(
            lost.is_empty(),
            "seed {seed} round {round}: {} of {} acknowledged runs are gone after SIGKILL: {lost:?}",
            lost.len(),
            acknowledged.len()
        );
    }
}

const DONOR: &str = r#"
id: donor
steps:
  - map: { id: a, expr: '{ n: .init.n }' }
  - sleep: { id: nap, ms: 1 }
  - map: { id: b, expr: '{ n: (.steps.a.n + 1) }' }
"#;

/// The store of `home` as its `weft` commands ([`weft`]) see it: the sled store in the home, or
/// the home's PostgreSQL schema in postgres mode. Dropped, it lets go of the runs it made.
fn store_of(home: &Path) -> Box<dyn weft::internal::Store> {
    match crate::backend::store_url_for(home) {
        Some(url) => Box::new(weft::internal::PgStore::open(&url).expect("open the store")),
        None => Box::new(weft::internal::SledStore::open(home, 8).expect("open the store")),
    }
}

/// Stores a run next to the others through the store's own API, as a crash or a bad disk
/// would leave it: `definition` and `base` as given, its summary `pending`, created `age_ms`
/// after now (the newest runs are recovered first).
fn plant(home: &Path, run_id: &str, definition: &[u8], base: &[u8], age_ms: i64) {
    use weft::RunSummary;
    use weft::internal::NewRun;
    let store = store_of(home);
    let at = chrono::Utc::now().timestamp_millis() + age_ms;
    store
        .create_run(NewRun {
            summary: &RunSummary {
                run_id: run_id.into(),
                workflow_id: "donor".into(),
                status: weft::RunStatus::Pending,
                created_at: at,
                updated_at: at,
                tags: Default::default(),
            },
            definition: &weft::internal::Definition::new(definition.to_vec()),
            plugins: &[],
            base,
            fresh_id: false,
        })
        .expect("plant a run");
    store.sync().expect("sync");
}

/// The stored definition and first state of `run_id`, the state's run id replaced by `as_id`.
fn donated(home: &Path, run_id: &str, as_id: &str) -> (Vec<u8>, Value) {
    let store = store_of(home);
    let definition = store.definition(run_id).expect("read").expect("definition");
    let mut base: Value =
        serde_json::from_slice(&store.base(run_id).expect("read").expect("base")).expect("JSON");
    base["run_id"] = Value::from(as_id);
    (definition, base)
}

#[test]
fn s101_s114_recovery_marks_runs_it_cannot_load_or_drive_failed_and_recovers_the_others() {
    let home = Home::new();
    let file = home.file("donor.yaml", DONOR);
    let donor = run_weft(
        &home.home(),
        &[
            "run",
            file.to_str().expect("utf-8"),
            "--run-id",
            "donor",
            "--input",
            "{\"n\": 41}",
        ],
    );
    assert_eq!(donor.code, 0, "{donor:?}");
    // A healthy run stored but never started, as a crash right after storing leaves it (S114).
    let (definition, orphan) = donated(&home.home(), "donor", "orphan");
    plant(
        &home.home(),
        "orphan",
        &definition,
        orphan.to_string().as_bytes(),
        0,
    );
    // Newer (so met first): a run whose stored definition is garbage, two of them...
    plant(&home.home(), "garbled", b"not a graph", b"{}", 1_000);
    plant(&home.home(), "garbled-too", b"not a graph", b"{}", 2_000);
    // ...and one that loads but makes the core fail when driven (an entry the graph lacks).
    let (definition, mut broken) = donated(&home.home(), "donor", "broken");
    broken["root"]["current"]["entry"] = Value::from(999);
    plant(
        &home.home(),
        "broken",
        &definition,
        broken.to_string().as_bytes(),
        3_000,
    );

    // No process holds the home: `cancel` ends a run nothing can load, without running it.
    let cancel = run_weft(&home.home(), &["cancel", "garbled-too"]);
    assert_eq!(cancel.code, 0, "{cancel:?}");
    let runs = run_weft(&home.home(), &["runs", "--status", "cancelled"]);
    assert!(runs.stdout.contains("garbled-too"), "{runs:?}");

    // `serve` recovers the healthy run past the poisoned ones, and says which it could not.
    let (mut server, addr) = serve(&home.home(), &workflows_of(&home.home()));
    let (status, events) =
        http(addr, "GET", "/runs/orphan/events?follow=true", "").expect("the orphan's events");
    assert_eq!(status, 200, "{events}");
    assert!(events.contains("\"run-succeeded\""), "{events}");
    let (_, record) = http(addr, "GET", "/runs/orphan", "").expect("the orphan's record");
    let record: Value = serde_json::from_str(&record).expect("JSON");
    assert_eq!(record["result"], serde_json::json!({ "n": 42 }), "{record}");
    // The run whose state names an entry its graph lacks is refused by the read check, so it
    // is marked failed like the garbled ones (asserted with them below).
    // The unloadable one is marked failed, so nothing tries it again; `cancel`, served by
    // `serve`, answers that it has ended.
    let line = server.expect_line("garbled");
    assert!(
        line.contains("cannot be recovered") && line.contains("marked failed"),
        "{line}"
    );
    let runs = run_weft(&home.home(), &["runs", "--status", "failed"]);
    assert!(
        runs.stdout.contains("garbled ") && runs.stdout.contains("broken"),
        "{runs:?}"
    );
    let cancel = run_weft(&home.home(), &["cancel", "garbled"]);
    assert_eq!(cancel.code, 2, "{cancel:?}");
    assert!(cancel.stderr.contains("already ended"), "{cancel:?}");
    server.kill();

    // The next start finds nothing left to recover and serves.
    let (mut server, _) = serve(&home.home(), &workflows_of(&home.home()));
    server.kill();
    let out = server.finish();
    assert!(!out.stderr.contains("recover"), "{out:?}");
}

const HOLD: &str = r#"
id: hold
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: wait, plugin: kit, step: wait-abort, config: { max-ms: 600000 } }
"#;

#[test]
fn s118_a_forwarded_run_whose_holder_dies_says_its_run_is_stored_and_how_to_go_on() {
    // The control socket of a home held by one process (S118): sled only.
    let home = Home::new();
    let hold = home.file("hold.yaml", HOLD);
    let hold = hold.to_str().expect("utf-8");
    let mut holder = Proc::start(weft_sled(
        &home.home(),
        &["run", hold, "--run-id", "holder"],
    ));
    holder.expect_line("step-started wait");
    // Served by the holder (S118), which picks the run id.
    let mut client = Proc::start(weft_sled(&home.home(), &["run", hold]));
    client.expect_line("step-started wait");
    holder.kill();
    let out = client.finish();
    assert_eq!(out.code, 6, "{out:?}");
    let id = out
        .stderr
        .split("go on with `weft resume ")
        .nth(1)
        .and_then(|rest| rest.split('`').next())
        .unwrap_or_else(|| panic!("no way to go on in {out:?}"));
    assert!(
        out.stderr.contains(&format!(
            "the weft process holding home {} stopped before run {id} ended",
            home.home().display()
        )),
        "{out:?}"
    );
    let shown = run_weft_sled(&home.home(), &["show", id, "--json"]);
    assert_eq!(shown.code, 0, "{shown:?}");
    let record: Value = serde_json::from_str(shown.stdout.trim()).expect("JSON record");
    assert_eq!(record["status"], "running", "{record}");
}

/// Every entry kind a crash can hit: a sequence of plugin steps, a parallel, a foreach, a loop, a
/// sleep and a suspension; each plugin step appends a line to the round's log in a granted
/// directory, so its effects can be counted.
const TORTURE: &str = r#"
id: torture
plugins:
  kit:
    wasm: "{testkit}"
    grants: { dirs: [ { host: "./data", guest: /data, mode: rw } ] }
steps:
  - { id: first, plugin: kit, step: append, config: { file: /data/RUN.log } }
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
  - sleep: { id: nap, ms: 20 }
  - { id: gate, plugin: kit, step: suspend, config: { payload: { ask: go } } }
  - { id: last, plugin: kit, step: append, config: { file: /data/RUN.log } }
  - map: { id: out, expr: '{ n: .init.n, count: .steps.count.n, gate: .steps.gate.resumed }' }
"#;

/// The plugin steps of [`TORTURE`] that append a line, with how many times each runs.
const EFFECTS: &[(&str, usize)] = &[
    ("first", 1),
    ("fan.left", 1),
    ("fan.right", 1),
    ("each.item", 3),
    ("count.tick", 3),
    ("last", 1),
];

/// Invocations of `path` the record shows started, and ended, (foreach items and loop
/// iterations counted one by one).
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

#[test]
fn s100_s102_s104_forty_runs_of_every_entry_kind_killed_at_random_moments_recover_exactly() {
    let seed = seed("torture");
    let mut rng = Rng(seed);
    let home = Home::new();
    std::fs::create_dir_all(home.dir.path().join("data")).expect("data dir");
    let mut killed_mid_run = 0;
    for round in 0..40u64 {
        let run = format!("t{round}");
        let at = format!("seed {seed} round {round}");
        let file = home.file(&format!("{run}.yaml"), &TORTURE.replace("RUN", &run));
        let log = home.dir.path().join("data").join(format!("{run}.log"));
        let mut child = Proc::start(weft(
            &home.home(),
            &[
                "run",
                file.to_str().expect("utf-8"),
                "--run-id",
                &run,
                "--input",
                &format!("{{\"n\": {round}}}"),
            ],
        ));
        // Kill once the run has printed `lines` progress lines (each printed after its event
        // is stored), plus up to 2 ms, so the kill lands anywhere from before the run is
        // stored to its suspension: between transitions, mid-invocation, mid-sleep.
        let lines = rng.below(40) as usize;
        let jitter = Duration::from_micros(rng.below(2_000));
        let alive = child.read_lines(lines);
        std::thread::sleep(jitter);
        child.kill();
        killed_mid_run += usize::from(alive);

        let shown = run_weft(&home.home(), &["show", &run, "--json"]);
        if shown.code != 0 {
            // Killed before the run was stored: nothing to recover, nothing ran.
            assert!(
                read_log(&log).is_empty(),
                "{at}: effects of an unstored run"
            );
            continue;
        }
        let before: Value = serde_json::from_str(shown.stdout.trim()).expect("record");
        let before_log = read_log(&log);
        if before["status"] != "suspended" {
            assert!(
                matches!(before["status"].as_str(), Some("running" | "pending")),
                "{at}: {before}"
            );
            let out = run_weft(&home.home(), &["resume", &run, "--json"]);
            assert_eq!(
                out.code, 3,
                "{at}: recovery did not reach the gate: {out:?}"
            );
        }
        let out = run_weft(
            &home.home(),
            &["resume", &run, "--data", "{\"go\": true}", "--json"],
        );
        assert_eq!(out.code, 0, "{at}: {out:?}");
        let after: Value = serde_json::from_str(out.stdout.trim()).expect("record");
        assert_eq!(
            after["result"],
            serde_json::json!({ "n": round, "count": 3, "gate": { "go": true } }),
            "{at}"
        );
        let after_log = read_log(&log);
        for &(path, total) in EFFECTS {
            let (started, ended) = invocations(&before, path);
            let (was, is) = (effects(&before_log, path), effects(&after_log, path));
            let context = format!(
                "{at}: {path}: {started} started, {ended} ended at the kill; {was} effects then, {is} after"
            );
            assert!(
                was >= ended,
                "{context}: an ended invocation left no effect"
            );
            assert!(is >= total, "{context}: not every invocation ran");
            // What ended before the kill never runs again (S102); what was in flight may
            // run once more (S104).
            assert!(
                is - was <= total - ended,
                "{context}: an ended invocation ran again"
            );
            assert!(is <= total + (started - ended), "{context}: ran too often");
        }
    }
    assert!(
        killed_mid_run >= 10,
        "seed {seed}: only {killed_mid_run} of 40 kills landed while the run was going"
    );
}
