//! weft: a durable workflow host whose steps and tools are sandboxed WebAssembly components.
//!
//! The crate is layered as `docs/ARCHITECTURE.md` in the repository describes: [`engine`] is the pure core,
//! [`plugin`] runs WebAssembly components, [`store`] keeps runs durable, [`driver`] ties them
//! together, and [`cli`] is the command line on top.

pub mod builder;
pub mod cli;
pub mod driver;
pub mod engine;
pub mod native;
pub mod plugin;
pub mod server;
pub mod store;
pub mod workflow;
