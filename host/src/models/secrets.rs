//! What a model call must never let out: the API key and the values of the model's
//! `headers:`. A provider may repeat them in its error ("Incorrect API key provided: sk-..."),
//! and a failure's message is stored in the run's record and events: every one of them is
//! replaced by `[redacted]` before the failure leaves the call.

use crate::engine::invocation::StepFailure;
use crate::engine::model::ModelDef;

/// What replaces a secret.
const REDACTED: &str = "[redacted]";

/// The secrets of one call, longest first (a value holding another is replaced whole).
pub(super) struct Secrets(Vec<String>);

impl Secrets {
    /// The key (when the model has one) and every configured header's value.
    pub(super) fn of(key: Option<&str>, def: &ModelDef) -> Secrets {
        let mut values: Vec<String> = key
            .into_iter()
            .chain(def.headers.values().map(String::as_str))
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .collect();
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        values.dedup();
        Secrets(values)
    }

    /// `text` with every secret replaced.
    fn scrub(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for secret in &self.0 {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), REDACTED);
            }
        }
        text
    }

    /// `failure` with every secret replaced in its message and its details.
    pub(super) fn redact(&self, mut failure: StepFailure) -> StepFailure {
        failure.message = self.scrub(&failure.message);
        if let Some(details) = &failure.details {
            let text = details.to_string();
            let scrubbed = self.scrub(&text);
            if scrubbed != text {
                failure.details = serde_json::from_str(&scrubbed).ok();
            }
        }
        failure
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::ModelApi;

    #[test]
    fn the_key_and_header_values_are_replaced_wherever_they_appear() {
        let def = ModelDef {
            api: ModelApi::OpenaiChat,
            base_url: "http://x/v1".into(),
            model: "m".into(),
            api_key_env: None,
            headers: [
                ("x-org".to_owned(), "org-secret".to_owned()),
                ("x-empty".to_owned(), String::new()),
            ]
            .into_iter()
            .collect(),
        };
        let secrets = Secrets::of(Some("sk-abc"), &def);
        let failure = StepFailure::new(
            "model-auth",
            "bad key Bearer sk-abc for org-secret (sk-abc)",
        )
        .with_details(serde_json::json!({"echo": "sk-abc", "status": 401}));
        let failure = secrets.redact(failure);
        assert_eq!(
            failure.message,
            "bad key Bearer [redacted] for [redacted] ([redacted])"
        );
        assert_eq!(
            failure.details,
            Some(serde_json::json!({"echo": "[redacted]", "status": 401}))
        );
        // Without any secret in it, a failure is as it was.
        let plain = Secrets::of(None, &def).redact(StepFailure::new("x", "answered 401"));
        assert_eq!(plain.message, "answered 401");
    }
}
