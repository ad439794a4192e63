//! Time as the core sees it: instants arrive inside events, never from a clock.

/// Milliseconds since the Unix epoch, UTC. Time only enters the core inside events.
pub type Millis = i64;

/// RFC 3339 in UTC with milliseconds (S109).
pub fn rfc3339(ms: Millis) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
