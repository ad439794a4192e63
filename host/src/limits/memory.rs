//! A global allocator that measures what jq expressions allocate, so that their evaluation
//! has a memory budget (`engine::expr`): the `weft` binary installs it, and a program that
//! embeds weft installs it the same way to bound expressions' memory too.
//!
//! While an evaluation runs, the allocations and frees of its thread add up to the bytes it
//! holds; the evaluation looks at that sum at every step and stops once it passes its budget.
//! Other threads, and the thread outside evaluations, are only counted through one check of a
//! thread-local flag.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;

thread_local! {
    /// Whether this thread is evaluating an expression.
    static METERING: Cell<bool> = const { Cell::new(false) };
    /// The bytes this thread allocated less those it freed since its evaluation began.
    static HELD: Cell<i64> = const { Cell::new(0) };
}

/// A global allocator that wraps `A` and measures the memory jq expressions hold while they
/// are evaluated. Install it in a binary that embeds weft to give expressions a memory budget
/// (`RuntimeConfig::expr_memory_bytes`); without it, that budget is not applied.
///
/// ```no_run
/// #[global_allocator]
/// static ALLOC: weft::MeteredAlloc<std::alloc::System> = weft::MeteredAlloc(std::alloc::System);
/// # fn main() {}
/// ```
pub struct MeteredAlloc<A>(pub A);

/// Counts `bytes` (negative for a free) against this thread's evaluation, if one is running.
/// Never allocates, never panics (during thread teardown its thread-locals may be gone).
#[inline]
fn count(bytes: i64) {
    let _ = METERING.try_with(|m| {
        if m.get() {
            let _ = HELD.try_with(|h| h.set(h.get().saturating_add(bytes)));
        }
    });
}

// SAFETY: every call is passed on to `A` unchanged; counting touches only thread-locals of
// `Cell<bool>` and `Cell<i64>`, which need no allocation and cannot unwind. The one `unsafe`
// of weft's own code: a global allocator cannot be written without it.
#[allow(unsafe_code)]
unsafe impl<A: GlobalAlloc> GlobalAlloc for MeteredAlloc<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as i64);
        // SAFETY: the caller's contract, passed on.
        unsafe { self.0.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as i64);
        // SAFETY: the caller's contract, passed on.
        unsafe { self.0.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as i64));
        // SAFETY: the caller's contract, passed on.
        unsafe { self.0.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as i64 - layout.size() as i64);
        // SAFETY: the caller's contract, passed on.
        unsafe { self.0.realloc(ptr, layout, new_size) }
    }
}

/// Runs `f` with this thread's allocations measured from zero ([`held`], which stays 0
/// without a [`MeteredAlloc`]). `f` must not unwind (an evaluation catches its own unwinds).
pub(crate) fn metered<R>(f: impl FnOnce() -> R) -> R {
    let was = METERING.with(|m| m.replace(true));
    let before = HELD.with(|h| h.replace(0));
    let out = f();
    METERING.with(|m| m.set(was));
    HELD.with(|h| h.set(before));
    out
}

/// The bytes the current evaluation holds beyond what it began with (0 outside [`metered`],
/// or without a [`MeteredAlloc`]).
#[inline]
pub(crate) fn held() -> i64 {
    HELD.try_with(Cell::get).unwrap_or(0)
}
