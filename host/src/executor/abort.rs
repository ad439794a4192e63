//! How an invocation is told to stop: [`AbortHandle`] (a cancel, S77, or a deadline, S15), and
//! [`until_aborted`], which runs an attempt until it ends, is aborted or is past its deadline.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::lock;
use crate::engine::invocation::StepFailure;

/// Cooperative cancellation of invocations, shared by cheap clones.
///
/// [`cancel`](Self::cancel) sets it aborted with reason `cancelled`: running invocations see
/// `abort.is-aborted` true, and are stopped after the host's abort grace (S77). A
/// [`child`](Self::child) is aborted when its parent is, and can also be aborted on its own.
/// The host never writes to the handle it is given: an invocation whose deadline passed sees
/// reason `timeout` through its own view.
#[derive(Debug, Clone, Default)]
pub struct AbortHandle {
    inner: Arc<AbortInner>,
}

#[derive(Debug, Default)]
struct AbortInner {
    state: Mutex<Option<(String, Instant)>>,
    notify: Notify,
    parent: Option<AbortHandle>,
}

impl AbortHandle {
    /// A handle that is not aborted.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new handle that is aborted when `self` is, or when aborted itself.
    pub fn child(&self) -> Self {
        Self {
            inner: Arc::new(AbortInner {
                state: Mutex::new(None),
                notify: Notify::new(),
                parent: Some(self.clone()),
            }),
        }
    }

    /// Aborts with reason `cancelled`.
    pub fn cancel(&self) {
        self.abort("cancelled");
    }

    /// Aborts with `reason`; the first reason given stays.
    pub fn abort(&self, reason: impl Into<String>) {
        let mut state = lock(&self.inner.state);
        if state.is_none() {
            *state = Some((reason.into(), Instant::now()));
            drop(state);
            self.inner.notify.notify_waiters();
        }
    }

    /// True once aborted (or the parent is).
    pub fn is_aborted(&self) -> bool {
        self.state().is_some()
    }

    /// Why it was aborted: the earliest reason of this handle and its ancestors.
    pub fn reason(&self) -> Option<String> {
        self.state().map(|(reason, _)| reason)
    }

    /// When it was aborted.
    pub fn aborted_at(&self) -> Option<Instant> {
        self.state().map(|(_, at)| at)
    }

    fn state(&self) -> Option<(String, Instant)> {
        let own = lock(&self.inner.state).clone();
        let parent = self.inner.parent.as_ref().and_then(AbortHandle::state);
        match (own, parent) {
            (Some(a), Some(b)) => Some(if b.1 < a.1 { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    /// Resolves once aborted.
    pub async fn aborted(&self) {
        self.wait().await;
    }

    fn wait(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            loop {
                let notified = self.inner.notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if lock(&self.inner.state).is_some() {
                    return;
                }
                match &self.inner.parent {
                    Some(parent) => {
                        tokio::select! {
                            _ = &mut notified => {}
                            _ = parent.wait() => return,
                        }
                    }
                    None => notified.await,
                }
            }
        })
    }
}

/// Runs `work`, an attempt of an executor whose future can simply be dropped, until it ends, its
/// `abort` fires (a `cancelled` failure, `cancelled` the message) or `deadline` passes (S15: the
/// abort gets reason `timeout`, and the attempt fails `timeout` with `late`, then ` N ms`).
#[allow(
    clippy::result_large_err,
    reason = "StepFailure is the contract's failure type, passed on as it came; failures are the cold path"
)]
pub(crate) async fn until_aborted<T>(
    work: impl Future<Output = Result<T, StepFailure>>,
    abort: &AbortHandle,
    deadline: Option<Duration>,
    cancelled: &str,
    late: &str,
) -> Result<T, StepFailure> {
    let past_deadline = async {
        match deadline {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = work => r,
        () = abort.aborted() => Err(StepFailure::new("cancelled", cancelled).not_retryable()),
        () = past_deadline => {
            abort.abort("timeout");
            let ms = deadline.map(|d| d.as_millis()).unwrap_or_default();
            Err(StepFailure::new("timeout", format!("{late} {ms} ms")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn abort_reasons_and_children() {
        let run = AbortHandle::new();
        let step = run.child();
        assert!(!step.is_aborted());
        step.abort("timeout");
        assert_eq!(step.reason().as_deref(), Some("timeout"));
        assert!(!run.is_aborted(), "a child never aborts its parent");
        run.cancel();
        assert_eq!(
            step.reason().as_deref(),
            Some("timeout"),
            "earliest reason stays"
        );
        let other = run.child();
        assert_eq!(other.reason().as_deref(), Some("cancelled"));
        other.aborted().await;
    }

    #[tokio::test]
    async fn aborted_wakes_waiters_of_children() {
        let run = AbortHandle::new();
        let step = run.child();
        let waiter = tokio::spawn({
            let step = step.clone();
            async move { step.aborted().await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        run.cancel();
        tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .expect("woken")
            .expect("task ok");
    }
}
