//! Workflow throughput and latency: `cargo bench --bench workflows -- [SCENARIO...]`.
//!
//! Every scenario runs plugin steps (leankit, a plugin written with the Rust SDK's lean mode; a
//! fresh sandboxed instance per invocation) on the
//! durable sled store with fsynced transitions, many runs in flight at once (as a server holds
//! them; concurrent runs share fsyncs), after a warm-up, for at least two seconds, and prints
//! one JSON line: `{"scenario", "in_flight", "sync", "plugin", "runs", "steps", "seconds", "runs_per_s",
//! "steps_per_s", "p50_ms", "p99_ms", "cpu_us_per_step", "rss_mb"}`, the percentiles being those
//! of one run's time from `start` to its end (a `suspend_resume` cycle's: start, suspend, resume,
//! end), and the CPU that of every thread of the process over the timed window, divided by its
//! steps: on a shared machine it moves less than the throughput does. `seq1` and `seq20` beside
//! `seq10` split a run's cost into what a step adds and what a run costs once.
//! `floor` is the bare cost of one fresh pooled instance and one trivial `execute`, with no
//! engine and no store, measured in the same process so the engine's overhead shows as a ratio.
//! Two more floors run only when named: `floor_durable` adds what durability costs with no
//! engine and no store (each invocation appends a record of a `seq10` step's size to a plain
//! file, made durable by a group fdatasync, and every tenth, as a `seq10` run's end, waits for
//! the sync that covers it), and `floor_store` the same through weft's store (its log, pending
//! table and checkpoints); both with 64 tasks in flight unless `WEFT_BENCH_INFLIGHT` says.
//! `foreach100k` runs only when named too: one run at a time of a foreach of 100,000 steps,
//! whose steps per second, set beside `foreach1000`'s at one run in flight, show that a run's
//! cost grows linearly with its length.
//! Two scenarios of big guests also run only when named: `python1000` and `js1000`, a foreach
//! of 1,000 steps of the Python example `wordstats` (`examples/python`, about 40 MB of
//! component) or the JavaScript tool `slugify` (`examples/js`), one run at a time and
//! `WEFT_BENCH_CONCURRENCY` items at once (default 1); build them first with their `build.sh`.
//! Their lines add `"faults_per_step"` (the process's minor and major page faults).
//!
//! The environment changes what is measured:
//! - `WEFT_BENCH_INFLIGHT=N`: N runs in flight in every scenario (1 measures latency, as the
//!   peer's default does); unset, each scenario keeps its own number.
//! - `WEFT_BENCH_SYNC=0`: transitions are not fsynced (`RuntimeConfig::sync_writes`), to show
//!   what the fsync costs; the default `1` is the durable mode every figure is quoted in.
//! - `WEFT_BENCH_PLUGIN=testkit`: the steps of the testkit plugin instead, the same steps built
//!   with std (its WASI imports cost every instance; see `docs/PLUGINS-RUST-SDK.md`); the
//!   default is `leankit`.
//! - `WEFT_BENCH_REPEAT=N`: N rounds of every scenario, then a line per scenario with the
//!   median of each figure (`"round": "median"`).
//! - `WEFT_BENCH_MIN_S`: the timed window in seconds (default 2).
//! - `WEFT_BENCH_RUNS=N`: instead of a timed window, exactly N runs (N invocations for
//!   `floor`) after a warm-up of one run per run in flight: the same work every time, for
//!   `perf stat` or a profiler to compare two builds on.
//! - `WEFT_BENCH_KEEP_RESIDENT=BYTES`: the bytes of each freed plugin memory kept resident and
//!   reset in place (`PoolConfig::keep_resident`) instead of the default, to size it.
//! - `WEFT_BENCH_DECOMMIT_BATCH=N`: freed slots decommitted in one batch
//!   (`PoolConfig::decommit_batch`) instead of the default, to size it.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use weft::Invocation;
use weft::LoadedWorkflow;
use weft::StepCall;
use weft::internal::{DiscardEvents, NoRun};
use weft::internal::{Plugin, Sandbox};
use weft::internal::{SledStore, Store};
use weft::{HostConfig, PluginHost, PoolConfig};
use weft::{ResumeRequest, RunStatus};
use weft::{Runtime, RuntimeConfig};

