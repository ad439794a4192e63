//! [`Failure`]: why a step or tool did not succeed, and [`Tripwire`]: a guardrail's refusal.

use core::fmt;

use crate::prelude::*;

use serde_json::Value;

/// The code of the failure a panic in a step or tool becomes (when the guest can unwind; see
/// the crate documentation).
pub const EXCEPTION: &str = "exception";

/// The code [`Failure::tripwire`] gives.
pub const TRIPWIRE: &str = "tripwire";

/// Why a step or tool failed: the `Err` of every handler.
///
/// Built with [`Failure::new`] and refined with its builder methods; the fields are public so
/// that tests can look at them.
///
/// ```
/// use weft_plugin::{Failure, json};
///
/// let failure = Failure::new("upstream-timeout", "the quote service did not answer")
///     .retryable()
///     .details(json!({"service": "quotes"}));
/// assert!(failure.retryable);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// What went wrong, for people (one line is best).
    pub message: String,
    /// A machine-readable code, e.g. `invalid-input` or `upstream-timeout`.
    pub code: Option<String>,
    /// Whether the host may retry (as the entry's retry policy allows). False unless
    /// [`Failure::retryable`] says otherwise.
    pub retryable: bool,
    /// Extra structured details (a JSON object is best), kept in the run record.
    pub details: Option<Value>,
    /// Set when a guardrail tripped: the run then ends with status `tripwire`. (Boxed, so
    /// that `Result<_, Failure>` stays small.)
    pub tripwire: Option<Box<Tripwire>>,
}

/// A guardrail's refusal, carried up to the run's result (the run's status becomes
/// `tripwire`). Made by [`Failure::tripwire`].
#[derive(Debug, Clone, PartialEq)]
pub struct Tripwire {
    /// Why it tripped.
    pub reason: String,
    /// The caller may try again with changed input.
    pub retry: bool,
    /// Extra data about the refusal.
    pub metadata: Option<Value>,
    /// Which guardrail tripped.
    pub processor_id: Option<String>,
}

impl Failure {
    /// A failure with a machine-readable `code` and a `message`; not retryable.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code: Some(code.into()),
            retryable: false,
            details: None,
            tripwire: None,
        }
    }

    /// A failure with code `invalid-input`: the input (or a tool's arguments) cannot be used.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Failure::new("invalid-input", message)
    }

    /// A failure with code `invalid-config`: the step's or tool's config cannot be used.
    pub fn invalid_config(message: impl Into<String>) -> Self {
        Failure::new("invalid-config", message)
    }

    /// A guardrail's refusal: code `tripwire`, the reason as message and as the tripwire's
    /// reason. The run ends with status `tripwire` (not `failed`), whatever the retry policy.
    ///
    /// ```
    /// use weft_plugin::{Failure, json};
    ///
    /// let refusal = Failure::tripwire("the text names a forbidden word")
    ///     .metadata(json!({"word": "forbidden"}))
    ///     .processor("word-filter");
    /// assert_eq!(refusal.code.as_deref(), Some("tripwire"));
    /// ```
    pub fn tripwire(reason: impl Into<String>) -> Self {
        let reason = reason.into();
        Failure {
            message: reason.clone(),
            code: Some(TRIPWIRE.to_string()),
            retryable: false,
            details: None,
            tripwire: Some(Box::new(Tripwire {
                reason,
                retry: false,
                metadata: None,
                processor_id: None,
            })),
        }
    }

    /// Lets the host retry this failure (as far as the entry's retry policy allows).
    pub fn retryable(mut self) -> Self {
        self.retryable = true;
        self
    }

    /// Attaches structured details (a JSON object is best).
    pub fn details(mut self, details: impl Into<Value>) -> Self {
        self.details = Some(details.into());
        self
    }

    /// Sets the tripwire's metadata. On a failure that is not a tripwire yet, this makes it one
    /// whose reason is the message.
    pub fn metadata(mut self, metadata: impl Into<Value>) -> Self {
        self.tripwire_mut().metadata = Some(metadata.into());
        self
    }

    /// Marks the tripwire as one the caller may retry with changed input. On a failure that is
    /// not a tripwire yet, this makes it one whose reason is the message.
    pub fn retry_allowed(mut self) -> Self {
        self.tripwire_mut().retry = true;
        self
    }

    /// Names the guardrail that tripped. On a failure that is not a tripwire yet, this makes it
    /// one whose reason is the message.
    pub fn processor(mut self, id: impl Into<String>) -> Self {
        self.tripwire_mut().processor_id = Some(id.into());
        self
    }

    /// The failure a panic with `message` becomes: code `exception`, details
    /// `{"type": "panic"}`, not retryable.
    pub fn exception(message: impl Into<String>) -> Self {
        Failure::new(EXCEPTION, message).details(serde_json::json!({"type": "panic"}))
    }

    /// The tripwire, made from the message if there is none yet.
    fn tripwire_mut(&mut self) -> &mut Tripwire {
        let message = &self.message;
        self.tripwire.get_or_insert_with(|| {
            Box::new(Tripwire {
                reason: message.clone(),
                retry: false,
                metadata: None,
                processor_id: None,
            })
        })
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.code {
            Some(code) => write!(f, "{code}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl core::error::Error for Failure {}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn new_failures_are_not_retryable_until_told() {
        let f = Failure::new("c", "m");
        assert!(!f.retryable);
        assert!(f.tripwire.is_none());
        let f = f.retryable().details(json!({"a": 1}));
        assert!(f.retryable);
        assert_eq!(f.details, Some(json!({"a": 1})));
        assert_eq!(f.to_string(), "c: m");
    }

    #[test]
    fn tripwire_settings_make_a_tripwire() {
        let t = Failure::tripwire("no")
            .metadata(json!({"w": 1}))
            .retry_allowed()
            .processor("p");
        assert_eq!(t.code.as_deref(), Some(TRIPWIRE));
        assert_eq!(
            t.tripwire,
            Some(Box::new(Tripwire {
                reason: "no".into(),
                retry: true,
                metadata: Some(json!({"w": 1})),
                processor_id: Some("p".into()),
            }))
        );
        let made = Failure::new("c", "why").metadata(json!(1));
        assert_eq!(made.tripwire.map(|t| t.reason), Some("why".into()));
    }
}
