//! The `weft:plugin/log` import: log lines as events, counted against `limits.max-events`.

use wasmtime::Result;

use super::bindings::weft::plugin::log;
use super::io::LogLevel;
use super::state::StoreState;
use super::writer::limit_trap;

impl log::Host for StoreState {
    fn log(&mut self, level: log::Level, message: String) -> Result<()> {
        let level = match level {
            log::Level::Trace => LogLevel::Trace,
            log::Level::Debug => LogLevel::Debug,
            log::Level::Info => LogLevel::Info,
            log::Level::Warn => LogLevel::Warn,
            log::Level::Error => LogLevel::Error,
        };
        self.out.log(level, message).map_err(limit_trap)
    }
}
