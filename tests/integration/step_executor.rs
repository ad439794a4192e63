//! The `StepExecutor` seam (issue 6, item 3): the driver runs every step through the executor
//! its reference resolves to — an executor registered by name, a native step, a plugin from the
//! plugin host — and a plugin a recovered run needs is loaded from the store once, through the
//! host's own cache.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use weft::RunStatus;
use weft::Runtime;
use weft::{GuestEvent, StepExecutor, StepInfo, StepRequest};
use weft::{InvocationResult, StepOutcome};
use weft::{NativeCall, NativeStep};
use weft::{PluginError, PluginHost};

use crate::common::{Env, config, config_for, plugin_paths};
use crate::rules::{find, settle};

/// What [`Probe`] saw of the one invocation it ran.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    step: String,
    input: Value,
    attempt: u32,
    deadline: Option<Duration>,
    init: Value,
}

/// An executor of our own: answers with its input under `probed`, writes one chunk.
#[derive(Default)]
struct Probe {
    seen: Mutex<Vec<Seen>>,
}

impl StepExecutor for Probe {
    fn execute(&self, request: StepRequest) -> BoxFuture<'_, InvocationResult> {
        Box::pin(async move {
            self.seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Seen {
                    step: request.step.clone(),
                    input: Value::clone(&request.call.input),
                    attempt: request.call.attempt,
                    deadline: request.io.deadline,
                    init: request.io.run.init_data(),
                });
            request
                .io
                .sink
                .emit(GuestEvent::Output(json!({"chunk": "from the probe"})));
            InvocationResult {
                outcome: Ok(StepOutcome::Done(json!({"probed": request.call.input}))),
                patches: vec![json!({"probe": "was here"})],
            }
        })
    }
}

fn probe_info() -> StepInfo {
    StepInfo {
        name: String::new(),
        description: "answers with its input".into(),
        input_schema: None,
        output_schema: None,
        suspend_schema: None,
        resume_schema: None,
        config_schema: None,
    }
}

#[tokio::test]
async fn an_executor_registered_by_name_runs_its_steps_with_the_request_the_driver_builds() {
    let env = Env::new();
    let probe = Arc::new(Probe::default());
    env.rt
        .register_executor("probe", probe_info(), probe.clone());
    let yaml = r#"
id: probed
initial-state: {}
steps:
  - { id: p, native: probe, timeout-ms: 1234 }
"#;
    let path = env.file("probed.yaml", yaml);
    let w = env.rt.load_workflow(&path).await.expect("load");
    let id = env
        .rt
        .start(&w, json!({"x": 1}), None)
        .await
        .expect("start");
    let rec = settle(&env, &id).await;
    assert_eq!(rec.status, RunStatus::Success, "{:?}", rec.error);
    assert_eq!(rec.result, Some(json!({"probed": {"x": 1}})));
    assert_eq!(rec.state["probe"], "was here", "its patches are applied");
    assert_eq!(
        *probe.seen.lock().unwrap_or_else(|e| e.into_inner()),
        vec![Seen {
            step: "probe".into(),
            input: json!({"x": 1}),
            attempt: 0,
            deadline: Some(Duration::from_millis(1234)),
            init: json!({"x": 1}),
        }],
        "one invocation, named by the registered name, with the step's timeout as its deadline"
    );
    let events = env.events(&id);
    let chunks = find(&events, "step-output", Some("p"));
    assert_eq!(chunks.len(), 1, "{events:?}");
    assert_eq!(chunks[0].data, json!({"chunk": "from the probe"}));
}

/// A run that waits in native step `hold` (which never returns in the first process), then
/// runs a plugin step.
const HELD: &str = r#"
id: held
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: hold, native: hold }
  - { id: inc, plugin: kit, step: inc }
"#;

/// Starts `runs` runs of [`HELD`] in `home` and "crashes" once each one is inside `hold`: the
/// process's tokio runtime ends with every task, leaving the runs `running` in the store.
fn crash_while_held(home: &Path, workflow: &Path, runs: usize) {
    let tokio = tokio::runtime::Runtime::new().expect("tokio");
    tokio.block_on(async {
        let rt = Runtime::open(home, config_for(home)).expect("open");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        rt.register(
            "hold",
            NativeStep::new(move |call: NativeCall| {
                let _ = tx.send(call.call.run_id.clone());
                std::future::pending()
            }),
        );
        let w = rt.load_workflow(workflow).await.expect("load");
        for n in 0..runs {
            rt.start(&w, json!({}), Some(format!("held{n}")))
                .await
                .expect("start");
        }
        for _ in 0..runs {
            rx.recv().await.expect("a run reached hold");
        }
    });
    drop(tokio);
}

/// A runtime over `home` in which `hold` returns `{"n": 1}` at once.
fn reopen(home: &Path) -> Runtime {
    let rt = Runtime::open(home, config_for(home)).expect("open");
    rt.register(
        "hold",
        NativeStep::new(|_| async { Ok(StepOutcome::Done(json!({"n": 1}))) }),
    );
    rt
}

