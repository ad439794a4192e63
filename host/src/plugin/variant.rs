//! A component pre-instantiated on one engine, with the indices of the exports weft calls.

use wasmtime::component::{Component, InstancePre};

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
        Ok(Self {
            kind: rt.kind,
            pre,
            steps,
            tools,
        })
    }
}
