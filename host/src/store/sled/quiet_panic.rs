//! Running code that may panic on bad data (sled, on a damaged database) so that the panic
//! becomes an error and prints nothing.

use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::sync::Once;

thread_local! {
    /// Set while [`quietly`] runs on this thread.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

static HOOK: Once = Once::new();

/// Runs `f`; a panic inside it becomes `Err` with the panic's message, and the panic hook stays
/// silent for it. Panics on other threads, or outside `f`, print as before.
pub(super) fn quietly<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info);
            }
        }));
    });
    let was = QUIET.with(|q| q.replace(true));
    let result = std::panic::catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was));
    result.map_err(|panic| {
        panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_an_error() {
        assert_eq!(quietly(|| 7), Ok(7));
        let v: Vec<u8> = Vec::new();
        let index = v.len() + 4;
        let err = quietly(|| v[index]).expect_err("panics");
        assert!(err.contains("index out of bounds"), "{err}");
        assert!(!QUIET.with(Cell::get), "quiet only inside");
    }
}
