//! Crash recovery (S100–S104) and many runs at once.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use weft::RunStatus;

use crate::common::{Env, effects, plugin_paths, read_log};

const CRASHY: &str = r#"
id: crashy
plugins:
  kit:
    wasm: "{testkit}"
    grants: { dirs: [ { host: "./data", guest: /data, mode: rw } ] }
steps:
  - { id: s1, plugin: kit, step: append, config: { file: /data/RUN.log } }
  - { id: s2, plugin: kit, step: append, config: { file: /data/RUN.log } }
  - { id: s3, plugin: kit, step: append, config: { file: /data/RUN.log } }
  - { id: s4, plugin: kit, step: append, config: { file: /data/RUN.log } }
  - sleep: { id: nap, ms: 20 }
  - { id: s5, plugin: kit, step: append, config: { file: /data/RUN.log } }
  - { id: s6, plugin: kit, step: append, config: { file: /data/RUN.log } }
  - map: { id: out, expr: '{ n: .init.n, last: .steps.s6 }' }
"#;

/// `weft --home HOME` on the tests' backend (`--store URL`, one schema per home, in postgres
/// mode).
fn weft(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
    c.env_remove("WEFT_STORE")
        .arg("--home")
        .arg(home)
        .args(crate::common::store_args_for(home))
        .stdin(Stdio::null());
    c
}

/// A small deterministic generator, so a failure can be replayed.
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