/// The allocator the `weft` binary uses.
#[global_allocator]
static ALLOC: weft::MeteredAlloc<mimalloc::MiMalloc> = weft::MeteredAlloc(mimalloc::MiMalloc);

/// What the environment asks of this bench (see the module docs).
struct Settings {
    in_flight: Option<usize>,
    sync: bool,
    /// The plugin of every step: its name and the path of its component.
    plugin: (&'static str, &'static str),
    repeat: usize,
    min_time: Duration,
    /// A fixed number of runs instead of a timed window.
    runs: Option<usize>,
    /// The plugin host of the runtime and of the floors.
    host: HostConfig,
}

impl Settings {
    fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let number = |name: &str| {
            var(name).map(|v| {
                v.parse::<f64>()
                    .unwrap_or_else(|_| panic!("{name}={v} is not a number"))
            })
        };
        Settings {
            in_flight: number("WEFT_BENCH_INFLIGHT").map(|n| (n as usize).max(1)),
            sync: var("WEFT_BENCH_SYNC").is_none_or(|v| v != "0"),
            plugin: match var("WEFT_BENCH_PLUGIN").as_deref() {
                None | Some("leankit") => ("leankit", weft_guests::LEANKIT),
                Some("testkit") => ("testkit", weft_guests::TESTKIT),
                Some(other) => panic!("WEFT_BENCH_PLUGIN={other}: give leankit or testkit"),
            },
            repeat: number("WEFT_BENCH_REPEAT").map_or(1, |n| (n as usize).max(1)),
            min_time: Duration::from_secs_f64(number("WEFT_BENCH_MIN_S").unwrap_or(2.0)),
            runs: number("WEFT_BENCH_RUNS").map(|n| (n as usize).max(1)),
            host: HostConfig::default().with_pool({
                let pool = number("WEFT_BENCH_KEEP_RESIDENT")
                    .map_or_else(PoolConfig::default, |bytes| {
                        PoolConfig::default().with_keep_resident(bytes as usize)
                    });
                match number("WEFT_BENCH_DECOMMIT_BATCH") {
                    Some(slots) => pool.with_decommit_batch(slots as usize),
                    None => pool,
                }
            }),
        }
    }
}

/// One round's figures of one scenario.
#[derive(Clone)]
struct Figures {
    runs: u64,
    steps: u64,
    seconds: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// The CPU time the whole process (every thread) used meanwhile.
    cpu_seconds: f64,
    /// The page faults (minor and major) the process took meanwhile.
    faults: u64,
}

/// The CPU time (user and system) this process has used so far, all its threads together, in
/// seconds, from `/proc/self/stat` (in Linux's fixed 100 ticks a second): to the hundredth of a
/// second, a fraction of a percent of a timed window. Not `clock_gettime`: rustix's reaches it
/// through the vDSO, which it cannot find under valgrind, and the bench must run there.
fn cpu_time() -> f64 {
    stat_fields(&[14, 15]) as f64 / 100.0
}

/// The page faults this process has taken so far, minor and major (`/proc/self/stat`).
fn page_faults() -> u64 {
    stat_fields(&[10, 12])
}

/// The sum of the fields of `/proc/self/stat` numbered `fields` (from 1, as proc(5) counts).
fn stat_fields(fields: &[usize]) -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command's name (the 2nd), which is in parentheses and may hold
    // spaces: the 3rd field is the first after it.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let values: Vec<u64> = after
        .split_whitespace()
        .map(|f| f.parse::<u64>().unwrap_or(0))
        .collect();
    fields.iter().filter_map(|&n| values.get(n - 3)).sum()
}

