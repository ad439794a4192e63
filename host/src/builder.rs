//! Workflows written in Rust: a builder that produces the same graph as the YAML file would.
//!
//! The builder writes the workflow document of WORKFLOW-FORMAT.md §1 and hands it to the same
//! loader as `weft run`, so a built workflow gets exactly the same checks, paths and graph.
//!
//! ```no_run
//! # async fn demo(rt: &weft::Runtime) -> Result<(), weft::WorkflowError> {
//! use serde_json::json;
//! use weft::{Entry, PluginSpec, WorkflowBuilder};
//!
//! let workflow = WorkflowBuilder::new("shout-twice")
//!     .plugin("text", PluginSpec::wasm("examples/plugins/text.wasm"))
//!     .then(Entry::step("shout", "text", "upper"))
//!     .then(Entry::native("twice", "twice"))
//!     .then(Entry::map("out", "{ text: .input.text }"))
//!     .build(rt)
//!     .await?;
//! # Ok(()) }
//! ```

use serde_json::{Map, Value, json};

use crate::driver::Runtime;
use crate::workflow::{LoadedWorkflow, WorkflowError};

/// A workflow under construction.
#[derive(Debug, Clone)]
pub struct WorkflowBuilder {
    doc: Map<String, Value>,
    plugins: Map<String, Value>,
    steps: Vec<Value>,
}

impl WorkflowBuilder {
    /// A workflow with this id.
    pub fn new(id: impl Into<String>) -> Self {
        let mut doc = Map::new();
        doc.insert("id".into(), Value::String(id.into()));
        WorkflowBuilder {
            doc,
            plugins: Map::new(),
            steps: Vec::new(),
        }
    }

    fn set(mut self, key: &str, value: Value) -> Self {
        self.doc.insert(key.into(), value);
        self
    }

    /// `description:`.
    pub fn description(self, text: impl Into<String>) -> Self {
        self.set("description", Value::String(text.into()))
    }

    /// `input-schema:`.
    pub fn input_schema(self, schema: Value) -> Self {
        self.set("input-schema", schema)
    }

    /// `state-schema:`.
    pub fn state_schema(self, schema: Value) -> Self {
        self.set("state-schema", schema)
    }

    /// `initial-state:`.
    pub fn initial_state(self, state: Value) -> Self {
        self.set("initial-state", state)
    }

    /// `retry:`, the default for every step: `{attempts, delay-ms, backoff, max-delay-ms}`.
    pub fn retry(self, retry: Value) -> Self {
        self.set("retry", retry)
    }

    /// Declares a plugin under `alias`.
    pub fn plugin(mut self, alias: impl Into<String>, spec: PluginSpec) -> Self {
        self.plugins.insert(alias.into(), Value::Object(spec.0));
        self
    }

    /// Appends an entry to `steps:`.
    pub fn then(mut self, entry: Entry) -> Self {
        self.steps.push(entry.0);
        self
    }

    /// The workflow document, as a YAML file would hold it.
    pub fn document(&self) -> Value {
        let mut doc = self.doc.clone();
        if !self.plugins.is_empty() {
            doc.insert("plugins".into(), Value::Object(self.plugins.clone()));
        }
        doc.insert("steps".into(), Value::Array(self.steps.clone()));
        Value::Object(doc)
    }

    /// Checks the workflow and loads its plugins, like `weft run` does with a file. Relative
    /// paths are relative to the current directory.
    pub async fn build(&self, rt: &Runtime) -> Result<LoadedWorkflow, WorkflowError> {
        let id = self
            .doc
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("workflow");
        let text = self.document().to_string();
        rt.load_workflow_text(&format!("{id}.workflow.json"), &text)
            .await
    }
}

/// A plugin declaration (`plugins.NAME`).
#[derive(Debug, Clone)]
pub struct PluginSpec(Map<String, Value>);

impl PluginSpec {
    /// The component at `path`.
    pub fn wasm(path: impl Into<String>) -> Self {
        let mut m = Map::new();
        m.insert("wasm".into(), Value::String(path.into()));
        PluginSpec(m)
    }

    /// Pins the component's sha256.
    pub fn sha256(mut self, digest: impl Into<String>) -> Self {
        self.0.insert("sha256".into(), Value::String(digest.into()));
        self
    }

    /// `limits:` (`memory-mib`, `timeout-ms`, `fuel`, `max-output-mib`, `max-events`).
    pub fn limits(mut self, limits: Value) -> Self {
        self.0.insert("limits".into(), limits);
        self
    }

    /// `grants:` (`dirs`, `env`, `http`).
    pub fn grants(mut self, grants: Value) -> Self {
        self.0.insert("grants".into(), grants);
        self
    }
}

