//! weft's integration tests: one binary, one module per area, real components in real
//! wasmtime against a real sled directory.

mod blocks;
mod cli;
mod common;
mod durability;
mod hostile;
mod loader_hardening;
mod plugin;
mod rerun;
mod rules;
mod sequence;
mod server;
