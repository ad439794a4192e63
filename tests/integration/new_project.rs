//! `weft new step|tool NAME`: its refusals write nothing, and the projects it writes (Rust ones
//! with the SDK `weft-plugin` vendored, with std or `--lean`) build for wasm32-wasip2 with their
//! own `build.sh` and run with `weft run` (docs/PLUGINS.md).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::cli::path_str;
use crate::lean_guest::imports_and_modules;
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
fn new_refuses_bad_names_and_taken_directories_writing_nothing() {
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
        // The same refusals in the other languages.
        (
            &["new", "step", "Greet", "--lang", "js", "--dir", dir],
            "lowercase letters",
        ),
        (
            &["new", "tool", "my_tool", "--lang", "python", "--dir", dir],
            "`-`",
        ),
        (
            &["new", "tool", "greet-", "--lang", "js", "--dir", dir],
            "not ending with `-`",
        ),
        (
            &["new", "step", "taken", "--lang", "js", "--dir", dir],
            "not empty",
        ),
        (
            &["new", "tool", "a-file", "--lang", "js", "--dir", dir],
            "not a directory",
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
        "wit/worlds.wit",
        "wit/deps/http.wit",
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

/// Every file below `dir`, relative to it, `/`-separated, sorted.
fn files_below(dir: &Path) -> Vec<String> {
    tree(dir)
        .into_iter()
        .filter(|p| dir.join(p).is_file())
        .map(|p| path_str(&p).replace('\\', "/"))
        .collect()
}

/// The first `{{word}}` placeholder left in `text` (JSDoc's `{{a: string}}` is not one).
fn placeholder(text: &str) -> Option<&str> {
    text.match_indices("{{").find_map(|(at, _)| {
        let rest = &text[at + 2..];
        let end = rest.find("}}")?;
        let word = &rest[..end];
        (!word.is_empty() && word.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            .then_some(&text[at..at + end + 4])
    })
}

/// `weft new --lang js` writes the whole project, placeholders filled, pinned to the jco that
/// tests/polyglot/js.sh builds it with (that script builds and runs what it writes).
#[test]
fn new_writes_a_javascript_project() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = path_str(tmp.path());
    // Rust's reserved names are free in JavaScript.
    for (kind, name) in [("step", "word-count"), ("tool", "test")] {
        let out = weft_in(
            tmp.path(),
            &["new", kind, name, "--lang", "js", "--dir", dir],
        );
        assert_eq!(out.code, 0, "{out:?}");
        assert!(
            out.stdout.contains(&format!(
                "created the JavaScript {kind} plugin project {name}"
            )),
            "{out:?}"
        );
        assert!(out.stdout.contains("jco 1.35.0"), "{out:?}");
        let project = tmp.path().join(name);
        assert_eq!(
            files_below(&project),
            [
                ".gitignore",
                "README.md",
                "app.js",
                "build.sh",
                "bundle.config.js",
                "package.json",
                "weft_sdk.d.ts",
                "weft_sdk.js",
                "wit/deps/wasi-cli/environment.wit",
                "wit/plugin.wit",
                "wit/worlds.wit",
                "workflow.yaml",
            ],
            "{kind} {name}"
        );
        for file in files_below(&project) {
            let text = std::fs::read_to_string(project.join(&file)).expect("read");
            assert_eq!(placeholder(&text), None, "{file} of the {kind}");
        }
        let read = |file: &str| std::fs::read_to_string(project.join(file)).expect("read");
        let package: Value = serde_json::from_str(&read("package.json")).expect("JSON");
        assert_eq!(package["name"], name);
        assert_eq!(
            package["devDependencies"]["@bytecodealliance/jco"],
            "1.35.0"
        );
        assert_eq!(
            package["overrides"]["@bytecodealliance/preview2-shim"],
            "0.26.0"
        );
        let world = format!("{kind}-plugin-wasi");
        let build = package["scripts"]["build"].as_str().unwrap_or_default();
        assert!(
            build.contains(&format!("--world-name {world}"))
                && build.contains(&format!("-o {name}.wasm")),
            "{build}"
        );
        assert!(read("wit/worlds.wit").contains(&format!("world {world} {{")));
        assert_eq!(
            read("wit/plugin.wit"),
            std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit/plugin.wit")
            )
            .expect("the repository's wit/plugin.wit")
        );
        let app = read("app.js");
        assert!(app.contains(&format!("{kind}(\n  '{name}',")), "{app}");
        assert!(app.contains(&format!("export {{ {kind}s }} from './weft_sdk.js';")));
        // Only the step-plugin world imports `run`.
        let sdk = read("weft_sdk.js");
        assert_eq!(sdk.contains("from 'weft:plugin/run@0.1.0'"), kind == "step");
        let workflow = read("workflow.yaml");
        assert!(
            workflow.contains(&format!("wasm: {name}.wasm")),
            "{workflow}"
        );
        assert!(workflow.contains(&format!("{kind}: {name}")), "{workflow}");
        assert!(read(".gitignore").contains("/node_modules"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(project.join("build.sh"))
                .expect("stat")
                .permissions()
                .mode();
            assert!(mode & 0o100 != 0, "build.sh is not executable");
        }
    }
    assert!(
        !tmp.path().join("home").exists(),
        "`weft new` must not open the home"
    );
}

/// The target directory the generated projects share, so that the SDK's dependencies
/// (wit-bindgen, serde) are compiled once.
fn shared_target() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("new-project-target")
}

/// Writes a project with `weft new KIND NAME` (`--lean` when `lean`), builds it with its
/// `build.sh` for wasm32-wasip2, runs its unit tests (`cargo test`, natively), puts the
/// component where its workflow looks for it, and runs the workflow with `input`; returns the
/// run record and the component's imports.
fn new_build_run(kind: &str, name: &str, lean: bool, input: &Value) -> (Value, Vec<String>) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut args = vec!["new", kind, name, "--dir", path_str(tmp.path())];
    if lean {
        args.push("--lean");
    }
    let out = weft_in(tmp.path(), &args);
    assert_eq!(out.code, 0, "{out:?}");
    let project = tmp.path().join(name);
    // The SDK is vendored: the project needs nothing from weft's repository.
    assert_eq!(
        files_below(&project),
        [
            ".gitignore",
            "Cargo.toml",
            "README.md",
            "build.sh",
            "src/lib.rs",
            "weft-plugin/Cargo.toml",
            "weft-plugin/src/bindings.rs",
            "weft-plugin/src/context.rs",
            "weft-plugin/src/failure.rs",
            "weft-plugin/src/lean.rs",
            "weft-plugin/src/lib.rs",
            "weft-plugin/src/outcome.rs",
            "weft-plugin/src/registry.rs",
            "weft-plugin/wit/plugin.wit",
            "workflow.yaml",
        ],
        "{kind} {name}"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (file, original) in [
        ("weft-plugin/wit/plugin.wit", "wit/plugin.wit"),
        ("weft-plugin/src/registry.rs", "sdk/rust/src/registry.rs"),
    ] {
        assert_eq!(
            std::fs::read_to_string(project.join(file)).expect("read"),
            std::fs::read_to_string(root.join(original)).expect("the repository's copy"),
            "{file}"
        );
    }
    let manifest = std::fs::read_to_string(project.join("Cargo.toml")).expect("read");
    let dependency = if lean {
        "weft-plugin = { path = \"weft-plugin\", default-features = false, features = [\"lean\"] }"
    } else {
        "weft-plugin = { path = \"weft-plugin\" }"
    };
    assert!(manifest.contains(dependency), "{manifest}");

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
    // Its unit tests run natively, the SDK's host services doing nothing there.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut test = Command::new(cargo);
    test.args(["test", "--quiet"])
        .current_dir(&project)
        .env("CARGO_TARGET_DIR", &target)
        .stdin(Stdio::null());
    for var in REMOVED_VARS {
        test.env_remove(var);
    }
    let tested = test.output().expect("run cargo test");
    assert!(
        tested.status.success(),
        "the generated {kind}'s unit tests failed:\n{}\n{}",
        String::from_utf8_lossy(&tested.stdout),
        String::from_utf8_lossy(&tested.stderr)
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

    let (imports, _) = imports_and_modules(release.join(&file));
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
    let record = serde_json::from_str(&out.stdout).expect("one run record");
    (record, imports)
}

#[test]
fn a_new_step_project_builds_and_runs() {
    for lean in [false, true] {
        let (record, imports) = new_build_run("step", "greet", lean, &json!({"name": "Ada"}));
        assert_eq!(record["status"], "success", "{record}");
        assert_eq!(record["result"], json!({"greeting": "Hello, Ada!"}));
        assert_eq!(record["state"], json!({"last-greeted": "Ada"}));
        // std brings WASI in; the lean project imports weft's interfaces alone.
        assert_eq!(
            imports.iter().any(|i| i.starts_with("wasi:")),
            !lean,
            "lean: {lean}, {imports:?}"
        );
    }
}

#[test]
fn a_new_tool_project_builds_and_runs() {
    for lean in [false, true] {
        let (record, imports) = new_build_run("tool", "adder", lean, &json!({"a": 2, "b": 3}));
        assert_eq!(record["status"], "success", "{record}");
        assert_eq!(record["result"], json!({"sum": 5}));
        assert_eq!(
            imports.iter().any(|i| i.starts_with("wasi:")),
            !lean,
            "{imports:?}"
        );
    }
}

/// The example plugins in Python and JavaScript (`examples/python`, `examples/js`) were written
/// by `weft new`; their copies of the SDK and the contract stay those of this repository.
#[test]
fn the_example_plugins_carry_this_repositorys_sdk_and_contract() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let read =
        |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_else(|e| panic!("read {p}: {e}"));
    for (copy, source) in [
        ("examples/python/weft_sdk.py", "sdk/python/weft_sdk.py"),
        ("examples/python/wit/plugin.wit", "wit/plugin.wit"),
        ("examples/js/weft_sdk.d.ts", "sdk/js/weft_sdk.d.ts"),
        ("examples/js/wit/plugin.wit", "wit/plugin.wit"),
    ] {
        assert!(
            read(copy) == read(source),
            "{copy} differs from {source}: copy it again"
        );
    }
    // The JavaScript SDK as `weft new tool` renders it (a tool's world has no `run` import).
    let sdk = read("sdk/js/weft_sdk.js");
    let (before, after) = sdk
        .split_once("{{js_run_import}}")
        .expect("the SDK has the run-import placeholder");
    let copy = read("examples/js/weft_sdk.js");
    assert!(
        copy.starts_with(before) && copy.ends_with(after),
        "examples/js/weft_sdk.js differs from sdk/js/weft_sdk.js: copy it again"
    );
}
