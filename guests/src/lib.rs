//! Paths of weft's example and test plugins (WebAssembly components).
//!
//! The build script compiles the guest workspace `guests/plugins` for wasm32-wasip2 into
//! `<target>/guests`, copies every component to `<workspace>/examples/plugins/<name>.wasm` (so
//! the example workflows in `examples/` can name `plugins/<name>.wasm`) and defines one constant
//! per plugin below, holding the absolute path of that copy.

include!(concat!(env!("OUT_DIR"), "/plugins.rs"));
