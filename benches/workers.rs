//! weft on PostgreSQL with `weft worker` processes: `cargo bench --bench workers -- [SCENARIO...]`.
//!
//! Build the `weft` binary first (`cargo build --release`): the bench runs
//! `target/release/weft` (next to its own executable; `WEFT_BIN=PATH` names another) as its
//! workers, and stops with that instruction when it is missing.
//!
//! The bench starts a throwaway PostgreSQL cluster of its own (`initdb` and `pg_ctl` from `PATH`
//! or `/usr/lib/postgresql/*/bin`, in a temporary directory, reachable only through a Unix
//! socket there; run as the `postgres` user through `runuser` when the bench runs as root) with
//! `fsync` and `synchronous_commit` on, as a database whose contents matter runs: every figure
//! is a durable one. It stops the cluster at the end.
//!
//! For each scenario (`seq10`: ten sequential testkit steps; `foreach1000`: one foreach of 1000
//! items, ten at once: the workflows of `benches/workflows.rs`) and each number N of workers in
//! 1, 2, 4, in a fresh schema: the bench process opens a `Runtime` on the store, loads the
//! workflow (compiling testkit once into a plugin cache every worker shares), submits a batch of
//! runs (`Runtime::submit`), starts N `weft --store URL --home HOME-i --plugin-cache DIR worker
//! --concurrency 64` processes, polls `runs()` until every run has ended, stops the workers
//! with SIGINT and prints one JSON line:
//! - `runs_per_s`, `steps_per_s`: over the window from the workers' start to the last run's end
//!   (its stored `updated_at`), so the workers' start-up is in it (`first_step_ms`: from their
//!   start to the first `step-started`);
//! - `run_p50_ms`, `run_p99_ms`: a run's time from its submission (`created_at`) to its end: all
//!   runs are submitted before the workers start, so this includes the wait in the queue;
//!   `drive_p50_ms`, `drive_p99_ms`: from its first `step-started` to its end;
//! - `handoff_p50_ms`, `handoff_p99_ms`, `handoff_mean_ms` (seq10): from one step's
//!   `step-succeeded` to the next step's `step-started`, from the events' `at` timestamps, whose
//!   resolution is a millisecond. Both events come from one transition and carry its one time,
//!   so this is always 0: the commit between them is not visible in the events;
//!   `step_cycle_p50_ms`, `step_cycle_p99_ms`, `step_cycle_mean_ms`: from one step's
//!   `step-started` to the next one's, which holds the invocation, the transition's commit and
//!   the hand-off;
//! - `max_gap_ms`: the longest stretch in the window with no event of any run (a worker idle
//!   while runs wait shows here);
//! - `runs_per_worker`: how many runs each worker was seen holding (the bench polls the `runs`
//!   table every 50 ms while they run; `runs_owner_unseen`: runs never seen held, too quick);
//! - the `runs` table's `n_dead_tup`, `n_live_tup`, updates (`n_tup_upd`, HOT ones
//!   `n_tup_hot_upd`), autovacuums, its heap size and total size with TOAST and indexes, and
//!   the `records` table's total size, read after the workers stopped.
//!
//! Then a markdown table of the same figures.
//!
//! The environment changes what is measured:
//! - `WEFT_BENCH_RUNS_SCALE=X`: batches X times the default (600 seq10 runs, 4 foreach1000 runs).
//! - `WEFT_BENCH_WORKERS=1,2,4`: the numbers of workers.
//! - `WEFT_BENCH_LEASE_MS=N`: the store's `lease_ms` (default 10000): how soon a killed
//!   worker's runs are taken up; it does not change how often a worker looks for runs (when it
//!   is told of new ones, when one of its own ends, and every 500 ms at most).
//! - `WEFT_BENCH_LONG=SECONDS`: instead, the long run: 2 workers, seq10 runs submitted at a
//!   steady `WEFT_BENCH_LONG_RATE` runs/s (default 40) for that many seconds, and every 10 s a
//!   JSON line with the runs' progress and latency and the `runs` and `records` tables' dead
//!   tuples, sizes and autovacuums, to show whether dead tuples stay bounded; then the same once
//!   the backlog has drained.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio_postgres::Client;
use weft::HostConfig;
use weft::LoadedWorkflow;
use weft::{EventKind, RunStatus};
use weft::{Runtime, RuntimeConfig};

