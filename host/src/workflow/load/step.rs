//! Step entries, by what runs them: a model (`model:`), a native step (`native:`), or a
//! plugin's step or tool (`plugin:` with `step:` or `tool:`); and what every step gets: its
//! input, config (its schema's defaults filled), retry policy and schemas.

use serde_json::{Value, json};
use serde_saphyr::Spanned;

use super::compile::compile_schema;
use super::models::model_info;
use super::plugins::plugin_tool;
use super::retry::{check_retry, merge_retry, retry_under_model};
use super::{Builder, FileCx, line};
use crate::engine::model::{EntryId, EntryKind, MODEL_PLUGIN, StepDef, StepKind, StepSchemas};
use crate::engine::schema::{self, Schema};
use crate::executor::StepInfo;
use crate::native::NATIVE_PLUGIN;
use crate::workflow::WorkflowError;
use crate::workflow::raw::RawEntry;

impl Builder<'_> {
    /// Builds a step entry: it has an `id:`, and names what runs it.
    pub(super) fn step(
        &mut self,
        e: &RawEntry,
        prefix: &str,
        fcx: &mut FileCx,
    ) -> Result<EntryId, WorkflowError> {
        let Some(id) = &e.id else {
            let ln = e.plugin.as_ref().map(|p| p.referenced.line());
            return Err(WorkflowError::at(
                fcx.path,
                ln,
                "a step has no `id:`".into(),
                "give every step an id",
            ));
        };
        let ln = Some(id.referenced.line());
        if let (Some(step), Some(_)) = (&e.step, &e.tool) {
            return Err(WorkflowError::at(
                fcx.path,
                line(&step.referenced),
                format!("step `{}` has both `step:` and `tool:`", id.value),
                "keep one: `step:` invokes a step of the plugin, `tool:` calls one of its tools",
            ));
        }
        if let Some(model) = &e.model {
            return self.model_step(e, id, model, prefix, fcx);
        }
        if let Some(name) = &e.native {
            return self.native_step(e, id, name, prefix, fcx);
        }
        let Some(alias) = &e.plugin else {
            return Err(WorkflowError::at(
                fcx.path,
                ln,
                format!("step `{}` names no plugin and is no block", id.value),
                "add `plugin:` or a block key (parallel, branch, foreach, loop, sleep, map, workflow)",
            ));
        };
        self.plugin_step(e, id, alias, prefix, fcx)
    }

    /// Builds step `id`, a call of the model `model` (S122).
    fn model_step(
        &mut self,
        e: &RawEntry,
        id: &Spanned<String>,
        model: &Spanned<String>,
        prefix: &str,
        fcx: &mut FileCx,
    ) -> Result<EntryId, WorkflowError> {
        let ln = Some(id.referenced.line());
        if e.plugin.is_some() || e.step.is_some() || e.tool.is_some() || e.native.is_some() {
            return Err(WorkflowError::at(
                fcx.path,
                ln,
                format!(
                    "step `{}` has `model:` and also `plugin:`, `step:`, `tool:` or `native:`",
                    id.value
                ),
                "a model step names only its model: keep `model:` or the others",
            ));
        }
        self.claim_id(id, fcx)?;
        let key = self.model_key(model, fcx)?;
        self.finish_step(
            e,
            id,
            prefix,
            fcx,
            MODEL_PLUGIN.to_owned(),
            &model_info(&key),
        )
    }

    /// Builds step `id`, a call of the native step `name` registered with the runtime.
    fn native_step(
        &mut self,
        e: &RawEntry,
        id: &Spanned<String>,
        name: &Spanned<String>,
        prefix: &str,
        fcx: &mut FileCx,
    ) -> Result<EntryId, WorkflowError> {
        let ln = Some(id.referenced.line());
        if e.plugin.is_some() || e.step.is_some() || e.tool.is_some() {
            return Err(WorkflowError::at(
                fcx.path,
                ln,
                format!(
                    "step `{}` has both `native:` and `plugin:`/`step:`/`tool:`",
                    id.value
                ),
                "keep one of them",
            ));
        }
        self.claim_id(id, fcx)?;
        let Some(info) = self.natives.info(&name.value) else {
            let names = self.natives.names();
            return Err(WorkflowError::at(
                fcx.path,
                line(&name.referenced),
                format!(
                    "no native step `{}` is registered (registered: {})",
                    name.value,
                    if names.is_empty() {
                        "none".into()
                    } else {
                        names.join(", ")
                    }
                ),
                "register it with Runtime::register before loading the workflow",
            ));
        };
        self.finish_step(e, id, prefix, fcx, NATIVE_PLUGIN.to_owned(), &info)
    }

    /// Builds step `id`, a call of a step (`step:`, or the plugin's only one) or a tool
    /// (`tool:`) of the plugin `alias`.
    fn plugin_step(
        &mut self,
        e: &RawEntry,
        id: &Spanned<String>,
        alias: &Spanned<String>,
        prefix: &str,
        fcx: &mut FileCx,
    ) -> Result<EntryId, WorkflowError> {
        let ln = Some(id.referenced.line());
        self.claim_id(id, fcx)?;
        let (digest, wasm, plugin) =
            self.declared_plugin(alias, &format!("step `{}`", id.value), fcx)?;
        if let Some(tool) = &e.tool {
            let info = plugin_tool(&plugin, alias, tool, fcx)?;
            // A tool is called like a step: its arguments are the step's input, checked against
            // its input schema, and its result the step's output, checked against its output
            // schema (S120).
            let info = StepInfo {
                name: info.name.clone(),
                description: info.description.clone(),
                input_schema: Some(info.input_schema.clone()),
                output_schema: info.output_schema.clone(),
                suspend_schema: None,
                resume_schema: None,
                config_schema: None,
            };
            let key = self.plugin_key(alias, &digest, &wasm, fcx)?;
            return self.finish_step(e, id, prefix, fcx, key, &info);
        }
        let names: Vec<&str> = plugin.steps().iter().map(|s| s.name.as_str()).collect();
        let info = match &e.step {
            Some(name) => plugin
                .steps()
                .iter()
                .find(|s| s.name == name.value)
                .ok_or_else(|| {
                    WorkflowError::at(
                        fcx.path,
                        line(&name.referenced),
                        format!(
                            "plugin `{}` has no step `{}` (it has: {})",
                            alias.value,
                            name.value,
                            if names.is_empty() {
                                "none".into()
                            } else {
                                names.join(", ")
                            }
                        ),
                        "fix the step name; `weft plugin inspect` lists a plugin's steps",
                    )
                })?,
            None if names.len() == 1 => &plugin.steps()[0],
            None => {
                return Err(WorkflowError::at(
                    fcx.path,
                    ln,
                    format!(
                        "step `{}`: plugin `{}` has {} steps ({}); say which with `step:`",
                        id.value,
                        alias.value,
                        names.len(),
                        names.join(", ")
                    ),
                    "add `step: NAME`",
                ));
            }
        };
        let key = self.plugin_key(alias, &digest, &wasm, fcx)?;
        let info = info.clone();
        self.finish_step(e, id, prefix, fcx, key, &info)
    }

    /// Adds step `id` of entry `e` to the graph: it runs `info`'s step of the executor `key`,
    /// its input, config, retry and schemas checked.
    fn finish_step(
        &mut self,
        e: &RawEntry,
        id: &Spanned<String>,
        prefix: &str,
        fcx: &mut FileCx,
        key: String,
        info: &StepInfo,
    ) -> Result<EntryId, WorkflowError> {
        let kind = if e.tool.is_some() {
            StepKind::Tool
        } else {
            StepKind::Step
        };
        let ln = Some(id.referenced.line());
        let input = match &e.input {
            Some(expr) => Some(self.expr(expr, &format!("step {}: input", id.value), fcx)?),
            None => None,
        };
        let config = filled_config(
            e.config.clone(),
            info,
            &format!("step `{}`", id.value),
            ln,
            fcx,
        )?;
        if let Some(r) = &e.retry {
            check_retry(fcx.path, r)?;
        }
        let own = e.retry.as_ref().map(|r| &r.value);
        let retry = match &e.model {
            Some(model) => retry_under_model(&model.value, own, fcx),
            None => merge_retry(&fcx.retry, own),
        };
        let schemas = StepSchemas {
            input: compile_schema(fcx.path, info.input_schema.clone(), "input-schema")?,
            output: compile_schema(fcx.path, info.output_schema.clone(), "output-schema")?,
            suspend: compile_schema(fcx.path, info.suspend_schema.clone(), "suspend-schema")?,
            resume: compile_schema(fcx.path, info.resume_schema.clone(), "resume-schema")?,
        };
        let (eid, _) = self.push(&id.value, prefix, fcx)?;
        self.graph.entries[eid as usize].kind = EntryKind::Step(Box::new(StepDef {
            plugin: key,
            step: info.name.clone(),
            config: config.into(),
            retry,
            timeout_ms: e.timeout_ms,
            schemas,
            kind,
            input,
        }));
        Ok(eid)
    }
}

/// `config` (`{}` when absent) with the defaults of `info`'s config schema filled, or the
/// refusal of what breaks it (S17).
pub(super) fn filled_config(
    config: Option<Value>,
    info: &StepInfo,
    who: &str,
    ln: Option<u64>,
    fcx: &FileCx,
) -> Result<Value, WorkflowError> {
    let mut config = config.unwrap_or_else(|| json!({}));
    if let Some(cs) = &info.config_schema {
        let schema = compile_schema(
            fcx.path,
            Some(cs.clone()),
            &format!("config-schema of step {}", info.name),
        )?
        .unwrap_or_else(|| Schema::new(json!({})));
        if let Err(v) = schema.fill_and_check(&mut config) {
            return Err(WorkflowError::at(
                fcx.path,
                ln,
                format!("{who}: config: {}", schema::summarize(&v)),
                "fix `config:` to satisfy the step's config-schema (S17)",
            ));
        }
    }
    Ok(config)
}
