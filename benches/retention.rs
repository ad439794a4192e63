//! Whether retention keeps a home flat: `cargo bench --bench retention`.
//!
//! The bench opens a `Runtime` on a fresh home with a `ManualClock` and runs
//! `WEFT_BENCH_RETENTION_RUNS` runs (default 100,000) of a workflow of three sequential testkit
//! steps (`inc`, as `benches/workflows.rs` runs them), in batches of `WEFT_BENCH_INFLIGHT`
//! (default 64) started at once with `start_and_wait`, each on a task of its own. After each
//! batch the clock moves one second on, so a run's age is counted in batches. Two series:
//! - `retention`: the runtime's retention (`RuntimeConfig::with_retention`) is
//!   `WEFT_BENCH_RETENTION_BATCHES` seconds (default a tenth of the series' batches: about
//!   10,000 runs of 100,000), and every `WEFT_BENCH_PRUNE_EVERY` batches (default 1 % of the
//!   runs) the bench calls `Runtime::prune_expired`; the runtime's own background prune runs
//!   too, on the wall clock, at a tenth of the retention (between 0.1 and 60 s), as it would in
//!   a server. The runs stored should settle at the retention's runs plus at most one prune
//!   interval's, and the home's size with them.
//! - `baseline`: the same without a retention and with no prune, up to
//!   `WEFT_BENCH_RETENTION_BASELINE_RUNS` runs (default the same count; 0 skips it): what the
//!   home grows to when nothing is deleted.
//!
//! Every `WEFT_BENCH_RETENTION_EVERY` runs (default 10,000, or a tenth of the runs when there
//! are fewer than 100,000) and at the end, one JSON line: `series`, `store`, `runs_done`,
//! `runs_stored` (`Runtime::runs`), `home_bytes` (the apparent size of every file under the
//! home) and `home_allocated_bytes` (the blocks the file system holds for them), `parts` (the
//! bytes of each top-level entry of the home: `db/` is sled's own files, `values/` the values
//! files of checkpointed records, `wal/` the log, `blobs/` the definitions and components,
//! `cache/` the compiled plugin), `files` (how many files each part holds), `prunes` (the
//! bench's calls of `prune_expired` so far), `last_prune` (the last one's `PruneReport`:
//! runs deleted and kept, blobs removed, bytes given back), `prune_ms` (how long it took) and
//! `seconds` since the series began. The sizes are read between batches, with no run in flight.
//! Then a markdown table of both series by runs done.
//!
//! With `WEFT_BENCH_POSTGRES=1` the store is PostgreSQL instead: a throwaway cluster of the
//! bench's own (`benches/support/pg_bench.rs`, as `benches/workers.rs` starts it: `fsync` and
//! `synchronous_commit` on), a schema per series (`retention`, `baseline`), the runtime
//! driving the runs itself (no `weft worker`). Each line adds `runs_table` and `records_table`,
//! the `pg_stat_user_tables` figures of those tables (`n_live_tup`, `n_dead_tup`, updates,
//! autovacuums; `heap_bytes` is `pg_relation_size`, `total_bytes` `pg_total_relation_size`,
//! TOAST and indexes with it), `schema_bytes` (the same total of every table of the series'
//! schema) and `database_bytes` (`pg_database_size`: both series' schemas and PostgreSQL's own
//! catalogs). The bench does not vacuum: the room of deleted rows is reused once autovacuum has
//! been through (the cluster's defaults, `autovacuum_naptime` 60 s), so a table settles at
//! about twice its live rows' size. The statistics reach `pg_stat_user_tables` up to a second
//! after their transaction.
//!
//! How to read it: with retention on, `runs_stored` and every size should stop growing once the
//! first runs have aged past the retention (by the second line at the defaults) and move only
//! within a prune interval's worth from then on; the baseline's grow in proportion to the runs.
//! Sizes do not depend on the build: `--profile dev` measures them as a release build does, and
//! builds in a minute where the release profile's fat LTO takes about twenty. On a 2-core
//! machine in the dev profile a series of 100,000 runs takes 5 to 8 minutes on sled and 15 on
//! PostgreSQL. The figures of 2026-12-07 are in `docs/PERFORMANCE.md` ("Retention: the home
//! stays flat").

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use weft::{LoadedWorkflow, ManualClock, PruneReport, RunStatus, Runtime, RuntimeConfig};

