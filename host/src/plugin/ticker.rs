//! The epoch ticker: a thread that advances the engines' epochs, so deadlines are noticed and a
//! busy guest yields to the tokio runtime.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use super::engine::Engines;
use super::error::PluginError;

/// Advances the engines' epochs every `tick` on a thread of its own until dropped.
pub(crate) struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    /// Starts the thread; it holds `engines` until the ticker is dropped.
    pub(crate) fn start(engines: Arc<Engines>, tick: Duration) -> Result<Self, PluginError> {
        if tick.is_zero() {
            return Err(PluginError::Engine {
                message: "epoch_tick must be greater than zero".into(),
            });
        }
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name("weft-epoch".into())
            .spawn({
                let stop = stop.clone();
                move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::park_timeout(tick);
                        engines.tick();
                    }
                }
            })
            .map_err(|e| PluginError::Engine {
                message: format!("cannot start the epoch thread: {e}"),
            })?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}
