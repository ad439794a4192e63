//! Plugin and workflow costs: `cargo bench --bench plugin`.
//!
//! Prints one line per figure — name, median, iterations — for:
//! compiling the testkit plugin into a fresh cache, loading it from the disk cache in a fresh
//! host, instantiating and invoking the trivial step `inc` with the pooling allocator and with
//! on-demand allocation (and in the lean component `leankit`, pooled), one `Plugin::execute` end to end as the engine makes it (event log,
//! abort handle, deadline, step context with state and config), and a ten-step sequential
//! workflow run end to end through [`Runtime`] on the sled store (per run and per step).
//!
//! The whole bench stays well under two minutes (a few seconds on a quiet machine): five
//! compilations, fifteen cache loads, some fifteen thousand invocations, six hundred runs.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use weft::RunStatus;
use weft::StepCall;
use weft::internal::{DiscardEvents, EventLog, NoRun};
use weft::internal::{Plugin, Sandbox};
use weft::{AbortHandle, Invocation};
use weft::{HostConfig, PluginHost};
use weft::{Runtime, RuntimeConfig};

/// The allocator the `weft` binary uses.
#[global_allocator]
static ALLOC: weft::MeteredAlloc<mimalloc::MiMalloc> = weft::MeteredAlloc(mimalloc::MiMalloc);

/// Compilations from scratch (each is slow).
const COMPILES: usize = 5;
/// Loads from the disk cache, each in a fresh host.
const CACHE_LOADS: usize = 15;
/// Untimed invocations before measuring.
const WARMUP: usize = 200;
/// Timed invocations per figure.
const INVOCATIONS: usize = 5000;
/// Untimed workflow runs before measuring.
const RUN_WARMUP: usize = 20;
/// Timed workflow runs per figure.
const RUNS: usize = 300;
/// Steps of the sequential workflow.
const STEPS: usize = 10;

fn main() {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    tokio.block_on(bench());
}

