//! Spotting the component-model-async ABI in a component the engine refused, so the refusal can
//! say what to change. The host's engines do not enable it (wasmtime's `component-model-async`
//! feature makes every call slower); a component that uses it is refused at load.

use wasmparser::{
    CanonicalFunction as Canon, CanonicalOption, ComponentDefinedType, ComponentType,
    ComponentTypeDeclaration, InstanceTypeDeclaration, Parser, Payload,
};

/// A use of the component-model-async ABI in `wasm`, described (`an async-lifted export`, `the
/// stream built-ins`, ...): the first canonical function that uses it, else the first type;
/// `None` when there is none or `wasm` cannot be read.
pub(crate) fn async_abi_use(wasm: &[u8]) -> Option<&'static str> {
    let mut in_types = None;
    for payload in Parser::new(0).parse_all(wasm) {
        match payload.ok()? {
            Payload::ComponentCanonicalSection(reader) => {
                for func in reader {
                    if let Some(what) = canonical(&func.ok()?) {
                        return Some(what);
                    }
                }
            }
            Payload::ComponentTypeSection(reader) => {
                for ty in reader {
                    in_types = in_types.or_else(|| component_type(&ty.ok()?));
                }
            }
            _ => {}
        }
    }
    in_types
}

/// An async use in a canonical function: an `async` or `callback` option, or a built-in of the
/// async ABI.
fn canonical(func: &Canon) -> Option<&'static str> {
    let is_async = |options: &[CanonicalOption]| {
        options
            .iter()
            .any(|o| matches!(o, CanonicalOption::Async | CanonicalOption::Callback(_)))
    };
    Some(match func {
        Canon::Lift { options, .. } if is_async(options) => "an async-lifted export",
        Canon::Lower { options, .. } if is_async(options) => "an async-lowered import",
        Canon::TaskReturn { .. } => "the task.return built-in",
        Canon::TaskCancel => "the task.cancel built-in",
        Canon::BackpressureInc | Canon::BackpressureDec => "the backpressure built-ins",
        Canon::ContextGet { .. } | Canon::ContextSet { .. } => "the context built-ins",
        Canon::SubtaskDrop | Canon::SubtaskCancel { .. } => "the subtask built-ins",
        Canon::StreamNew { .. }
        | Canon::StreamRead { .. }
        | Canon::StreamWrite { .. }
        | Canon::StreamCancelRead { .. }
        | Canon::StreamCancelWrite { .. }
        | Canon::StreamDropReadable { .. }
        | Canon::StreamDropWritable { .. } => "the stream built-ins",
        Canon::FutureNew { .. }
        | Canon::FutureRead { .. }
        | Canon::FutureWrite { .. }
        | Canon::FutureCancelRead { .. }
        | Canon::FutureCancelWrite { .. }
        | Canon::FutureDropReadable { .. }
        | Canon::FutureDropWritable { .. } => "the future built-ins",
        Canon::ErrorContextNew { .. }
        | Canon::ErrorContextDebugMessage { .. }
        | Canon::ErrorContextDrop => "the error-context built-ins",
        Canon::WaitableSetNew
        | Canon::WaitableSetWait { .. }
        | Canon::WaitableSetPoll { .. }
        | Canon::WaitableSetDrop
        | Canon::WaitableJoin => "the waitable-set built-ins",
        _ => return None,
    })
}

/// An async use in a type: an async function, a stream or a future, also inside the instance
/// and component types that describe imports and exports.
fn component_type(ty: &ComponentType) -> Option<&'static str> {
    match ty {
        ComponentType::Func(func) if func.async_ => Some("an async function type"),
        ComponentType::Defined(ComponentDefinedType::Stream(_)) => Some("a stream type"),
        ComponentType::Defined(ComponentDefinedType::Future(_)) => Some("a future type"),
        ComponentType::Instance(decls) => decls.iter().find_map(|d| match d {
            InstanceTypeDeclaration::Type(ty) => component_type(ty),
            _ => None,
        }),
        ComponentType::Component(decls) => decls.iter().find_map(|d| match d {
            ComponentTypeDeclaration::Type(ty) => component_type(ty),
            _ => None,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_plugins_use_no_async_abi() {
        for path in [
            weft_guests::TESTKIT,
            weft_guests::HOSTILE,
            weft_guests::TOOLS,
        ] {
            let wasm = std::fs::read(path).expect("built plugin");
            assert_eq!(async_abi_use(&wasm), None, "{path}");
        }
        assert_eq!(async_abi_use(b"not wasm"), None);
    }
}