#[path = "support/pg_bench.rs"]
mod pg_bench;

use pg_bench::{Cluster, table_stats};

/// The allocator the `weft` binary uses.
#[global_allocator]
static ALLOC: weft::MeteredAlloc<mimalloc::MiMalloc> = weft::MeteredAlloc(mimalloc::MiMalloc);

/// How far the manual clock moves after each batch.
const STEP: Duration = Duration::from_secs(1);

/// The parts of a home every line names, present or not.
const PARTS: [&str; 4] = ["db", "values", "wal", "blobs"];

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().filter(|v| !v.is_empty()).map(|v| {
        v.parse::<u64>()
            .unwrap_or_else(|_| panic!("{name}={v} is not a whole number"))
    })
}

/// What the environment asks of this bench (see the module docs).
struct Settings {
    runs: u64,
    baseline_runs: u64,
    in_flight: u64,
    /// The retention, in batches (seconds of the manual clock).
    retention_batches: u64,
    /// Batches between two calls of `prune_expired`.
    prune_every: u64,
    /// Runs between two lines.
    every: u64,
    postgres: bool,
}

impl Settings {
    fn from_env() -> Self {
        let runs = env_number("WEFT_BENCH_RETENTION_RUNS")
            .unwrap_or(100_000)
            .max(1);
        let in_flight = env_number("WEFT_BENCH_INFLIGHT").unwrap_or(64).max(1);
        let batches = runs.div_ceil(in_flight);
        Settings {
            runs,
            baseline_runs: env_number("WEFT_BENCH_RETENTION_BASELINE_RUNS").unwrap_or(runs),
            in_flight,
            retention_batches: env_number("WEFT_BENCH_RETENTION_BATCHES")
                .unwrap_or(batches / 10)
                .max(1),
            prune_every: env_number("WEFT_BENCH_PRUNE_EVERY")
                .unwrap_or_else(|| (runs / 100).div_ceil(in_flight))
                .max(1),
            every: env_number("WEFT_BENCH_RETENTION_EVERY")
                .unwrap_or((runs / 10).clamp(1, 10_000))
                .max(1),
            postgres: std::env::var("WEFT_BENCH_POSTGRES").is_ok_and(|v| v == "1"),
        }
    }
}

/// Where the runs are stored.
enum Store<'a> {
    Sled,
    Postgres {
        cluster: &'a Cluster,
        db: &'a tokio_postgres::Client,
    },
}

impl Store<'_> {
    fn name(&self) -> &'static str {
        match self {
            Store::Sled => "sled",
            Store::Postgres { .. } => "postgres",
        }
    }
}

/// The apparent bytes, the allocated bytes and the number of the files under `path`.
fn tree_size(path: &Path) -> (u64, u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return (0, 0, 0);
    };
    if !meta.is_dir() {
        return (meta.len(), meta.blocks() * 512, 1);
    }
    let mut sum = (0, 0, 0);
    for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
        let (bytes, allocated, files) = tree_size(&entry.path());
        sum = (sum.0 + bytes, sum.1 + allocated, sum.2 + files);
    }
    sum
}

/// The home's sizes: in all, and by top-level entry.
fn home_sizes(home: &Path) -> Value {
    let mut parts: BTreeMap<String, u64> = PARTS.iter().map(|p| (p.to_string(), 0)).collect();
    let mut files: BTreeMap<String, u64> = parts.clone();
    for entry in std::fs::read_dir(home).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let (bytes, _, count) = tree_size(&entry.path());
        parts.insert(name.clone(), bytes);
        files.insert(name, count);
    }
    let (bytes, allocated, _) = tree_size(home);
    json!({
        "home_bytes": bytes,
        "home_allocated_bytes": allocated,
        "parts": parts,
        "files": files,
    })
}

