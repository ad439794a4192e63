//! What a lean component (feature `lean`, no std) needs from somewhere, since std and
//! wasi-libc are not there: the global allocator, the panic handler, the canonical ABI's
//! `cabi_realloc`, `memcmp` and `bcmp`.
//!
//! Only for wasm32 without threads: an instance is single-threaded and serves one call from
//! the host, then is thrown away with its memory.

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::fmt::Write as _;
use core::panic::PanicInfo;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::prelude::*;

/// The arena's size: 1 MiB of the component's initial memory. A step that needs more grows
/// memory past it, 1 MiB or more at a time, up to the workflow's `limits.memory-mib`.
const ARENA_BYTES: usize = 1 << 20;

/// The size of a WebAssembly page.
const PAGE: usize = 64 * 1024;

/// The least memory grown at a time when the arena is used up, in pages (1 MiB).
const GROW_PAGES: usize = 16;

/// The arena, zeroed in the component's initial memory (`.bss`): its pages cost nothing until
/// touched. A heap that `memory.grow` made instead would be fresh pages in every instance.
#[repr(C, align(16))]
struct Arena(UnsafeCell<[u8; ARENA_BYTES]>);

// SAFETY: a wasm32 instance without the atomics feature has one thread.
unsafe impl Sync for Arena {}

static ARENA: Arena = Arena(UnsafeCell::new([0; ARENA_BYTES]));

/// A bump allocator over [`ARENA`], then over memory it grows: it frees only the last block
/// (and grows or shrinks that one in place), since an instance lives for one call.
struct Bump {
    /// The next free byte and the end of the region it is in, as addresses; both 0 until the
    /// first allocation.
    region: UnsafeCell<(usize, usize)>,
}

// SAFETY: as for `Arena`, one thread.
unsafe impl Sync for Bump {}

#[global_allocator]
static ALLOCATOR: Bump = Bump {
    region: UnsafeCell::new((0, 0)),
};

impl Bump {
    /// `layout`'s block at the next free byte, if the region has room.
    fn carve(next: &mut usize, end: usize, layout: Layout) -> Option<*mut u8> {
        let start = next.checked_add(layout.align() - 1)? & !(layout.align() - 1);
        let stop = start.checked_add(layout.size())?;
        if stop > end {
            return None;
        }
        *next = stop;
        Some(start as *mut u8)
    }

    /// A fresh region of at least `bytes` (plus alignment) grown at the end of memory.
    fn grow(bytes: usize, align: usize) -> Option<(usize, usize)> {
        let want = bytes.checked_add(align)?.div_ceil(PAGE).max(GROW_PAGES);
        let old = core::arch::wasm32::memory_grow(0, want);
        if old == usize::MAX {
            return None;
        }
        Some((old * PAGE, (old + want) * PAGE))
    }
}

