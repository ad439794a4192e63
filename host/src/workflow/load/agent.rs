//! `agent:` entries (S123–S126): the model, the tools offered to it (plugin tools and
//! workflows), what needs approval, and the bounds of the loop.

use serde_json::json;
use serde_saphyr::Spanned;

use super::compile::compile_schema;
use super::models::model_info;
use super::plugins::plugin_tool;
use super::read::Resolved;
use super::retry::{check_retry, merge_retry, retry_under_model};
use super::step::filled_config;
use super::{Builder, FileCx, line, quoted};
use crate::engine::model::{
    AgentDef, AgentTool, DEFAULT_MAX_PARALLEL_TOOLS, EntryId, EntryKind, Graph, MAX_PARALLEL_TOOLS,
    StepDef, StepKind, StepSchemas, WORKFLOW_TOOL_PLUGIN,
};
use crate::workflow::WorkflowError;
use crate::workflow::raw::{RawAgent, RawAgentTool, RawWorkflow};

/// The most model calls of an agent that does not say (`max-steps`).
pub(super) const DEFAULT_MAX_STEPS: u32 = 10;

/// The longest tool name providers accept (OpenAI and Anthropic: 64).
const MAX_TOOL_NAME: usize = 64;

impl Builder<'_> {
    /// Builds an `agent:` entry.
    pub(super) fn agent(
        &mut self,
        a: &RawAgent,
        prefix: &str,
        fcx: &mut FileCx,
    ) -> Result<EntryId, WorkflowError> {
        self.claim_id(&a.id, fcx)?;
        let id = &a.id.value;
        let ln = line(&a.id.referenced);
        let model = self.model_key(&a.model, fcx)?;
        if let Some(r) = &a.retry {
            check_retry(fcx.path, r)?;
        }
        let retry = retry_under_model(&a.model.value, a.retry.as_ref().map(|r| &r.value), fcx);
        let config = filled_config(
            a.config.clone(),
            &model_info(&model),
            &format!("agent `{id}`"),
            ln,
            fcx,
        )?;
        let input = match &a.input {
            Some(expr) => Some(self.expr(expr, &format!("agent {id}: input"), fcx)?),
            None => None,
        };
        let output_schema = match &a.output_schema {
            Some(s) => compile_schema(fcx.path, Some(s.value.clone()), "output-schema").map_err(
                |mut e| {
                    e.line = line(&s.referenced);
                    e
                },
            )?,
            None => None,
        };
        let max_steps = a.max_steps.unwrap_or(DEFAULT_MAX_STEPS);
        if max_steps == 0 {
            return Err(WorkflowError::at(
                fcx.path,
                ln,
                format!("agent `{id}`: max-steps 0 allows no model call"),
                "use 1 or more",
            ));
        }
        let max_parallel_tools = match &a.max_parallel_tools {
            None => DEFAULT_MAX_PARALLEL_TOOLS,
            Some(n) => match u32::try_from(n.value) {
                Ok(v) if (1..=MAX_PARALLEL_TOOLS).contains(&v) => v,
                _ => {
                    return Err(WorkflowError::at(
                        fcx.path,
                        line(&n.referenced),
                        format!(
                            "agent `{id}`: max-parallel-tools {} is out of range",
                            n.value
                        ),
                        &format!(
                            "use 1 to {MAX_PARALLEL_TOOLS} (default {DEFAULT_MAX_PARALLEL_TOOLS})"
                        ),
                    ));
                }
            },
        };
        let mut tools: Vec<AgentTool> = Vec::with_capacity(a.tools.len());
        for raw in &a.tools {
            let tool = self.agent_tool(id, raw, fcx)?;
            if let Some(first) = tools.iter().find(|t| t.name == tool.name) {
                return Err(WorkflowError::at(
                    fcx.path,
                    line(&raw.referenced),
                    format!("agent `{id}` offers two tools named `{}`", first.name),
                    "give one of them another `name:`",
                ));
            }
            tools.push(tool);
        }
        for name in &a.approve {
            let Some(tool) = tools.iter_mut().find(|t| t.name == name.value) else {
                let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
                return Err(WorkflowError::at(
                    fcx.path,
                    line(&name.referenced),
                    format!(
                        "agent `{id}`: approve names `{}`, which is not one of its tools ({})",
                        name.value,
                        if names.is_empty() {
                            "none".into()
                        } else {
                            quoted(&names)
                        }
                    ),
                    "name a tool of `tools:` as the model calls it",
                ));
            };
            tool.approve = true;
        }
        let (eid, _) = self.push(id, prefix, fcx)?;
        self.graph.entries[eid as usize].kind = EntryKind::Agent(Box::new(AgentDef {
            model,
            instructions: a.instructions.clone(),
            tools,
            max_steps,
            output_schema,
            config: config.into(),
            retry,
            timeout_ms: a.timeout_ms,
            input,
            max_parallel_tools,
        }));
        Ok(eid)
    }

    /// One tool of agent `agent`: a plugin's tool or a workflow.
    fn agent_tool(
        &mut self,
        agent: &str,
        raw: &Spanned<RawAgentTool>,
        fcx: &FileCx,
    ) -> Result<AgentTool, WorkflowError> {
        let t = &raw.value;
        let at = line(&raw.referenced);
        let own_retry = match &t.retry {
            Some(r) => {
                check_retry(fcx.path, r)?;
                Some(&r.value)
            }
            None => None,
        };
        let retry = merge_retry(&fcx.retry, own_retry);
        let (name, description, parameters, approve, call) = match (&t.plugin, &t.tool, &t.workflow)
        {
            (Some(alias), Some(tool), None) => {
                let who = format!("agent `{agent}`");
                let (digest, wasm, plugin) = self.declared_plugin(alias, &who, fcx)?;
                let info = plugin_tool(&plugin, alias, tool, fcx)?.clone();
                let key = self.plugin_key(alias, &digest, &wasm, fcx)?;
                let schemas = StepSchemas {
                    input: compile_schema(
                        fcx.path,
                        Some(info.input_schema.clone()),
                        "input-schema",
                    )?,
                    output: compile_schema(fcx.path, info.output_schema.clone(), "output-schema")?,
                    suspend: None,
                    resume: None,
                };
                let call = StepDef {
                    plugin: key,
                    step: info.name.clone(),
                    config: json!({}).into(),
                    retry,
                    timeout_ms: t.timeout_ms,
                    schemas,
                    kind: StepKind::Tool,
                    input: None,
                };
                (
                    info.name,
                    info.description,
                    info.input_schema,
                    info.needs_approval,
                    call,
                )
            }
            (None, None, Some(w)) => {
                let key = self.workflow_tool(w, fcx)?;
                let child = &self.graph.workflow_tools[&key];
                let root = child.root();
                let Some(description) = t.description.clone().or_else(|| root.description.clone())
                else {
                    return Err(WorkflowError::at(
                        fcx.path,
                        at,
                        format!(
                            "agent `{agent}`: workflow tool `{}` has no description",
                            w.id.value
                        ),
                        "add `description:` (what the workflow does, for the model) to the tool \
                         or to the workflow file",
                    ));
                };
                let parameters = root
                    .input_schema
                    .as_ref()
                    .map(|s| s.value().clone())
                    .unwrap_or_else(|| json!({ "type": "object" }));
                let call = StepDef {
                    plugin: WORKFLOW_TOOL_PLUGIN.to_owned(),
                    step: key,
                    config: json!({}).into(),
                    retry,
                    timeout_ms: t.timeout_ms,
                    schemas: StepSchemas {
                        input: root.input_schema.clone(),
                        ..StepSchemas::default()
                    },
                    kind: StepKind::Tool,
                    input: None,
                };
                (w.id.value.clone(), description, parameters, false, call)
            }
            _ => {
                return Err(WorkflowError::at(
                    fcx.path,
                    at,
                    format!("agent `{agent}`: a tool needs `plugin:` with `tool:`, or `workflow:`"),
                    "write `{plugin: ALIAS, tool: NAME}` or `{workflow: {id: ID, file: FILE}, \
                     description: TEXT}`",
                ));
            }
        };
        let name = t.name.as_ref().map(|n| n.value.clone()).unwrap_or(name);
        let valid = !name.is_empty()
            && name.len() <= MAX_TOOL_NAME
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(WorkflowError::at(
                fcx.path,
                at,
                format!("agent `{agent}`: tool name `{name}` is not one a model can call"),
                "use 1 to 64 ASCII letters, digits, `_` and `-` (`name:` sets it)",
            ));
        }
        Ok(AgentTool {
            name,
            description: t.description.clone().unwrap_or(description),
            parameters,
            approve,
            call,
        })
    }

    /// The key in [`Graph::workflow_tools`] of the workflow file `w` names, its graph built the
    /// first time: a graph of its own, which a call runs as a child run (S125).
    fn workflow_tool(&mut self, w: &RawWorkflow, fcx: &FileCx) -> Result<String, WorkflowError> {
        let nested = Resolved::new(&fcx.parsed.dir.join(&w.file.value));
        let key = nested.key.display().to_string();
        if !self.graph.workflow_tools.contains_key(&key) {
            let mut child = Builder {
                files: self.files,
                plugins: self.plugins,
                by_path: self.by_path,
                natives: self.natives,
                host: self.host,
                graph: Graph::empty(),
                stack: self.stack.clone(),
                retention: None,
            };
            child.file(
                &nested.key,
                String::new(),
                Some((fcx.path, w.file.referenced.line())),
            )?;
            self.graph.workflow_tools.insert(key.clone(), child.graph);
        }
        Ok(key)
    }
}
