//! The memory limiter of an invocation (`limits.memory-mib`).

use wasmtime::{ResourceLimiter, Result};

/// A `ResourceLimiter` that caps linear memory and remembers that it refused growth.
#[derive(Debug)]
pub(crate) struct MemoryLimiter {
    pub(crate) max_bytes: u64,
    pub(crate) max_table_elements: usize,
    pub(crate) denied: bool,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> Result<bool> {
        if desired as u64 > self.max_bytes {
            self.denied = true;
            return Ok(false);
        }
        // Beyond the memory's own declared maximum (or the pool's slot): refused, but that is
        // the guest's own bound, not `limits.memory-mib`.
        Ok(maximum.is_none_or(|m| desired <= m))
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> Result<bool> {
        Ok(desired <= self.max_table_elements && maximum.is_none_or(|m| desired <= m))
    }
}