async fn bench() {
    let wasm = std::fs::read(weft_guests::TESTKIT).expect("read the testkit plugin");
    let scratch = tempfile::tempdir().expect("temp dir");
    println!("{:<52} {:>12} {:>6}", "figure", "median", "iters");

    // Compile from scratch into a fresh cache, in a fresh host each time.
    let mut compile = Vec::new();
    let mut warm_cache = None;
    for i in 0..COMPILES {
        let cache = scratch.path().join(format!("compile-{i}"));
        let host = host_with(Some(&cache), true);
        let started = Instant::now();
        host.load(&wasm, None).await.expect("compile testkit");
        compile.push(started.elapsed());
        assert_eq!(host.compilations(), 1, "a fresh cache compiles");
        warm_cache = Some(cache);
    }
    report("compile testkit into a fresh cache", &compile);
    let cache = warm_cache.expect("at least one compilation");

    // Load from the disk cache in a fresh host (no compilation).
    let mut cached = Vec::new();
    for _ in 0..CACHE_LOADS {
        let host = host_with(Some(&cache), true);
        let started = Instant::now();
        host.load(&wasm, None)
            .await
            .expect("load testkit from the cache");
        cached.push(started.elapsed());
        assert_eq!(host.compilations(), 0, "a warm cache does not compile");
    }
    report("load testkit from the disk cache (fresh host)", &cached);

    // Instantiate + invoke `inc`: pooling allocator vs on-demand.
    let sandbox = Sandbox::default();
    let call = step_call(json!({"n": 41}), json!({}), json!({}));
    for (pooled, name) in [
        (true, "execute inc, pooling allocator"),
        (false, "execute inc, on-demand allocation"),
    ] {
        let host = host_with(Some(&cache), pooled);
        assert_eq!(host.is_pooled(), pooled, "the allocator asked for");
        let plugin = host.load(&wasm, None).await.expect("load testkit");
        let times = measure(WARMUP, INVOCATIONS, || {
            let io = Invocation::new(Arc::new(DiscardEvents), Arc::new(NoRun));
            invoke_inc(&plugin, &call, &sandbox, io)
        })
        .await;
        report(name, &times);
    }

    // The same `inc` in a lean component (the Rust SDK without std or WASI: leankit, the
    // workflow bench's plugin), pooled.
    {
        let lean = std::fs::read(weft_guests::LEANKIT).expect("read the leankit plugin");
        let host = host_with(Some(&cache), true);
        let plugin = host.load(&lean, None).await.expect("load leankit");
        let times = measure(WARMUP, INVOCATIONS, || {
            let io = Invocation::new(Arc::new(DiscardEvents), Arc::new(NoRun));
            invoke_inc(&plugin, &call, &sandbox, io)
        })
        .await;
        report("execute inc, lean component (leankit), pooling", &times);
    }

    // One `Plugin::execute` end to end as the engine makes it: an event log, an abort handle,
    // a deadline, a step context carrying state and config, the result checked.
    {
        let host = host_with(Some(&cache), true);
        let plugin = host.load(&wasm, None).await.expect("load testkit");
        let sandbox: Sandbox = serde_json::from_value(json!({
            "limits": {"memory-mib": 64, "timeout-ms": 10000}
        }))
        .expect("sandbox");
        plugin.prepare(&sandbox).await.expect("prepare");
        let call = step_call(
            json!({"n": 41, "note": "x".repeat(64)}),
            json!({"unused": true}),
            json!({"approvals": 1, "seen": [1, 2, 3]}),
        );
        let abort = AbortHandle::new();
        let times = measure(WARMUP, INVOCATIONS, || {
            let io = Invocation::new(Arc::new(EventLog::new()), Arc::new(NoRun))
                .with_abort(abort.child())
                .with_deadline(Some(Duration::from_secs(10)));
            invoke_inc(&plugin, &call, &sandbox, io)
        })
        .await;
        report("Plugin::execute inc end to end (engine-style)", &times);
    }

    // A ten-step sequential workflow through the runtime on the sled store.
    let steps: String = (1..=STEPS)
        .map(|i| format!("  - {{ id: s{i}, plugin: kit, step: inc }}\n"))
        .collect();
    let yaml = format!(
        "id: inc{STEPS}\nplugins:\n  kit: {{ wasm: \"{}\" }}\nsteps:\n{steps}",
        weft_guests::TESTKIT
    );
    let file = scratch.path().join("inc10.yaml");
    std::fs::write(&file, yaml).expect("write the workflow");
    for sync_writes in [true, false] {
        let mut config = RuntimeConfig::default();
        config.host.cache_dir = Some(cache.clone());
        config.sync_writes = sync_writes;
        let home = scratch.path().join(format!("home-sync-{sync_writes}"));
        let rt = Runtime::open(&home, config).expect("open the runtime");
        let workflow = rt.load_workflow(&file).await.expect("load the workflow");
        let times = measure(RUN_WARMUP, RUNS, || async {
            let id = rt
                .start(&workflow, json!({"n": 0}), None)
                .await
                .expect("start");
            let record = rt.wait(&id).await.expect("wait");
            assert_eq!(record.status, RunStatus::Success);
            assert_eq!(record.result, Some(json!({"n": STEPS})));
        })
        .await;
        let fsync = if sync_writes { "fsync on" } else { "fsync off" };
        report(
            &format!("workflow of {STEPS} inc steps, per run ({fsync})"),
            &times,
        );
        let per_step: Vec<Duration> = times.iter().map(|t| *t / STEPS as u32).collect();
        report(
            &format!("workflow of {STEPS} inc steps, per step ({fsync})"),
            &per_step,
        );
    }
}

/// A plugin host with its own cache directory, pooled or on demand.
fn host_with(cache: Option<&Path>, pooled: bool) -> PluginHost {
    let config = HostConfig::default().with_cache_dir(cache.map(Path::to_path_buf));
    let pool = config.pool.clone().with_enabled(pooled);
    PluginHost::new(config.with_pool(pool)).expect("plugin host")
}

fn step_call(input: Value, config: Value, state: Value) -> StepCall {
    StepCall {
        run_id: "01BENCH".to_string(),
        workflow_id: "bench".to_string(),
        step_path: "inc".to_string(),
        attempt: 0,
        input: input.into(),
        config: config.into(),
        state: state.into(),
        resume: None,
        foreach_index: None,
        iteration: None,
    }
}

/// Runs `inc` once and checks it succeeded.
async fn invoke_inc(plugin: &Plugin, call: &StepCall, sandbox: &Sandbox, io: Invocation) {
    let result = plugin.execute("inc", call, sandbox, io).await;
    if let Err(failure) = &result.outcome {
        panic!("inc failed: {failure:?}");
    }
}

/// Runs `f` `warmup` times untimed, then `iters` times timed.
async fn measure<F, Fut>(warmup: usize, iters: usize, mut f: F) -> Vec<Duration>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    for _ in 0..warmup {
        f().await;
    }
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        let started = Instant::now();
        f().await;
        times.push(started.elapsed());
    }
    times
}

/// Prints `name`, the median and the number of iterations.
fn report(name: &str, times: &[Duration]) {
    let mut sorted = times.to_vec();
    sorted.sort();
    let median = match sorted.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2,
    };
    println!(
        "{name:<52} {:>12} {:>6}",
        format_duration(median),
        times.len()
    );
}

fn format_duration(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 1e6 {
        format!("{:.3} s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.3} ms", us / 1e3)
    } else {
        format!("{us:.1} µs")
    }
}
