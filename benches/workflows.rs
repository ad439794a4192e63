//! Workflow throughput: `cargo bench --bench workflows -- [SCENARIO...]`.
//!
//! Every scenario runs plugin steps (testkit, a fresh sandboxed instance per invocation) on the
//! durable sled store with fsynced transitions, many runs in flight at once (as a server holds
//! them; concurrent runs share fsyncs), after a warm-up,
//! for at least two seconds, and prints one JSON line:
//! `{"scenario", "runs", "steps", "seconds", "runs_per_s", "steps_per_s", "rss_mb"}`.
//! `floor` is the bare cost of one fresh pooled instance and one trivial `execute`, with no
//! engine and no store, measured in the same process so the engine's overhead shows as a ratio.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use weft::driver::{Runtime, RuntimeConfig};
use weft::engine::invocation::StepCall;
use weft::engine::{ResumeRequest, RunStatus};
use weft::plugin::{DiscardEvents, HostConfig, Invocation, NoRun, PluginHost, Sandbox};
use weft::workflow::LoadedWorkflow;

/// The allocator the `weft` binary uses.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const MIN_TIME: Duration = Duration::from_secs(2);

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
}

fn scenarios() -> Vec<Scenario> {
    let plugin = format!(
        "plugins:\n  kit: {{ wasm: \"{}\" }}\n",
        weft_guests::TESTKIT
    );
    let seq10: String = (0..10)
        .map(|i| format!("  - {{ id: s{i}, plugin: kit, step: inc }}\n"))
        .collect();
    let arms: String = (0..8)
        .map(|k| {
            format!(
                "        - {{ id: a{k}, plugin: kit, step: mul, config: {{ by: {} }} }}\n",
                k + 1
            )
        })
        .collect();
    vec![
        Scenario {
            name: "seq10",
            yaml: format!("id: seq10\n{plugin}steps:\n{seq10}"),
            input: json!({"n": 0}),
            steps: 10,
            in_flight: 256,
            resume: false,
        },
        Scenario {
            name: "foreach1000",
            yaml: format!(
                "id: foreach1000\n{plugin}steps:\n  - foreach:\n      id: each\n      concurrency: 10\n      do: {{ id: double, plugin: kit, step: double }}\n"
            ),
            input: json!((1..=1000).collect::<Vec<u32>>()),
            steps: 1000,
            in_flight: 16,
            resume: false,
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
        },
    ]
}

fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn print(name: &str, runs: u64, steps: u64, seconds: f64) {
    let line = json!({
        "scenario": name,
        "runs": runs,
        "steps": steps,
        "seconds": (seconds * 1000.0).round() / 1000.0,
        "runs_per_s": (runs as f64 / seconds).round(),
        "steps_per_s": (steps as f64 / seconds).round(),
        "rss_mb": (rss_mb() * 10.0).round() / 10.0,
    });
    println!("{line}");
}

async fn one(rt: &Runtime, w: &LoadedWorkflow, input: &Value, resume: bool) {
    let id = rt.start(w, input.clone(), None).await.expect("start");
    let mut rec = rt.wait(&id).await.expect("wait");
    if resume {
        assert_eq!(rec.status, RunStatus::Suspended);
        let req = ResumeRequest {
            step: None,
            label: None,
            foreach_index: None,
            data: json!({"add": 7}),
        };
        rt.resume(&id, req).await.expect("resume");
        rec = rt.wait(&id).await.expect("wait");
    }
    assert_eq!(rec.status, RunStatus::Success, "{:?}", rec.error);
}

async fn batch(rt: &Runtime, w: &Arc<LoadedWorkflow>, s: &Scenario) {
    let mut tasks = Vec::with_capacity(s.in_flight);
    for _ in 0..s.in_flight {
        let (rt, w, input, resume) = (rt.clone(), w.clone(), s.input.clone(), s.resume);
        tasks.push(tokio::spawn(
            async move { one(&rt, &w, &input, resume).await },
        ));
    }
    for t in tasks {
        t.await.expect("run task");
    }
}

async fn run_scenario(rt: &Runtime, dir: &std::path::Path, s: &Scenario) {
    let path = dir.join(format!("{}.yaml", s.name));
    std::fs::write(&path, &s.yaml).expect("write workflow");
    let w = Arc::new(rt.load_workflow(&path).await.expect("load"));
    batch(rt, &w, s).await;
    let start = Instant::now();
    let mut runs = 0u64;
    while start.elapsed() < MIN_TIME {
        batch(rt, &w, s).await;
        runs += s.in_flight as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    print(s.name, runs, runs * s.steps, secs);
}

async fn floor(dir: &std::path::Path) {
    let host = PluginHost::new(HostConfig::default().with_cache_dir(Some(dir.join("floor-cache"))))
        .expect("host");
    let bytes = std::fs::read(weft_guests::TESTKIT).expect("testkit");
    let plugin = host.load(&bytes, None).await.expect("load");
    let sandbox = Arc::new(Sandbox::default());
    let call = StepCall {
        run_id: "floor".into(),
        workflow_id: "floor".into(),
        step_path: "inc".into(),
        attempt: 0,
        input: json!({"n": 0}),
        config: json!({}),
        state: json!({}),
        resume: None,
        foreach_index: None,
        iteration: None,
    };
    let invoke = |n: usize| {
        let (plugin, sandbox, call) = (plugin.clone(), sandbox.clone(), call.clone());
        tokio::spawn(async move {
            for _ in 0..n {
                let io = Invocation::new(Arc::new(DiscardEvents), Arc::new(NoRun));
                let r = plugin.execute("inc", &call, &sandbox, io).await;
                assert!(r.outcome.is_ok());
            }
        })
    };
    for t in [invoke(200), invoke(200)] {
        t.await.expect("warm-up");
    }
    let start = Instant::now();
    let mut steps = 0u64;
    while start.elapsed() < MIN_TIME {
        let tasks: Vec<_> = (0..64).map(|_| invoke(50)).collect();
        for t in tasks {
            t.await.expect("floor task");
        }
        steps += 64 * 50;
    }
    print("floor", steps, steps, start.elapsed().as_secs_f64());
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
    rt.block_on(async {
        let dir = tempfile::tempdir().expect("temp dir");
        if picked("floor") {
            floor(dir.path()).await;
        }
        let runtime =
            Runtime::open(&dir.path().join("home"), RuntimeConfig::default()).expect("runtime");
        for s in scenarios() {
            if picked(s.name) {
                run_scenario(&runtime, dir.path(), &s).await;
            }
        }
    });
}