struct Scenario {
    name: &'static str,
    yaml: String,
    input: Value,
    /// Steps one run (or cycle) counts.
    steps: u64,
    /// Runs in flight at once.
    in_flight: usize,
    /// Resume each run once with `{add: 7}` after it suspends.
    resume: bool,
    /// Run only when named on the command line.
    named_only: bool,
}

fn scenarios(settings: &Settings) -> Vec<Scenario> {
    let plugin = format!("plugins:\n  kit: {{ wasm: \"{}\" }}\n", settings.plugin.1);
    // `n` steps in sequence, each adding one.
    let seq = |name: &'static str, n: u64| Scenario {
        name,
        yaml: format!(
            "id: {name}\n{plugin}steps:\n{}",
            (0..n)
                .map(|i| format!("  - {{ id: s{i}, plugin: kit, step: inc }}\n"))
                .collect::<String>()
        ),
        input: json!({"n": 0}),
        steps: n,
        in_flight: 256,
        resume: false,
        named_only: false,
    };
    let arms: String = (0..8)
        .map(|k| {
            format!(
                "        - {{ id: a{k}, plugin: kit, step: mul, config: {{ by: {} }} }}\n",
                k + 1
            )
        })
        .collect();
    vec![
        seq("seq10", 10),
        Scenario {
            name: "foreach1000",
            yaml: format!(
                "id: foreach1000\n{plugin}steps:\n  - foreach:\n      id: each\n      concurrency: 10\n      do: {{ id: double, plugin: kit, step: double }}\n"
            ),
            input: json!((1..=1000).collect::<Vec<u32>>()),
            steps: 1000,
            in_flight: 16,
            resume: false,
            named_only: false,
        },
        Scenario {
            name: "parallel8",
            yaml: format!(
                "id: parallel8\n{plugin}steps:\n  - parallel:\n      id: fan\n      steps:\n{arms}  - {{ id: merge, plugin: kit, step: sum }}\n"
            ),
            input: json!({"n": 1}),
            steps: 9,
            in_flight: 64,
            resume: false,
            named_only: false,
        },
        Scenario {
            name: "loop100",
            yaml: format!(
                "id: loop100\n{plugin}steps:\n  - loop:\n      id: count\n      do-until: '.output.n >= 100'\n      do: {{ id: inc, plugin: kit, step: inc }}\n"
            ),
            input: json!({"n": 0}),
            steps: 100,
            in_flight: 64,
            resume: false,
            named_only: false,
        },
        Scenario {
            name: "suspend_resume",
            yaml: format!(
                "id: suspend-resume\n{plugin}steps:\n  - {{ id: wait, plugin: kit, step: suspend }}\n"
            ),
            input: json!({"n": 0}),
            steps: 2,
            in_flight: 64,
            resume: true,
            named_only: false,
        },
        // One run of a long foreach, to show its cost is linear in its length (issue 53).
        Scenario {
            name: "foreach100k",
            yaml: format!(
                "id: foreach100k\n{plugin}steps:\n  - foreach:\n      id: each\n      concurrency: 10\n      do: {{ id: double, plugin: kit, step: double }}\n"
            ),
            input: json!((1..=100_000).collect::<Vec<u32>>()),
            steps: 100_000,
            in_flight: 1,
            resume: false,
            named_only: true,
        },
        // With `seq10`, what a run costs once and what a step costs at the margin.
        seq("seq1", 1),
        seq("seq20", 20),
        big_guest(
            "python1000",
            "python/wordstats.wasm",
            "step: wordstats",
            256,
        ),
        big_guest("js1000", "js/slugify.wasm", "tool: slugify", 128),
    ]
}

