//! Deadline and cancellation as the guest and the host see them: the `weft:plugin/abort`
//! import, and the moment the host stops a guest that did not return.

use std::time::{Duration, Instant};

use wasmtime::Result;

use super::bindings::weft::plugin::abort;
use super::state::StoreState;
use crate::executor::AbortHandle;

/// Why an invocation is aborted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AbortCause {
    /// The caller's handle was aborted.
    Cancelled,
    /// The attempt's deadline passed.
    Timeout,
}

/// The caller's abort handle combined with this attempt's deadline.
#[derive(Debug, Clone)]
pub(crate) struct AbortView {
    pub(crate) handle: AbortHandle,
    pub(crate) deadline_at: Option<Instant>,
    pub(crate) grace: Duration,
}

impl AbortView {
    /// What aborted the invocation first, and when, if anything has by `now`.
    pub(crate) fn cause(&self, now: Instant) -> Option<(AbortCause, Instant)> {
        let cancelled = self
            .handle
            .aborted_at()
            .map(|at| (AbortCause::Cancelled, at));
        let timeout = self
            .deadline_at
            .filter(|at| *at <= now)
            .map(|at| (AbortCause::Timeout, at));
        match (cancelled, timeout) {
            (Some(c), Some(t)) => Some(if t.1 < c.1 { t } else { c }),
            (c, t) => c.or(t),
        }
    }

    /// The reason the guest sees through `abort.reason`.
    pub(crate) fn reason(&self, now: Instant) -> Option<String> {
        self.cause(now).map(|(cause, _)| match cause {
            AbortCause::Cancelled => self.handle.reason().unwrap_or_else(|| "cancelled".into()),
            AbortCause::Timeout => "timeout".into(),
        })
    }

    /// True once the grace after the abort has run out: the guest must be stopped.
    pub(crate) fn must_stop(&self, now: Instant) -> bool {
        self.cause(now)
            .and_then(|(_, at)| at.checked_add(self.grace))
            .is_some_and(|stop_at| now >= stop_at)
    }

    /// The earliest instant at which the guest may have to be stopped, as things stand.
    pub(crate) fn next_stop(&self) -> Option<Instant> {
        let deadline = self.deadline_at.and_then(|at| at.checked_add(self.grace));
        let cancel = self
            .handle
            .aborted_at()
            .and_then(|at| at.checked_add(self.grace));
        match (deadline, cancel) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl abort::Host for StoreState {
    fn is_aborted(&mut self) -> Result<bool> {
        Ok(self.abort.cause(Instant::now()).is_some())
    }

    fn reason(&mut self) -> Result<Option<String>> {
        Ok(self.abort.reason(Instant::now()))
    }
}

/// Resolves as soon as the invocation is aborted: cancelled, or past its deadline (no grace:
/// for an invocation whose guest has not started).
pub(crate) async fn aborted(view: &AbortView) {
    let deadline = async {
        match view.deadline_at {
            Some(at) => tokio::time::sleep_until(at.into()).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = deadline => {}
        () = view.handle.aborted() => {}
    }
}

/// Resolves when the guest must be stopped: the abort grace after the deadline or the cancel.
pub(crate) async fn hard_stop(view: AbortView) {
    loop {
        let now = Instant::now();
        if view.must_stop(now) {
            return;
        }
        let next = view.next_stop();
        let timer = async {
            match next {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        if view.handle.is_aborted() {
            timer.await;
        } else {
            tokio::select! {
                () = timer => {}
                () = view.handle.aborted() => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abort_view_prefers_the_earliest_cause_and_waits_for_the_grace() {
        let handle = AbortHandle::new();
        let start = Instant::now();
        let view = AbortView {
            handle: handle.clone(),
            deadline_at: Some(start + Duration::from_millis(50)),
            grace: Duration::from_millis(100),
        };
        assert_eq!(view.cause(start), None);
        let later = start + Duration::from_millis(60);
        assert_eq!(view.reason(later).as_deref(), Some("timeout"));
        assert!(!view.must_stop(later));
        assert!(view.must_stop(start + Duration::from_millis(151)));
        handle.cancel();
        // The cancel (just now) came before the deadline (start + 50 ms): it is the cause.
        let after_both = Instant::now() + Duration::from_millis(60);
        assert_eq!(view.reason(after_both).as_deref(), Some("cancelled"));
        let no_deadline = AbortView {
            deadline_at: None,
            ..view
        };
        assert_eq!(
            no_deadline.reason(Instant::now()).as_deref(),
            Some("cancelled")
        );
    }
}
