//! How model calls are bounded host-wide ([`ModelConfig`], `RuntimeConfig::models`): the
//! deadline of a call whose step sets none, the longest line of a provider's event stream, and
//! the most streamed pieces one call may emit.

use std::time::Duration;

use crate::plugin::DEFAULT_MAX_EVENTS;

/// Default [`ModelConfig::timeout`], in milliseconds: 10 minutes.
pub(crate) const DEFAULT_MODEL_TIMEOUT_MS: u64 = 600_000;

/// Default [`ModelConfig::max_line_bytes`], in KiB: 1 MiB.
pub(crate) const DEFAULT_MODEL_MAX_LINE_KIB: usize = 1024;

/// Default [`ModelConfig::max_events`]: the plugins' `limits.max-events`.
pub(crate) const DEFAULT_MODEL_MAX_EVENTS: u64 = DEFAULT_MAX_EVENTS;

/// The settings of every model call a runtime makes (`RuntimeConfig::models`).
///
/// ```
/// use std::time::Duration;
/// use weft::RuntimeConfig;
///
/// let mut config = RuntimeConfig::default();
/// config.models.timeout = Duration::from_secs(120);
/// assert_eq!(config.models.max_events, 100_000);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelConfig {
    /// The deadline of a model call whose step (or agent) sets no `timeout-ms` (default 10
    /// minutes, as the providers' own SDKs wait). Past it the call fails `timeout`, retried by
    /// its `retry:` policy.
    pub timeout: Duration,
    /// The longest line, in bytes, of a provider's event stream, and the most data one event
    /// may gather (default 1 MiB; a provider's lines are a few KiB). A longer one fails the
    /// call with `model-malformed` before it is read on.
    pub max_line_bytes: usize,
    /// The most `step-output` events (text pieces and tool-call fragments) one model call may
    /// emit (default 100 000, the plugins' `limits.max-events`). One more fails the call with
    /// `output-limit`, not retried.
    pub max_events: u64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            timeout: Duration::from_millis(DEFAULT_MODEL_TIMEOUT_MS),
            max_line_bytes: DEFAULT_MODEL_MAX_LINE_KIB * 1024,
            max_events: DEFAULT_MODEL_MAX_EVENTS,
        }
    }
}
