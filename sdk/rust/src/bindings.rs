//! The bindings of `wit/plugin.wit`, generated twice: once for world `step-plugin` and once for
//! world `tool-plugin`, which shares the first one's types and imports. Each world has its own
//! `export!` macro, so a guest exports exactly the interfaces it registers something for
//! (`export_plugin!` picks the macros): with `pub_export_macro` the export half of a world's
//! component type travels inside its `export!` macro and lands only in the guest that calls it.

/// World `step-plugin`: imports writer, abort, run and log; exports `weft:plugin/steps`.
#[allow(missing_docs)]
pub mod steps_world {
    wit_bindgen::generate!({
        path: "wit",
        world: "step-plugin",
        pub_export_macro: true,
        default_bindings_module: "weft_plugin::__private::steps_world",
        runtime_path: "weft_plugin::__private::wit_bindgen::rt",
    });
}

/// World `tool-plugin`: imports writer, abort and log (those of [`steps_world`]); exports
/// `weft:plugin/tools`.
#[allow(missing_docs)]
pub mod tools_world {
    wit_bindgen::generate!({
        path: "wit",
        world: "tool-plugin",
        pub_export_macro: true,
        default_bindings_module: "weft_plugin::__private::tools_world",
        runtime_path: "weft_plugin::__private::wit_bindgen::rt",
        with: {
            "weft:plugin/types@0.1.0": crate::__private::steps_world::weft::plugin::types,
            "weft:plugin/writer@0.1.0": crate::__private::steps_world::weft::plugin::writer,
            "weft:plugin/abort@0.1.0": crate::__private::steps_world::weft::plugin::abort,
            "weft:plugin/log@0.1.0": crate::__private::steps_world::weft::plugin::log,
        },
    });
}
