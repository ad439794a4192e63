//! The `weft:plugin/log` import: log lines as events, counted against `limits.max-events`, and
//! stderr bytes from guests without WASI, taken as WASI's stderr.

use wasmtime::Result;

use super::bindings::weft::plugin::log;
use super::events::Stdio;
use super::state::StoreState;
use super::writer::limit_trap;
use crate::executor::LogLevel;

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

    fn stderr_byte(&mut self, byte: u8) -> Result<()> {
        self.out.stdio(Stdio::Stderr, &[byte]);
        Ok(())
    }
}
