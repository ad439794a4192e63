//! A jq expression that would take the host's memory fails its step instead, in the `weft`
//! binary (whose allocator measures evaluations) and in the embedding API alike: a value doubled
//! step by step, a string repeated by a huge count, a value of shared parts written out.

use serde_json::Value;

use crate::torture::{Home, run_weft};

/// Doubles a string forty times: 1 TiB, were it built.
const BOMB: &str = r#"
id: bomb
steps:
  - map: { id: double, expr: 'reduce range(40) as $i ("x"; . + .) | length' }
"#;

#[test]
fn a_memory_bomb_expression_fails_its_step_within_the_memory_budget() {
    let files = Home::new();
    let bomb = files.file("bomb.yaml", BOMB);
    let home = files.home();
    let out = run_weft(
        &home,
        &[
            "run",
            bomb.to_str().expect("utf-8"),
            "--json",
            "--expr-memory-mib",
            "64",
        ],
    );
    assert_eq!(out.code, 1, "{out:?}");
    let record: Value = serde_json::from_str(out.stdout.trim()).expect("JSON record");
    let message = record["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("memory budget of 64 MiB"), "{record}");
    assert_eq!(record["error"]["code"], "expression-error", "{record}");
}

#[test]
fn a_repeated_string_or_an_interpolation_of_shared_parts_fails_before_it_is_built() {
    let files = Home::new();
    let home = files.home();
    for (name, expr) in [
        ("repeat", r#""x" * 100000000000 | length"#),
        (
            "interpolate",
            r#"reduce range(40) as $i (1; [., .]) | "\(.)" | length"#,
        ),
        (
            "tostring",
            "reduce range(40) as $i (1; [., .]) | tostring | length",
        ),
    ] {
        let file = files.file(
            &format!("{name}.yaml"),
            &format!("id: {name}\nsteps:\n  - map: {{ id: m, expr: '{expr}' }}\n"),
        );
        let out = run_weft(&home, &["run", file.to_str().expect("utf-8"), "--json"]);
        assert_eq!(out.code, 1, "{name}: {out:?}");
        let record: Value = serde_json::from_str(out.stdout.trim()).expect("JSON record");
        let message = record["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("memory budget of 256 MiB"),
            "{name}: {record}"
        );
    }
}