#[test]
fn s100_s102_s104_runs_killed_at_random_moments_recover_without_rerunning_completed_steps() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("home");
    std::fs::create_dir_all(dir.path().join("data")).expect("data dir");
    let mut seed = 0x5eed_u64;
    for round in 0..10u64 {
        let run = format!("crash{round}");
        let file = dir.path().join(format!("{run}.yaml"));
        std::fs::write(&file, plugin_paths(CRASHY).replace("RUN", &run)).expect("workflow");
        let log = dir.path().join("data").join(format!("{run}.log"));
        // Kill once the step log has `after` lines: somewhere from before the first step to the
        // last one, also while a step may be mid-invocation.
        let after = (next(&mut seed) % 7) as usize;
        let mut child = weft(&home)
            .args(["run", file.to_str().expect("utf-8"), "--run-id", &run])
            .args(["--input", &format!("{{\"n\": {round}}}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn weft run");
        loop {
            if read_log(&log).len() >= after {
                break;
            }
            if child.try_wait().expect("child status").is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        // What was stored as completed before the crash never runs again.
        let shown = weft(&home)
            .args(["show", &run, "--json"])
            .output()
            .expect("show");
        let shown_record: Option<Value> = shown
            .status
            .success()
            .then(|| serde_json::from_slice(&shown.stdout).expect("record"));
        let completed: Vec<String> = if let Some(rec) = &shown_record {
            rec["steps"]
                .as_object()
                .map(|steps| {
                    steps
                        .iter()
                        .filter(|(_, s)| s["status"] == "success")
                        .map(|(p, _)| p.clone())
                        .collect()
                })
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let before = read_log(&log);
        let ended = shown_record
            .as_ref()
            .filter(|rec| rec["status"] == "success")
            .map(|rec| (rec["status"].clone(), rec["result"].clone()));
        let resumed = weft(&home)
            .args(["resume", &run, "--json"])
            .output()
            .expect("resume");
        let (status, result) = if let Some(ended) = ended {
            // The run ended before the kill: there is nothing to recover, and resume says so.
            assert!(
                !resumed.status.success(),
                "round {round}: resumed an ended run"
            );
            ended
        } else if resumed.status.success() {
            let rec: Value = serde_json::from_slice(&resumed.stdout).expect("record");
            (rec["status"].clone(), rec["result"].clone())
        } else {
            // The run had not been stored yet when it was killed: nothing to recover.
            assert!(
                !shown.status.success(),
                "round {round}: resume failed: {}",
                String::from_utf8_lossy(&resumed.stderr)
            );
            continue;
        };
        assert_eq!(status, "success", "round {round}");
        assert_eq!(result["n"], json!(round), "round {round}");
        let after_lines = read_log(&log);
        for step in ["s1", "s2", "s3", "s4", "s5", "s6"] {
            assert!(
                effects(&after_lines, step) >= 1,
                "round {round}: {step} never ran; kill after {after} lines; before {before:?} after {after_lines:?} completed {completed:?} log {}",
                log.display()
            );
            if completed.iter().any(|c| c == step) {
                assert_eq!(
                    effects(&after_lines, step),
                    effects(&before, step),
                    "round {round}: completed step {step} ran again"
                );
            } else {
                // At most the one invocation in flight at the crash runs twice (S104).
                assert!(
                    effects(&after_lines, step) <= 2,
                    "round {round}: {step} ran 3 times"
                );
            }
        }
    }
}

const EVERYTHING: &str = r#"
id: everything
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: start, plugin: kit, step: inc }
  - parallel:
      id: fan
      steps:
        - { id: two, plugin: kit, step: mul, config: { by: 2 } }
        - { id: three, plugin: kit, step: mul, config: { by: 3 } }
  - { id: total, plugin: kit, step: sum }
  - branch:
      id: route
      arms:
        - when: '.input.n % 2 == 0'
          do: { id: even, plugin: kit, step: inc }
        - when: '.input.n % 2 == 1'
          do: { id: odd, plugin: kit, step: echo }
  - map: { id: items, expr: '[range(0; 3)]' }
  - foreach:
      id: each
      concurrency: 2
      do: { id: dbl, plugin: kit, step: double }
  - map: { id: zero, expr: '{ n: 0 }' }
  - loop:
      id: count
      do-until: '.output.n >= 3'
      do: { id: tick, plugin: kit, step: inc }
  - sleep: { id: nap, ms: 1 }
  - workflow: { id: inner, file: inner.yaml }
  - map: { id: out, expr: '{ total: .steps.total.n, route: .steps.route, each: .steps.each, inner: .steps.inner }' }
"#;

const INNER: &str = r#"
id: inner
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: bump, plugin: kit, step: inc }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s11_a_thousand_concurrent_runs_of_every_entry_kind_end_with_the_right_results() {
    let env = Env::new();
    env.file("inner.yaml", INNER);
    let path = env.file("everything.yaml", EVERYTHING);
    let w = std::sync::Arc::new(env.load(&path).await);
    let mut tasks = Vec::new();
    for i in 0..1000i64 {
        let (rt, w) = (env.rt.clone(), w.clone());
        tasks.push(tokio::spawn(async move {
            let id = rt.start(&w, json!({"n": i}), None).await.expect("start");
            (i, rt.wait(&id).await.expect("wait"))
        }));
    }
    for t in tasks {
        let (i, rec) = t.await.expect("task");
        assert_eq!(rec.status, RunStatus::Success, "run {i}: {:?}", rec.error);
        let n = i + 1;
        let total = n * 2 + n * 3;
        let route = if total % 2 == 0 {
            json!({ "even": { "n": total + 1 } })
        } else {
            json!({ "odd": { "n": total } })
        };
        let result = rec.result.expect("result");
        assert_eq!(result["total"], json!(total), "run {i}");
        assert_eq!(result["route"], route, "run {i}");
        assert_eq!(result["each"], json!([0, 2, 4]), "run {i}");
        assert_eq!(result["inner"], json!({ "n": 4 }), "run {i}");
    }
}

#[test]
fn s101_weft_serve_recovers_a_run_that_no_process_drives() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("home");
    std::fs::create_dir_all(dir.path().join("data")).expect("data dir");
    let file = dir.path().join("orphan.yaml");
    std::fs::write(&file, plugin_paths(CRASHY).replace("RUN", "orphan")).expect("workflow");
    let log = dir.path().join("data").join("orphan.log");
    let mut child = weft(&home)
        .args(["run", file.to_str().expect("utf-8"), "--run-id", "orphan"])
        .args(["--input", "{\"n\": 7}"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn weft run");
    while read_log(&log).len() < 2 && child.try_wait().expect("status").is_none() {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    let shown = weft(&home)
        .args(["show", "orphan", "--json"])
        .output()
        .expect("show");
    let rec: Value = serde_json::from_slice(&shown.stdout).expect("record");
    if rec["status"] != "running" {
        // The child finished before the kill landed: nothing is orphaned this time.
        assert_eq!(rec["status"], "success");
        return;
    }
    let mut serve = weft(&home)
        .args(["serve", "--addr", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn weft serve");
    // `weft show` is served by `weft serve` through the control socket once it holds the home.
    let mut status = Value::Null;
    for _ in 0..2_000 {
        let out = weft(&home)
            .args(["show", "orphan", "--json"])
            .output()
            .expect("show");
        if out.status.success() {
            let rec: Value = serde_json::from_slice(&out.stdout).expect("record");
            status = rec["status"].clone();
            if status == "success" {
                assert_eq!(rec["result"]["n"], 7);
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    serve.kill().expect("stop serve");
    let _ = serve.wait();
    assert_eq!(status, "success", "weft serve did not recover the run");
    let stderr = serve.stderr.take().map(|mut s| {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut s, &mut text);
        text
    });
    assert!(
        stderr
            .unwrap_or_default()
            .contains("recovered 1 runs: orphan")
    );
}

/// S100, S102, S103: steps of a plugin granted nothing start before the transitions that issue
/// them are durable, and a run of them goes on without waiting for the syncs of transitions
/// nothing outside waits on. A host that dies right after any of its durable commits (the run
/// ahead of the disk by then) must leave a run that recovers to the same result, with every
/// step's end stored once and its events numbered without gap or duplicate.
#[test]
fn s100_s102_s103_a_run_ahead_of_the_disk_recovers_from_a_crash_after_any_commit() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("inner.yaml"), plugin_paths(INNER)).expect("inner");
    let file = dir.path().join("everything.yaml");
    std::fs::write(&file, plugin_paths(EVERYTHING)).expect("workflow");
    let file = file.to_str().expect("utf-8");
    let mut results = Vec::new();
    let mut crashes = 0;
    for n in 1.. {
        let home = dir.path().join(format!("home{n}"));
        let first = weft(&home)
            .args(["--crash-after-commits", &n.to_string()])
            .args([
                "run",
                file,
                "--run-id",
                "r",
                "--input",
                "{\"n\": 4}",
                "--json",
            ])
            .output()
            .expect("weft run");
        let stderr = String::from_utf8_lossy(&first.stderr);
        let record = if first.status.success() {
            serde_json::from_slice::<Value>(&first.stdout).expect("record")
        } else {
            assert!(
                stderr.contains(&format!("crashing after commit {n}")),
                "commit {n}: {stderr}"
            );
            crashes += 1;
            let resumed = weft(&home)
                .args(["resume", "r", "--json"])
                .output()
                .expect("weft resume");
            let shown = if resumed.status.success() {
                resumed
            } else {
                // The crash came after the run's last commit: it has ended already.
                weft(&home)
                    .args(["show", "r", "--json"])
                    .output()
                    .expect("weft show")
            };
            serde_json::from_slice::<Value>(&shown.stdout).expect("record")
        };
        assert_eq!(record["status"], "success", "commit {n}: {record}");
        results.push(record["result"].clone());
        let watched = weft(&home)
            .args(["watch", "r"])
            .output()
            .expect("weft watch");
        let events: Vec<Value> = String::from_utf8_lossy(&watched.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("an event"))
            .collect();
        let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
        assert_eq!(
            seqs,
            (1..=seqs.len() as u64).collect::<Vec<_>>(),
            "commit {n}: seq with a gap or a duplicate"
        );
        let mut ended = std::collections::BTreeSet::new();
        for e in events.iter().filter(|e| e["type"] == "step-succeeded") {
            let key = format!("{} {} {}", e["path"], e["foreach_index"], e["iteration"]);
            assert!(ended.insert(key), "commit {n}: a step ended twice: {e}");
        }
        if first.status.success() {
            break;
        }
    }
    assert!(crashes >= 3, "only {crashes} commits before the run ended");
    let whole = results.last().expect("a run without a crash").clone();
    for (i, r) in results.iter().enumerate() {
        assert_eq!(*r, whole, "crashed after commit {}", i + 1);
    }
}

const HELD: &str = r#"
id: held
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: w, plugin: kit, step: wait-abort, config: { chunks: ["held"], max-ms: 600000 } }
"#;

/// S91, S100, S103: a step's chunk reaches a watcher only once a sync has made it durable,
/// also while no transition of its run is syncing. A host killed the moment a watcher saw the
/// chunk (the step still in flight) leaves it stored under the seq the watcher saw, so a
/// watcher that goes on from there misses nothing and never sees that seq again for another
/// event.
#[test]
fn s91_s100_s103_a_chunk_a_watcher_saw_is_stored_under_its_seq_after_a_kill() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("home");
    let file = dir.path().join("held.yaml");
    std::fs::write(&file, plugin_paths(HELD)).expect("workflow");
    let mut child = weft(&home)
        .args(["run", file.to_str().expect("utf-8"), "--run-id", "held"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn weft run");
    // `weft run` prints each event as it is published: `[  N] step-output w "held"`.
    let stderr = child.stderr.take().expect("stderr");
    let mut seen = None;
    for line in std::io::BufReader::new(stderr).lines() {
        let line = line.expect("a line of stderr");
        if line.contains("step-output w") {
            seen = Some(line);
            break;
        }
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    let seen = seen.expect("weft run printed no step-output before it ended");
    let seq: u64 = seen
        .trim_start_matches('[')
        .split(']')
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no seq in {seen:?}"));

    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    rt.block_on(async {
        let runtime =
            weft::Runtime::open(&home, crate::common::config_for(&home)).expect("reopen the home");
        // The run is orphaned: every stored event is sent at once, and then nothing.
        let mut rx = runtime.watch("held", 1).expect("watch");
        let mut stored = Vec::new();
        while let Ok(ev) = rx.try_recv() {
            stored.push((*ev).clone());
        }
        let at = stored.iter().find(|e| e.seq == seq);
        assert!(
            at.is_some_and(|e| e.kind == weft::EventKind::StepOutput && e.data == json!("held")),
            "the watcher saw {seen:?}; stored: {:?}",
            stored
                .iter()
                .map(|e| (e.seq, e.kind, e.data.clone()))
                .collect::<Vec<_>>()
        );
    });
}

/// S100, S87: a watcher that starts while a transition is stored but not yet synced gets its
/// events only once the sync covers them, not from the store before. `weft run` follows its
/// run from the store as soon as the run started, while the first step's end may still be
/// syncing; killed the moment it printed the sleep's `step-waiting`, every step it saw start
/// must be in the stored run. Several at once, as the race needs a busy machine.
#[test]
fn s87_s100_a_watcher_reading_the_store_sees_only_durable_events() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("napper.yaml");
    std::fs::write(&file, plugin_paths(crate::driver_api::NAPPER)).expect("workflow");
    let rounds = |lane: usize| {
        for round in 0..25 {
            use std::io::BufRead;
            let home = dir.path().join(format!("home-{lane}-{round}"));
            let mut child = weft(&home)
                .args(["run", file.to_str().expect("utf-8"), "--run-id", "held"])
                .args(["--input", "{\"n\": 1}"])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn weft run");
            let stderr = child.stderr.take().expect("stderr");
            let mut started = Vec::new();
            for line in std::io::BufReader::new(stderr).lines() {
                let line = line.expect("a line of stderr");
                if let Some(rest) = line.split("] step-started ").nth(1) {
                    started.push(rest.split(' ').next().unwrap_or_default().to_owned());
                }
                if line.contains("step-waiting nap") {
                    break;
                }
            }
            child.kill().expect("SIGKILL");
            child.wait().expect("reap");
            let shown = weft(&home)
                .args(["show", "held", "--json"])
                .output()
                .expect("weft show");
            let record: Value = serde_json::from_slice(&shown.stdout).expect("record");
            for step in &started {
                assert!(
                    record["steps"].get(step).is_some(),
                    "lane {lane}, round {round}: weft run printed {step} starting, but the \
                     stored run has only {}",
                    record["steps"]
                );
            }
            assert!(started.contains(&"nap".to_owned()), "{started:?}");
        }
    };
    std::thread::scope(|s| {
        for lane in 0..3 {
            s.spawn(move || rounds(lane));
        }
    });
}

/// A workflows directory in `dir` holding `files` (name, YAML with `{testkit}`-style plugin
/// placeholders).
fn workflows_dir(dir: &Path, files: &[(&str, &str)]) -> std::path::PathBuf {
    let workflows = dir.join("workflows");
    std::fs::create_dir(&workflows).expect("workflows dir");
    for (name, yaml) in files {
        std::fs::write(workflows.join(name), plugin_paths(yaml)).expect("workflow");
    }
    workflows
}

/// Serves `home` and gives `look` the server's address while `starters` threads each start a
/// run of `body` after another; SIGKILLs the server once `look` returns, and returns what it
/// returned. A failed assertion in `look` stops the threads too, so the test ends.
fn while_starting_runs<T>(
    home: &Path,
    workflows: &Path,
    starters: usize,
    body: &str,
    look: impl FnOnce(std::net::SocketAddr) -> T,
) -> T {
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Sets its flag when dropped, also while a failed assertion unwinds.
    struct StopOnDrop<'a>(&'a AtomicBool);

    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }

    let (mut server, addr) = crate::torture::serve(home, workflows);
    let stop = AtomicBool::new(false);
    let seen = std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        for _ in 0..starters {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    if crate::torture::http(addr, "POST", "/runs", body).is_none() {
                        break;
                    }
                }
            });
        }
        let seen = look(addr);
        server.child.kill().expect("SIGKILL");
        seen
    });
    let _ = server.child.wait();
    seen
}

