//! Builds the guest plugins in `plugins/` (a cargo workspace of its own) for wasm32-wasip2,
//! copies the components to `<workspace>/examples/plugins/<name>.wasm` and writes
//! `$OUT_DIR/plugins.rs`, which names their paths for `src/lib.rs`.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The guest target.
const TARGET: &str = "wasm32-wasip2";

/// Said when the target is missing and cannot be added.
const MISSING_TARGET: &str =
    "the wasm32-wasip2 target is missing; run: rustup target add wasm32-wasip2";

/// Each built component: file stem (crate name), constant name, what it is.
const PLUGINS: &[(&str, &str, &str)] = &[
    (
        "text",
        "TEXT",
        "The example text toolkit: steps `upper`, `words`, `reverse`, `template`, `stats`.",
    ),
    (
        "approval",
        "APPROVAL",
        "The example approval plugin: step `approve` (suspends above a limit).",
    ),
    (
        "stream",
        "STREAM",
        "The example streaming plugin: step `stream` (a chunk per word, with progress events).",
    ),
    (
        "files",
        "FILES",
        "The example filesystem plugin: step `read-dir`.",
    ),
    (
        "testkit",
        "TESTKIT",
        "The engine's test plugin: `echo`, `inc`, `context`, `fail`, `set-state`, `suspend`, \
         `bail`, `tripwire`, `emit`, `step-result`, `wait-abort`, `typed`, `bad-json`.",
    ),
    (
        "hostile",
        "HOSTILE",
        "The hostile catalog: `spin`, `sleep`, `membomb`, `stack-overflow`, `panic`, `exit`, \
         `not-json`, `big-result`, `writer-flood`, `stdout-spam`, `fs-escape`, `env-peek`, \
         `tcp-connect`, `http-get`, `scribble`. Imports wasi:http.",
    ),
    (
        "tools",
        "TOOLS",
        "The example tool plugin (exports only `weft:plugin/tools`): `add`, `delete-everything` (needs approval), `read-file` (under `/data`), `check-text` (a tripwire).",
    ),
    (
        "sdk_demo",
        "SDK_DEMO",
        "The Rust SDK's demo plugin (built with `sdk/rust`, crate `weft-plugin`): steps `shout`, \
         `ask`, `guard`, `boom`, `ctx`; tool `count-words`.",
    ),
    (
        "leankit",
        "LEANKIT",
        "A plugin built with the Rust SDK's lean mode (no std, no WASI): the benchmark's steps \
         `inc`, `mul`, `sum`, `double`, `suspend`, and `boom` (panics), `fill` (memory past the \
         SDK's arena).",
    ),
    (
        "command",
        "COMMAND",
        "Not a plugin: a plain WASI command component (exports only `wasi:cli/run`); the host \
         must refuse it.",
    ),
];

/// Plugins built by a cargo invocation of their own (`-p NAME`), after the workspace's default
/// members: they build the SDK without std (feature `lean`), which cargo would unify with the
/// std build of the others.
const OWN_BUILDS: &[&str] = &["leankit"];

/// Environment variables that would leak the parent build's settings into the nested one.
const REMOVED_VARS: &[&str] = &[
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "RUSTDOCFLAGS",
    "CARGO_ENCODED_RUSTDOCFLAGS",
    "CARGO_BUILD_TARGET",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET_DIR",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "CARGO_BUILD_RUSTC_WRAPPER",
    "CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER",
    "CARGO_MAKEFLAGS",
    "CARGO_PRIMARY_PACKAGE",
    "DEBUG",
    "OPT_LEVEL",
    "PROFILE",
    "TARGET",
    "HOST",
    "NUM_JOBS",
    "OUT_DIR",
];

/// Prefixes of the per-package variables cargo sets for a build script, and of the parent
/// build's profile overrides: the guests have a profile of their own. (A quick bench build with
/// `CARGO_PROFILE_RELEASE_LTO=off` once built other components, whose copies in
/// `examples/plugins` then made every other target directory rebuild, and back.)
const REMOVED_PREFIXES: &[&str] = &[
    "CARGO_CFG_",
    "CARGO_FEATURE_",
    "CARGO_PKG_",
    "CARGO_MANIFEST_",
    "CARGO_CRATE_",
    "CARGO_PROFILE_",
];