#[test]
fn s101_two_runs_recovered_at_once_load_their_plugin_from_the_store_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("home");
    let workflow = dir.path().join("held.yaml");
    std::fs::write(&workflow, plugin_paths(HELD)).expect("write workflow");
    crash_while_held(&home, &workflow, 2);

    let tokio = tokio::runtime::Runtime::new().expect("tokio");
    tokio.block_on(async {
        let rt = reopen(&home);
        assert_eq!(rt.host().blobs_fetched(), 0);
        let recovery = rt.recover_all().await.expect("recover");
        assert_eq!(recovery.recovered.len(), 2, "{:?}", recovery.failed);
        for n in 0..2 {
            let rec = rt.wait(&format!("held{n}")).await.expect("wait");
            assert_eq!(rec.status, RunStatus::Success, "{:?}", rec.error);
            assert_eq!(rec.result, Some(json!({"n": 2})));
        }
        assert_eq!(
            rt.host().blobs_fetched(),
            1,
            "both runs share the one load of the component from the store"
        );
    });
}

#[test]
fn s101_a_recovered_run_uses_the_plugin_the_host_has_loaded_without_reading_the_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("home");
    let workflow = dir.path().join("held.yaml");
    std::fs::write(&workflow, plugin_paths(HELD)).expect("write workflow");
    crash_while_held(&home, &workflow, 1);

    let tokio = tokio::runtime::Runtime::new().expect("tokio");
    tokio.block_on(async {
        let rt = reopen(&home);
        // Loading the workflow again loads its plugin into this process's host.
        rt.load_workflow(&workflow).await.expect("load");
        rt.recover_all().await.expect("recover");
        let rec = rt.wait("held0").await.expect("wait");
        assert_eq!(rec.status, RunStatus::Success, "{:?}", rec.error);
        assert_eq!(rec.result, Some(json!({"n": 2})));
        assert_eq!(
            rt.host().blobs_fetched(),
            0,
            "the host's plugin is used; the store is not read"
        );
    });
}

/// Does something to the stored component with digest `digest` of the home `home`.
type Spoil = fn(home: &Path, digest: &str);

/// Removes the stored component: its blob file on sled, its row on PostgreSQL.
fn remove_component(home: &Path, digest: &str) {
    match crate::backend::store_url_for(home) {
        Some(url) => assert_eq!(
            crate::backend::execute(
                &url,
                &format!("DELETE FROM {{s}}.blobs WHERE digest = '{digest}'")
            ),
            1,
            "the component's row"
        ),
        None => {
            std::fs::remove_file(home.join("blobs/sha256").join(digest)).expect("remove the blob")
        }
    }
}

/// Replaces the stored component's bytes with others.
fn damage_component(home: &Path, digest: &str) {
    match crate::backend::store_url_for(home) {
        Some(url) => assert_eq!(
            crate::backend::execute(
                &url,
                &format!(
                    "UPDATE {{s}}.blobs SET bytes = 'not the component'::bytea \
                     WHERE digest = '{digest}'"
                )
            ),
            1,
            "the component's row"
        ),
        None => {
            let blob = home.join("blobs/sha256").join(digest);
            std::fs::remove_file(&blob).expect("remove the blob");
            std::fs::write(blob, b"not the component").expect("write");
        }
    }
}

#[test]
fn s101_a_recovered_run_whose_component_is_missing_or_damaged_in_the_home_fails_saying_so() {
    let spoils: [(&str, Spoil, &str); 2] = [
        (
            "missing",
            remove_component,
            "is not in the store (the home's blobs/sha256, or the database's blobs table): restore it, or start the workflow again from its file",
        ),
        (
            "damaged",
            damage_component,
            "it is damaged; restore the original component",
        ),
    ];
    let wasm = std::fs::read(weft_guests::TESTKIT).expect("built plugin");
    let tokio = tokio::runtime::Runtime::new().expect("tokio");
    let digest = tokio.block_on(digest_of(&wasm));
    drop(tokio);
    for (what, spoil, message) in spoils {
        let dir = tempfile::tempdir().expect("temp dir");
        let home = dir.path().join("home");
        let workflow = dir.path().join("held.yaml");
        std::fs::write(&workflow, plugin_paths(HELD)).expect("write workflow");
        crash_while_held(&home, &workflow, 1);
        spoil(&home, &digest);

        let tokio = tokio::runtime::Runtime::new().expect("tokio");
        tokio.block_on(async {
            let rt = reopen(&home);
            rt.recover_all().await.expect("recover");
            let rec = rt.wait("held0").await.expect("wait");
            assert_eq!(rec.status, RunStatus::Failed, "{what}: {rec:?}");
            let error = rec.error.expect("an error");
            assert_eq!(error.code, "plugin-unavailable", "{what}");
            assert_eq!(error.step, "inc", "{what}");
            assert!(
                error.message.contains(&digest[..12]) && error.message.contains(message),
                "{what}: {}",
                error.message
            );
        });
    }
}

