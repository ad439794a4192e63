//! The plugin host through its public API: which components it accepts, pins, the compiled-plugin
//! cache, and what plugins describe of themselves.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use weft::Invocation;
use weft::RunStatus;
use weft::cli::{Cmd, EXIT_OK, EXIT_USAGE, Output, PluginCmd};
use weft::internal::{DiscardEvents, NoRun};
use weft::internal::{Plugin, Sandbox, ToolCall};
use weft::{HostConfig, PluginError, PluginHost, PoolConfig};
use weft::{StepCall, StepOutcome};

use crate::common::Env;

/// A host whose cache is `<dir>/cache` (its key next to it), with a small instance pool.
fn host(dir: Option<&Path>) -> PluginHost {
    PluginHost::new(
        HostConfig::default()
            .with_cache_dir(dir.map(|dir| dir.join("cache")))
            .with_pool(PoolConfig::default().with_slots(4)),
    )
    .expect("plugin host")
}

fn bytes(path: &str) -> Vec<u8> {
    std::fs::read(path).expect("built plugin")
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn call(step: &str, input: Value) -> StepCall {
    StepCall {
        run_id: "run-1".into(),
        workflow_id: "wf".into(),
        step_path: step.into(),
        attempt: 0,
        input: input.into(),
        config: json!({}).into(),
        state: json!({}).into(),
        resume: None,
        foreach_index: None,
        iteration: None,
    }
}

fn io() -> Invocation {
    Invocation::new(Arc::new(DiscardEvents), Arc::new(NoRun))
}

/// Runs testkit's `inc` on `plugin` and checks its answer.
async fn runs_inc(plugin: &Plugin) {
    let result = plugin
        .execute(
            "inc",
            &call("inc", json!({"n": 1})),
            &Sandbox::default(),
            io(),
        )
        .await;
    assert_eq!(result.outcome, Ok(StepOutcome::Done(json!({"n": 2}))));
}

#[tokio::test]
async fn a_component_exporting_only_tools_is_accepted_and_lists_them() {
    let host = host(None);
    let plugin = host
        .load(&bytes(weft_guests::TOOLS), None)
        .await
        .expect("tools plugin loads");
    let exports = plugin.exports();
    assert!(exports.tools && !exports.steps, "{exports:?}");
    assert!(plugin.steps().is_empty());
    let names: Vec<&str> = plugin.tools().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        ["add", "delete-everything", "read-file", "check-text"]
    );
    let add = plugin.tool("add").expect("add");
    assert_eq!(add.input_schema["required"], json!(["a", "b"]));
    assert_eq!(
        add.output_schema.as_ref().map(|s| &s["required"]),
        Some(&json!(["sum"]))
    );
    assert!(!add.needs_approval);
    assert!(
        plugin
            .tool("delete-everything")
            .expect("delete-everything")
            .needs_approval
    );

    // It runs its tools, and refuses steps it does not have.
    let sum = plugin
        .call_tool(
            "add",
            ToolCall {
                run_id: "run-1".into(),
                call_id: "call-1".into(),
                args: json!({"a": 2, "b": 3}),
                config: json!({}),
            },
            &Sandbox::default(),
            io(),
        )
        .await;
    assert_eq!(sum, Ok(json!({"sum": 5})));
    let step = plugin
        .execute("add", &call("add", json!({})), &Sandbox::default(), io())
        .await;
    let err = step.outcome.expect_err("a tool plugin has no steps");
    assert_eq!(err.code, "unknown-step");
    assert!(!err.retryable);
}

