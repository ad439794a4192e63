//! The Rust SDK's lean mode (`sdk/rust` with `default-features = false, features = ["lean"]`):
//! its plugin (`guests/plugins/leankit`) is a component of one core module that imports weft's
//! interfaces alone, and runs, suspends, panics and grows memory as a std plugin does.

use serde_json::{Value, json};
use wasmparser::{Parser, Payload};
use weft::RunStatus;

use crate::common::Env;
use crate::rules::{error, req, resume, settle, start};

/// A workflow `lean` with the lean plugin declared as `kit`, then `steps` (YAML lines).
fn wf(steps: &str) -> String {
    format!(
        "id: lean\nplugins:\n  kit: {{ wasm: \"{}\" }}\n{steps}",
        weft_guests::LEANKIT
    )
}

/// The names the component at `path` imports (its outermost imports) and how many core modules
/// it holds.
pub(crate) fn imports_and_modules(path: impl AsRef<std::path::Path>) -> (Vec<String>, usize) {
    let bytes = std::fs::read(path).expect("a built plugin");
    let (mut imports, mut modules, mut depth) = (Vec::new(), 0, 0usize);
    for payload in Parser::new(0).parse_all(&bytes) {
        match payload.expect("a valid component") {
            Payload::ModuleSection { .. } => modules += 1,
            Payload::ComponentSection { .. } => depth += 1,
            Payload::ComponentImportSection(reader) if depth == 0 => {
                for import in reader {
                    imports.push(import.expect("an import").name.name.to_string());
                }
            }
            Payload::End(_) => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    (imports, modules)
}

#[tokio::test]
async fn a_lean_component_imports_weft_alone_in_one_core_module() {
    let (imports, modules) = imports_and_modules(weft_guests::LEANKIT);
    assert!(
        imports.iter().all(|name| name.starts_with("weft:plugin/")),
        "{imports:?}"
    );
    assert_eq!(
        modules, 1,
        "no shim modules: no import lowered through memory"
    );
    // The same SDK with std: WASI comes in with std's runtime, and three core modules.
    let (imports, modules) = imports_and_modules(weft_guests::SDK_DEMO);
    assert!(
        imports.iter().any(|name| name.starts_with("wasi:")),
        "{imports:?}"
    );
    assert!(modules > 1);
}

#[tokio::test]
async fn lean_steps_run_in_sequence_and_fan_out() {
    let env = Env::new();
    let yaml = wf("steps:\n  - { id: i, plugin: kit, step: inc }\n  \
         - { id: m, plugin: kit, step: mul, config: { by: 2.5 } }\n  \
         - parallel:\n      id: p\n      steps:\n        \
         - { id: a, plugin: kit, step: inc }\n        \
         - { id: b, plugin: kit, step: mul, config: { by: 3 } }\n  \
         - { id: s, plugin: kit, step: sum }\n");
    let rec = env.run(&yaml, json!({"n": 1})).await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    assert_eq!(rec.steps["m"].output.as_deref(), Some(&json!({"n": 5})));
    // (5 + 1) + 5 * 3
    assert_eq!(rec.result, Some(json!({"n": 21})));

    // The input schema `inc` described is checked by the host.
    let rec = env
        .run(
            &wf("steps:\n  - { id: i, plugin: kit, step: inc }\n"),
            json!({"n": "one"}),
        )
        .await;
    assert_eq!(rec.status, RunStatus::Failed);
    assert_eq!(error(&rec).code, "invalid-input");
}

#[tokio::test]
async fn a_lean_step_suspends_and_resumes() {
    let env = Env::new();
    let yaml = wf("steps:\n  - { id: w, plugin: kit, step: suspend }\n");
    let id = start(&env, &yaml, json!({"ask": "ship?"})).await;
    let rec = settle(&env, &id).await;
    assert_eq!(rec.status, RunStatus::Suspended, "{rec:?}");
    assert_eq!(
        rec.steps["w"].suspend_payload,
        Some(json!({"ask": "ship?"}))
    );
    let rec = resume(&env, &id, req(Some("w"), None, None, json!("yes")))
        .await
        .expect("resume");
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    assert_eq!(
        rec.result,
        Some(json!({"resumed": "yes", "payload": {"ask": "ship?"}, "input": {"ask": "ship?"}}))
    );
}

#[tokio::test]
async fn s84_s111_a_lean_panic_fails_the_step_with_the_panics_message() {
    // Without std nothing unwinds: the SDK's panic handler writes Rust's panic report through
    // `log.stderr-byte` and traps, and the host takes the message as it does from a std
    // guest's stderr.
    let env = Env::new();
    let yaml = wf(
        "steps:\n  - { id: b, plugin: kit, step: boom, config: { message: lean went boom }, \
         retry: { attempts: 2, delay-ms: 1 } }\n",
    );
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, RunStatus::Failed, "{rec:?}");
    let err = error(&rec);
    assert_eq!(err.code, "trap");
    assert_eq!(err.message, "plugin panicked: lean went boom");
    assert_eq!(rec.steps["b"].attempts, Some(2));
}

/// The sum of the bytes `fill` writes into a block of `n`: byte `i` is `i % 251`.
fn fill_sum(n: u64) -> u64 {
    let whole = n / 251 * (250 * 251 / 2);
    let rest = n % 251;
    whole + rest * (rest.saturating_sub(1)) / 2
}

#[tokio::test]
async fn a_lean_step_grows_memory_past_its_arena_up_to_the_limit() {
    let env = Env::new();
    // 4 MiB: past the SDK's 1 MiB arena, so memory grows.
    let bytes = 4 * 1024 * 1024;
    let rec = env
        .run(
            &wf(&format!(
                "steps:\n  - {{ id: f, plugin: kit, step: fill, config: {{ bytes: {bytes} }} }}\n"
            )),
            Value::Null,
        )
        .await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    assert_eq!(
        rec.result,
        Some(json!({"bytes": bytes, "sum": fill_sum(bytes)}))
    );

    // Over the workflow's memory limit: the host refuses to grow, and says which limit.
    let rec = env
        .run(
            &format!(
                "id: lean\nplugins:\n  kit: {{ wasm: \"{}\", limits: {{ memory-mib: 16 }} }}\n\
                 steps:\n  - {{ id: f, plugin: kit, step: fill, config: {{ bytes: 33554432 }} }}\n",
                weft_guests::LEANKIT
            ),
            Value::Null,
        )
        .await;
    assert_eq!(rec.status, RunStatus::Failed, "{rec:?}");
    let err = error(&rec);
    assert_eq!(err.code, "memory-limit", "{err:?}");
    assert!(err.message.contains("16 MiB"), "{}", err.message);
}
