//! The plugin host's own guarantees through real runs: what a guest panic leaves in records and
//! events (S84), components the host refuses and why, cached native code a guest cannot forge,
//! and grants that would expose the home.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use weft::Invocation;
use weft::RunRecord;
use weft::internal::{DiscardEvents, NoRun};
use weft::internal::{Plugin, Sandbox};
use weft::{EventKind, RunStatus};
use weft::{HostConfig, PluginHost, PoolConfig};
use weft::{StepCall, StepOutcome};

use crate::common::Env;

/// A one-step workflow running step `step` of the hostile plugin, the plugin entry extended with
/// `plugin` (e.g. `grants`).
fn hostile(step: &str, plugin: Value) -> String {
    let mut entry = json!({"wasm": "{hostile}"});
    if let (Some(entry), Value::Object(extra)) = (entry.as_object_mut(), plugin) {
        entry.extend(extra);
    }
    json!({"id": "hostile", "plugins": {"h": entry}, "steps": [{"id": "h", "plugin": "h", "step": step}]})
        .to_string()
}

/// S84: a message holds the one-line reason only: no source location, no trap text, no
/// backtrace, one line.
fn assert_reason_only(message: &str) {
    assert!(!message.contains("src/"), "a source location: {message:?}");
    assert!(!message.contains("wasm trap"), "the trap text: {message:?}");
    assert!(!message.contains("backtrace"), "a backtrace: {message:?}");
    assert!(!message.contains('\n'), "not one line: {message:?}");
}

#[tokio::test]
async fn s84_a_guest_panic_is_recorded_as_its_one_line_reason() {
    let env = Env::new();
    let rec: RunRecord = env.run(&hostile("panic", json!({})), json!({})).await;
    assert_eq!(rec.status, RunStatus::Failed, "{rec:#?}");
    let err = rec.error.clone().expect("a failed run has an error");
    assert_eq!(err.code, "trap");
    assert_eq!(err.message, "plugin panicked: boom");
    assert_eq!(rec.steps["h"].error.as_ref(), Some(&err));

    let events = env.events(&rec.run_id);
    let failed: Vec<&Value> = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::StepFailed | EventKind::RunFailed))
        .map(|e| &e.data["error"]["message"])
        .collect();
    assert_eq!(failed.len(), 2, "{events:?}");
    for message in failed {
        let message = message.as_str().expect("a message");
        assert_reason_only(message);
        assert_eq!(message, "plugin panicked: boom");
    }
}

/// A host whose compiled-plugin cache is `<dir>/cache` (its key then is `<dir>/cache.key`).
fn host_over(dir: &Path) -> PluginHost {
    PluginHost::new(
        HostConfig::default()
            .with_cache_dir(Some(dir.join("cache")))
            .with_pool(PoolConfig::default().with_slots(4)),
    )
    .expect("plugin host")
}

/// The cached artifact of the component with sha256 `digest` in `<dir>/cache`.
fn cached_artifact(dir: &Path, digest: &str) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(dir.join("cache"))
        .expect("cache dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "cwasm")
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(digest))
        })
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found.into_iter().next().expect("one artifact")
}

