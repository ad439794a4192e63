//! An agent (docs/AGENTS.md): a model calling sandboxed tools in a loop, durably. The agent of
//! `examples/agent/assistant.yaml` adds numbers and reads a granted file (two tool calls at
//! once), asks a person before `delete-everything` (this program approves it through
//! `Runtime::resume`, labelled by the call's id), files a report through a workflow offered as
//! a tool (a child run that goes on alone), then answers. The model's text is printed as it
//! streams, from the run's events.
//!
//! ```text
//! cargo run --example agent
//! ```
//!
//! Without `OPENAI_API_KEY` the model is the scripted double (`examples/agent/script.yaml`,
//! docs/MODEL-DOUBLE.md) served in-process on loopback, so the output is the same every time.
//! With `OPENAI_API_KEY` set it is `WEFT_AGENT_MODEL` (default gpt-4o-mini) at
//! `OPENAI_BASE_URL` (default https://api.openai.com/v1). The home is a temporary directory.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::Path;

use anyhow::{Context, bail, ensure};
use serde_json::{Value, json};
use weft::dev_model::{Script, serve};
use weft::{EventKind, ResumeRequest, RunStatus, Runtime, RuntimeConfig, StoredEvent};

/// The model line of `assistant.yaml`, which this program replaces by the model it uses.
const DOUBLE_MODEL: &str =
    r#"  m: { api: openai-chat, base-url: "http://127.0.0.1:8077/v1", model: scripted }"#;
/// The run's id: fixed, so the child runs' ids (made from it) print the same every time.
const RUN_ID: &str = "assistant-1";
/// The agent's id in `assistant.yaml`.
const AGENT: &str = "helper";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = Path::new(weft_guests::PLUGIN_DIR)
        .parent()
        .context("examples dir")?
        .join("agent");
    let file = dir.join("assistant.yaml");
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("cannot read {}", file.display()))?;
    ensure!(
        text.contains(DOUBLE_MODEL),
        "{} no longer has the model line this example replaces: {DOUBLE_MODEL}",
        file.display()
    );
    let text = text.replacen(DOUBLE_MODEL, &model_line(&dir).await?, 1);
    let input_file = dir.join("input.json");
    let input: Value = serde_json::from_str(
        &std::fs::read_to_string(&input_file)
            .with_context(|| format!("cannot read {}", input_file.display()))?,
    )
    .with_context(|| format!("{} is not JSON", input_file.display()))?;

    let home = tempfile::tempdir()?;
    let rt = Runtime::open(home.path(), RuntimeConfig::default())?;
    // Relative paths in the text (plugins, granted dirs, report.yaml) are taken from `file`'s dir.
    let name = file.to_str().context("the examples path is not UTF-8")?;
    let workflow = rt.load_workflow_text(name, &text).await?;
    let question = input["question"].as_str().unwrap_or_default().to_owned();
    let run_id = rt.start(&workflow, input, Some(RUN_ID.into())).await?;
    println!("run {run_id} asks: {question}");

    // Follow the run's events until it ends; at each suspension, a person answers one
    // approval, and watching goes on from the next event.
    let mut show = Show::default();
    let record = loop {
        let mut events = rt.watch_settled(&run_id, show.next_seq)?;
        while let Some(event) = events.recv().await {
            show.event(&event);
        }
        show.end_text();
        let record = rt.wait(&run_id).await?;
        if record.status != RunStatus::Suspended {
            break record;
        }
        let Some(pending) = record.suspended.as_ref().and_then(|s| s.first()) else {
            bail!("the run is suspended with nothing to resume");
        };
        let Some(label) = pending.labels.first() else {
            bail!("{} waits without a label", pending.path);
        };
        println!(
            "approval needed: {} {} (label {label})",
            pending.payload["tool"].as_str().unwrap_or("?"),
            pending.payload["arguments"]
        );
        let data = json!({ "approved": true });
        println!("  a person approves: resume --label {label} --data {data}");
        let resume = ResumeRequest {
            step: None,
            label: Some(label.clone()),
            foreach_index: None,
            data,
        };
        rt.resume(&run_id, resume).await?;
    };

    println!("run {run_id}: {}", record.status);
    if record.status != RunStatus::Success {
        bail!(
            "the run ended {}: {}",
            record.status,
            serde_json::to_string(&(record.error, record.tripwire))?
        );
    }
    let output = record.result.unwrap_or_default();
    let steps = output["steps"].as_array().cloned().unwrap_or_default();
    println!("answer: {}", output["text"].as_str().unwrap_or_default());
    println!(
        "usage: {} in {} model calls, {} messages",
        output["usage"],
        steps.len(),
        output["messages"].as_array().map_or(0, Vec::len)
    );

    // The workflow tool's children went on alone; wait for each and show how it ended.
    let children = steps
        .iter()
        .filter_map(|s| s["tool_results"].as_array())
        .flatten()
        .filter_map(|r| r["result"]["run_id"].as_str());
    for child in children {
        let rec = rt.wait(child).await?;
        println!(
            "child run {child}: {} {}",
            rec.status,
            rec.result.unwrap_or_default()
        );
        ensure!(
            rec.status == RunStatus::Success,
            "the child run {child} did not succeed"
        );
    }
    Ok(())
}

