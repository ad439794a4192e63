//! [`Outcome`]: what a step hands back, and [`IntoOutcome`]: what a step handler may return.

use serde::Serialize;
use serde_json::Value;

use crate::Failure;
use crate::prelude::*;

/// What a step hands back to the host.
///
/// A step handler may return `Result<Outcome, Failure>` to choose, or any serializable value
/// (`Result<Value, Failure>`, `Result<MyOutput, Failure>`), which is [`Outcome::Done`].
///
/// ```
/// use weft_plugin::{Outcome, json};
///
/// let ask = Outcome::suspend(json!({"question": "ship it?"})).label("release");
/// assert_eq!(
///     ask,
///     Outcome::Suspend { payload: json!({"question": "ship it?"}), labels: vec!["release".into()] }
/// );
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Finished: the value is the step's output.
    Done(Value),
    /// Pause the run until someone resumes this step; the step then runs again with
    /// [`Context::resume`](crate::Context::resume) set.
    Suspend {
        /// Shown to whoever resumes the run (e.g. what needs approving).
        payload: Value,
        /// Extra names by which a resume can address this suspension (`weft resume --label`).
        labels: Vec<String>,
    },
    /// End the whole workflow now, successfully, with this value as its result.
    Bail(Value),
}

impl Outcome {
    /// [`Outcome::Done`] with `output`.
    pub fn done(output: impl Into<Value>) -> Self {
        Outcome::Done(output.into())
    }

    /// [`Outcome::Suspend`] with `payload` and no labels yet (add them with
    /// [`Outcome::label`]).
    pub fn suspend(payload: impl Into<Value>) -> Self {
        Outcome::Suspend {
            payload: payload.into(),
            labels: Vec::new(),
        }
    }

    /// [`Outcome::Bail`] with `result`.
    pub fn bail(result: impl Into<Value>) -> Self {
        Outcome::Bail(result.into())
    }

    /// Adds a label to a suspension; on [`Outcome::Done`] and [`Outcome::Bail`] it does
    /// nothing.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        if let Outcome::Suspend { labels, .. } = &mut self {
            labels.push(label.into());
        }
        self
    }

    /// Adds labels to a suspension; on [`Outcome::Done`] and [`Outcome::Bail`] it does nothing.
    pub fn labels<L: Into<String>>(mut self, more: impl IntoIterator<Item = L>) -> Self {
        if let Outcome::Suspend { labels, .. } = &mut self {
            labels.extend(more.into_iter().map(Into::into));
        }
        self
    }
}

/// What a step handler may return in its `Ok`: an [`Outcome`], or any serializable value (the
/// step's output, as [`Outcome::Done`]).
pub trait IntoOutcome {
    /// The outcome; `Err` (code `invalid-output`) when the value cannot be serialized as JSON.
    fn into_outcome(self) -> Result<Outcome, Failure>;
}

impl IntoOutcome for Outcome {
    fn into_outcome(self) -> Result<Outcome, Failure> {
        Ok(self)
    }
}

impl<T: Serialize> IntoOutcome for T {
    fn into_outcome(self) -> Result<Outcome, Failure> {
        to_json(&self, "output").map(Outcome::Done)
    }
}

/// `value` as JSON; a value serde cannot write as JSON (a map with non-string keys, a failing
/// `Serialize`) is a failure with code `invalid-output`.
pub(crate) fn to_json<T: Serialize + ?Sized>(value: &T, what: &str) -> Result<Value, Failure> {
    serde_json::to_value(value).map_err(|e| {
        Failure::new(
            "invalid-output",
            format!("the {what} cannot be written as JSON: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn labels_apply_to_suspensions_only() {
        assert_eq!(
            Outcome::suspend(json!(1)).label("a").labels(["b", "c"]),
            Outcome::Suspend {
                payload: json!(1),
                labels: vec!["a".into(), "b".into(), "c".into()]
            }
        );
        assert_eq!(Outcome::done(2).label("a"), Outcome::Done(json!(2)));
        assert_eq!(Outcome::bail("x").labels(["a"]), Outcome::Bail(json!("x")));
    }

    #[test]
    fn serializable_values_are_done() {
        #[derive(Serialize)]
        struct Out {
            n: u32,
        }
        assert_eq!(
            Out { n: 3 }.into_outcome(),
            Ok(Outcome::Done(json!({"n": 3})))
        );
        assert_eq!(json!([1]).into_outcome(), Ok(Outcome::Done(json!([1]))));
        let bad: std::collections::HashMap<(u8, u8), u8> = [((1, 2), 3)].into_iter().collect();
        let err = bad.into_outcome().err().and_then(|f| f.code);
        assert_eq!(err.as_deref(), Some("invalid-output"));
    }
}