/// `artifact` with `suffix` appended to its name (its sidecars).
fn sidecar(artifact: &Path, suffix: &str) -> PathBuf {
    let mut name = artifact.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Sidecar files by suffix, with their contents.
type Sidecars = Vec<(&'static str, Vec<u8>)>;

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Testkit's `inc` answers `n + 1`: the code that runs is testkit's.
async fn runs_testkit_inc(plugin: &Plugin) {
    let call = StepCall {
        run_id: "run-1".into(),
        workflow_id: "wf".into(),
        step_path: "inc".into(),
        attempt: 0,
        input: json!({"n": 1}).into(),
        config: json!({}).into(),
        state: json!({}).into(),
        resume: None,
        foreach_index: None,
        iteration: None,
    };
    let io = Invocation::new(Arc::new(DiscardEvents), Arc::new(NoRun));
    let result = plugin.execute("inc", &call, &Sandbox::default(), io).await;
    assert_eq!(result.outcome, Ok(StepOutcome::Done(json!({"n": 2}))));
}

#[tokio::test]
async fn cached_native_code_forged_by_whoever_can_write_the_cache_is_recompiled() {
    let dir = tempfile::tempdir().expect("temp dir");
    let testkit = std::fs::read(weft_guests::TESTKIT).expect("testkit");
    let hostile = std::fs::read(weft_guests::HOSTILE).expect("hostile");
    let seed = host_over(dir.path());
    seed.load(&testkit, None).await.expect("testkit loads");
    seed.load(&hostile, None).await.expect("hostile loads");
    assert_eq!(seed.compilations(), 2);
    let target = cached_artifact(dir.path(), &sha256_hex(&testkit));
    let other = cached_artifact(dir.path(), &sha256_hex(&hostile));
    // Real native code, valid for this very engine, but of another component.
    let forged = std::fs::read(&other).expect("hostile's artifact");

    // What a guest with write access to the cache can do: replace the artifact and recompute any
    // checksum it can compute (a sha256 under every sidecar name), or copy a sidecar that the
    // host itself wrote for the other component.
    let forgeries: [(&str, Sidecars); 2] = [
        (
            "recomputed checksums",
            vec![
                (".sha256", sha256_hex(&forged).into_bytes()),
                (".mac", sha256_hex(&forged).into_bytes()),
            ],
        ),
        (
            "the other component's own sidecars",
            [".sha256", ".mac"]
                .into_iter()
                .filter_map(|s| std::fs::read(sidecar(&other, s)).ok().map(|b| (s, b)))
                .collect(),
        ),
    ];
    for (case, sidecars) in forgeries {
        std::fs::write(&target, &forged).expect("forge the artifact");
        for (suffix, bytes) in sidecars {
            std::fs::write(sidecar(&target, suffix), bytes).expect("forge a sidecar");
        }
        let fresh = host_over(dir.path());
        let plugin = fresh
            .load(&testkit, None)
            .await
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(
            fresh.compilations(),
            1,
            "{case}: the forged code was not used"
        );
        runs_testkit_inc(&plugin).await;
    }
    // The rewritten entry is trusted again.
    let next = host_over(dir.path());
    runs_testkit_inc(&next.load(&testkit, None).await.expect("loads")).await;
    assert_eq!(next.compilations(), 0);
}

/// Every file below `dir` with the digest of its content (sled's own files by name only).
fn tree(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                todo.push(path);
            } else if path.starts_with(dir.join("db")) {
                // sled flushes its own pages in the background: only its file names count.
                out.push((path, String::new()));
            } else {
                let bytes = std::fs::read(&path).expect("read file");
                out.push((path, sha256_hex(&bytes)));
            }
        }
    }
    out.sort();
    out
}

/// The fs-escape step of the hostile plugin writes `<config.dir>/new-file`: with `grant` granted
/// read-write as `/data`, it would write `/data/<under>/new-file`.
fn writes_into(grant: &str, under: &str) -> String {
    let mut workflow: Value = serde_json::from_str(&hostile(
        "fs-escape",
        json!({"grants": {"dirs": [{"host": grant, "guest": "/data", "mode": "rw"}]}}),
    ))
    .expect("json");
    workflow["steps"][0]["config"] = json!({"dir": format!("/data/{under}")});
    workflow.to_string()
}

#[tokio::test]
async fn grants_that_contain_are_or_lie_inside_the_home_are_refused_before_anything_runs() {
    let env = Env::new();
    let home = env.rt.home().to_path_buf();
    let canonical_home = home.canonicalize().expect("home");
    // A directory inside the home: sled's database; on PostgreSQL the home holds no directory
    // of its own, so the test makes one.
    let inside = home.join("db");
    if !inside.is_dir() {
        std::fs::create_dir(&inside).expect("a directory inside the home");
    }
    let before = tree(&home);
    for (case, workflow, relation) in [
        // The workflow's directory `.` holds the home (the CLI's default home is `./.weft`).
        (
            "the workflow's directory",
            writes_into(".", "home"),
            "contains",
        ),
        (
            "the home itself",
            writes_into(&home.display().to_string(), ""),
            "is the weft home",
        ),
        (
            "a directory inside the home",
            writes_into(&inside.display().to_string(), ".."),
            "is inside the weft home",
        ),
    ] {
        let path = env.file("grants-home.json", &workflow);
        let err = match env.rt.load_workflow(&path).await {
            Ok(_) => panic!("{case}: the workflow was accepted"),
            Err(err) => err.to_string(),
        };
        for part in [
            "plugin `h`",
            "grants.dirs",
            relation,
            &canonical_home.display().to_string(),
            "grant a directory outside",
        ] {
            assert!(err.contains(part), "{case}: `{part}` missing from: {err}");
        }
    }
    assert!(
        env.rt.runs(None, None).expect("runs").is_empty(),
        "no run was made"
    );
    assert_eq!(tree(&home), before, "nothing in the home changed");
}

