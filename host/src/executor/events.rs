//! What an invocation writes as it runs: its events ([`GuestEvent`], at a [`LogLevel`] for log
//! lines), and where they go ([`EventSink`]; [`DiscardEvents`] and [`EventLog`] for tests and
//! small tools).

use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::lock;

/// Level of a guest log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Finest detail.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal information; captured guest stdout.
    Info,
    /// Something odd; captured guest stderr.
    Warn,
    /// Something failed.
    Error,
}

/// One event of a running invocation, delivered in the order the guest made the calls (S111).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "type", content = "event")]
pub enum GuestEvent {
    /// `writer.write(chunk)`: the chunk, parsed; text that is not JSON arrives as a JSON string.
    Output(Value),
    /// `writer.custom(kind, data)`.
    Custom {
        /// The event kind, e.g. `progress`.
        kind: String,
        /// Its data, parsed like a writer chunk.
        data: Value,
    },
    /// `log.log`, or a line the guest wrote to stdout (info) or stderr (warn).
    Log {
        /// The level.
        level: LogLevel,
        /// The message, one line for captured output.
        message: String,
    },
}

/// Receives the events of invocations. Called synchronously, in call order, from the task that
/// runs the guest: keep it quick (push to a channel or a buffer).
pub trait EventSink: Send + Sync {
    /// Takes one event.
    fn emit(&self, event: GuestEvent);
}

/// A sink that drops every event.
#[derive(Debug, Clone, Copy, Default)]
pub struct DiscardEvents;

impl EventSink for DiscardEvents {
    fn emit(&self, _event: GuestEvent) {}
}

/// A sink that keeps every event in memory, for tests and small tools.
#[derive(Debug, Default)]
pub struct EventLog {
    events: Mutex<Vec<GuestEvent>>,
}

impl EventLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of the events so far.
    pub fn events(&self) -> Vec<GuestEvent> {
        lock(&self.events).clone()
    }

    /// Takes the events so far, leaving the log empty.
    pub fn take(&self) -> Vec<GuestEvent> {
        std::mem::take(&mut *lock(&self.events))
    }
}

impl EventSink for EventLog {
    fn emit(&self, event: GuestEvent) {
        lock(&self.events).push(event);
    }
}