/// `n` sequential testkit `inc` steps.
fn workflow_yaml(n: usize) -> String {
    let steps: String = (0..n)
        .map(|i| format!("  - {{ id: s{i}, plugin: kit, step: inc }}\n"))
        .collect();
    format!(
        "id: seq{n}\nplugins:\n  kit: {{ wasm: \"{}\" }}\nsteps:\n{steps}",
        weft_guests::TESTKIT
    )
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// One series: `runs` runs on a fresh home (and schema), pruned when `retention` is given; its
/// lines.
async fn series(
    store: &Store<'_>,
    settings: &Settings,
    name: &'static str,
    runs: u64,
    retention: Option<Duration>,
) -> Vec<Value> {
    let dir = tempfile::Builder::new()
        .prefix("weft-bench-retention-")
        .tempdir()
        .expect("temp dir");
    let home = dir.path().join("home");
    let clock = ManualClock::new(now_ms());
    let mut config = RuntimeConfig::default().with_clock(clock.clone());
    if let Some(r) = retention {
        config = config.with_retention(r);
    }
    if let Store::Postgres { cluster, .. } = store {
        config = config.with_store(cluster.url(name));
    }
    let rt = Runtime::open(&home, config).expect("runtime");
    let path = dir.path().join("seq3.yaml");
    std::fs::write(&path, workflow_yaml(3)).expect("write workflow");
    let w: Arc<LoadedWorkflow> = Arc::new(rt.load_workflow(&path).await.expect("load"));
    eprintln!(
        "{name} on {}: {runs} runs, {} in flight{}",
        store.name(),
        settings.in_flight,
        match retention {
            Some(r) => format!(
                ", retention {} s, prune_expired every {} batches",
                r.as_secs(),
                settings.prune_every
            ),
            None => ", no retention".into(),
        }
    );

    let started = Instant::now();
    let mut lines = Vec::new();
    let (mut done, mut batches, mut prunes) = (0u64, 0u64, 0u64);
    let mut last_prune: Option<(PruneReport, Duration)> = None;
    let mut next_line = settings.every.min(runs);
    while done < runs {
        let n = settings.in_flight.min(next_line - done);
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let (rt, w) = (rt.clone(), w.clone());
                tokio::spawn(async move { rt.start_and_wait(&w, json!({"n": 0}), None).await })
            })
            .collect();
        for t in tasks {
            let record = t.await.expect("run task").expect("start");
            assert_eq!(record.status, RunStatus::Success, "{:?}", record.error);
        }
        done += n;
        batches += 1;
        clock.advance(STEP.as_millis() as u64);
        if retention.is_some() && batches % settings.prune_every == 0 {
            let t = Instant::now();
            let report = rt.prune_expired().await.expect("prune");
            last_prune = Some((report, t.elapsed()));
            prunes += 1;
        }
        if done == next_line {
            let stored = rt.runs(None, None).expect("runs").len();
            let mut line = json!({
                "series": name,
                "store": store.name(),
                "runs_done": done,
                "runs_stored": stored,
            });
            let sizes = home_sizes(&home);
            for (k, v) in sizes.as_object().expect("sizes") {
                line[k] = v.clone();
            }
            line["prunes"] = json!(prunes);
            line["last_prune"] = match &last_prune {
                Some((r, _)) => serde_json::to_value(r).expect("report"),
                None => Value::Null,
            };
            line["prune_ms"] = json!(last_prune.as_ref().map(|(_, t)| t.as_millis() as u64));
            if let Store::Postgres { db, .. } = store {
                line["runs_table"] = table_stats(db, name, "runs").await;
                line["records_table"] = table_stats(db, name, "records").await;
                let size = db
                    .query_one(
                        "SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::int8, \
                         pg_database_size(current_database()) FROM pg_class c \
                         JOIN pg_namespace n ON n.oid = c.relnamespace \
                         WHERE n.nspname = $1 AND c.relkind = 'r'",
                        &[&name],
                    )
                    .await
                    .expect("schema size");
                line["schema_bytes"] = json!(size.get::<_, i64>(0));
                line["database_bytes"] = json!(size.get::<_, i64>(1));
            }
            line["seconds"] = json!((started.elapsed().as_secs_f64() * 10.0).round() / 10.0);
            println!("{line}");
            lines.push(line);
            next_line = (next_line + settings.every).min(runs);
        }
    }
    rt.close().await;
    drop(rt);
    lines
}