/// One entry of a `steps:` or `do:` list.
#[derive(Debug, Clone)]
pub struct Entry(Value);

impl Entry {
    /// A plugin step: `{id, plugin, step}`.
    pub fn step(id: &str, plugin: &str, step: &str) -> Self {
        Entry(json!({ "id": id, "plugin": plugin, "step": step }))
    }

    /// A native step registered with [`Runtime::register`].
    pub fn native(id: &str, name: &str) -> Self {
        Entry(json!({ "id": id, "native": name }))
    }

    fn with(mut self, key: &str, value: Value) -> Self {
        if let Value::Object(m) = &mut self.0 {
            m.insert(key.into(), value);
        }
        self
    }

    /// A step's `config:`.
    pub fn config(self, config: Value) -> Self {
        self.with("config", config)
    }

    /// A step's `retry:`.
    pub fn retry(self, retry: Value) -> Self {
        self.with("retry", retry)
    }

    /// A step's `timeout-ms:`.
    pub fn timeout_ms(self, ms: u64) -> Self {
        self.with("timeout-ms", json!(ms))
    }

    /// Arms that run at once.
    pub fn parallel(id: &str, arms: impl IntoIterator<Item = Entry>) -> Self {
        let steps: Vec<Value> = arms.into_iter().map(|e| e.0).collect();
        Entry(json!({ "parallel": { "id": id, "steps": steps } }))
    }

    /// Arms that run when their jq test holds.
    pub fn branch(id: &str, arms: impl IntoIterator<Item = Arm>) -> Self {
        let arms: Vec<Value> = arms.into_iter().map(|a| a.0).collect();
        Entry(json!({ "branch": { "id": id, "arms": arms } }))
    }

    /// The body once per element of the input array.
    pub fn foreach(id: &str, concurrency: u32, body: Body) -> Self {
        Entry(json!({ "foreach": { "id": id, "concurrency": concurrency, "do": body.0 } }))
    }

    /// The body until the jq test holds.
    pub fn do_until(id: &str, test: &str, max_iterations: Option<u32>, body: Body) -> Self {
        Self::looped(id, "do-until", test, max_iterations, body)
    }

    /// The body while the jq test holds.
    pub fn do_while(id: &str, test: &str, max_iterations: Option<u32>, body: Body) -> Self {
        Self::looped(id, "do-while", test, max_iterations, body)
    }

    fn looped(id: &str, kind: &str, test: &str, max: Option<u32>, body: Body) -> Self {
        let mut l = json!({ "id": id, kind: test, "do": body.0 });
        if let Some(max) = max {
            l["max-iterations"] = json!(max);
        }
        Entry(json!({ "loop": l }))
    }

    /// Waits `ms` milliseconds.
    pub fn sleep_ms(id: &str, ms: u64) -> Self {
        Entry(json!({ "sleep": { "id": id, "ms": ms } }))
    }

    /// Waits until the RFC 3339 instant the jq expression gives.
    pub fn sleep_until(id: &str, expr: &str) -> Self {
        Entry(json!({ "sleep": { "id": id, "until": expr } }))
    }

    /// The value of a jq expression.
    pub fn map(id: &str, expr: &str) -> Self {
        Entry(json!({ "map": { "id": id, "expr": expr } }))
    }

    /// Another workflow file as one entry.
    pub fn workflow(id: &str, file: &str) -> Self {
        Entry(json!({ "workflow": { "id": id, "file": file } }))
    }
}

/// A block's `do:`: one entry or an inline list.
#[derive(Debug, Clone)]
pub struct Body(Value);

impl From<Entry> for Body {
    fn from(e: Entry) -> Self {
        Body(e.0)
    }
}

impl<const N: usize> From<[Entry; N]> for Body {
    fn from(list: [Entry; N]) -> Self {
        Body(Value::Array(list.into_iter().map(|e| e.0).collect()))
    }
}

impl From<Vec<Entry>> for Body {
    fn from(list: Vec<Entry>) -> Self {
        Body(Value::Array(list.into_iter().map(|e| e.0).collect()))
    }
}

/// A branch arm.
#[derive(Debug, Clone)]
pub struct Arm(Value);

impl Arm {
    /// An arm running one entry when `when` holds.
    pub fn when(when: &str, entry: Entry) -> Self {
        Arm(json!({ "when": when, "do": entry.0 }))
    }

    /// An arm with an id of its own running a list when `when` holds (S107).
    pub fn list(id: &str, when: &str, entries: impl IntoIterator<Item = Entry>) -> Self {
        let list: Vec<Value> = entries.into_iter().map(|e| e.0).collect();
        Arm(json!({ "id": id, "when": when, "do": list }))
    }
}
