//! The driver's side of the value limits ([`crate::limits`]): an invocation's result is checked
//! (size, against the run's own value limit, and depth) as it arrives, and the state it leaves behind before the transition is
//! stored. A step over a limit fails with [`OUTPUT_LIMIT`], never retried, and its patches are
//! dropped.

use crate::engine::RunState;
use crate::engine::invocation::{InvocationResult, StepFailure, StepOutcome};
use crate::limits::{LimitError, SizeLimit, VALUES_SETTING, check_depth, json_len};

/// The code of a step whose result or state breaks a limit; the plugin host uses it for results
/// over a plugin's own `limits.max-output-mib` too.
pub(super) const OUTPUT_LIMIT: &str = "output-limit";

/// A failed result saying why.
pub(super) fn over_limit(path: &str, e: &LimitError) -> InvocationResult {
    InvocationResult {
        outcome: Err(StepFailure::new(OUTPUT_LIMIT, format!("step {path}: {e}")).not_retryable()),
        patches: Vec::new(),
    }
}

/// The first value of `result` over the run's value limit of `bytes`, if any.
fn check(result: &InvocationResult, bytes: u64) -> Result<(), LimitError> {
    let limit = SizeLimit {
        bytes,
        setting: VALUES_SETTING,
    };
    match &result.outcome {
        Ok(StepOutcome::Done(v)) => limit.check_value("its output", v)?,
        Ok(StepOutcome::Suspend { payload, labels }) => {
            limit.check_value("its suspend payload", payload)?;
            limit.check("its labels", labels)?;
        }
        Ok(StepOutcome::Bail(v)) => limit.check_value("its bail value", v)?,
        Err(f) => {
            if let Some(details) = &f.details {
                check_depth("its failure details", details)?;
            }
            if let Some(metadata) = f.tripwire.as_ref().and_then(|t| t.metadata.as_ref()) {
                check_depth("its tripwire metadata", metadata)?;
            }
            limit.check("its failure", f)?;
        }
    }
    for (i, patch) in result.patches.iter().enumerate() {
        limit.check_value(&format!("its state patch {}", i + 1), patch)?;
    }
    Ok(())
}

/// Replaces `result` by an `output-limit` failure when a value in it is over the run's value
/// limit of `bytes` ([`RunState::value_limit`]) or too deep.
pub(super) fn enforce(result: &mut InvocationResult, path: &str, bytes: u64) {
    if let Err(e) = check(result, bytes) {
        *result = over_limit(path, &e);
    }
}

/// The size of the largest workflow-file state of `state`, in bytes.
pub(super) fn largest_state(state: &RunState) -> u64 {
    state
        .files
        .values()
        .map(|f| json_len(&f.state))
        .max()
        .unwrap_or(0)
}
