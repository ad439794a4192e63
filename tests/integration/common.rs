//! Shared set-up: a runtime in a fresh temporary home, and workflow files written next to it.

use std::path::{Path, PathBuf};

use serde_json::Value;
use weft::{LoadedWorkflow, load_workflow};
use weft::{RunRecord, Runtime, RuntimeConfig, StoredEvent};

use crate::backend;

/// A runtime over a temporary home, removed when dropped.
pub struct Env {
    pub rt: Runtime,
    pub dir: tempfile::TempDir,
}

impl Env {
    /// A fresh home with default settings, sharing one compiled-plugin cache across tests.
    pub fn new() -> Env {
        Env::with_config(config())
    }

    /// A fresh home with these settings.
    pub fn with_config(config: RuntimeConfig) -> Env {
        let dir = tempfile::tempdir().expect("temp dir");
        let rt = Runtime::open(&dir.path().join("home"), config).expect("open runtime");
        Env { rt, dir }
    }

    /// Writes `yaml` as a workflow file named `name` in the temp dir; `{testkit}`, `{hostile}`,
    /// `{text}`, `{approval}`, `{stream}`, `{files}` stand for the plugins' paths.
    pub fn file(&self, name: &str, yaml: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, plugin_paths(yaml)).expect("write workflow");
        path
    }

    /// Loads a workflow file.
    pub async fn load(&self, path: &Path) -> LoadedWorkflow {
        match load_workflow(path, self.rt.host()).await {
            Ok(w) => w,
            Err(e) => panic!("workflow refused: {e}"),
        }
    }

    /// Writes, loads and runs `yaml` with `input` until it ends or suspends.
    pub async fn run(&self, yaml: &str, input: Value) -> RunRecord {
        let path = self.file("workflow.yaml", yaml);
        let w = self.load(&path).await;
        let id = self.rt.start(&w, input, None).await.expect("start");
        self.rt.wait(&id).await.expect("wait")
    }

    /// Every stored event of a run (it must have ended or suspended).
    pub fn events(&self, run_id: &str) -> Vec<StoredEvent> {
        let mut rx = self.rt.watch(run_id, 1).expect("watch");
        let mut out = Vec::new();
        while let Ok(ev) = rx.try_recv() {
            out.push((*ev).clone());
        }
        out
    }
}

/// Default settings, with the compiled-plugin cache shared by every test of this build, on the
/// tests' backend: a fresh PostgreSQL schema in postgres mode (`backend.rs`), else the sled store
/// in the home.
pub fn config() -> RuntimeConfig {
    with_store(sled_config(), backend::store_url())
}

/// [`config`] and its store URL (`None` on sled), for tests that look into the store itself.
pub fn config_and_url() -> (RuntimeConfig, Option<String>) {
    let url = backend::store_url();
    (with_store(sled_config(), url.clone()), url)
}

/// Default settings on the sled store whatever the tests' backend, with the shared
/// compiled-plugin cache: for tests of what only sled has (its files in the home, its format
/// marker, the home lock).
pub fn sled_config() -> RuntimeConfig {
    let mut config = RuntimeConfig::default();
    config.host.cache_dir = Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache"));
    config
}

fn with_store(config: RuntimeConfig, url: Option<String>) -> RuntimeConfig {
    match url {
        Some(url) => config.with_store(url),
        None => config,
    }
}

/// [`config`] for a home that is opened more than once (reopened after a crash, recovered):
/// in postgres mode every call for one home names the same schema, so the home finds its runs
/// again.
pub fn config_for(home: &Path) -> RuntimeConfig {
    with_store(sled_config(), backend::store_url_for(home))
}

/// The arguments that put a spawned `weft` on the tests' backend: `--store URL` (a fresh
/// schema on every call) in postgres mode, none otherwise.
pub fn store_args() -> Vec<String> {
    match backend::store_url() {
        Some(url) => vec!["--store".into(), url],
        None => Vec::new(),
    }
}

/// [`store_args`] for the `weft` commands on `home`: the same schema for every call with one
/// home, so `weft run` and a later `weft show` of that home see one store.
pub fn store_args_for(home: &Path) -> Vec<String> {
    match backend::store_url_for(home) {
        Some(url) => vec!["--store".into(), url],
        None => Vec::new(),
    }
}

/// The lines of the effects log that test plugins append to at `path` (none when it is
/// missing): each names the step that wrote it first.
pub fn read_log(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Lines of the effects `log` written by the step at `path`.
pub fn effects(log: &[String], path: &str) -> usize {
    log.iter()
        .filter(|l| l.split(' ').next() == Some(path))
        .count()
}

/// Replaces `{plugin}` placeholders with the built plugins' absolute paths.
pub fn plugin_paths(yaml: &str) -> String {
    yaml.replace("{testkit}", weft_guests::TESTKIT)
        .replace("{hostile}", weft_guests::HOSTILE)
        .replace("{text}", weft_guests::TEXT)
        .replace("{approval}", weft_guests::APPROVAL)
        .replace("{stream}", weft_guests::STREAM)
        .replace("{files}", weft_guests::FILES)
        .replace("{tools}", weft_guests::TOOLS)
        .replace("{command}", weft_guests::COMMAND)
}

/// The event types of `events`, in order, with their paths: `step-started:a`.
pub fn kinds(events: &[StoredEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            let kind = serde_json::to_value(e.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            match &e.path {
                Some(p) => format!("{kind}:{p}"),
                None => kind,
            }
        })
        .collect()
}

/// Starts the scripted model double with `script` on loopback; its base address
/// (`http://ADDR`).
pub async fn model_double(script: &str) -> String {
    let script = weft::dev_model::Script::from_yaml(script).expect("a valid script");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(weft::dev_model::serve(listener, script));
    format!("http://{addr}")
}

/// A figure of a Prometheus text exposition (`/metrics`, `Runtime::metrics`): the value on the
/// line of `name` (with its labels), `None` when there is none.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
