//! weft's integration tests: one binary, one module per area, real components in real
//! wasmtime against a real sled directory.

mod blocks;
mod cli;
mod common;
mod durability;
mod full_disk;
mod hostile;
mod plugin;
mod rerun;
mod rules;
mod sequence;
mod server;
mod torture;
