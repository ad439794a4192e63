//! The validated workflow graph the core runs: files, entries and their settings.
//!
//! A [`Graph`] is built from workflow files (or the Rust builder) once, stored with each run
//! (S10) and never changed afterwards. Nested `workflow:` files are expanded in place, so every
//! entry has one full path.

use std::sync::Arc;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::expr::Expr;
use super::schema::Schema;

/// The format version of [`Graph`]; bumped when its serialized shape changes.
pub(crate) const GRAPH_FORMAT: u32 = 1;

/// Index of an entry in [`Graph::entries`].
pub(crate) type EntryId = u32;

/// Index of a file instance in [`Graph::files`]; 0 is the top-level file.
pub(crate) type FileId = u32;

/// A whole workflow, ready to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Graph {
    /// The format version this graph was written with.
    pub(crate) format: u32,
    /// Every file instance: the top-level file first, then one per `workflow:` entry.
    pub(crate) files: Vec<FileDef>,
    /// Every entry of every file instance.
    pub(crate) entries: Vec<EntryDef>,
    /// The plugins the steps use, by key (see [`StepDef::plugin`]).
    pub(crate) plugins: IndexMap<String, PluginRef>,
    /// The models `model:` entries call, by key (`models:`, S122).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub(crate) models: IndexMap<String, ModelDef>,
    /// The workflows agents offer their models as tools, each a whole graph of its own that a
    /// call runs as a child run (S125), by key (see [`WORKFLOW_TOOL_PLUGIN`]).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub(crate) workflow_tools: IndexMap<String, Graph>,
}

/// The plugin key of an agent's workflow tool calls: their `step` is the workflow's key in
/// [`Graph::workflow_tools`].
pub(crate) const WORKFLOW_TOOL_PLUGIN: &str = "workflow";

/// The plugin key of a `model:` entry's [`StepDef`]: its `step` is the model's key in
/// [`Graph::models`].
pub(crate) const MODEL_PLUGIN: &str = "model";

/// A model a workflow calls (`models:` in a workflow file, S122). It holds the name of the
/// environment variable with the API key, never the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct ModelDef {
    /// The wire protocol.
    pub(crate) api: ModelApi,
    /// Where the API is, e.g. `https://api.openai.com/v1` (requests go to
    /// `BASE/chat/completions` or `BASE/messages`).
    pub(crate) base_url: String,
    /// The model's name at the provider.
    pub(crate) model: String,
    /// The host's environment variable holding the API key, read by the host at each call and
    /// sent only to `base_url`; `None` for servers that take no key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) api_key_env: Option<String>,
    /// Extra request headers.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub(crate) headers: IndexMap<String, String>,
}

/// The wire protocol of a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum ModelApi {
    /// OpenAI chat completions (also vLLM, llama.cpp, Ollama and most local servers).
    OpenaiChat,
    /// Anthropic messages.
    AnthropicMessages,
}

impl Graph {
    /// A graph with nothing in it yet, for builders to fill.
    pub(crate) fn empty() -> Graph {
        Graph {
            format: GRAPH_FORMAT,
            files: Vec::new(),
            entries: Vec::new(),
            plugins: IndexMap::new(),
            models: IndexMap::new(),
            workflow_tools: IndexMap::new(),
        }
    }

    /// The top-level file.
    pub(crate) fn root(&self) -> &FileDef {
        &self.files[0]
    }

    /// The workflow id of the top-level file.
    pub fn workflow_id(&self) -> &str {
        &self.root().id
    }

    /// The entry with this id.
    pub(crate) fn entry(&self, id: EntryId) -> &EntryDef {
        &self.entries[id as usize]
    }

    /// The file instance with this id.
    pub(crate) fn file(&self, id: FileId) -> &FileDef {
        &self.files[id as usize]
    }

    /// The entry whose full path is `path`.
    pub(crate) fn entry_by_path(&self, path: &str) -> Option<&EntryDef> {
        self.entries.iter().find(|e| e.path == path)
    }
}

/// One workflow file as it is used at one place of the graph.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct FileDef {
    /// The file's `id:`.
    pub(crate) id: String,
    /// Where the file came from, for messages.
    pub(crate) source: String,
    /// The file's `description:`.
    pub(crate) description: Option<String>,
    /// The path prefix of its entries (`""` at top level, else the `workflow:` entry's path).
    pub(crate) prefix: String,
    /// The schema of the file's input.
    pub(crate) input_schema: Option<Schema>,
    /// The schema the state must satisfy after every merge.
    pub(crate) state_schema: Option<Schema>,
    /// The state a run of this file starts with.
    pub(crate) initial_state: Value,
    /// The top-level entries, in order.
    pub(crate) body: Vec<EntryId>,
}