#[path = "support/pg_bench.rs"]
mod pg_bench;

use pg_bench::{Cluster, table_stats};

/// The allocator the `weft` binary uses.
#[global_allocator]
static ALLOC: weft::MeteredAlloc<mimalloc::MiMalloc> = weft::MeteredAlloc(mimalloc::MiMalloc);

/// Runs each worker drives at once.
const CONCURRENCY: usize = 64;
/// How long the bench waits without any run ending before it calls the point stuck.
const STUCK_AFTER: Duration = Duration::from_secs(60);

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn env_number(name: &str) -> Option<f64> {
    std::env::var(name).ok().filter(|v| !v.is_empty()).map(|v| {
        v.parse::<f64>()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number"))
    })
}

// ---------------------------------------------------------------------------------------------
// Workers.

/// The `weft` binary the workers run.
fn weft_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("WEFT_BIN") {
        return bin.into();
    }
    let exe = std::env::current_exe().expect("current exe");
    // target/release/deps/workers-HASH → target/release/weft
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("weft"))
        .expect("the bench's directory");
    assert!(
        bin.is_file(),
        "{} is missing: build it first with `cargo build --release` (or name a weft binary \
         with WEFT_BIN=PATH)",
        bin.display()
    );
    let age = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if let (Some(b), Some(e)) = (age(&bin), age(&exe))
        && b < e
    {
        eprintln!(
            "note: {} is older than this bench; `cargo build --release` if the host changed",
            bin.display()
        );
    }
    bin
}

/// Worker processes, killed when dropped unless stopped first.
struct Workers {
    children: Vec<Child>,
    logs: Vec<PathBuf>,
}

