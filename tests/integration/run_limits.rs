//! What one run may make and write: one limit for every value (`--max-output-mib`), a `map`'s
//! value held to it as a step's output is, and kept by the run whichever process resumes it;
//! and the bytes of records a run may write in all (`--max-run-mib`), counted across a crash.

use serde_json::Value;

use crate::torture::{Home, run_weft};

/// A run that suspends at `ask`, then makes a string of `.init.n` bytes in a map.
const ASK_THEN_MAP: &str = r#"
id: grows
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: ask, plugin: kit, step: suspend, config: { payload: { question: "grow?" } } }
  - map: { id: big, expr: '"x" * .init.n' }
"#;

/// Three MiB of text: over the default limit of 2 MiB, within 4.
const THREE_MIB: &str = r#"{"n": 3145728}"#;

/// The run's record printed by `--json`.
fn record(stdout: &str) -> Value {
    serde_json::from_str(stdout.trim()).expect("a JSON record")
}

#[test]
fn a_map_value_over_the_value_limit_fails_naming_the_limit_and_its_setting() {
    let files = Home::new();
    let file = files.file(
        "big.yaml",
        "id: big\nsteps:\n  - map: { id: big, expr: '\"x\" * .input.n' }\n",
    );
    let path = file.to_str().expect("utf-8");
    let out = run_weft(
        &files.home(),
        &["run", path, "--json", "--input", THREE_MIB],
    );
    assert_eq!(out.code, 1, "{out:?}");
    let rec = record(&out.stdout);
    assert_eq!(rec["error"]["code"], "expression-error", "{rec}");
    let message = rec["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("map big: the expression's value is larger than the limit of 2 MiB")
            && message.contains("--max-output-mib"),
        "{message}"
    );
    // Under a larger limit the same value is made and kept.
    let out = run_weft(
        &files.home(),
        &[
            "run",
            path,
            "--json",
            "--input",
            THREE_MIB,
            "--max-output-mib",
            "4",
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let rec = record(&out.stdout);
    assert_eq!(rec["result"].as_str().map(str::len), Some(3 << 20));
}

#[test]
fn a_run_keeps_its_value_limit_when_a_process_with_another_resumes_it() {
    let files = Home::new();
    let file = files.file("grows.yaml", ASK_THEN_MAP);
    let path = file.to_str().expect("utf-8");
    let home = files.home();
    let start = |id: &str, mib: &str| {
        let out = run_weft(
            &home,
            &[
                "run",
                path,
                "--run-id",
                id,
                "--json",
                "--input",
                THREE_MIB,
                "--max-output-mib",
                mib,
            ],
        );
        assert_eq!(out.code, 3, "suspended: {out:?}");
    };
    let resume = |id: &str, mib: &str| {
        let out = run_weft(&home, &["resume", id, "--json", "--max-output-mib", mib]);
        record(&out.stdout)
    };
    // Started under 4 MiB, resumed by a process of the default 2 MiB: the run's 4 MiB holds.
    start("roomy", "4");
    let rec = resume("roomy", "2");
    assert_eq!(rec["status"], "success", "{}", rec["error"]);
    assert_eq!(rec["result"].as_str().map(str::len), Some(3 << 20));
    // Started under 2 MiB, resumed by a process of 4 MiB: the run's 2 MiB holds.
    start("tight", "2");
    let rec = resume("tight", "4");
    assert_eq!(rec["status"], "failed", "{rec}");
    assert_eq!(rec["error"]["code"], "expression-error", "{rec}");
    let message = rec["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("the limit of 2 MiB"), "{message}");
}

/// A loop of plugin steps with no end but its guard: one transition per iteration.
const SPIN: &str = r#"
id: spin
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - loop:
      id: l
      do-until: 'false'
      max-iterations: 1000000
      do: { id: e, plugin: kit, step: echo }
"#;

/// The iteration a run of `SPIN` stopped at, checking it was stopped for its writes.
fn stopped_at(rec: &Value) -> u64 {
    assert_eq!(rec["status"], "failed", "{rec}");
    assert_eq!(rec["error"]["code"], "run-limit", "{rec}");
    let message = rec["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("past the 1 MiB one run may write") && message.contains("--max-run-mib"),
        "{message}"
    );
    assert_eq!(rec["steps"]["l"]["status"], "cancelled", "{rec}");
    rec["steps"]["l.e"]["iteration"]
        .as_u64()
        .expect("an iteration")
}

#[test]
fn a_run_past_the_bytes_it_may_write_is_stopped_and_the_count_survives_a_crash() {
    let files = Home::new();
    let file = files.file("spin.yaml", SPIN);
    let path = file.to_str().expect("utf-8");
    let home = files.home();
    let limit = ["--max-run-mib", "1"];
    let run = |id: &str, more: &[&str]| {
        let mut args = vec!["run", path, "--run-id", id, "--json"];
        args.extend(limit);
        args.extend(more);
        run_weft(&home, &args)
    };
    let whole = run("whole", &[]);
    assert_eq!(whole.code, 1, "{}", whole.stderr);
    let whole = stopped_at(&record(&whole.stdout));
    // Killed part-way, past a snapshot, then recovered by another process: the records written
    // before the crash still count, so it stops where the uninterrupted run did.
    let crashed = run("crashed", &["--crash-after-commits", "2000"]);
    assert_ne!(crashed.code, 0, "it crashed: {}", crashed.stderr);
    let mut args = vec!["resume", "crashed", "--json"];
    args.extend(limit);
    let recovered = run_weft(&home, &args);
    let recovered = stopped_at(&record(&recovered.stdout));
    assert!(
        recovered.abs_diff(whole) <= 2,
        "stopped at iteration {recovered} after a crash, {whole} without"
    );
}