#[tokio::test]
async fn a_component_exporting_neither_interface_is_refused_naming_its_exports() {
    let host = host(None);
    let err = host
        .load(&bytes(weft_guests::COMMAND), None)
        .await
        .expect_err("a command is not a plugin");
    assert!(matches!(err, PluginError::NotAPlugin { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("wasi:cli/run"), "{message}");
    assert!(message.contains("weft:plugin/steps@0.1.0"), "{message}");
    assert!(message.contains("not a weft plugin"), "{message}");
    assert!(!message.contains('\n'), "{message}");
}

#[tokio::test]
async fn a_workflow_naming_a_command_component_is_refused_before_it_runs() {
    let env = Env::new();
    let path = env.file(
        "command.yaml",
        r#"
id: not-a-plugin
plugins:
  cmd: { wasm: "{command}" }
steps:
  - { id: a, plugin: cmd, step: run }
"#,
    );
    let err = match weft::load_workflow(&path, env.rt.host()).await {
        Ok(_) => panic!("a command component was accepted"),
        Err(e) => e,
    };
    assert!(err.to_string().contains("wasi:cli/run"), "{err}");
    assert!(
        env.rt.runs(None, None).expect("runs").is_empty(),
        "nothing was stored"
    );
}

#[tokio::test]
async fn a_sha256_pin_mismatch_is_refused_and_the_right_pin_loads() {
    let host = host(None);
    let wasm = bytes(weft_guests::TESTKIT);
    let digest = sha256(&wasm);
    let wrong = sha256(b"some other plugin");

    let err = host
        .load(&wasm, Some(&wrong))
        .await
        .expect_err("mismatch refused");
    assert!(matches!(err, PluginError::PinMismatch { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains(&digest) && message.contains(&wrong),
        "{message}"
    );
    assert!(message.contains("pin"), "{message}");

    let err = host
        .load(&wasm, Some("3f1c"))
        .await
        .expect_err("malformed pin refused");
    assert!(matches!(err, PluginError::InvalidPin { .. }), "{err:?}");
    assert!(err.to_string().contains("64 hex digits"), "{err}");

    let plugin = host
        .load(&wasm, Some(&digest))
        .await
        .expect("the right pin loads");
    assert_eq!(plugin.digest(), digest);
    let prefixed = format!("sha256:{}", digest.to_uppercase());
    let again = host
        .load(&wasm, Some(&prefixed))
        .await
        .expect("prefixed, any case");
    assert!(
        Arc::ptr_eq(&plugin, &again),
        "the same bytes give the same plugin"
    );
    runs_inc(&plugin).await;
}

#[tokio::test]
async fn a_workflow_pin_mismatch_refuses_the_file_and_the_right_pin_runs() {
    let env = Env::new();
    let digest = sha256(&bytes(weft_guests::TESTKIT));
    let wrong = sha256(b"not testkit");
    let workflow = |pin: &str| {
        format!(
            r#"
id: pinned
plugins:
  kit: {{ wasm: "{{testkit}}", sha256: "{pin}" }}
steps:
  - {{ id: a, plugin: kit, step: inc }}
"#
        )
    };
    let path = env.file("wrong-pin.yaml", &workflow(&wrong));
    let err = match weft::load_workflow(&path, env.rt.host()).await {
        Ok(_) => panic!("a wrong pin was accepted"),
        Err(e) => e,
    };
    let message = err.to_string();
    assert!(
        message.contains(&wrong) && message.contains(&digest),
        "{message}"
    );

    let rec = env.run(&workflow(&digest), json!({"n": 0})).await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:#?}");
    assert_eq!(rec.result, Some(json!({"n": 1})));
}

/// The one compiled artifact in `<dir>/cache`.
fn artifact(dir: &Path) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(dir.join("cache"))
        .expect("cache dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found.into_iter().next().expect("one artifact")
}

/// The MAC that authenticates `artifact`.
fn mac(artifact: &Path) -> PathBuf {
    let mut name = artifact.as_os_str().to_owned();
    name.push(".mac");
    PathBuf::from(name)
}

#[tokio::test]
async fn a_second_load_skips_compilation() {
    let cache = tempfile::tempdir().expect("temp dir");
    let wasm = bytes(weft_guests::TESTKIT);

    let first = host(Some(cache.path()));
    let plugin = first.load(&wasm, None).await.expect("loads");
    assert_eq!(first.compilations(), 1);
    // Loading the same bytes again in the same host: the same plugin, no compile.
    let again = first.load(&wasm, None).await.expect("loads again");
    assert!(Arc::ptr_eq(&plugin, &again));
    assert_eq!(first.compilations(), 1);
    let file = artifact(cache.path());
    assert!(
        file.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(&sha256(&wasm)))
    );
    assert!(mac(&file).is_file());

    // A new host (a new process, as far as the cache knows) loads from disk.
    let second = host(Some(cache.path()));
    let plugin = second
        .load(&wasm, None)
        .await
        .expect("loads from the cache");
    assert_eq!(second.compilations(), 0);
    runs_inc(&plugin).await;
}

#[tokio::test]
async fn a_corrupted_or_truncated_cache_entry_is_recompiled() {
    let cache = tempfile::tempdir().expect("temp dir");
    let wasm = bytes(weft_guests::TESTKIT);
    let seed = host(Some(cache.path()));
    seed.load(&wasm, None).await.expect("loads");
    assert_eq!(seed.compilations(), 1);
    let file = artifact(cache.path());
    let good = std::fs::read(&file).expect("artifact");

    // Garbage (MAC mismatch), truncated (MAC mismatch), and garbage whose MAC was replaced by
    // its plain sha256 (what anyone without the cache key could compute).
    let garbage = b"this is not a compiled component".repeat(64);
    let truncated = good[..good.len() / 2].to_vec();
    for (case, bytes, fix_checksum) in [
        ("garbage", garbage.clone(), false),
        ("truncated", truncated, false),
        ("garbage with a recomputed checksum", garbage, true),
    ] {
        std::fs::write(&file, &bytes).expect("corrupt the artifact");
        if fix_checksum {
            std::fs::write(mac(&file), sha256(&bytes)).expect("rewrite the MAC");
        }
        let fresh = host(Some(cache.path()));
        let plugin = fresh
            .load(&wasm, None)
            .await
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(fresh.compilations(), 1, "{case}: recompiled");
        runs_inc(&plugin).await;
        // The entry was rewritten: the next host loads it without compiling.
        let next = host(Some(cache.path()));
        next.load(&wasm, None)
            .await
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(
            next.compilations(),
            0,
            "{case}: the rewritten entry is used"
        );
    }
}

#[tokio::test]
async fn describe_gives_each_steps_schemas() {
    let host = host(None);
    let plugin = host
        .load(&bytes(weft_guests::TESTKIT), None)
        .await
        .expect("loads");
    let exports = plugin.exports();
    assert!(exports.steps && !exports.tools, "{exports:?}");
    assert!(plugin.tools().is_empty());
    // The catalog grows; these are the steps tests rely on, each described once.
    let names: Vec<&str> = plugin.steps().iter().map(|s| s.name.as_str()).collect();
    for name in [
        "echo",
        "inc",
        "context",
        "fail",
        "set-state",
        "suspend",
        "bail",
        "tripwire",
        "emit",
        "step-result",
        "wait-abort",
        "typed",
        "bad-json",
    ] {
        assert_eq!(
            names.iter().filter(|n| **n == name).count(),
            1,
            "{name} in {names:?}"
        );
    }
    let typed = plugin.step("typed").expect("typed");
    let schema = |s: &Option<Value>| s.clone().expect("schema present");
    assert_eq!(schema(&typed.input_schema)["required"], json!(["amount"]));
    assert_eq!(
        schema(&typed.input_schema)["properties"]["currency"]["default"],
        json!("EUR")
    );
    assert_eq!(
        schema(&typed.config_schema)["properties"]["factor"]["default"],
        json!(1)
    );
    assert_eq!(schema(&typed.output_schema)["required"], json!(["total"]));
    assert_eq!(
        schema(&typed.suspend_schema)["required"],
        json!(["question"])
    );
    assert_eq!(schema(&typed.resume_schema)["required"], json!(["ok"]));
    // A step without schemas has none.
    let echo = plugin.step("echo").expect("echo");
    assert!(
        echo.input_schema.is_none() && echo.output_schema.is_none() && echo.config_schema.is_none()
    );
    assert_eq!(echo.description, "Returns the input unchanged.");
    assert!(plugin.step("no-such-step").is_none());

    // An unknown step fails with `unknown-step`, never retried, naming what the plugin has.
    let result = plugin
        .execute(
            "no-such-step",
            &call("x", json!({})),
            &Sandbox::default(),
            io(),
        )
        .await;
    let err = result.outcome.expect_err("unknown step");
    assert_eq!(err.code, "unknown-step");
    assert!(!err.retryable);
    assert!(err.message.contains("typed"), "{}", err.message);
}

#[tokio::test]
async fn the_hostile_plugin_describes_its_whole_catalog() {
    let host = host(None);
    let plugin = host
        .load(&bytes(weft_guests::HOSTILE), None)
        .await
        .expect("loads, wasi:http linked");
    let names: Vec<&str> = plugin.steps().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "spin",
            "sleep",
            "membomb",
            "stack-overflow",
            "panic",
            "exit",
            "not-json",
            "big-result",
            "writer-flood",
            "stdout-spam",
            "fs-escape",
            "env-peek",
            "tcp-connect",
            "http-get",
            "scribble"
        ]
    );
}

/// Collects a command's output.
#[derive(Default)]
struct Captured {
    out: Vec<String>,
    err: Vec<String>,
}

impl Output for Captured {
    fn line(&mut self, text: &str) {
        self.out.push(text.to_owned());
    }

    fn err(&mut self, text: &str) {
        self.err.push(text.to_owned());
    }
}

#[tokio::test]
async fn s105_plugin_inspect_through_the_library_prints_steps_and_tools_or_refuses() {
    let env = Env::new();
    let mut out = Captured::default();
    let inspect = |file: &str| {
        Cmd::Plugin(PluginCmd::Inspect {
            file: PathBuf::from(file),
        })
    };
    let code = weft::cli::exec(&env.rt, inspect(weft_guests::TESTKIT), &mut out).await;
    assert_eq!(code, EXIT_OK, "{:?}", out.err);
    let info: Value = serde_json::from_str(&out.out.join("\n")).expect("one JSON document");
    assert_eq!(info["digest"], json!(sha256(&bytes(weft_guests::TESTKIT))));
    assert_eq!(info["tools"], json!([]));
    let steps = info["steps"].as_array().expect("steps");
    let loaded = env
        .rt
        .host()
        .load(&bytes(weft_guests::TESTKIT), None)
        .await
        .expect("loads");
    assert_eq!(steps.len(), loaded.steps().len());
    assert_eq!(
        info["steps"],
        serde_json::to_value(loaded.steps()).expect("steps serialize")
    );
    let typed = steps.iter().find(|s| s["name"] == "typed").expect("typed");
    assert_eq!(typed["input_schema"]["required"], json!(["amount"]));

    let mut out = Captured::default();
    let code = weft::cli::exec(&env.rt, inspect(weft_guests::TOOLS), &mut out).await;
    assert_eq!(code, EXIT_OK, "{:?}", out.err);
    let info: Value = serde_json::from_str(&out.out.join("\n")).expect("one JSON document");
    assert_eq!(info["steps"], json!([]));
    assert_eq!(info["tools"][0]["name"], json!("add"));

    let mut out = Captured::default();
    let code = weft::cli::exec(&env.rt, inspect(weft_guests::COMMAND), &mut out).await;
    assert_eq!(code, EXIT_USAGE);
    assert!(out.out.is_empty(), "{:?}", out.out);
    assert!(out.err.join("\n").contains("wasi:cli/run"), "{:?}", out.err);
}
