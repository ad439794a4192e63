//! `weft new step|tool NAME`: its refusals write nothing, and the projects it writes build for
//! wasm32-wasip2 with their own `build.sh` and run with `weft run` (docs/PLUGINS.md).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::cli::path_str;
use crate::torture::{Out, run_weft};

/// Environment variables of the outer `cargo test` that must not leak into the nested build.
const REMOVED_VARS: &[&str] = &[
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_BUILD_TARGET",
    "CARGO_BUILD_TARGET_DIR",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "CARGO_MAKEFLAGS",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_CRATE_NAME",
];

/// Runs `weft ARGS` with a home inside `dir`.
fn weft_in(dir: &Path, args: &[&str]) -> Out {
    run_weft(&dir.join("home"), args)
}

/// Every entry below `dir`, as paths relative to it, sorted.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).expect("list dir").flatten() {
            let path = entry.path();
            out.push(path.strip_prefix(dir).expect("below dir").to_path_buf());
            if path.is_dir() {
                todo.push(path);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn new_refuses_bad_names_taken_directories_and_other_languages_writing_nothing() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let projects = tmp.path().join("projects");
    std::fs::create_dir_all(projects.join("taken")).expect("mkdir");
    std::fs::write(projects.join("taken/keep.txt"), "mine").expect("write");
    std::fs::write(projects.join("a-file"), "mine").expect("write");
    let before = tree(&projects);
    let dir = path_str(&projects);

    let cases: &[(&[&str], &str)] = &[
        (&["new", "step", "Greet", "--dir", dir], "lowercase letters"),
        (
            &["new", "step", "1st", "--dir", dir],
            "starting with a letter",
        ),
        (&["new", "tool", "my_tool", "--dir", dir], "`-`"),
        (
            &["new", "tool", "../escape", "--dir", dir],
            "invalid plugin name",
        ),
        (&["new", "step", "test", "--dir", dir], "reserves"),
        (&["new", "step", "taken", "--dir", dir], "not empty"),
        (&["new", "tool", "a-file", "--dir", dir], "not a directory"),
        (
            &["new", "tool", "adder", "--lang", "js", "--dir", dir],
            "JavaScript plugins are not available",
        ),
    ];
    for (args, said) in cases {
        let out = weft_in(tmp.path(), args);
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        assert!(
            out.stderr.contains(said),
            "{args:?} should say {said:?}: {out:?}"
        );
    }
    let out = weft_in(
        tmp.path(),
        &["new", "step", "greet", "--lang", "js", "--dir", dir],
    );
    assert!(out.stderr.contains("use --lang rust"), "{out:?}");
    assert_eq!(tree(&projects), before, "a refusal wrote something");

    // Python is accepted (tests/polyglot/python.sh builds and runs what it writes).
    let out = weft_in(
        tmp.path(),
        &["new", "step", "greet", "--lang", "python", "--dir", dir],
    );
    assert_eq!(out.code, 0, "{out:?}");
    for file in [
        "app.py",
        "weft_sdk.py",
        "build.sh",
        "wit/plugin.wit",
        "workflow.yaml",
    ] {
        assert!(
            projects.join("greet").join(file).is_file(),
            "{file} missing"
        );
    }
    assert!(
        !tmp.path().join("home").exists(),
        "`weft new` must not open the home"
    );
}

/// The target directory the generated projects share, so that wit-bindgen is compiled once.
fn shared_target() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("new-project-target")
}

/// Writes a project with `weft new KIND NAME`, builds it with its `build.sh` for wasm32-wasip2,
/// puts the component where its workflow looks for it, and runs the workflow with `input`;
/// returns the run record.
fn new_build_run(kind: &str, name: &str, input: &Value) -> Value {
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = weft_in(
        tmp.path(),
        &["new", kind, name, "--dir", path_str(tmp.path())],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let project = tmp.path().join(name);
    for file in [
        "Cargo.toml",
        "build.sh",
        "src/lib.rs",
        "wit/plugin.wit",
        "workflow.yaml",
        "README.md",
    ] {
        assert!(project.join(file).is_file(), "{file} missing");
    }

    let target = shared_target();
    let mut build = Command::new("sh");
    build
        .arg(project.join("build.sh"))
        .current_dir(&project)
        .env("CARGO_TARGET_DIR", &target)
        .stdin(Stdio::null());
    for var in REMOVED_VARS {
        build.env_remove(var);
    }
    let built = build.output().expect("run build.sh");
    assert!(
        built.status.success(),
        "building the generated {kind} failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    // The workflow names the component where a plain `./build.sh` puts it.
    let file = format!("{}.wasm", name.replace('-', "_"));
    let release = project.join("target/wasm32-wasip2/release");
    std::fs::create_dir_all(&release).expect("mkdir");
    std::fs::copy(
        target.join("wasm32-wasip2/release").join(&file),
        release.join(&file),
    )
    .expect("the build made the component");

    let workflow = project.join("workflow.yaml");
    let out = weft_in(
        tmp.path(),
        &[
            "run",
            path_str(&workflow),
            "--input",
            &input.to_string(),
            "--json",
        ],
    );
    assert_eq!(out.code, 0, "{out:?}");
    serde_json::from_str(&out.stdout).expect("one run record")
}

#[test]
fn a_new_step_project_builds_and_runs() {
    let record = new_build_run("step", "greet", &json!({"name": "Ada"}));
    assert_eq!(record["status"], "success", "{record}");
    assert_eq!(record["result"], json!({"greeting": "Hello, Ada!"}));
    assert_eq!(record["state"], json!({"last-greeted": "Ada"}));
}

#[test]
fn a_new_tool_project_builds_and_runs() {
    let record = new_build_run("tool", "adder", &json!({"a": 2, "b": 3}));
    assert_eq!(record["status"], "success", "{record}");
    assert_eq!(record["result"], json!({"sum": 5}));
}