/// One entry of a `steps:` or `do:` list.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct EntryDef {
    /// The entry's id, unique within its file.
    pub(crate) id: String,
    /// The full path: enclosing ids joined by `.` (S6).
    pub(crate) path: String,
    /// The file instance the entry is written in.
    pub(crate) file: FileId,
    /// What the entry does.
    pub(crate) kind: EntryKind,
}

/// The kinds of entries (WORKFLOW-FORMAT.md §1).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum EntryKind {
    /// A plugin or native step.
    Step(Box<StepDef>),
    /// Arms that run at once (S18).
    Parallel {
        /// The arms.
        arms: Vec<EntryId>,
    },
    /// Arms that run when their test holds (S21).
    Branch {
        /// The arms, in declaration order.
        arms: Vec<BranchArm>,
    },
    /// The body once per element of the input array (S25).
    Foreach {
        /// The most items in progress at once.
        concurrency: u32,
        /// The body, a sequence.
        body: Vec<EntryId>,
    },
    /// The body again and again (S32).
    Loop {
        /// The test after each iteration.
        test: Expr,
        /// True for `do-until`, false for `do-while`.
        until: bool,
        /// The most iterations allowed.
        max_iterations: Option<u32>,
        /// The body, a sequence.
        body: Vec<EntryId>,
    },
    /// Wait (S37).
    Sleep {
        /// Milliseconds to wait.
        ms: Option<u64>,
        /// An expression giving an RFC 3339 instant to wait for.
        until: Option<Expr>,
    },
    /// Compute a value (S40).
    Map {
        /// The expression.
        expr: Expr,
    },
    /// Another workflow file as one entry (S41).
    Workflow {
        /// The nested file instance.
        file: FileId,
    },
    /// A branch arm whose `do:` is a list: a sequence with an id of its own (S107).
    Group {
        /// The entries.
        body: Vec<EntryId>,
    },
    /// A model that calls tools in a loop of journaled sub-steps (S123).
    Agent(Box<AgentDef>),
}

/// An `agent:` entry (S123–S126): a model deciding, tools acting, until the model answers
/// without a tool call.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct AgentDef {
    /// The model's key in [`Graph::models`].
    pub(crate) model: String,
    /// The system instructions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) instructions: Option<String>,
    /// The tools offered to the model, by the name the model calls them by.
    pub(crate) tools: Vec<AgentTool>,
    /// The most model calls of one execution, a repair included.
    pub(crate) max_steps: u32,
    /// The structured output the final answer must be (S124); `None`: the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) output_schema: Option<Schema>,
    /// The model calls' configuration (`max-tokens`, `temperature`); shared with each call.
    pub(crate) config: Arc<Value>,
    /// The model calls' retry policy (the model's `retry:` over the file's, the entry's over
    /// both).
    pub(crate) retry: RetryPolicy,
    /// Each model call's own `timeout-ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) timeout_ms: Option<u64>,
    /// Makes the agent's input from the entry's (`input:`, S119).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) input: Option<Expr>,
    /// The most tool calls of one reply in flight at once (`max-parallel-tools`): running, or
    /// waiting for an approval. Graphs stored before the setting get the default.
    #[serde(
        default = "default_max_parallel_tools",
        skip_serializing_if = "is_default_max_parallel_tools"
    )]
    pub(crate) max_parallel_tools: u32,
}

/// The most tool calls of one reply in flight at once when the agent does not say
/// (`max-parallel-tools`).
pub(crate) const DEFAULT_MAX_PARALLEL_TOOLS: u32 = 8;

/// The largest `max-parallel-tools` a workflow file may give.
pub(crate) const MAX_PARALLEL_TOOLS: u32 = 1000;

fn default_max_parallel_tools() -> u32 {
    DEFAULT_MAX_PARALLEL_TOOLS
}

fn is_default_max_parallel_tools(n: &u32) -> bool {
    *n == DEFAULT_MAX_PARALLEL_TOOLS
}

/// A tool an agent offers its model.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct AgentTool {
    /// The name the model calls it by.
    pub(crate) name: String,
    /// What it does, for the model.
    pub(crate) description: String,
    /// The JSON Schema of its arguments, as the model is shown it.
    pub(crate) parameters: Value,
    /// A person approves each call before it runs (S124).
    pub(crate) approve: bool,
    /// What a call runs: a plugin's tool, or a workflow as a child run.
    pub(crate) call: StepDef,
}

/// One arm of a branch.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BranchArm {
    /// The test.
    pub(crate) when: Expr,
    /// The arm's entry.
    pub(crate) entry: EntryId,
}