/// The `models:` line to use: OpenAI when `OPENAI_API_KEY` is set, else the scripted double,
/// started here on a loopback port.
async fn model_line(dir: &Path) -> anyhow::Result<String> {
    if std::env::var("OPENAI_API_KEY").is_ok_and(|k| !k.is_empty()) {
        let base = std::env::var("OPENAI_BASE_URL")
            .unwrap_or_else(|_| "https://api.openai.com/v1".to_owned());
        let model = std::env::var("WEFT_AGENT_MODEL").unwrap_or_else(|_| "gpt-4o-mini".to_owned());
        println!("model: {model} at {base}");
        // JSON strings are YAML flow scalars, so any value is quoted safely.
        return Ok(format!(
            "  m: {{ api: openai-chat, base-url: {}, model: {}, api-key-env: OPENAI_API_KEY }}",
            Value::from(base),
            Value::from(model)
        ));
    }
    let script = Script::from_file(&dir.join("script.yaml"))?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = serve(listener, script).await {
            eprintln!("the model double stopped: {e}");
        }
    });
    println!("model: the scripted double (examples/agent/script.yaml) on loopback");
    Ok(format!(
        "  m: {{ api: openai-chat, base-url: \"http://{addr}/v1\", model: scripted }}"
    ))
}

/// Prints a run's events as a person would want to follow an agent: the model's text as it
/// streams, the tool calls it makes, approvals, and the tool results in the order the model
/// made the calls (parallel calls end in any order; printing them in call order keeps the
/// output the same every time).
#[derive(Default)]
struct Show {
    /// The next event to watch from.
    next_seq: u64,
    /// The model call whose text is being printed.
    streaming: Option<String>,
    /// The tool calls of the last model reply: path and call id, in the model's order.
    calls: Vec<(String, String)>,
    /// Of those, the results not printed yet, by path.
    results: HashMap<String, String>,
    /// How many of `calls` have been printed.
    printed: usize,
}

impl Show {
    fn event(&mut self, ev: &StoredEvent) {
        self.next_seq = ev.seq + 1;
        let Some(path) = ev.path.as_deref() else {
            return;
        };
        let model = path
            .strip_prefix(AGENT)
            .is_some_and(|p| p.starts_with(".model-"));
        let tool = path
            .strip_prefix(AGENT)
            .is_some_and(|p| p.starts_with(".tool-"));
        match ev.kind {
            // The model's text, piece by piece, as the provider streams it.
            EventKind::StepOutput if model => {
                if let Some(text) = ev.data["text"].as_str() {
                    if self.streaming.as_deref() != Some(path) {
                        self.end_text();
                        print!("{path}: ");
                        self.streaming = Some(path.to_owned());
                    }
                    print!("{text}");
                    let _ = std::io::stdout().flush();
                }
            }
            EventKind::StepSucceeded if model => {
                if self.streaming.as_deref() == Some(path) {
                    self.end_text();
                } else {
                    println!("{path}: (no text)");
                }
                self.took_reply(&ev.data["output"]);
            }
            EventKind::StepFailed if model => {
                self.end_text();
                println!("{path} failed: {}", ev.data["error"]);
            }
            EventKind::StepSuspended if tool => {
                println!(
                    "  {} waits for a person's approval",
                    self.call_id(path).unwrap_or(path)
                );
            }
            EventKind::StepSucceeded if tool => {
                self.took_result(path, ev.data["output"].to_string());
            }
            EventKind::StepFailed if tool => {
                // Told to the model, which may try otherwise.
                self.took_result(path, format!("failed {}", ev.data["error"]));
            }
            _ => {}
        }
    }

    /// Ends a line of streamed text.
    fn end_text(&mut self) {
        if self.streaming.take().is_some() {
            println!();
        }
    }

    /// A model reply: the tool calls it asks for.
    fn took_reply(&mut self, reply: &Value) {
        self.calls.clear();
        self.results.clear();
        self.printed = 0;
        for call in reply["tool_calls"].as_array().into_iter().flatten() {
            let id = call["id"].as_str().unwrap_or_default();
            println!(
                "  -> {id}: {} {}",
                call["name"].as_str().unwrap_or_default(),
                call["arguments"]
            );
            let path = tool_path(id, &self.calls);
            self.calls.push((path, id.to_owned()));
        }
    }

    /// A tool call ended: prints every result whose turn has come.
    fn took_result(&mut self, path: &str, shown: String) {
        self.results.insert(path.to_owned(), shown);
        while let Some((path, id)) = self.calls.get(self.printed) {
            let Some(shown) = self.results.remove(path) else {
                break;
            };
            println!("  <- {id}: {shown}");
            self.printed += 1;
        }
    }

    /// The call id of the tool call at `path`.
    fn call_id(&self, path: &str) -> Option<&str> {
        self.calls
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, id)| id.as_str())
    }
}

/// The path of the agent's tool call `id` (S123): characters other than ASCII letters,
/// digits, `-` and `_` become `_`, and an id the reply repeats gets `-2`, `-3`...
fn tool_path(id: &str, taken: &[(String, String)]) -> String {
    let safe: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let base = format!("{AGENT}.tool-{safe}");
    let mut path = base.clone();
    let mut n = 1;
    while taken.iter().any(|(p, _)| *p == path) {
        n += 1;
        path = format!("{base}-{n}");
    }
    path
}
