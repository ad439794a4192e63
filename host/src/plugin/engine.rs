//! Engine set-up: the wasmtime `Config` every engine shares, the pooling allocator, the linker
//! of the imports weft provides, and the set of engines one host makes (the main one at start,
//! the others on first use).

use std::sync::OnceLock;

use wasmtime::component::Linker;
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::bindings;
use super::cache;
use super::config::HostConfig;
use super::error::{PluginError, one_line};
use super::state::StoreState;

const MIB: u64 = 1024 * 1024;

/// Which engine an instance runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum EngineKind {
    /// Pooling allocator (the main engine, unless pooling is off or could not be set up).
    Pooled,
    /// On-demand allocation: pool exhausted, or memory above the pool's slot size.
    OnDemand,
    /// On-demand allocation with fuel metering, for plugins whose limits set `fuel`.
    Fuel,
}

/// A wasmtime engine with the linker of weft's imports and the fingerprint that names its
/// compiled artifacts in the cache.
pub(crate) struct LinkedEngine {
    pub(crate) kind: EngineKind,
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<StoreState>,
    pub(crate) fingerprint: String,
}

/// The engines of one host: the main one, and the others made when first needed.
pub(crate) struct Engines {
    pub(crate) main: LinkedEngine,
    on_demand: OnceLock<LinkedEngine>,
    fuel: OnceLock<LinkedEngine>,
}

impl Engines {
    /// Makes the main engine: pooled when `config.pool.enabled`, falling back to on-demand
    /// allocation (with a warning) when the pool cannot reserve its memory.
    pub(crate) fn new(config: &HostConfig) -> Result<Self, PluginError> {
        let main = if config.pool.enabled {
            match linked_engine(EngineKind::Pooled, config) {
                Ok(engine) => engine,
                Err(err) => {
                    tracing::warn!(
                        "pooling allocator unavailable ({}); using on-demand allocation",
                        one_line(&err)
                    );
                    linked_engine(EngineKind::OnDemand, config).map_err(engine_error)?
                }
            }
        } else {
            linked_engine(EngineKind::OnDemand, config).map_err(engine_error)?
        };
        Ok(Self {
            main,
            on_demand: OnceLock::new(),
            fuel: OnceLock::new(),
        })
    }

    /// Advances the epoch of every engine made so far.
    pub(crate) fn tick(&self) {
        self.main.engine.increment_epoch();
        if let Some(e) = self.on_demand.get() {
            e.engine.increment_epoch();
        }
        if let Some(e) = self.fuel.get() {
            e.engine.increment_epoch();
        }
    }

    /// The engine of `kind`, made on first use.
    pub(crate) fn get(
        &self,
        kind: EngineKind,
        config: &HostConfig,
    ) -> Result<&LinkedEngine, PluginError> {
        let slot = match kind {
            EngineKind::Pooled if self.main.kind == EngineKind::Pooled => return Ok(&self.main),
            EngineKind::Pooled | EngineKind::OnDemand => {
                if self.main.kind == EngineKind::OnDemand {
                    return Ok(&self.main);
                }
                &self.on_demand
            }
            EngineKind::Fuel => &self.fuel,
        };
        if let Some(e) = slot.get() {
            return Ok(e);
        }
        let kind = if kind == EngineKind::Pooled {
            EngineKind::OnDemand
        } else {
            kind
        };
        let made = linked_engine(kind, config).map_err(engine_error)?;
        Ok(slot.get_or_init(|| made))
    }
}

/// The boundary: a wasmtime error of engine set-up as a [`PluginError`].
fn engine_error(err: wasmtime::Error) -> PluginError {
    PluginError::Engine {
        message: one_line(&err),
    }
}

/// The wasmtime settings shared by every engine, so artifacts move between pooled and on-demand
/// engines (same tunables, same fingerprint).
fn base_config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.concurrency_support(false);
    config.epoch_interruption(true);
    // Explicit, so pooled and on-demand engines agree whatever the defaults become.
    config.memory_reservation(4 << 30);
    config.memory_guard_size(32 << 20);
    config.memory_may_move(false);
    config.parallel_compilation(true);
    config
}