/// A plugin step as the core needs it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StepDef {
    /// The key of the plugin in [`Graph::plugins`].
    pub(crate) plugin: String,
    /// The step's name inside the plugin.
    pub(crate) step: String,
    /// The configuration, defaults filled (S57, S116); shared with the calls of the step.
    pub(crate) config: Arc<Value>,
    /// The retry policy, workflow default and step override merged (S51).
    pub(crate) retry: RetryPolicy,
    /// The step's own `timeout-ms`, overriding the plugin's limit (S15).
    pub(crate) timeout_ms: Option<u64>,
    /// The schemas the plugin declares for this step.
    pub(crate) schemas: StepSchemas,
    /// A step, or a tool the plugin exports (`tool:`, S120).
    #[serde(default)]
    pub(crate) kind: StepKind,
    /// Makes the invocation's input from the entry's (`input:`, S119); `None`: the entry's
    /// input as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) input: Option<Expr>,
}

/// What a step entry invokes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepKind {
    /// A step of the plugin's `steps` export (or a native step).
    #[default]
    Step,
    /// A tool of the plugin's `tools` export: called with the input as its arguments, its
    /// result the entry's output (S120).
    Tool,
}

/// The schemas a step declares (`step-info`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct StepSchemas {
    /// What the step accepts.
    pub(crate) input: Option<Schema>,
    /// What it returns with `done`.
    pub(crate) output: Option<Schema>,
    /// What it suspends with.
    pub(crate) suspend: Option<Schema>,
    /// What a resume must give.
    pub(crate) resume: Option<Schema>,
}

/// A plugin used by the graph, pinned by content digest (S10).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PluginRef {
    /// The sha256 of the component, hex.
    pub(crate) digest: String,
    /// Where it was loaded from, for messages.
    pub(crate) source: String,
    /// Its `limits:` and `grants:` as written, paths resolved; the plugin host reads them.
    pub(crate) sandbox: Value,
}

/// When and how often a failed step is tried again (S51, S52).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct RetryPolicy {
    /// The most invocations, the first included.
    pub(crate) attempts: u32,
    /// The wait before the first retry.
    pub(crate) delay_ms: u64,
    /// The factor by which each further wait grows.
    pub(crate) backoff: f64,
    /// The longest wait.
    pub(crate) max_delay_ms: Option<u64>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 1,
            delay_ms: 0,
            backoff: 1.0,
            max_delay_ms: None,
        }
    }
}

/// The longest wait a failure may ask for (`retry_after_ms`, a provider's `retry-after`: S121)
/// when the policy sets no `max-delay-ms`: 10 minutes. Without it, a `retry-after` of `inf`
/// would park the run for ever.
pub(crate) const DEFAULT_MAX_ASKED_DELAY_MS: u64 = 600_000;

impl RetryPolicy {
    /// How long to wait when a failure asks for `asked` ms: at most the policy's
    /// `max-delay-ms`, else at most [`DEFAULT_MAX_ASKED_DELAY_MS`] (S121).
    pub(crate) fn asked_delay(&self, asked: u64) -> u64 {
        asked.min(self.max_delay_ms.unwrap_or(DEFAULT_MAX_ASKED_DELAY_MS))
    }

    /// The wait before retry `k` (k ≥ 1), in milliseconds (S52).
    pub(crate) fn delay_before(&self, k: u32) -> u64 {
        let exp = i32::try_from(k.saturating_sub(1)).unwrap_or(i32::MAX);
        let raw = self.delay_ms as f64 * self.backoff.powi(exp);
        let raw = if raw.is_finite() { raw } else { f64::MAX };
        let capped = match self.max_delay_ms {
            Some(max) => raw.min(max as f64),
            None => raw,
        };
        capped.min(u64::MAX as f64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s52_retry_waits_grow_by_backoff_and_stop_at_the_cap() {
        let p = RetryPolicy {
            attempts: 4,
            delay_ms: 100,
            backoff: 2.0,
            max_delay_ms: None,
        };
        assert_eq!(
            [p.delay_before(1), p.delay_before(2), p.delay_before(3)],
            [100, 200, 400]
        );
        let capped = RetryPolicy {
            max_delay_ms: Some(250),
            ..p
        };
        assert_eq!(capped.delay_before(3), 250);
    }

    #[test]
    fn s121_a_wait_asked_for_is_capped_by_max_delay_or_else_by_the_default() {
        let p = RetryPolicy::default();
        assert_eq!(p.asked_delay(1500), 1500);
        assert_eq!(p.asked_delay(u64::MAX), DEFAULT_MAX_ASKED_DELAY_MS);
        let capped = RetryPolicy {
            max_delay_ms: Some(50),
            ..p
        };
        assert_eq!(capped.asked_delay(u64::MAX), 50);
        let raised = RetryPolicy {
            max_delay_ms: Some(3_600_000),
            ..p
        };
        assert_eq!(raised.asked_delay(2_000_000), 2_000_000);
    }
}