/// A foreach of 1,000 steps of an example plugin built in another language (`examples/`),
/// `WEFT_BENCH_CONCURRENCY` at once, each on a line of text.
fn big_guest(name: &'static str, wasm: &str, call: &str, memory_mib: u32) -> Scenario {
    let concurrency = std::env::var("WEFT_BENCH_CONCURRENCY")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(1)
        .max(1);
    let wasm = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(wasm);
    let texts: Vec<Value> = (0..1000)
        .map(|i| json!({"text": format!("Line {i}: the café opens at nine, the bar at ten.")}))
        .collect();
    Scenario {
        name,
        yaml: format!(
            "id: {name}\nplugins:\n  big: {{ wasm: \"{}\", limits: {{ memory-mib: {memory_mib} }} }}\nsteps:\n  - foreach:\n      id: each\n      concurrency: {concurrency}\n      do: {{ id: call, plugin: big, {call}, input: '{{text: .input.text}}' }}\n",
            wasm.display()
        ),
        input: json!(texts),
        steps: 1000,
        in_flight: 1,
        resume: false,
        named_only: true,
    }
}

fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The `q` quantile (0..=1) of sorted `values`, in milliseconds.
fn quantile_ms(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    (sorted[i].as_secs_f64() * 1e6).round() / 1e3
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn print(name: &str, in_flight: usize, settings: &Settings, round: Value, f: &Figures) {
    let line = json!({
        "scenario": name,
        "round": round,
        "in_flight": in_flight,
        "sync": settings.sync,
        "plugin": settings.plugin.0,
        "runs": f.runs,
        "steps": f.steps,
        "seconds": (f.seconds * 1000.0).round() / 1000.0,
        "runs_per_s": (f.runs as f64 / f.seconds).round(),
        "steps_per_s": (f.steps as f64 / f.seconds).round(),
        "p50_ms": f.p50_ms,
        "p99_ms": f.p99_ms,
        "cpu_us_per_step": (f.cpu_seconds * 1e8 / f.steps.max(1) as f64).round() / 100.0,
        "faults_per_step": (f.faults as f64 * 100.0 / f.steps.max(1) as f64).round() / 100.0,
        "rss_mb": (rss_mb() * 10.0).round() / 10.0,
    });
    println!("{line}");
}

/// Prints each round as it ends, then the medians when there was more than one.
fn report(name: &str, in_flight: usize, settings: &Settings, rounds: &[Figures]) {
    if rounds.len() < 2 {
        return;
    }
    let of = |f: fn(&Figures) -> f64| median(rounds.iter().map(f).collect());
    let seconds = of(|f| f.seconds);
    let steps = (of(|f| f.steps as f64 / f.seconds) * seconds).round() as u64;
    let medians = Figures {
        runs: (of(|f| f.runs as f64 / f.seconds) * seconds).round() as u64,
        steps,
        seconds,
        p50_ms: of(|f| f.p50_ms),
        p99_ms: of(|f| f.p99_ms),
        cpu_seconds: of(|f| f.cpu_seconds / f.steps.max(1) as f64) * steps as f64,
        faults: (of(|f| f.faults as f64 / f.steps.max(1) as f64) * steps as f64) as u64,
    };
    print(name, in_flight, settings, json!("median"), &medians);
}

/// One run (or suspend-resume cycle), to its end; how long it took. As the peer's bench
/// does (`run.start()`, `run.resume()`), each call returns once the run has settled.
async fn one(rt: &Runtime, w: &LoadedWorkflow, input: &Value, resume: bool) -> Duration {
    let started = Instant::now();
    let mut rec = rt
        .start_and_wait(w, input.clone(), None)
        .await
        .expect("start");
    if resume {
        assert_eq!(rec.status, RunStatus::Suspended);
        let req = ResumeRequest {
            step: None,
            label: None,
            foreach_index: None,
            data: json!({"add": 7}),
        };
        rec = rt.resume_and_wait(&rec.run_id, req).await.expect("resume");
    }
    assert_eq!(rec.status, RunStatus::Success, "{:?}", rec.error);
    started.elapsed()
}

/// When a measurement ends.
#[derive(Clone, Copy)]
enum Until {
    /// At this instant (each worker ends the run it is in).
    Time(Instant),
    /// After this many runs in all.
    Runs(usize),
}

/// `in_flight` workers, each starting its next run as its last one ends, until `until`; every
/// run's time. The peer's bench keeps its runs in flight the same way.
async fn workers(
    rt: &Runtime,
    w: &Arc<LoadedWorkflow>,
    s: &Scenario,
    in_flight: usize,
    until: Until,
) -> Vec<Duration> {
    let tasks: Vec<_> = (0..in_flight)
        .map(|k| {
            let (rt, w, input, resume) = (rt.clone(), w.clone(), s.input.clone(), s.resume);
            tokio::spawn(async move {
                let mut times = Vec::new();
                loop {
                    let done = match until {
                        Until::Time(t) => Instant::now() >= t && !times.is_empty(),
                        // Worker k's share of the runs: n / in_flight, one more for the first
                        // n % in_flight workers.
                        Until::Runs(n) => {
                            times.len() >= n / in_flight + usize::from(k < n % in_flight)
                        }
                    };
                    if done {
                        return times;
                    }
                    times.push(one(&rt, &w, &input, resume).await);
                }
            })
        })
        .collect();
    let mut times = Vec::new();
    for t in tasks {
        times.extend(t.await.expect("run task"));
    }
    times
}

async fn run_scenario(
    rt: &Runtime,
    dir: &std::path::Path,
    s: &Scenario,
    settings: &Settings,
) -> (usize, Figures) {
    let in_flight = settings.in_flight.unwrap_or(s.in_flight);
    let path = dir.join(format!("{}.yaml", s.name));
    std::fs::write(&path, &s.yaml).expect("write workflow");
    let w = Arc::new(rt.load_workflow(&path).await.expect("load"));
    let (warm_up, until) = match settings.runs {
        Some(n) => (Until::Runs(in_flight), Until::Runs(n)),
        None => (
            Until::Time(Instant::now() + settings.min_time / 4),
            Until::Time(Instant::now() + settings.min_time / 4 + settings.min_time),
        ),
    };
    workers(rt, &w, s, in_flight, warm_up).await;
    let start = Instant::now();
    let cpu = cpu_time();
    let faults = page_faults();
    let until = match until {
        Until::Time(_) => Until::Time(start + settings.min_time),
        runs => runs,
    };
    let mut times = workers(rt, &w, s, in_flight, until).await;
    let seconds = start.elapsed().as_secs_f64();
    let cpu_seconds = cpu_time() - cpu;
    times.sort();
    let runs = times.len() as u64;
    let figures = Figures {
        runs,
        steps: runs * s.steps,
        seconds,
        p50_ms: quantile_ms(&times, 0.5),
        p99_ms: quantile_ms(&times, 0.99),
        cpu_seconds,
        faults: page_faults() - faults,
    };
    print(s.name, in_flight, settings, json!(null), &figures);
    (in_flight, figures)
}

/// The bare invocation every floor measures: the bench's plugin, loaded once, its `inc` step
/// called on a fresh pooled instance with no engine around it.
struct Bare {
    plugin: Arc<Plugin>,
    sandbox: Sandbox,
    call: StepCall,
}

impl Bare {
    async fn load(dir: &std::path::Path, settings: &Settings) -> Arc<Self> {
        let cache = dir.join("floor-cache");
        let host =
            PluginHost::new(settings.host.clone().with_cache_dir(Some(cache))).expect("host");
        let bytes = std::fs::read(settings.plugin.1).expect("the bench's plugin");
        let plugin = host.load(&bytes, None).await.expect("load");
        let call = StepCall {
            run_id: "floor".into(),
            workflow_id: "floor".into(),
            step_path: "inc".into(),
            attempt: 0,
            input: json!({"n": 0}).into(),
            config: json!({}).into(),
            state: json!({}).into(),
            resume: None,
            foreach_index: None,
            iteration: None,
        };
        Arc::new(Bare {
            plugin,
            sandbox: Sandbox::default(),
            call,
        })
    }

    async fn invoke(&self) {
        let io = Invocation::new(Arc::new(DiscardEvents), Arc::new(NoRun));
        let r = self
            .plugin
            .execute("inc", &self.call, &self.sandbox, io)
            .await;
        assert!(r.outcome.is_ok());
    }
}

/// Runs `in_flight` tasks at once, each `spawn(k, n)`'s `n` invocations: `settings`' fixed
/// number in all, or batches of `batch` each until its timed window ends; their figures.
async fn measure_floor(
    settings: &Settings,
    in_flight: usize,
    batch: usize,
    spawn: impl Fn(usize, usize) -> tokio::task::JoinHandle<()>,
) -> Figures {
    let start = Instant::now();
    let cpu = cpu_time();
    let faults = page_faults();
    let mut steps = 0u64;
    match settings.runs {
        Some(n) => {
            let tasks: Vec<_> = (0..in_flight)
                .map(|k| spawn(k, n / in_flight + usize::from(k < n % in_flight)))
                .collect();
            for t in tasks {
                t.await.expect("floor task");
            }
            steps = n as u64;
        }
        None => {
            while start.elapsed() < settings.min_time {
                let tasks: Vec<_> = (0..in_flight).map(|k| spawn(k, batch)).collect();
                for t in tasks {
                    t.await.expect("floor task");
                }
                steps += (in_flight * batch) as u64;
            }
        }
    }
    Figures {
        runs: steps,
        steps,
        seconds: start.elapsed().as_secs_f64(),
        p50_ms: 0.0,
        p99_ms: 0.0,
        cpu_seconds: cpu_time() - cpu,
        faults: page_faults() - faults,
    }
}

async fn floor(dir: &std::path::Path, settings: &Settings) -> Figures {
    let bare = Bare::load(dir, settings).await;
    let invoke = |_: usize, n: usize| {
        let bare = bare.clone();
        tokio::spawn(async move {
            for _ in 0..n {
                bare.invoke().await;
            }
        })
    };
    for t in [invoke(0, 200), invoke(1, 200)] {
        t.await.expect("warm-up");
    }
    let figures = measure_floor(settings, 64, 50, invoke).await;
    print("floor", 64, settings, json!(null), &figures);
    figures
}

/// Where a durable floor keeps each step's record.
enum Log {
    /// A plain file: records gathered in a buffer, written and fdatasynced together.
    File {
        file: std::fs::File,
        buffer: Mutex<Vec<u8>>,
    },
    /// weft's own store, its log, pending table and checkpoints included.
    Store(SledStore),
}

/// Records appended by many tasks, made durable together by one thread: each sync covers every
/// record appended before it began, as the engine's group commit does.
struct GroupSync {
    log: Log,
    synced: tokio::sync::watch::Sender<u64>,
    /// The records appended so far (the last ticket handed out), or `u64::MAX` once the
    /// thread should stop.
    wake: (Mutex<u64>, Condvar),
}

impl GroupSync {
    /// Appends `record` as record `seq` of `run`; returns the number a sync must reach to
    /// cover it.
    fn append(&self, run: &str, seq: u64, record: &[u8]) -> u64 {
        match &self.log {
            Log::File { buffer, .. } => buffer.lock().expect("buffer").extend_from_slice(record),
            Log::Store(store) => store.append(run, (seq, 0), record).expect("append"),
        }
        let mut appended = self.wake.0.lock().expect("wake");
        *appended += 1;
        self.wake.1.notify_one();
        *appended
    }

    /// Syncs until told to stop.
    fn run(&self) {
        let mut last = 0;
        loop {
            let target = {
                let mut appended = self.wake.0.lock().expect("wake");
                while *appended == last {
                    appended = self.wake.1.wait(appended).expect("wake");
                }
                if *appended == u64::MAX {
                    return;
                }
                *appended
            };
            match &self.log {
                Log::File { file, buffer } => {
                    let bytes = std::mem::take(&mut *buffer.lock().expect("buffer"));
                    (&*file).write_all(&bytes).expect("write");
                    file.sync_data().expect("fdatasync");
                }
                Log::Store(store) => store.sync().expect("sync"),
            }
            last = target;
            self.synced.send_replace(target);
        }
    }

    fn stop(&self) {
        *self.wake.0.lock().expect("wake") = u64::MAX;
        self.wake.1.notify_one();
    }
}

/// The floor with durability and no engine (`floor_durable`, or `floor_store` through weft's
/// store), shaped as `seq10` runs: each task invokes, appends a record of a `seq10` step's
/// size and goes on (a sandboxed step may start while the transition that issued it is being
/// synced, S100), and every tenth step, as a run's end, waits for the sync that covers it.
async fn floor_durable(
    name: &'static str,
    dir: &std::path::Path,
    settings: &Settings,
) -> (usize, Figures) {
    let in_flight = settings.in_flight.unwrap_or(64);
    let bare = Bare::load(dir, settings).await;
    let log = if name == "floor_store" {
        Log::Store(SledStore::open(&dir.join("floor-store"), 64).expect("store"))
    } else {
        let file = std::fs::File::create(dir.join("floor-durable.log")).expect("log file");
        Log::File {
            file,
            buffer: Mutex::new(Vec::new()),
        }
    };
    let sync = Arc::new(GroupSync {
        log,
        synced: tokio::sync::watch::Sender::new(0),
        wake: (Mutex::new(0), Condvar::new()),
    });
    let syncing = {
        let sync = sync.clone();
        std::thread::spawn(move || sync.run())
    };
    let invoke = |k: usize, n: usize| {
        let (bare, sync) = (bare.clone(), sync.clone());
        let mut synced = sync.synced.subscribe();
        tokio::spawn(async move {
            let run = format!("floor-{k}");
            // The size of a `seq10` step's record in store format 8.
            let mut record = vec![0x90; 117];
            for seq in 1..=n as u64 {
                bare.invoke().await;
                record[..8].copy_from_slice(&seq.to_be_bytes());
                let ticket = sync.append(&run, seq, &record);
                // A run's end, every tenth step: answered once synced.
                if seq % 10 == 0 || seq == n as u64 {
                    synced.wait_for(|s| *s >= ticket).await.expect("syncing");
                }
            }
        })
    };
    for t in [invoke(in_flight, 100), invoke(in_flight + 1, 100)] {
        t.await.expect("warm-up");
    }
    let figures = measure_floor(settings, in_flight, 100, invoke).await;
    sync.stop();
    syncing.join().expect("sync thread");
    print(name, in_flight, settings, json!(null), &figures);
    (in_flight, figures)
}

fn main() {
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let picked = |name: &str| wanted.is_empty() || wanted.iter().any(|w| w == name);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let settings = Settings::from_env();
    rt.block_on(async {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = RuntimeConfig::default()
            .with_sync_writes(settings.sync)
            .with_host(settings.host.clone());
        let runtime = Runtime::open(&dir.path().join("home"), config).expect("runtime");
        let mut rounds: Vec<(String, usize, Vec<Figures>)> = Vec::new();
        for _ in 0..settings.repeat {
            let mut at = 0;
            let mut add = |name: &str, in_flight: usize, f: Figures| {
                if rounds.len() <= at {
                    rounds.push((name.to_owned(), in_flight, Vec::new()));
                }
                rounds[at].2.push(f);
                at += 1;
            };
            if picked("floor") {
                add("floor", 64, floor(dir.path(), &settings).await);
            }
            for name in ["floor_durable", "floor_store"] {
                // Not among the scenarios run by default: only when named.
                if wanted.iter().any(|w| w == name) {
                    let (in_flight, f) = floor_durable(name, dir.path(), &settings).await;
                    add(name, in_flight, f);
                }
            }
            for s in scenarios(&settings) {
                let named = wanted.iter().any(|w| w == s.name);
                if named || (picked(s.name) && !s.named_only) {
                    let (in_flight, f) = run_scenario(&runtime, dir.path(), &s, &settings).await;
                    add(s.name, in_flight, f);
                }
            }
        }
        for (name, in_flight, figures) in &rounds {
            report(name, *in_flight, &settings, figures);
        }
    });
}