/// How many lines of the nested build's stderr a failure shows.
const TAIL_LINES: usize = 200;

fn main() {
    if let Err(message) = run() {
        panic!("{message}");
    }
}

fn run() -> Result<(), String> {
    let manifest_dir = PathBuf::from(env("CARGO_MANIFEST_DIR")?);
    let out_dir = PathBuf::from(env("OUT_DIR")?);
    let plugins_dir = manifest_dir.join("plugins");
    let workspace_root = manifest_dir
        .parent()
        .ok_or("the guests crate has no parent directory")?
        .to_path_buf();

    let target_dir = workspace_target_dir(&out_dir).join("guests");
    let built_dir = target_dir.join(TARGET).join("release");
    let plugin_dir = workspace_root.join("examples").join("plugins");

    watch(&plugins_dir, &built_dir, &plugin_dir)?;
    ensure_target();
    build(&plugins_dir, &target_dir, None)?;
    for package in OWN_BUILDS {
        build(&plugins_dir, &target_dir, Some(package))?;
    }
    fs::create_dir_all(&plugin_dir)
        .map_err(|e| format!("cannot create {}: {e}", plugin_dir.display()))?;

    let mut consts = String::from("// Written by guests/build.rs.\n\n");
    consts.push_str(&format!(
        "/// The directory that holds the built plugins: `<workspace>/examples/plugins`.\n\
         pub const PLUGIN_DIR: &str = {:?};\n",
        utf8(&plugin_dir)?
    ));
    for (name, constant, doc) in PLUGINS {
        let file = format!("{name}.wasm");
        let built = built_dir.join(&file);
        let copy = plugin_dir.join(&file);
        copy_if_changed(&built, &copy)?;
        consts.push_str(&format!(
            "\n/// `{file}`: {doc}\npub const {constant}: &str = {:?};\n",
            utf8(&copy)?
        ));
    }
    write_if_changed(&out_dir.join("plugins.rs"), consts.as_bytes())
}

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|e| format!("{name}: {e}"))
}

fn utf8(path: &Path) -> Result<&str, String> {
    path.to_str()
        .ok_or_else(|| format!("the path {} is not UTF-8", path.display()))
}

/// The target dir of the workspace being built: `CARGO_TARGET_DIR` when absolute, else the
/// directory above `OUT_DIR` (`<target>/[<triple>/]<profile>/build/<pkg>-<hash>/out`) that cargo
/// marked with `CACHEDIR.TAG`.
fn workspace_target_dir(out_dir: &Path) -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from)
        && dir.is_absolute()
    {
        return dir;
    }
    out_dir
        .ancestors()
        .skip(1)
        .find(|dir| dir.join("CACHEDIR.TAG").is_file())
        .or_else(|| out_dir.ancestors().nth(4))
        .unwrap_or(out_dir)
        .to_path_buf()
}