fn mib(v: &Value) -> String {
    v.as_u64().map_or("–".into(), |b| {
        format!("{:.2}", b as f64 / (1 << 20) as f64)
    })
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "–".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A markdown table of both series, a row per line of either, by runs done.
fn table(retention: &[Value], baseline: &[Value], postgres: bool) {
    let mut rows: BTreeMap<u64, [Option<&Value>; 2]> = BTreeMap::new();
    for (i, lines) in [retention, baseline].into_iter().enumerate() {
        for l in lines {
            let done = l["runs_done"].as_u64().expect("runs_done");
            rows.entry(done).or_default()[i] = Some(l);
        }
    }
    let side = |l: Option<&Value>| -> String {
        let Some(l) = l else {
            return " | | | | | | ".into();
        };
        if postgres {
            let (r, rec) = (&l["runs_table"], &l["records_table"]);
            format!(
                " {} | {} | {} | {}/{} | {} | {}/{} | {} ",
                cell(&l["runs_stored"]),
                mib(&r["total_bytes"]),
                cell(&r["autovacuums"]),
                cell(&r["n_live_tup"]),
                cell(&r["n_dead_tup"]),
                mib(&rec["total_bytes"]),
                cell(&rec["n_live_tup"]),
                cell(&rec["n_dead_tup"]),
                mib(&l["schema_bytes"]),
            )
        } else {
            let p = &l["parts"];
            format!(
                " {} | {} | {} | {} | {} | {} | {} ",
                cell(&l["runs_stored"]),
                mib(&l["home_bytes"]),
                mib(&p["db"]),
                mib(&p["values"]),
                mib(&p["wal"]),
                mib(&p["blobs"]),
                cell(&l["files"]["values"]),
            )
        }
    };
    println!();
    if postgres {
        println!(
            "| runs done | retention: stored | `runs` MiB | `runs` autovacuums | `runs` live/dead | \
             `records` MiB | `records` live/dead | schema MiB | no retention: stored | `runs` MiB | \
             `runs` autovacuums | `runs` live/dead | `records` MiB | `records` live/dead | schema MiB |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    } else {
        println!(
            "| runs done | retention: stored | home MiB | db/ | values/ | wal/ | blobs/ | values files | \
             no retention: stored | home MiB | db/ | values/ | wal/ | blobs/ | values files |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    }
    for (done, [r, b]) in rows {
        println!("| {done} |{}|{}|", side(r), side(b));
    }
}

fn main() {
    let settings = Settings::from_env();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let cluster = settings.postgres.then(Cluster::start);
    tokio.block_on(async {
        let db = match &cluster {
            Some(c) => Some(c.client().await),
            None => None,
        };
        let store = match (&cluster, &db) {
            (Some(cluster), Some(db)) => Store::Postgres { cluster, db },
            _ => Store::Sled,
        };
        let retention = STEP * settings.retention_batches as u32;
        let with = series(
            &store,
            &settings,
            "retention",
            settings.runs,
            Some(retention),
        )
        .await;
        let without = if settings.baseline_runs > 0 {
            series(&store, &settings, "baseline", settings.baseline_runs, None).await
        } else {
            Vec::new()
        };
        table(&with, &without, settings.postgres);
    });
    drop(cluster);
}
