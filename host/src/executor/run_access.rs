//! What an invocation may read of its run (S8): [`RunAccess`], and [`NoRun`] for a call outside
//! any run.

use serde_json::Value;

/// Read access to the run, for the `run` host interface.
pub trait RunAccess: Send + Sync {
    /// The workflow's input (`run.init-data`).
    fn init_data(&self) -> Value;
    /// The output of a step of this run that succeeded, by id or path (`run.step-result`).
    fn step_result(&self, step: &str) -> Option<Value>;
}

/// A run with no input and no step results.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoRun;

impl RunAccess for NoRun {
    fn init_data(&self) -> Value {
        Value::Null
    }
    fn step_result(&self, _step: &str) -> Option<Value> {
        None
    }
}
