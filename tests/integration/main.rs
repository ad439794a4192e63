//! weft's integration tests: one binary, one module per area, real components in real
//! wasmtime against a real sled directory.

mod common;
mod sequence;
mod durability;
mod hostile;
mod plugin;
mod rules;
mod blocks;
mod server;