#[tokio::test]
async fn an_invocation_whose_grants_expose_the_home_fails_before_the_guest_starts() {
    // A run stored before its workflow was checked reaches the host with such a grant anyway.
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let host = PluginHost::new(
        HostConfig::default()
            .with_home(Some(home.clone()))
            .with_pool(PoolConfig::default().with_slots(4)),
    )
    .expect("plugin host");
    let plugin = host
        .load(&std::fs::read(weft_guests::HOSTILE).expect("hostile"), None)
        .await
        .expect("loads");
    let sandbox: Sandbox = serde_json::from_value(json!({"grants": {"dirs": [
        {"host": dir.path(), "guest": "/data", "mode": "rw"}
    ]}}))
    .expect("sandbox");
    let call = StepCall {
        run_id: "run-1".into(),
        workflow_id: "wf".into(),
        step_path: "h".into(),
        attempt: 0,
        input: json!({}).into(),
        config: json!({"dir": "/data/home"}).into(),
        state: json!({}).into(),
        resume: None,
        foreach_index: None,
        iteration: None,
    };
    let io = Invocation::new(Arc::new(DiscardEvents), Arc::new(NoRun));
    let result = plugin.execute("fs-escape", &call, &sandbox, io).await;
    let failure = result.outcome.expect_err("refused");
    assert_eq!(failure.code, "sandbox-error", "{failure:?}");
    assert!(!failure.retryable);
    assert!(
        failure.message.contains("contains the weft home"),
        "{}",
        failure.message
    );
    assert!(!home.join("new-file").exists(), "the guest did not run");
}

/// A tiny valid component whose one export, `run: async func()`, is lifted with the async ABI
/// (`canon lift ... async (callback ...)`), as jco's QuickJS backend emits by default.
fn async_lifted_component() -> Vec<u8> {
    use wasm_encoder::{
        Alias, CanonicalFunctionSection, CanonicalOption, CodeSection, ComponentAliasSection,
        ComponentExportKind, ComponentExportSection, ComponentTypeSection, ExportKind,
        ExportSection, Function, FunctionSection, InstanceSection, Module, ModuleArg,
        ModuleSection, TypeSection, ValType,
    };
    let mut module = Module::new();
    let mut types = TypeSection::new();
    types.ty().function([], [ValType::I32]);
    types.ty().function([ValType::I32; 3], [ValType::I32]);
    module.section(&types);
    let mut funcs = FunctionSection::new();
    funcs.function(0).function(1);
    module.section(&funcs);
    let mut exports = ExportSection::new();
    exports
        .export("run", ExportKind::Func, 0)
        .export("callback", ExportKind::Func, 1);
    module.section(&exports);
    let mut code = CodeSection::new();
    for _ in 0..2 {
        // 0: the task exited.
        let mut body = Function::new([]);
        body.instructions().i32_const(0).end();
        code.function(&body);
    }
    module.section(&code);

    let mut component = wasm_encoder::Component::new();
    component.section(&ModuleSection(&module));
    let mut instances = InstanceSection::new();
    instances.instantiate(0, Vec::<(&str, ModuleArg)>::new());
    component.section(&instances);
    let mut aliases = ComponentAliasSection::new();
    for name in ["run", "callback"] {
        aliases.alias(Alias::CoreInstanceExport {
            instance: 0,
            kind: ExportKind::Func,
            name,
        });
    }
    component.section(&aliases);
    let mut types = ComponentTypeSection::new();
    types
        .function()
        .async_(true)
        .params(Vec::<(&str, wasm_encoder::ComponentValType)>::new())
        .result(None);
    component.section(&types);
    let mut canon = CanonicalFunctionSection::new();
    canon.lift(0, 0, [CanonicalOption::Async, CanonicalOption::Callback(1)]);
    component.section(&canon);
    let mut exports = ComponentExportSection::new();
    exports.export("run", ComponentExportKind::Func, 0, None);
    component.section(&exports);
    component.finish()
}

#[tokio::test]
async fn a_component_using_the_async_abi_is_refused_naming_the_feature_and_the_fix() {
    let wasm = async_lifted_component();
    // Valid for an engine with the async ABI: the refusal is about the feature, nothing else.
    wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::all())
        .validate_all(&wasm)
        .expect("a valid component");
    let host =
        PluginHost::new(HostConfig::default().with_pool(PoolConfig::default().with_slots(4)))
            .expect("plugin host");
    let err = host
        .load(&wasm, None)
        .await
        .expect_err("refused")
        .to_string();
    for part in [
        "component-model-async",
        "an async-lifted export",
        "--backend-qjs-disable-async",
    ] {
        assert!(err.contains(part), "`{part}` missing from: {err}");
    }
    assert!(!err.contains('\n'), "one line: {err}");
}