/// The pooling allocator sized by `config.pool` and `config.max_memory_mib`.
fn pooling(config: &HostConfig) -> PoolingAllocationConfig {
    let pool = &config.pool;
    let slots = pool.slots.max(1);
    let mut p = PoolingAllocationConfig::new();
    p.total_component_instances(slots)
        .total_core_instances(slots.saturating_mul(pool.core_instances_per_slot.max(1)))
        .total_memories(slots.saturating_mul(pool.memories_per_slot.max(1)))
        .total_tables(slots.saturating_mul(pool.tables_per_slot.max(1)))
        .total_stacks(slots)
        .max_memory_size(
            usize::try_from(config.max_memory_mib.saturating_mul(MIB)).unwrap_or(usize::MAX),
        )
        .table_elements(pool.table_elements as usize)
        .max_tables_per_module(2)
        .max_memories_per_module(1)
        .linear_memory_keep_resident(pool.keep_resident)
        .table_keep_resident(pool.keep_resident)
        .async_stack_keep_resident(pool.keep_resident)
        .decommit_batch_size(pool.decommit_batch.max(1))
        .pagemap_scan(if pagemap_scan_safe(pool, super::swap::possible) {
            Enabled::Auto
        } else {
            Enabled::No
        });
    p
}

/// Whether freed memories may be reset with `PAGEMAP_SCAN` (`pool.pagemap_scan`), given
/// whether pages of this process may be swapped out (`swap_possible`, asked only when the
/// scan is wanted: [`super::swap::possible`] reads files).
///
/// wasmtime 48's scan takes a page for dirty only when it is present: a dirtied page the kernel
/// has swapped out is neither reset nor returned, and the next instance in the slot would read
/// what the previous one left there (wasmtime pull request 14357). wasmtime 50 resets those too,
/// but its scan then also reports pages a guest never touched, which makes a small guest's
/// invocation four to five times as costly, so weft stays on 48 (docs/TOOLCHAIN.md). Where swap
/// is possible, memories are reset the default way instead: fresh every time, at the cost of
/// the page faults the scan saves.
fn pagemap_scan_safe(pool: &super::PoolConfig, swap_possible: impl FnOnce() -> bool) -> bool {
    if !pool.pagemap_scan {
        return false;
    }
    let swap_possible = swap_possible();
    if swap_possible {
        tracing::info!(
            "resetting plugin memories without PAGEMAP_SCAN: swap is active (a cgroup with \
             memory.swap.max 0 allows the scan again), and wasmtime 48's scan misses dirty \
             pages that are swapped out"
        );
    }
    !swap_possible
}

/// Makes the engine of `kind` and its linker.
pub(crate) fn linked_engine(
    kind: EngineKind,
    config: &HostConfig,
) -> wasmtime::Result<LinkedEngine> {
    let mut wasm_config = base_config();
    match kind {
        EngineKind::Pooled => {
            wasm_config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling(config)));
        }
        EngineKind::OnDemand => {
            wasm_config.allocation_strategy(InstanceAllocationStrategy::OnDemand);
        }
        EngineKind::Fuel => {
            wasm_config.allocation_strategy(InstanceAllocationStrategy::OnDemand);
            wasm_config.consume_fuel(true);
        }
    }
    let engine = Engine::new(&wasm_config)?;
    let linker = linker(&engine)?;
    let fingerprint = cache::engine_fingerprint(&engine);
    Ok(LinkedEngine {
        kind,
        engine,
        linker,
        fingerprint,
    })
}

/// WASI 0.2 in full, wasi-http, and the weft imports.
fn linker(engine: &Engine) -> wasmtime::Result<Linker<StoreState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    bindings::Plugin::add_to_linker::<StoreState, wasmtime::component::HasSelf<StoreState>>(
        &mut linker,
        |state| state,
    )?;
    Ok(linker)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooled_and_on_demand_engines_share_artifacts() {
        let config = HostConfig::default();
        let pooled = linked_engine(EngineKind::Pooled, &config).expect("pooled");
        let on_demand = linked_engine(EngineKind::OnDemand, &config).expect("on demand");
        let fuel = linked_engine(EngineKind::Fuel, &config).expect("fuel");
        assert_eq!(pooled.fingerprint, on_demand.fingerprint);
        assert_ne!(pooled.fingerprint, fuel.fingerprint);
    }

    #[test]
    fn pagemap_scan_is_used_only_where_no_page_can_be_swapped_out() {
        let on = super::super::PoolConfig::default();
        assert!(on.pagemap_scan, "on by default");
        assert!(pagemap_scan_safe(&on, || false));
        assert!(!pagemap_scan_safe(&on, || true));
        assert!(!pagemap_scan_safe(&on.with_pagemap_scan(false), || false));
    }
}
