//! The driver's clock: every timestamp it stamps and every timer it waits for (sleeps, retry
//! waits) goes through one [`Clock`], set in [`RuntimeConfig`](super::RuntimeConfig). The
//! system clock is the default; a [`ManualClock`] moves only when told to, so a test of an
//! hour-long sleep takes no time.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use crate::engine::Millis;

/// A wait for an instant, as a [`Clock`] hands it out.
pub(crate) type Wait = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Where the driver reads the time and waits for instants.
pub trait Clock: Send + Sync + Debug + 'static {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> Millis;
    /// A future that resolves once [`Clock::now_ms`] has reached `at` (at once when it has).
    fn sleep_until(&self, at: Millis) -> Wait;
}

/// The system's wall clock, waited on with tokio timers: the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        // std's count, not chrono's `Utc::now`, which works out a calendar date on the way.
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(since) => Millis::try_from(since.as_millis()).unwrap_or(Millis::MAX),
            Err(before) => {
                Millis::try_from(before.duration().as_millis()).map_or(Millis::MIN, |ms| -ms)
            }
        }
    }

    fn sleep_until(&self, at: Millis) -> Wait {
        let delay = u64::try_from(at.saturating_sub(self.now_ms())).unwrap_or(0);
        Box::pin(async move {
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
        })
    }
}

/// A clock that stands still until [`ManualClock::advance`] or [`ManualClock::set`] moves it;
/// waits whose instant it reaches then end. Clones share one time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<watch::Sender<Millis>>,
}

impl ManualClock {
    /// A clock standing at `now` (milliseconds since the Unix epoch).
    pub fn new(now: Millis) -> Self {
        ManualClock {
            now: Arc::new(watch::Sender::new(now)),
        }
    }

    /// Moves the clock `ms` milliseconds forward.
    pub fn advance(&self, ms: u64) {
        let ms = Millis::try_from(ms).unwrap_or(Millis::MAX);
        self.now.send_modify(|now| *now = now.saturating_add(ms));
    }

    /// Sets the clock to `now`.
    pub fn set(&self, now: Millis) {
        self.now.send_replace(now);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        *self.now.borrow()
    }

    fn sleep_until(&self, at: Millis) -> Wait {
        let mut now = self.now.subscribe();
        Box::pin(async move {
            // An error means every clone of the clock is gone, and with them the runtime that
            // would act on the end of this wait.
            let _ = now.wait_for(|now| *now >= at).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_manual_wait_ends_once_the_clock_reaches_its_instant() {
        let clock = ManualClock::new(1_000);
        let mut wait = clock.sleep_until(1_500);
        clock.advance(499);
        assert_eq!(clock.now_ms(), 1_499);
        assert!(futures::poll!(&mut wait).is_pending());
        clock.advance(1);
        assert!(futures::poll!(&mut wait).is_ready());
        // An instant already passed: at once.
        assert!(futures::poll!(clock.sleep_until(0)).is_ready());
        clock.set(10);
        assert_eq!(clock.now_ms(), 10);
    }
}
