//! The `weft:plugin/writer` import: streamed chunks and custom events, under the output limits.

use wasmtime::Result;

use super::bindings::weft::plugin::writer;
use super::state::StoreState;

/// Traps the guest from a host import with this message: an output limit was exceeded.
#[derive(Debug)]
pub(crate) struct OutputLimit(pub(crate) String);

impl std::fmt::Display for OutputLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OutputLimit {}

/// The trap of an import that hit an output limit.
pub(crate) fn limit_trap(message: String) -> wasmtime::Error {
    wasmtime::Error::new(OutputLimit(message))
}

impl writer::Host for StoreState {
    fn write(&mut self, chunk: String) -> Result<()> {
        self.out.chunk(chunk).map_err(limit_trap)
    }

    fn custom(&mut self, kind: String, data: String) -> Result<()> {
        self.out.custom(kind, data).map_err(limit_trap)
    }
}
