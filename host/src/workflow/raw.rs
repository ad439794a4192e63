//! The workflow file as written (WORKFLOW-FORMAT.md §1), before it is checked.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_saphyr::Spanned;

/// A whole workflow file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawFile {
    pub id: Spanned<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub input_schema: Option<Spanned<Value>>,
    #[serde(default)]
    pub state_schema: Option<Spanned<Value>>,
    #[serde(default)]
    pub initial_state: Option<Value>,
    #[serde(default)]
    pub retry: Option<Spanned<RawRetry>>,
    #[serde(default)]
    pub plugins: BTreeMap<String, Spanned<RawPlugin>>,
    #[serde(default)]
    pub models: BTreeMap<String, Spanned<RawModel>>,
    #[serde(default)]
    pub retention: Option<Spanned<String>>,
    pub steps: Spanned<Vec<RawEntry>>,
}

/// A plugin declaration.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawPlugin {
    pub wasm: Spanned<String>,
    #[serde(default)]
    pub sha256: Option<String>,
    #[serde(default)]
    pub limits: Option<Spanned<Value>>,
    #[serde(default)]
    pub grants: Option<Spanned<Value>>,
}

/// A model declaration (S122).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawModel {
    pub api: Spanned<String>,
    pub base_url: Spanned<String>,
    pub model: String,
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub retry: Option<Spanned<RawRetry>>,
}

/// A retry policy; absent fields inherit (S51).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawRetry {
    pub attempts: Option<u32>,
    pub delay_ms: Option<u64>,
    pub backoff: Option<f64>,
    pub max_delay_ms: Option<u64>,
}

/// One entry: a step, or a map with exactly one block key.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawEntry {
    #[serde(default)]
    pub id: Option<Spanned<String>>,
    #[serde(default)]
    pub plugin: Option<Spanned<String>>,
    #[serde(default)]
    pub step: Option<Spanned<String>>,
    #[serde(default)]
    pub tool: Option<Spanned<String>>,
    #[serde(default)]
    pub model: Option<Spanned<String>>,
    #[serde(default)]
    pub input: Option<Spanned<String>>,
    #[serde(default)]
    pub native: Option<Spanned<String>>,
    #[serde(default)]
    pub config: Option<Value>,
    #[serde(default)]
    pub retry: Option<Spanned<RawRetry>>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub parallel: Option<RawParallel>,
    #[serde(default)]
    pub branch: Option<RawBranch>,
    #[serde(default)]
    pub foreach: Option<RawForeach>,
    #[serde(default, rename = "loop")]
    pub loop_: Option<RawLoop>,
    #[serde(default)]
    pub sleep: Option<RawSleep>,
    #[serde(default)]
    pub map: Option<RawMap>,
    #[serde(default)]
    pub workflow: Option<RawWorkflow>,
    #[serde(default)]
    pub agent: Option<RawAgent>,
}

/// `agent:` (S123).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawAgent {
    pub id: Spanned<String>,
    pub model: Spanned<String>,
    #[serde(default)]
    pub instructions: Option<String>,
    #[serde(default)]
    pub tools: Vec<Spanned<RawAgentTool>>,
    #[serde(default)]
    pub approve: Vec<Spanned<String>>,
    #[serde(default)]
    pub max_steps: Option<u32>,
    #[serde(default)]
    pub max_parallel_tools: Option<Spanned<u64>>,
    #[serde(default)]
    pub output_schema: Option<Spanned<Value>>,
    #[serde(default)]
    pub input: Option<Spanned<String>>,
    #[serde(default)]
    pub config: Option<Value>,
    #[serde(default)]
    pub retry: Option<Spanned<RawRetry>>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// One tool of an agent: a plugin's tool, or a workflow.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawAgentTool {
    #[serde(default)]
    pub plugin: Option<Spanned<String>>,
    #[serde(default)]
    pub tool: Option<Spanned<String>>,
    #[serde(default)]
    pub workflow: Option<RawWorkflow>,
    #[serde(default)]
    pub name: Option<Spanned<String>>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub retry: Option<Spanned<RawRetry>>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// `parallel:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawParallel {
    pub id: Spanned<String>,
    pub steps: Vec<RawEntry>,
}

/// `branch:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBranch {
    pub id: Spanned<String>,
    pub arms: Vec<RawArm>,
}

/// One branch arm.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawArm {
    #[serde(default)]
    pub id: Option<Spanned<String>>,
    pub when: Spanned<String>,
    #[serde(rename = "do")]
    pub do_: RawDo,
}

/// `foreach:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawForeach {
    pub id: Spanned<String>,
    #[serde(default)]
    pub concurrency: Option<u32>,
    #[serde(rename = "do")]
    pub do_: RawDo,
}

/// `loop:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawLoop {
    pub id: Spanned<String>,
    #[serde(default)]
    pub do_while: Option<Spanned<String>>,
    #[serde(default)]
    pub do_until: Option<Spanned<String>>,
    #[serde(default)]
    pub max_iterations: Option<u32>,
    #[serde(rename = "do")]
    pub do_: RawDo,
}

/// `sleep:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSleep {
    pub id: Spanned<String>,
    #[serde(default)]
    pub ms: Option<u64>,
    #[serde(default)]
    pub until: Option<Spanned<String>>,
}

/// `map:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMap {
    pub id: Spanned<String>,
    pub expr: Spanned<String>,
}

/// `workflow:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWorkflow {
    pub id: Spanned<String>,
    pub file: Spanned<String>,
}

/// A `do:`: one entry or a list of entries.
#[derive(Debug)]
pub(super) enum RawDo {
    /// One entry.
    One(Box<RawEntry>),
    /// An inline list.
    List(Vec<RawEntry>),
}

impl<'de> Deserialize<'de> for RawDo {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct DoVisitor;
        impl<'de> Visitor<'de> for DoVisitor {
            type Value = RawDo;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("one entry (a map) or a list of entries")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawDo, A::Error> {
                RawEntry::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(|e| RawDo::One(Box::new(e)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<RawDo, A::Error> {
                Vec::<RawEntry>::deserialize(de::value::SeqAccessDeserializer::new(seq))
                    .map(RawDo::List)
            }
        }
        d.deserialize_any(DoVisitor)
    }
}
