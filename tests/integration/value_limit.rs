//! One limit for every value a run makes (`--max-output-mib`): a `map`'s value is held to it as
//! a step's output is, and a run keeps the limit it started with whichever process resumes it.

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
        let out = run_weft(
            &home,
            &["resume", id, "--json", "--max-output-mib", mib],
        );
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
