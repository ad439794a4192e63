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
        let has_steps = component.get_export_index(None, STEPS_EXPORT).is_some();
        let has_tools = component.get_export_index(None, TOOLS_EXPORT).is_some();
        if !has_steps && !has_tools {
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
        let steps = if has_steps {
            Some(steps::GuestIndices::new(&pre).map_err(link)?)
        } else {
            None
        };
        let tools = if has_tools {
            Some(tools::GuestIndices::new(&pre).map_err(link)?)
        } else {
            None
        };
        let func = |interface: &str, name: &str| {
            let interface = component.get_export_index(None, interface)?;
            component.get_export_index(Some(&interface), name)
        };
        Ok(Self {
            kind: rt.kind,
            execute: steps.as_ref().and_then(|_| func(STEPS_EXPORT, "execute")),
            call: tools.as_ref().and_then(|_| func(TOOLS_EXPORT, "call")),
            pre,
            steps,
            tools,
        })
    }
}