/// The content digest of a component, as a plugin host names it.
async fn digest_of(wasm: &[u8]) -> String {
    let host = PluginHost::new(config().host).expect("host");
    let plugin = host.load(wasm, None).await.expect("load");
    plugin.digest().to_owned()
}

#[tokio::test]
async fn load_stored_fetches_once_for_callers_at_once_and_never_once_loaded() {
    let wasm = std::fs::read(weft_guests::TESTKIT).expect("built plugin");
    let digest = digest_of(&wasm).await;
    let host = PluginHost::new(config().host).expect("host");
    let fetches = AtomicU64::new(0);
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let fetch_slowly = || async {
        fetches.fetch_add(1, Ordering::SeqCst);
        released.await.expect("released");
        Ok::<_, PluginError>(wasm.clone())
    };
    let fetch = || async {
        fetches.fetch_add(1, Ordering::SeqCst);
        Ok::<_, PluginError>(wasm.clone())
    };
    let mut first = Box::pin(host.load_stored(&digest, fetch_slowly));
    assert!(futures::poll!(first.as_mut()).is_pending());
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        1,
        "the first caller fetches"
    );
    let mut second = Box::pin(host.load_stored(&digest, fetch));
    assert!(futures::poll!(second.as_mut()).is_pending());
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        1,
        "a caller asking meanwhile waits for that fetch"
    );
    release.send(()).expect("release");
    let (a, b) = futures::join!(first, second);
    let (a, b) = (a.expect("loaded"), b.expect("loaded"));
    assert!(Arc::ptr_eq(&a, &b), "both get the one plugin");
    let again = host
        .load_stored(&digest, fetch)
        .await
        .expect("loaded already");
    assert!(Arc::ptr_eq(&a, &again));
    let by_bytes = host.load(&wasm, None).await.expect("load");
    assert!(Arc::ptr_eq(&a, &by_bytes), "one cache, whatever the way in");
    assert_eq!(fetches.load(Ordering::SeqCst), 1);
    assert_eq!(host.blobs_fetched(), 1);
}

#[tokio::test]
async fn load_stored_refuses_bytes_that_are_not_the_digest_and_a_malformed_digest() {
    let host = PluginHost::new(config().host).expect("host");
    let wasm = std::fs::read(weft_guests::TESTKIT).expect("built plugin");
    let other = "0".repeat(64);
    let err = host
        .load_stored(&other, || async { Ok::<_, PluginError>(wasm.clone()) })
        .await
        .expect_err("refused");
    assert!(matches!(err, PluginError::Damaged { .. }), "{err}");
    let err = host
        .load_stored("sha256:nothex", || async {
            Ok::<_, PluginError>(wasm.clone())
        })
        .await
        .expect_err("refused");
    assert!(matches!(err, PluginError::InvalidPin { .. }), "{err}");
}

/// An executor that panics: while making its future, or inside it.
struct Panics {
    early: bool,
}

impl StepExecutor for Panics {
    fn execute(&self, _request: StepRequest) -> BoxFuture<'_, InvocationResult> {
        if self.early {
            panic!("boom before the future\nsecond line");
        }
        Box::pin(async { panic!("boom inside the future") })
    }
}

#[tokio::test]
async fn s84_a_panicking_executor_fails_its_step_with_trap_instead_of_leaving_the_run_waiting() {
    let env = Env::new();
    for (name, early, reason) in [
        ("early", true, "boom before the future"),
        ("late", false, "boom inside the future"),
    ] {
        env.rt
            .register_executor(name, probe_info(), Arc::new(Panics { early }));
        let yaml = format!("id: panics-{name}\nsteps:\n  - {{ id: p, native: {name} }}\n");
        let path = env.file(&format!("{name}.yaml"), &yaml);
        let w = env.rt.load_workflow(&path).await.expect("load");
        let id = env.rt.start(&w, json!({}), None).await.expect("start");
        let rec = settle(&env, &id).await;
        assert_eq!(rec.status, RunStatus::Failed, "{rec:?}");
        let err = rec.error.expect("an error");
        assert_eq!(err.code, "trap");
        assert_eq!(err.message, format!("step panicked: {reason}"), "one line");
    }
}

#[tokio::test]
async fn s15_a_native_step_past_its_timeout_fails_with_timeout() {
    let env = Env::new();
    env.rt.register(
        "stuck",
        NativeStep::new(|_call: NativeCall| std::future::pending()),
    );
    let yaml = "id: stuck\nsteps:\n  - { id: s, native: stuck, timeout-ms: 50 }\n";
    let path = env.file("stuck.yaml", yaml);
    let w = env.rt.load_workflow(&path).await.expect("load");
    let id = env.rt.start(&w, json!({}), None).await.expect("start");
    let rec = settle(&env, &id).await;
    assert_eq!(rec.status, RunStatus::Failed, "{rec:?}");
    let err = rec.error.expect("an error");
    assert_eq!(err.code, "timeout");
    assert!(err.message.contains("deadline of 50 ms"), "{}", err.message);
}
