//! weft's integration tests: one binary, one module per area, real components in real
//! wasmtime against a real sled directory. Tests are named after the rules of
//! `docs/SEMANTICS.md` they check (`s45_…`); `contract.rs` keeps that true.

mod agents;
mod backend;
mod blocks;
mod bulk;
mod cli;
mod common;
mod contract;
mod core_contract;
mod dev_model;
mod distributed;
mod driver_api;
mod durability;
mod expr_memory;
mod full_disk;
mod guest_memory;
mod guest_sdk;
mod hostile;
mod hostile_models;
mod hostile_server;
mod interrupted;
mod layering;
mod layout;
mod lean_guest;
mod loader_hardening;
mod models;
mod new_project;
mod observability;
mod plugin;
mod plugin_host;
mod rerun;
mod retention;
mod rules;
mod run_limits;
mod sequence;
mod server;
mod server_api;
mod server_security;
mod step_executor;
mod store_conformance;
mod store_hardening;
mod store_pruning;
mod tags;
mod terminal;
mod tools;
mod torture;

/// The allocator the `weft` binary installs: expressions evaluated in this process are held to
/// their memory budget as they are there.
#[global_allocator]
static ALLOC: weft::MeteredAlloc<std::alloc::System> = weft::MeteredAlloc(std::alloc::System);
