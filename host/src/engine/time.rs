//! Time as the core sees it: instants arrive inside events, never from a clock.

use std::cell::RefCell;

/// Milliseconds since the Unix epoch, UTC. Time only enters the core inside events.
pub(crate) type Millis = i64;

/// RFC 3339 in UTC with milliseconds (S109).
///
/// A transition stamps its records and events with its instant, and many transitions fall in
/// the same millisecond, so each thread keeps the last instant it formatted: the same one again
/// is a copy of that string rather than another pass through `chrono`'s formatter.
pub fn rfc3339(ms: Millis) -> String {
    thread_local! {
        static LAST: RefCell<Option<(Millis, String)>> = const { RefCell::new(None) };
    }
    LAST.with_borrow_mut(|last| match last {
        Some((at, formatted)) if *at == ms => formatted.clone(),
        _ => {
            let formatted = chrono::DateTime::from_timestamp_millis(ms)
                .unwrap_or_default()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            *last = Some((ms, formatted.clone()));
            formatted
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// S109: an instant formatted again, and one after another, read as they did the first
    /// time: the kept string is only ever the last instant's.
    #[test]
    fn s109_a_repeated_instant_formats_as_it_did_the_first_time() {
        let a = 1_795_961_638_488;
        let first = rfc3339(a);
        assert_eq!(first, "2026-11-29T14:13:58.488Z");
        assert_eq!(rfc3339(a), first);
        assert_eq!(rfc3339(a + 1), "2026-11-29T14:13:58.489Z");
        assert_eq!(rfc3339(a), first);
        assert_eq!(rfc3339(Millis::MIN), "1970-01-01T00:00:00.000Z");
    }
}