// SAFETY: blocks never overlap: each is carved past the last one's end, and a region is either
// the arena or pages that `memory.grow` just added; only the last block is given back.
unsafe impl GlobalAlloc for Bump {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: one thread, and no reference to the region outlives this call.
        let region = unsafe { &mut *self.region.get() };
        if region.1 == 0 {
            let base = ARENA.0.get() as usize;
            *region = (base, base + ARENA_BYTES);
        }
        if let Some(block) = Self::carve(&mut region.0, region.1, layout) {
            return block;
        }
        match Self::grow(layout.size(), layout.align()) {
            Some(fresh) => {
                *region = fresh;
                Self::carve(&mut region.0, region.1, layout).unwrap_or(core::ptr::null_mut())
            }
            None => core::ptr::null_mut(),
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as in `alloc`.
        let region = unsafe { &mut *self.region.get() };
        if ptr as usize + layout.size() == region.0 {
            region.0 = ptr as usize;
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let region = unsafe { &mut *self.region.get() };
        let start = ptr as usize;
        if start + layout.size() == region.0 && start.saturating_add(new_size) <= region.1 {
            // The last block: it grows or shrinks where it is.
            region.0 = start + new_size;
            return ptr;
        }
        if new_size <= layout.size() {
            return ptr;
        }
        // SAFETY: the caller guarantees `layout.align()` is a power of two and `new_size`,
        // rounded to it, does not overflow.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: `new_layout` has a non-zero size, larger than the old one.
        let fresh = unsafe { self.alloc(new_layout) };
        if !fresh.is_null() {
            // SAFETY: both blocks are valid for the old size, and they do not overlap.
            unsafe { core::ptr::copy_nonoverlapping(ptr, fresh, layout.size()) };
        }
        fresh
    }
}

/// Set once a panic began: a panic while reporting one only traps.
static PANICKING: AtomicBool = AtomicBool::new(false);

/// Writes Rust's panic report to the host's stderr for the plugin, as std would (the host takes
/// its message for the failure's), then traps.
///
/// The report goes byte by byte through `weft:plugin/log.stderr-byte`: an import that takes a
/// string would need lowering through the component's memory, which costs every instance two
/// more core instances (about a fifth of a trivial step's time), panic or not.
#[panic_handler]
fn panic(info: &PanicInfo<'_>) -> ! {
    if !PANICKING.swap(true, Ordering::Relaxed) {
        let mut report = String::from("thread '<unnamed>' panicked at ");
        if let Some(place) = info.location() {
            let _ = write!(
                report,
                "{}:{}:{}",
                place.file(),
                place.line(),
                place.column()
            );
        }
        let _ = writeln!(report, ":\n{}", info.message());
        for byte in report.bytes() {
            crate::bindings::steps_world::weft::plugin::log::stderr_byte(byte);
        }
    }
    core::arch::wasm32::unreachable()
}

/// The canonical ABI's allocation function, which the host calls to hand the guest strings and
/// lists (wasi-libc exports it in a std build): a block of `new_len` bytes aligned to `align`,
/// with the first `old_len` bytes of `old` when `old` is one.
///
/// # Safety
///
/// As the canonical ABI requires: `align` is a power of two, and `old`, when `old_len` is not
/// zero, is a block this function returned with that length and alignment.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cabi_realloc(
    old: *mut u8,
    old_len: usize,
    align: usize,
    new_len: usize,
) -> *mut u8 {
    if new_len == 0 {
        // A dangling, well-aligned pointer: nothing may be read or written through it.
        return align as *mut u8;
    }
    // SAFETY: `align` is a power of two (the caller's promise), and `new_len` is not zero.
    let block = unsafe {
        if old_len == 0 {
            alloc::alloc::alloc(Layout::from_size_align_unchecked(new_len, align))
        } else {
            alloc::alloc::realloc(
                old,
                Layout::from_size_align_unchecked(old_len, align),
                new_len,
            )
        }
    };
    if block.is_null() {
        // Out of memory: the host sees a trap (and `memory-limit` when its limit refused).
        core::arch::wasm32::unreachable()
    }
    block
}

/// Compares `n` bytes, as C's `memcmp`: what wasi-libc gives a std build, and what the
/// compiler calls for slice and string comparisons.
///
/// # Safety
///
/// `a` and `b` must be valid for reads of `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcmp(
    a: *const core::ffi::c_void,
    b: *const core::ffi::c_void,
    n: usize,
) -> i32 {
    // SAFETY: the caller's promise.
    let (a, b) = unsafe {
        (
            core::slice::from_raw_parts(a.cast::<u8>(), n),
            core::slice::from_raw_parts(b.cast::<u8>(), n),
        )
    };
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return i32::from(*x) - i32::from(*y);
        }
    }
    0
}

/// Whether `n` bytes differ (non-zero) or not (zero), as C's `bcmp`.
///
/// # Safety
///
/// `a` and `b` must be valid for reads of `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bcmp(
    a: *const core::ffi::c_void,
    b: *const core::ffi::c_void,
    n: usize,
) -> i32 {
    // SAFETY: the caller's promise.
    unsafe { memcmp(a, b, n) }
}
