//! Embedding weft in a Rust service: a workflow built in Rust that mixes a native step (an
//! async closure) with sandboxed plugin steps, suspends for approval, and is resumed through
//! the API — events streamed live throughout.
//!
//! ```text
//! cargo run --example embed
//! ```

use anyhow::Context;
use serde_json::json;
use weft::{
    Entry, NativeStep, PluginSpec, ResumeRequest, RunStatus, Runtime, RuntimeConfig, StepFailure,
    StepOutcome, WorkflowBuilder,
};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let home = tempfile::tempdir()?;
    let rt = Runtime::open(home.path(), RuntimeConfig::default())?;

    // A native step: plain Rust, registered by name, invoked like any plugin step.
    rt.register(
        "price",
        NativeStep::new(|call| async move {
            let qty = call.call.input["qty"]
                .as_f64()
                .context("qty")
                .map_err(|e| StepFailure::new("invalid-input", e.to_string()).not_retryable())?;
            call.write(json!({ "pricing": qty }));
            Ok(StepOutcome::Done(json!({ "amount": qty * 450.0 })))
        })
        .input_schema(json!({ "type": "object", "required": ["qty"] })),
    );

    let plugins = std::path::Path::new(weft_guests::PLUGIN_DIR);
    let workflow = WorkflowBuilder::new("order")
        .plugin(
            "approval",
            PluginSpec::wasm(plugins.join("approval.wasm").display().to_string()),
        )
        .then(Entry::native("price", "price"))
        .then(Entry::step("approve", "approval", "approve").config(json!({ "limit": 1000 })))
        .build(&rt)
        .await?;

    let run_id = rt.start(&workflow, json!({ "qty": 3 }), None).await?;
    let record = rt.wait(&run_id).await?;
    anyhow::ensure!(
        record.status == RunStatus::Suspended,
        "expected a suspension"
    );
    println!("suspended: {}", serde_json::to_string(&record.suspended)?);

    // Days later, in another request handler: the manager approves.
    let resume = ResumeRequest {
        step: None,
        label: Some("manager".into()),
        foreach_index: None,
        data: json!({ "approved": true, "by": "ana" }),
    };
    rt.resume(&run_id, resume).await?;
    let record = rt.wait(&run_id).await?;
    let mut events = rt.watch(&run_id, 1)?;
    while let Some(event) = events.recv().await {
        println!("event: {}", serde_json::to_string(&*event)?);
    }
    println!("result: {}", serde_json::to_string(&record.result)?);
    anyhow::ensure!(
        record.status == RunStatus::Success,
        "the run did not succeed"
    );
    Ok(())
}
