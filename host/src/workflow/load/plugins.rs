//! Plugins and their grants: the components a file declares under `plugins:`, loaded once per
//! path; the plugin an entry names, looked up among them; its sandbox (`limits:`, `grants:`)
//! checked and the plugin added to the graph; its tools.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use serde_saphyr::Spanned;

use super::read::{ParsedFile, absolute};
use super::{Builder, FileCx, LoadedPlugin, line, quoted};
use crate::engine::model::PluginRef;
use crate::plugin::{Plugin, PluginError, PluginHost, Sandbox, ToolInfo};
use crate::workflow::raw::RawPlugin;
use crate::workflow::{WorkflowError, checks};

/// Loads the plugins the file `parsed` (at `file`) declares that no file before it did, into
/// `plugins` by digest and `by_path` by component path.
pub(super) async fn load_plugins(
    parsed: &ParsedFile,
    file: &Path,
    host: &PluginHost,
    plugins: &mut BTreeMap<String, LoadedPlugin>,
    by_path: &mut HashMap<PathBuf, String>,
) -> Result<(), WorkflowError> {
    for wasm in parsed.plugin_paths.values() {
        let (path, pin, line) = wasm;
        if by_path.contains_key(path) {
            continue;
        }
        // Read and hashed once per process while the file is unchanged (see `load_path`).
        let (plugin, bytes) = host.load_path(path, pin.as_deref()).await.map_err(|e| {
            let (message, fix) = match &e {
                PluginError::Read { source, .. } => (
                    format!("cannot read plugin {}: {source}", path.display()),
                    "fix the `wasm:` path; it is relative to this file's directory",
                ),
                // Other errors name the plugin by its path already.
                _ => {
                    let text = e.to_string();
                    if text.contains(&path.display().to_string()) {
                        (text, "")
                    } else {
                        (format!("plugin {}: {text}", path.display()), "")
                    }
                }
            };
            WorkflowError::at(file, Some(*line), message, fix)
        })?;
        by_path.insert(path.clone(), plugin.digest().to_owned());
        plugins.insert(plugin.digest().to_owned(), LoadedPlugin { bytes, plugin });
    }
    Ok(())
}

impl Builder<'_> {
    /// The plugin `alias` of this file, which `who` names: its digest, its component's path and
    /// the loaded plugin.
    pub(super) fn declared_plugin(
        &self,
        alias: &Spanned<String>,
        who: &str,
        fcx: &FileCx,
    ) -> Result<(String, PathBuf, Arc<Plugin>), WorkflowError> {
        let parsed = fcx.parsed;
        let Some((wasm, _, _)) = parsed.plugin_paths.get(&alias.value) else {
            let declared: Vec<&str> = parsed.plugin_paths.keys().map(String::as_str).collect();
            return Err(WorkflowError::at(
                fcx.path,
                line(&alias.referenced),
                format!(
                    "{who} names plugin `{}`, which is not declared (declared: {})",
                    alias.value,
                    if declared.is_empty() {
                        "none".into()
                    } else {
                        quoted(&declared)
                    }
                ),
                "fix the name or declare the plugin under `plugins:`",
            ));
        };
        let Some((digest, loaded)) = self
            .by_path
            .get(wasm)
            .and_then(|d| self.plugins.get_key_value(d))
        else {
            return Err(WorkflowError::at(
                fcx.path,
                line(&alias.referenced),
                format!("plugin `{}` was not loaded", alias.value),
                "",
            ));
        };
        Ok((digest.clone(), wasm.clone(), loaded.plugin.clone()))
    }

    /// The graph's key of the plugin `alias` of this file, its sandbox checked and the plugin
    /// added to the graph the first time.
    pub(super) fn plugin_key(
        &mut self,
        alias: &Spanned<String>,
        digest: &str,
        wasm: &Path,
        fcx: &FileCx,
    ) -> Result<String, WorkflowError> {
        let parsed = fcx.parsed;
        let key = format!("{}/{}", fcx.file, alias.value);
        if !self.graph.plugins.contains_key(&key) {
            let raw = &parsed.raw.plugins[&alias.value].value;
            let sandbox = sandbox_value(raw, &parsed.dir);
            let declared = &parsed.raw.plugins[&alias.value];
            let at = |part: Option<checks::Part>| {
                match part {
                    Some(checks::Part::Limits) => raw.limits.as_ref().map(|l| l.referenced.line()),
                    Some(checks::Part::Grants) => raw.grants.as_ref().map(|g| g.referenced.line()),
                    None => None,
                }
                .or_else(|| line(&declared.referenced))
            };
            let checked = checks::sandbox_shape(
                raw.limits.as_ref().map(|l| &l.value),
                raw.grants.as_ref().map(|g| &g.value),
            )
            .map_err(|(m, part)| (m, Some(part)))
            .and_then(|()| {
                serde_json::from_value::<Sandbox>(sandbox.clone())
                    .map_err(|e| (e.to_string(), None))
            })
            .and_then(|s| {
                // The values first, so a malformed grant is named as such before its place.
                s.check().map_err(|e| (e.to_string(), None))?;
                checks::sandbox_values(&s).map_err(|(m, part)| (m, Some(part)))?;
                self.host
                    .check_sandbox(&s)
                    .map_err(|e| (e.to_string(), None))
            });
            if let Err((err, part)) = checked {
                return Err(WorkflowError::at(
                    fcx.path,
                    at(part),
                    format!("plugin `{}`: {err}", alias.value),
                    "fix `limits:` / `grants:` (WORKFLOW-FORMAT.md §1)",
                ));
            }
            self.graph.plugins.insert(
                key.clone(),
                PluginRef {
                    digest: digest.to_owned(),
                    source: wasm.display().to_string(),
                    sandbox,
                },
            );
        }
        Ok(key)
    }
}

/// The tool `tool` of `plugin` (declared as `alias`), or a refusal listing its tools.
pub(super) fn plugin_tool<'p>(
    plugin: &'p Plugin,
    alias: &Spanned<String>,
    tool: &Spanned<String>,
    fcx: &FileCx,
) -> Result<&'p ToolInfo, WorkflowError> {
    plugin
        .tools()
        .iter()
        .find(|t| t.name == tool.value)
        .ok_or_else(|| {
            let names: Vec<&str> = plugin.tools().iter().map(|t| t.name.as_str()).collect();
            WorkflowError::at(
                fcx.path,
                line(&tool.referenced),
                format!(
                    "plugin `{}` has no tool `{}` (it has: {})",
                    alias.value,
                    tool.value,
                    if names.is_empty() {
                        "none".into()
                    } else {
                        names.join(", ")
                    }
                ),
                "fix the tool name; `weft plugin inspect` lists a plugin's tools",
            )
        })
}

/// The sandbox of plugin `raw` declared in directory `dir`, as the graph stores it: its
/// `limits:` and `grants:`, each granted directory's host path made absolute.
fn sandbox_value(raw: &RawPlugin, dir: &Path) -> Value {
    let mut grants = raw
        .grants
        .as_ref()
        .map(|g| g.value.clone())
        .unwrap_or_else(|| json!({}));
    if let Some(dirs) = grants.get_mut("dirs").and_then(Value::as_array_mut) {
        for d in dirs {
            if let Some(host) = d.get("host").and_then(Value::as_str) {
                let resolved = absolute(&dir.join(host));
                d["host"] = json!(resolved.display().to_string());
            }
        }
    }
    let limits = raw
        .limits
        .as_ref()
        .map(|l| l.value.clone())
        .unwrap_or_else(|| json!({}));
    json!({ "limits": limits, "grants": grants })
}