/// Tells cargo when to run this script again: when a guest source, the WIT, or a built or
/// copied component changes (deleting `target/guests` or `examples/plugins` triggers a rebuild).
fn watch(plugins_dir: &Path, built_dir: &Path, plugin_dir: &Path) -> Result<(), String> {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../wit/plugin.wit");
    println!("cargo:rerun-if-changed=../wit");
    // The Rust guest SDK (sdk/rust), which sdk-demo builds with.
    for path in ["Cargo.toml", "src", "wit"] {
        println!("cargo:rerun-if-changed=../sdk/rust/{path}");
    }
    // Only files that exist: cargo reruns a script on every build while a watched path is missing.
    for file in ["Cargo.toml", "Cargo.lock", ".cargo/config.toml"] {
        if plugins_dir.join(file).is_file() {
            println!("cargo:rerun-if-changed=plugins/{file}");
        }
    }
    let entries = fs::read_dir(plugins_dir)
        .map_err(|e| format!("cannot list {}: {e}", plugins_dir.display()))?;
    let mut crates = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot list {}: {e}", plugins_dir.display()))?;
        if entry.path().join("Cargo.toml").is_file() {
            crates.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    crates.sort();
    for name in crates {
        println!("cargo:rerun-if-changed=plugins/{name}/Cargo.toml");
        println!("cargo:rerun-if-changed=plugins/{name}/src");
    }
    for (name, _, _) in PLUGINS {
        for dir in [built_dir, plugin_dir] {
            println!(
                "cargo:rerun-if-changed={}",
                utf8(&dir.join(format!("{name}.wasm")))?
            );
        }
    }
    for var in ["CARGO_TARGET_DIR", "CARGO_NET_OFFLINE"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    Ok(())
}

/// Makes sure wasm32-wasip2 is installed, adding it with rustup if need be.
fn ensure_target() {
    match Command::new("rustup")
        .args(["target", "list", "--installed"])
        .stderr(Stdio::inherit())
        .output()
    {
        Ok(out) if out.status.success() => {
            let listed = String::from_utf8_lossy(&out.stdout);
            if listed.lines().any(|line| line.trim() == TARGET) {
                return;
            }
            let added = Command::new("rustup")
                .args(["target", "add", TARGET])
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .status();
            if !matches!(added, Ok(status) if status.success()) {
                panic!("{MISSING_TARGET}");
            }
        }
        // No rustup (or it failed): fine if the toolchain has the target anyway.
        _ => {
            if !rustc_has_target() {
                panic!("{MISSING_TARGET}");
            }
        }
    }
}

/// Whether the toolchain's sysroot holds the target's standard library (for toolchains not
/// managed by rustup).
fn rustc_has_target() -> bool {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| OsString::from("rustc"));
    Command::new(rustc)
        .args(["--print", "target-libdir", "--target", TARGET])
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        .and_then(|dir| fs::read_dir(dir).ok())
        .is_some_and(|mut entries| {
            entries.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("libstd-")))
        })
}

/// Runs the nested `cargo build` (of the workspace's default members, or of `package`), echoing
/// its stderr and keeping the tail for a failure.
fn build(plugins_dir: &Path, target_dir: &Path, package: Option<&str>) -> Result<(), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let manifest = plugins_dir.join("Cargo.toml");
    let mut command = Command::new(&cargo);
    command
        .current_dir(plugins_dir)
        .args(["build", "--release", "--target", TARGET])
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target_dir);
    if let Some(package) = package {
        command.args(["-p", package]);
    }
    if plugins_dir.join("Cargo.lock").is_file() {
        command.arg("--locked");
    }
    if std::env::var("CARGO_NET_OFFLINE").is_ok_and(|v| v == "true" || v == "1") {
        command.arg("--offline");
    }
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if REMOVED_VARS.contains(&key) || REMOVED_PREFIXES.iter().any(|p| key.starts_with(p)) {
            command.env_remove(key);
        }
    }
    let shown = std::iter::once(cargo.to_string_lossy())
        .chain(command.get_args().map(|a| a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::io::stderr()))
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", cargo.to_string_lossy()))?;

    // Only the tail is kept: cargo shows a build script's output when it fails, so echoing the
    // nested build's stderr as well would show it twice.
    let mut tail = VecDeque::with_capacity(TAIL_LINES);
    if let Some(stderr) = child.stderr.take() {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for the guest build: {e}"))?;
    if status.success() {
        return Ok(());
    }
    let tail: Vec<String> = tail.into();
    Err(format!(
        "building the guest plugins failed ({status}).\n\
         command (in guests/plugins): {shown}\n\
         to see it directly: cd guests/plugins && cargo build --release --target {TARGET}{}\n\
         --- last {} lines of its stderr ---\n{}",
        package.map(|p| format!(" -p {p}")).unwrap_or_default(),
        tail.len(),
        tail.join("\n")
    ))
}

/// Copies `from` to `to` unless `to` already has the same bytes (keeps its mtime stable), via a
/// temporary file and a rename so that a reader never sees half a component.
fn copy_if_changed(from: &Path, to: &Path) -> Result<(), String> {
    let bytes = fs::read(from)
        .map_err(|e| format!("the guest build did not produce {}: {e}", from.display()))?;
    write_if_changed(to, &bytes)
}

fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<(), String> {
    if fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    fs::write(&tmp, bytes).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    fs::rename(&tmp, path).map_err(|e| format!("cannot write {}: {e}", path.display()))
}