/// GETs `path` from the server at `addr` until `look` finds what it waits for in a `200`
/// answer's body; fails saying `never` after [`crate::torture::HANG`].
fn poll_until<T>(
    addr: std::net::SocketAddr,
    path: &str,
    never: &str,
    mut look: impl FnMut(&str) -> Option<T>,
) -> T {
    let deadline = std::time::Instant::now() + crate::torture::HANG;
    loop {
        assert!(std::time::Instant::now() < deadline, "{never}");
        let (code, body) = crate::torture::http(addr, "GET", path, "").expect("an answer");
        assert_eq!(code, 200, "{body}");
        if let Some(found) = look(&body) {
            return found;
        }
    }
}

/// A listing tells a run's status only once a sync made it durable (S100). The store holds a
/// transition, and the run's new summary, before the sync that makes them durable, so a
/// listing read from it alone could say `success` of a run that a SIGKILL then leaves
/// `running`; or list a new run, still `pending`, whose creation a SIGKILL then loses. `weft
/// serve` starts runs on eight connections while the test lists them; killed the moment a
/// listing shows a run newly succeeded, the reopened home must have it succeeded, and every run
/// that listing showed.
#[test]
fn s100_a_listing_tells_only_durable_runs_and_statuses() {
    use std::collections::{HashMap, HashSet};

    let dir = tempfile::tempdir().expect("temp dir");
    let workflows = workflows_dir(
        dir.path(),
        &[(
            "three.yaml",
            "id: three\nplugins:\n  kit: { wasm: \"{testkit}\" }\nsteps:\n  \
             - { id: a, plugin: kit, step: inc }\n  - { id: b, plugin: kit, step: inc }\n  \
             - { id: c, plugin: kit, step: inc }\n",
        )],
    );
    let statuses = |body: &str| -> HashMap<String, String> {
        let page: Value = serde_json::from_str(body).expect("a page of runs");
        page["runs"]
            .as_array()
            .expect("runs")
            .iter()
            .map(|r| {
                (
                    r["run_id"].as_str().unwrap_or_default().to_owned(),
                    r["status"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    // Large inputs make the syncs long, and so the time a new run is stored but not durable.
    let start =
        json!({ "workflow": "three", "input": { "n": 0, "pad": "x".repeat(100_000) } }).to_string();
    for round in 0..20 {
        let home = dir.path().join(format!("home-{round}"));
        let (seen, listed) = while_starting_runs(&home, &workflows, 8, &start, |addr| {
            // Every run a listing showed not yet succeeded.
            let mut unfinished = HashSet::new();
            let never =
                format!("round {round}: no listing showed a run going from running to success");
            poll_until(addr, "/runs?limit=1000", &never, |body| {
                let now = statuses(body);
                let newly = now
                    .iter()
                    .find(|(id, status)| *status == "success" && unfinished.contains(*id));
                if let Some((id, _)) = newly {
                    return Some((id.clone(), now.into_keys().collect::<Vec<_>>()));
                }
                unfinished.extend(
                    now.into_iter()
                        .filter(|(_, status)| status != "success")
                        .map(|(id, _)| id),
                );
                None
            })
        });
        let shown = weft(&home)
            .args(["show", &seen, "--json"])
            .output()
            .expect("weft show");
        let record: Value = serde_json::from_slice(&shown.stdout).expect("record");
        assert_eq!(
            record["status"], "success",
            "round {round}: a listing showed {seen} succeeded, but the reopened home has it {}",
            record["status"]
        );
        let stored = weft(&home).arg("runs").output().expect("weft runs");
        let stored = String::from_utf8_lossy(&stored.stdout);
        for id in &listed {
            assert!(
                stored.contains(id.as_str()),
                "round {round}: a listing showed {id}, but the reopened home has no such run"
            );
        }
    }
}

/// A run's record shows only what a sync made durable (S100), also a transition that emitted
/// no event: inside a foreach item, a step's end and the next step's start are such a
/// transition. `weft serve` drives a foreach of five-step items, beside other runs, while the
/// test reads the run's record; killed the moment the record shows more items past their first
/// step, the reopened home must have at least as many.
#[test]
fn s31_s100_a_run_record_shows_only_durable_steps() {
    use crate::torture::http;

    let dir = tempfile::tempdir().expect("temp dir");
    let workflows = workflows_dir(
        dir.path(),
        &[
            (
                "items.yaml",
                "id: items\nplugins:\n  kit: { wasm: \"{testkit}\" }\nsteps:\n  - foreach:\n      \
                 id: f\n      concurrency: 1\n      do:\n        \
                 - { id: a, plugin: kit, step: inc }\n        - { id: b, plugin: kit, step: inc }\n        \
                 - { id: c, plugin: kit, step: inc }\n        - { id: d, plugin: kit, step: inc }\n        \
                 - { id: e, plugin: kit, step: inc }\n",
            ),
            (
                "bulky.yaml",
                "id: bulky\nsteps:\n  - map: { id: m, expr: '{ n: 1 }' }\n",
            ),
        ],
    );
    let past_a = |record: &Value| {
        record["steps"]["f.a"]["items"]
            .as_array()
            .map_or(0, |items| {
                items.iter().filter(|i| i["status"] == "success").count()
            })
    };
    let items: Vec<Value> = (0..100).map(|n| json!({ "n": n })).collect();
    let watched = json!({ "workflow": "items", "input": items, "run_id": "watched" }).to_string();
    let bulky = json!({ "workflow": "bulky", "input": "x".repeat(200_000) }).to_string();
    for round in 0..20 {
        let home = dir.path().join(format!("home-{round}"));
        // Other runs, with large inputs, make the syncs long.
        let shown = while_starting_runs(&home, &workflows, 4, &bulky, |addr| {
            let (code, body) = http(addr, "POST", "/runs", &watched).expect("started");
            assert_eq!(code, 201, "{body}");
            let mut before = None;
            let never = format!("round {round}: the record never showed an item moving on");
            poll_until(addr, "/runs/watched", &never, |body| {
                let record: Value = serde_json::from_str(body).expect("a record");
                assert_ne!(
                    record["status"], "success",
                    "round {round}: the run ended before its record showed an item moving on"
                );
                let now = past_a(&record);
                if before.is_some_and(|b| now > b) {
                    return Some(now);
                }
                before = Some(now);
                None
            })
        });
        let out = weft(&home)
            .args(["show", "watched", "--json"])
            .output()
            .expect("weft show");
        let stored = past_a(&serde_json::from_slice(&out.stdout).expect("record"));
        assert!(
            stored >= shown,
            "round {round}: the record showed {shown} items past their first step, but the \
             reopened home has {stored}"
        );
    }
}
