//! The README's main job: run `examples/quickstart.yaml` (plugin steps built for
//! wasm32-wasip2 by the workspace) on the embedded default store, print its events as they
//! happen and its run record at the end.
//!
//! ```text
//! cargo run --example quickstart [-- '{"text": "your words"}']
//! ```
//!
//! The home is `$WEFT_HOME`, else `.weft` in the current directory, as for the `weft` CLI, so
//! `weft show RUN-ID` and `weft runs` find the run afterwards.

use std::path::{Path, PathBuf};

use anyhow::Context;
use weft::{RunStatus, Runtime, RuntimeConfig, load_workflow};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // The plugins live in examples/plugins, built by the `weft-guests` build script.
    let plugins = Path::new(weft_guests::PLUGIN_DIR);
    let file = plugins
        .parent()
        .context("examples dir")?
        .join("quickstart.yaml");
    let input = match std::env::args().nth(1) {
        Some(text) => serde_json::from_str(&text).context("the argument must be JSON")?,
        None => serde_json::json!({ "text": "weft runs sandboxed steps durably" }),
    };
    let home = std::env::var_os("WEFT_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(".weft"));

    let rt = Runtime::open(&home, RuntimeConfig::default())?;
    let workflow = load_workflow(&file, rt.host()).await?;
    let run_id = rt.start(&workflow, input, None).await?;

    // Follow the run's events live until it ends (or suspends).
    let mut events = rt.watch_settled(&run_id, 1)?;
    while let Some(event) = events.recv().await {
        println!("{}", serde_json::to_string(&*event)?);
    }
    let record = rt.wait(&run_id).await?;
    println!("{}", serde_json::to_string_pretty(&record)?);
    println!("run {run_id}: {} (home: {})", record.status, home.display());
    anyhow::ensure!(
        record.status == RunStatus::Success,
        "the run did not succeed"
    );
    Ok(())
}