impl Workers {
    fn start(bin: &Path, url: &str, dir: &Path, cache: &Path, tag: &str, n: usize) -> Workers {
        let mut children = Vec::new();
        let mut logs = Vec::new();
        for i in 0..n {
            let log = dir.join(format!("worker-{tag}-{i}.log"));
            let child = Command::new(bin)
                .arg("--store")
                .arg(url)
                .arg("--home")
                .arg(dir.join(format!("home-{i}")))
                .arg("--plugin-cache")
                .arg(cache)
                .args(["worker", "--concurrency", &CONCURRENCY.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(File::create(&log).expect("worker log"))
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
            children.push(child);
            logs.push(log);
        }
        Workers { children, logs }
    }

    fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// Whether every worker is still running; the exit status of the first one that ended.
    fn check(&mut self) -> Result<(), String> {
        for (i, c) in self.children.iter_mut().enumerate() {
            if let Ok(Some(status)) = c.try_wait() {
                return Err(format!(
                    "worker {i} (pid {}) exited early ({status}): {}",
                    c.id(),
                    tail(&self.logs[i])
                ));
            }
        }
        Ok(())
    }

    /// SIGINT to each, then waits for them (a SIGKILL after 20 s); how long the stop took.
    fn stop(mut self) -> Duration {
        let started = Instant::now();
        for c in &self.children {
            let _ = Command::new("kill")
                .args(["-INT", &c.id().to_string()])
                .status();
        }
        for (i, c) in self.children.iter_mut().enumerate() {
            loop {
                match c.try_wait() {
                    Ok(Some(status)) => {
                        if !status.success() {
                            eprintln!("worker {i} ended with {status}: {}", tail(&self.logs[i]));
                        }
                        break;
                    }
                    Ok(None) if started.elapsed() < Duration::from_secs(20) => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    _ => {
                        eprintln!("worker {i} did not stop within 20 s of SIGINT: killed");
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                }
            }
        }
        let took = started.elapsed();
        self.children.clear();
        took
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The last lines of a log file.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join(" | ")
}

// ---------------------------------------------------------------------------------------------
// Scenarios.

struct Scenario {
    name: &'static str,
    yaml: String,
    input: Value,
    /// Steps one run counts.
    steps: u64,
    /// Runs in a batch at scale 1.
    batch: usize,
}

/// The workflows of `benches/workflows.rs`.
fn scenarios() -> Vec<Scenario> {
    let plugin = format!(
        "plugins:\n  kit: {{ wasm: \"{}\" }}\n",
        weft_guests::TESTKIT
    );
    let seq10: String = (0..10)
        .map(|i| format!("  - {{ id: s{i}, plugin: kit, step: inc }}\n"))
        .collect();
    vec![
        Scenario {
            name: "seq10",
            yaml: format!("id: seq10\n{plugin}steps:\n{seq10}"),
            input: json!({"n": 0}),
            steps: 10,
            batch: 600,
        },
        Scenario {
            name: "foreach1000",
            yaml: format!(
                "id: foreach1000\n{plugin}steps:\n  - foreach:\n      id: each\n      concurrency: 10\n      do: {{ id: double, plugin: kit, step: double }}\n"
            ),
            input: json!((1..=1000).collect::<Vec<u32>>()),
            steps: 1000,
            batch: 4,
        },
    ]
}

// ---------------------------------------------------------------------------------------------
// Figures.

/// The `q` quantile (0..=1) of sorted `values`.
fn quantile(sorted: &[i64], q: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    Some(sorted[((sorted.len() - 1) as f64 * q).round() as usize])
}

fn at_ms(at: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(at)
        .map(|t| t.timestamp_millis())
        .unwrap_or_else(|e| panic!("event time {at}: {e}"))
}

/// What the events of the runs show.
#[derive(Default)]
struct Timeline {
    /// Each run's first `step-started`, in the order of the runs given.
    first_step: Vec<Option<i64>>,
    /// Each hand-off's time (seq10).
    handoffs: Vec<i64>,
    /// From each step's `step-started` to the next one's (seq10).
    cycles: Vec<i64>,
    /// Every event's time.
    times: Vec<i64>,
}

/// Reads every run's stored events.
async fn timeline(rt: &Runtime, ids: &[String], handoffs: bool) -> Timeline {
    let mut t = Timeline::default();
    for id in ids {
        let mut rx = rt.watch(id, 1).expect("watch");
        let mut first = None;
        let mut succeeded: Option<i64> = None;
        let mut started: Option<i64> = None;
        while let Some(ev) = rx.recv().await {
            let at = at_ms(&ev.at);
            t.times.push(at);
            match ev.kind {
                EventKind::StepStarted => {
                    first.get_or_insert(at);
                    if handoffs && let Some(s) = succeeded.take() {
                        t.handoffs.push(at - s);
                    }
                    if handoffs && let Some(s) = started.replace(at) {
                        t.cycles.push(at - s);
                    }
                }
                EventKind::StepSucceeded => succeeded = Some(at),
                _ => {}
            }
        }
        t.first_step.push(first);
    }
    t
}

/// The longest stretch between `from` and `to` with no event.
fn max_gap(times: &mut [i64], from: i64, to: i64) -> i64 {
    times.sort_unstable();
    let mut last = from;
    let mut gap = 0;
    for &t in times.iter().filter(|&&t| t >= from && t <= to) {
        gap = gap.max(t - last);
        last = t;
    }
    gap.max(to - last)
}

/// Notes the process (pid) that holds each run now, for those not noted yet (a finished run's
/// owner is cleared when its worker stops, so the bench looks while they run).
async fn note_owners(db: &Client, schema: &str, owners: &mut HashMap<String, i32>) {
    let rows = db
        .query(
            &format!(
                "SELECT r.run_id, w.pid FROM \"{schema}\".runs r \
                 JOIN \"{schema}\".workers w ON w.id = r.owner"
            ),
            &[],
        )
        .await
        .expect("runs by owner");
    for r in rows {
        owners.entry(r.get(0)).or_insert(r.get(1));
    }
}

/// What the store says of unfinished runs and workers, for a point that does not end.
async fn diagnose(db: &Client, schema: &str) -> Value {
    let runs = db
        .query(
            &format!(
                "SELECT r.status, COALESCE(r.owner, 'none'), (w.alive_until > now())::text, \
                 count(*) FROM \"{schema}\".runs r LEFT JOIN \"{schema}\".workers w \
                 ON w.id = r.owner GROUP BY 1, 2, 3 ORDER BY 1, 2"
            ),
            &[],
        )
        .await
        .expect("runs by status");
    let workers = db
        .query(
            &format!(
                "SELECT id, pid, (alive_until > now())::text FROM \"{schema}\".workers ORDER BY pid"
            ),
            &[],
        )
        .await
        .expect("workers");
    json!({
        "runs": runs.iter().map(|r| json!({
            "status": r.get::<_, String>(0),
            "owner": r.get::<_, String>(1),
            "owner_alive": r.get::<_, Option<String>>(2),
            "count": r.get::<_, i64>(3),
        })).collect::<Vec<_>>(),
        "workers": workers.iter().map(|r| json!({
            "id": r.get::<_, String>(0),
            "pid": r.get::<_, i32>(1),
            "alive": r.get::<_, Option<String>>(2),
        })).collect::<Vec<_>>(),
    })
}

/// Opens a runtime on `url` with the shared plugin cache and loads `s`'s workflow (compiling
/// testkit into the cache the first time).
async fn open(
    dir: &Path,
    cache: &Path,
    schema: &str,
    url: &str,
    s: &Scenario,
) -> (Runtime, LoadedWorkflow) {
    let config = RuntimeConfig::default()
        .with_store(url)
        .with_host(HostConfig::default().with_cache_dir(Some(cache.to_path_buf())));
    let rt = Runtime::open(&dir.join(format!("bench-home-{schema}")), config).expect("runtime");
    let path = dir.join(format!("{}.yaml", s.name));
    std::fs::write(&path, &s.yaml).expect("write workflow");
    let w = rt.load_workflow(&path).await.expect("load");
    (rt, w)
}

struct Env<'a> {
    cluster: &'a Cluster,
    db: &'a Client,
    bin: &'a Path,
    dir: &'a Path,
    cache: &'a Path,
}

/// One point: a batch of `s` driven by `n` workers. Its JSON line.
async fn point(env: &Env<'_>, s: &Scenario, n: usize, scale: f64) -> Value {
    let schema = format!("b_{}_{n}", s.name);
    let url = env.cluster.url(&schema);
    let (rt, w) = open(env.dir, env.cache, &schema, &url, s).await;
    let batch = ((s.batch as f64 * scale).round() as usize).max(1);
    let mut ids = Vec::with_capacity(batch);
    for _ in 0..batch {
        ids.push(rt.submit(&w, s.input.clone(), None).await.expect("submit"));
    }

    let t0 = now_ms();
    let mut workers = Workers::start(env.bin, &url, env.dir, env.cache, &schema, n);
    let pids = workers.pids();
    let mut last_progress = (0usize, Instant::now());
    let mut problem = None;
    let mut owners = HashMap::new();
    let summaries = loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        note_owners(env.db, &schema, &mut owners).await;
        let runs = rt.runs(Some(s.name), None).expect("runs");
        let ended = runs
            .iter()
            .filter(|r| !matches!(r.status, RunStatus::Pending | RunStatus::Running))
            .count();
        if ended == batch {
            break runs;
        }
        if ended > last_progress.0 {
            last_progress = (ended, Instant::now());
        }
        if let Err(e) = workers.check() {
            problem = Some(e);
        } else if last_progress.1.elapsed() > STUCK_AFTER {
            problem = Some(format!(
                "no run ended for {} s: {ended} of {batch} ended",
                STUCK_AFTER.as_secs()
            ));
        }
        if problem.is_some() {
            break runs;
        }
    };
    note_owners(env.db, &schema, &mut owners).await;
    // Runs per worker, in the order they were started; then the runs never seen held.
    let mut per_worker: Vec<usize> = pids
        .iter()
        .map(|&p| owners.values().filter(|&&o| o as u32 == p).count())
        .collect();
    per_worker.push(ids.iter().filter(|id| !owners.contains_key(*id)).count());
    let diagnosis = if problem.is_some() {
        Some(diagnose(env.db, &schema).await)
    } else {
        None
    };
    let stop_took = workers.stop();

    let mut failed = 0;
    let mut end = t0;
    let mut run_ms = Vec::new();
    let mut ends = std::collections::HashMap::new();
    for r in &summaries {
        match r.status {
            RunStatus::Success => {}
            RunStatus::Pending | RunStatus::Running => continue,
            _ => failed += 1,
        }
        end = end.max(r.updated_at);
        run_ms.push(r.updated_at - r.created_at);
        ends.insert(r.run_id.clone(), r.updated_at);
    }
    run_ms.sort_unstable();
    let ended: Vec<String> = ids
        .iter()
        .filter(|id| ends.contains_key(*id))
        .cloned()
        .collect();
    let mut t = timeline(&rt, &ended, s.name == "seq10").await;
    let mut drive_ms: Vec<i64> = ended
        .iter()
        .zip(&t.first_step)
        .filter_map(|(id, f)| f.map(|f| ends[id] - f))
        .collect();
    drive_ms.sort_unstable();
    t.handoffs.sort_unstable();
    t.cycles.sort_unstable();
    let first_step = t.first_step.iter().flatten().min().map(|f| f - t0);
    let gap = max_gap(&mut t.times, t0, end);
    let seconds = (end - t0) as f64 / 1000.0;
    let runs_done = run_ms.len() as u64;
    let mean = |v: &[i64]| {
        (!v.is_empty())
            .then(|| (v.iter().sum::<i64>() as f64 / v.len() as f64 * 100.0).round() / 100.0)
    };

    // The workers' backends have exited, so their statistics are in.
    let runs_table = table_stats(env.db, &schema, "runs").await;
    let records_table = table_stats(env.db, &schema, "records").await;
    rt.close().await;
    drop(rt);

    let mut line = json!({
        "scenario": s.name,
        "workers": n,
        "worker_pids": pids,
        "runs": runs_done,
        "failed": failed,
        "steps": runs_done * s.steps,
        "seconds": seconds,
        "runs_per_s": (runs_done as f64 / seconds * 10.0).round() / 10.0,
        "steps_per_s": (runs_done as f64 * s.steps as f64 / seconds).round(),
        "run_p50_ms": quantile(&run_ms, 0.5),
        "run_p99_ms": quantile(&run_ms, 0.99),
        "drive_p50_ms": quantile(&drive_ms, 0.5),
        "drive_p99_ms": quantile(&drive_ms, 0.99),
        "handoff_p50_ms": quantile(&t.handoffs, 0.5),
        "handoff_p99_ms": quantile(&t.handoffs, 0.99),
        "handoff_mean_ms": mean(&t.handoffs),
        "step_cycle_p50_ms": quantile(&t.cycles, 0.5),
        "step_cycle_p99_ms": quantile(&t.cycles, 0.99),
        "step_cycle_mean_ms": mean(&t.cycles),
        "first_step_ms": first_step,
        "max_gap_ms": gap,
        "runs_per_worker": per_worker[..n],
        "runs_owner_unseen": per_worker[n],
        "stop_ms": stop_took.as_millis() as u64,
        "runs_table": runs_table,
        "records_total_bytes": records_table.get("total_bytes"),
    });
    if let Some(p) = problem {
        line["problem"] = json!(p);
        line["diagnosis"] = diagnosis.unwrap_or(Value::Null);
    }
    println!("{line}");
    line
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "–".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn kib(v: &Value) -> String {
    v.as_i64()
        .map_or("–".into(), |b| format!("{}", (b as f64 / 1024.0).round()))
}

fn table(lines: &[Value]) {
    println!();
    println!(
        "| scenario | workers | runs | s | runs/s | steps/s | run p50/p99 ms | drive p50/p99 ms | \
         hand-off p50/p99 (mean) ms | step cycle p50/p99 (mean) ms | max gap ms | runs per \
         worker | runs n_dead_tup | runs heap / total KiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for l in lines {
        let rt = &l["runs_table"];
        let per_worker = l["runs_per_worker"]
            .as_array()
            .map(|m| m.iter().map(cell).collect::<Vec<_>>().join("/"))
            .unwrap_or_default();
        println!(
            "| {} | {} | {}{} | {} | {} | {} | {} / {} | {} / {} | {} / {} ({}) | {} / {} ({}) | {} | {} | {} | {} / {} |",
            cell(&l["scenario"]),
            cell(&l["workers"]),
            cell(&l["runs"]),
            if l.get("problem").is_some() {
                " (stuck)"
            } else {
                ""
            },
            cell(&l["seconds"]),
            cell(&l["runs_per_s"]),
            cell(&l["steps_per_s"]),
            cell(&l["run_p50_ms"]),
            cell(&l["run_p99_ms"]),
            cell(&l["drive_p50_ms"]),
            cell(&l["drive_p99_ms"]),
            cell(&l["handoff_p50_ms"]),
            cell(&l["handoff_p99_ms"]),
            cell(&l["handoff_mean_ms"]),
            cell(&l["step_cycle_p50_ms"]),
            cell(&l["step_cycle_p99_ms"]),
            cell(&l["step_cycle_mean_ms"]),
            cell(&l["max_gap_ms"]),
            per_worker,
            cell(&rt["n_dead_tup"]),
            kib(&rt["heap_bytes"]),
            kib(&rt["total_bytes"]),
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The long run.

/// Runs by status, and the p50/p99 of submit-to-end of the runs that ended since `since_ms`.
async fn progress(db: &Client, schema: &str, since_ms: i64) -> Value {
    let rows = db
        .query(
            &format!("SELECT status, count(*) FROM \"{schema}\".runs GROUP BY 1"),
            &[],
        )
        .await
        .expect("runs by status");
    let mut statuses = serde_json::Map::new();
    for r in rows {
        statuses.insert(r.get(0), json!(r.get::<_, i64>(1)));
    }
    let lat = db
        .query_one(
            &format!(
                "SELECT count(*), percentile_disc(0.5) WITHIN GROUP (ORDER BY updated_at - created_at), \
                 percentile_disc(0.99) WITHIN GROUP (ORDER BY updated_at - created_at) \
                 FROM \"{schema}\".runs WHERE status NOT IN ('pending', 'running') AND updated_at >= $1"
            ),
            &[&since_ms],
        )
        .await
        .expect("latency");
    json!({
        "statuses": statuses,
        "ended_in_interval": lat.get::<_, i64>(0),
        "run_p50_ms": lat.get::<_, Option<i64>>(1),
        "run_p99_ms": lat.get::<_, Option<i64>>(2),
    })
}

async fn long_run(env: &Env<'_>, seconds: f64, rate: f64) {
    let s = scenarios().into_iter().next().expect("seq10");
    let schema = "b_long".to_owned();
    let url = env.cluster.url(&schema);
    let (rt, w) = open(env.dir, env.cache, &schema, &url, &s).await;
    let workers = Workers::start(env.bin, &url, env.dir, env.cache, &schema, 2);
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(seconds);
    let submitter = {
        let (rt, input) = (rt.clone(), s.input.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut submitted = 0u64;
            while Instant::now() < until {
                tick.tick().await;
                rt.submit(&w, input.clone(), None).await.expect("submit");
                submitted += 1;
            }
            submitted
        })
    };
    let sample = |label: &'static str, since: i64| {
        let schema = schema.clone();
        async move {
            let line = json!({
                "long": label,
                "t_s": started.elapsed().as_secs(),
                "progress": progress(env.db, &schema, since).await,
                "runs_table": table_stats(env.db, &schema, "runs").await,
                "records_table": table_stats(env.db, &schema, "records").await,
            });
            println!("{line}");
        }
    };
    let mut since = now_ms();
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(10).min(until - Instant::now())).await;
        sample("submitting", since).await;
        since = now_ms();
    }
    let submitted = submitter.await.expect("submitter");
    // Let the backlog drain.
    let drain = Instant::now();
    loop {
        let unfinished: i64 = env
            .db
            .query_one(
                &format!(
                    "SELECT count(*) FROM \"{schema}\".runs WHERE status IN ('pending', 'running')"
                ),
                &[],
            )
            .await
            .expect("unfinished")
            .get(0);
        if unfinished == 0 || drain.elapsed() > STUCK_AFTER {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    sample("drained", since).await;
    let stop_took = workers.stop();
    // Statistics of the workers' backends are in once they have exited.
    tokio::time::sleep(Duration::from_secs(1)).await;
    sample("workers-stopped", now_ms()).await;
    println!(
        "{}",
        json!({"long": "end", "submitted": submitted, "rate": rate, "seconds": seconds,
               "stop_ms": stop_took.as_millis() as u64})
    );
    rt.close().await;
}

fn main() {
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let picked = |name: &str| wanted.is_empty() || wanted.iter().any(|w| w == name);
    let scale = env_number("WEFT_BENCH_RUNS_SCALE").unwrap_or(1.0);
    let counts: Vec<usize> = std::env::var("WEFT_BENCH_WORKERS")
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.split(',')
                .map(|n| n.trim().parse().expect("WEFT_BENCH_WORKERS: numbers"))
                .collect()
        })
        .unwrap_or_else(|| vec![1, 2, 4]);
    let bin = weft_bin();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let cluster = Cluster::start();
    tokio.block_on(async {
        let dir = tempfile::tempdir().expect("temp dir");
        let cache = dir.path().join("plugin-cache");
        let db = cluster.client().await;
        let settings = db
            .query_one(
                "SELECT version(), current_setting('fsync'), current_setting('synchronous_commit'), \
                 current_setting('wal_sync_method'), current_setting('autovacuum_naptime'), \
                 current_setting('shared_buffers')",
                &[],
            )
            .await
            .expect("settings");
        eprintln!(
            "{} | fsync={} synchronous_commit={} wal_sync_method={} autovacuum_naptime={} \
             shared_buffers={} | workers: {}",
            settings.get::<_, String>(0),
            settings.get::<_, String>(1),
            settings.get::<_, String>(2),
            settings.get::<_, String>(3),
            settings.get::<_, String>(4),
            settings.get::<_, String>(5),
            bin.display()
        );
        let env = Env {
            cluster: &cluster,
            db: &db,
            bin: &bin,
            dir: dir.path(),
            cache: &cache,
        };
        if let Some(seconds) = env_number("WEFT_BENCH_LONG") {
            let rate = env_number("WEFT_BENCH_LONG_RATE").unwrap_or(40.0);
            long_run(&env, seconds, rate).await;
            return;
        }
        let mut lines = Vec::new();
        for s in scenarios() {
            if !picked(s.name) {
                continue;
            }
            for &n in &counts {
                lines.push(point(&env, &s, n, scale).await);
            }
        }
        table(&lines);
    });
    drop(cluster);
}
