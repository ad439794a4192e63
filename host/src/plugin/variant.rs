//! A component pre-instantiated on one engine, with the indices of the exports weft calls.

use wasmtime::component::{Component, ComponentExportIndex, InstancePre};

use super::bindings::exports::weft::plugin::{steps, tools};
use super::engine::{EngineKind, LinkedEngine};
use super::error::{PluginError, one_line};
use super::state::StoreState;

/// The interface names a plugin exports.
const STEPS_EXPORT: &str = "weft:plugin/steps@0.1.0";
const TOOLS_EXPORT: &str = "weft:plugin/tools@0.1.0";

/// A component pre-instantiated on one engine.
pub(crate) struct Variant {
    pub(crate) kind: EngineKind,
    pub(crate) pre: InstancePre<StoreState>,
    pub(crate) steps: Option<steps::GuestIndices>,
    pub(crate) tools: Option<tools::GuestIndices>,
    /// `steps.execute` alone: a call of it type-checks that one export, where the bindings'
    /// `GuestIndices::load` checks `describe` too on every call.
    pub(crate) execute: Option<ComponentExportIndex>,
    /// `tools.call` alone, likewise.
    pub(crate) call: Option<ComponentExportIndex>,
}

impl Variant {
    /// Links `component` on `engine` and finds its exports; refuses a component that exports
    /// neither interface.
    pub(crate) fn new(
        rt: &LinkedEngine,
        component: &Component,
        origin: &str,
    ) -> Result<Self, PluginError> {
        let steps_export = component.get_export_index(None, STEPS_EXPORT);
        let tools_export = component.get_export_index(None, TOOLS_EXPORT);
        if steps_export.is_none() && tools_export.is_none() {
            let names: Vec<String> = component
                .component_type()
                .exports(&rt.engine)
                .map(|(name, _)| name.to_string())
                .collect();
            return Err(PluginError::NotAPlugin {
                origin: origin.to_string(),
                exports: if names.is_empty() {
                    "nothing".into()
                } else {
                    names.join(", ")
                },
            });
        }
        let pre = rt
            .linker
            .instantiate_pre(component)
            .map_err(|e| PluginError::Link {
                origin: origin.to_string(),
                message: one_line(&e),
            })?;
        let link = |e: wasmtime::Error| PluginError::Link {
            origin: origin.to_string(),
            message: one_line(&e),
        };
        let steps = steps_export
            .map(|_| steps::GuestIndices::new(&pre).map_err(link))
            .transpose()?;
        let tools = tools_export
            .map(|_| tools::GuestIndices::new(&pre).map_err(link))
            .transpose()?;
        Ok(Self {
            kind: rt.kind,
            execute: steps_export
                .as_ref()
                .and_then(|i| component.get_export_index(Some(i), "execute")),
            call: tools_export
                .as_ref()
                .and_then(|i| component.get_export_index(Some(i), "call")),
            pre,
            steps,
            tools,
        })
    }
}
