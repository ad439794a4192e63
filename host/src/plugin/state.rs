//! The data of one invocation's `Store`: WASI from the sandbox, the host imports' state, the
//! output accounting, the memory limiter and the abort view.

use std::sync::Arc;

use serde_json::Value;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::abort::AbortView;
use super::bindings::weft::plugin::types;
use super::events::Emitter;
use super::http::HttpGate;
use super::limiter::MemoryLimiter;
use crate::executor::RunAccess;

/// The `T` of every `Store<T>` the host creates.
pub(crate) struct StoreState {
    /// `None` until the guest first calls WASI, when its grants give it nothing to set up.
    pub(crate) wasi: Option<WasiCtx>,
    pub(crate) table: ResourceTable,
    pub(crate) http: WasiHttpCtx,
    pub(crate) gate: HttpGate,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) out: Arc<Emitter>,
    pub(crate) abort: AbortView,
    pub(crate) run: Arc<dyn RunAccess>,
    pub(crate) patches: Vec<Value>,
    /// The first `set-state` patch that was not a JSON object, described.
    pub(crate) bad_patch: Option<String>,
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: self
                .wasi
                .get_or_insert_with(|| super::grants::bare_wasi(&self.out)),
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for StoreState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.gate,
        }
    }
}

impl types::Host for StoreState {}
