//! Host bindings of the `weft:plugin@0.1.0` contract (`wit/plugin.wit`), world `plugin`.
//!
//! The world includes both `step-plugin` and `tool-plugin`; a plugin may export either or both,
//! so exports are looked up per interface (`steps::GuestIndices`, `tools::GuestIndices`) rather
//! than through the world's all-or-nothing instantiation. Imports are synchronous and may trap
//! (output limits); exports are called asynchronously so epoch yields work.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
    imports: { default: trappable },
    exports: { default: async },
});
