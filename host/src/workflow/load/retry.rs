//! Retry policies: a `retry:` checked, and the policy a call runs with, its own `retry:` over
//! its model's over its file's (S51, S52, S122).

use std::path::Path;

use serde_saphyr::Spanned;

use super::{FileCx, line};
use crate::engine::model::RetryPolicy;
use crate::workflow::raw::RawRetry;
use crate::workflow::{WorkflowError, checks};

/// Refuses a `retry:` policy with numbers outside their range (S51, S52).
pub(super) fn check_retry(path: &Path, r: &Spanned<RawRetry>) -> Result<(), WorkflowError> {
    checks::retry(&r.value)
        .map_err(|(message, fix)| WorkflowError::at(path, line(&r.referenced), message, fix))
}

/// The retry policy of a call of model `model` (a model step, an agent's model calls): the
/// model's `retry:` over the file's, `own` over both (S122).
pub(super) fn retry_under_model(model: &str, own: Option<&RawRetry>, fcx: &FileCx) -> RetryPolicy {
    let model_retry = fcx
        .parsed
        .raw
        .models
        .get(model)
        .and_then(|m| m.value.retry.as_ref())
        .map(|r| overlay_retry(&fcx.retry, &r.value));
    merge_retry(model_retry.as_ref().unwrap_or(&fcx.retry), own)
}

/// `own`'s fields where it has them, else `default`'s.
fn overlay_retry(default: &RawRetry, own: &RawRetry) -> RawRetry {
    RawRetry {
        attempts: own.attempts.or(default.attempts),
        delay_ms: own.delay_ms.or(default.delay_ms),
        backoff: own.backoff.or(default.backoff),
        max_delay_ms: own.max_delay_ms.or(default.max_delay_ms),
    }
}

/// The retry policy of `own` over `default`, each field from the first that has it, else
/// weft's default; at least one attempt.
pub(super) fn merge_retry(default: &RawRetry, own: Option<&RawRetry>) -> RetryPolicy {
    let base = RetryPolicy::default();
    let pick = |f: fn(&RawRetry) -> Option<u64>| own.and_then(f).or_else(|| f(default));
    RetryPolicy {
        attempts: own
            .and_then(|r| r.attempts)
            .or(default.attempts)
            .unwrap_or(base.attempts)
            .max(1),
        delay_ms: pick(|r| r.delay_ms).unwrap_or(base.delay_ms),
        backoff: own
            .and_then(|r| r.backoff)
            .or(default.backoff)
            .unwrap_or(base.backoff),
        max_delay_ms: pick(|r| r.max_delay_ms),
    }
}
