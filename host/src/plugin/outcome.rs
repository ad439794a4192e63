//! Turning what a guest did into an [`InvocationResult`](crate::InvocationResult): the failure codes of S14, S83, S84,
//! S110, and the parsing of the JSON texts a guest hands back.

use std::time::Duration;

use serde_json::{Map, Value};

use super::abort::AbortCause;
use super::bindings::weft::plugin::types;
use super::error::one_line;
use super::events::PanicReport;
use super::writer::OutputLimit;
use crate::engine::invocation::{StepFailure, StepOutcome, Tripwire};

/// The code of a failure the guest returned without one (S110).
pub(crate) const STEP_FAILED: &str = "step-failed";

/// How the guest call ended, before interpretation.
pub(crate) enum Ended {
    /// A trap, a WASI exit, or another error out of wasmtime.
    Error(wasmtime::Error),
    /// The host stopped the guest after the abort grace.
    Stopped,
    /// The invocation could not be set up; this is its failure.
    Setup(Box<StepFailure>),
}

/// Everything the host observed about one finished invocation.
pub(crate) struct Observed<R> {
    /// What the guest returned, or how it ended.
    pub(crate) ret: Result<R, Ended>,
    /// The abort cause (deadline or cancel) as it stood when the invocation ended.
    pub(crate) abort: Option<AbortCause>,
    /// The memory limiter refused growth.
    pub(crate) memory_denied: bool,
    /// The output limit a host import hit.
    pub(crate) output_limit: Option<String>,
    /// The panic report the guest printed on stderr.
    pub(crate) panic: Option<PanicReport>,
    /// The first invalid `set-state` patch.
    pub(crate) bad_patch: Option<String>,
    /// The valid patches, in call order.
    pub(crate) patches: Vec<Value>,
}

/// The settings messages refer to.
#[derive(Debug, Clone)]
pub(crate) struct Subject<'a> {
    /// `step `name`` or `tool `name``.
    pub(crate) what: &'a str,
    pub(crate) memory_mib: u64,
    pub(crate) max_output_bytes: u64,
    pub(crate) max_output_mib: u64,
    pub(crate) fuel: Option<u64>,
    pub(crate) deadline: Option<Duration>,
    pub(crate) grace: Duration,
    /// How to raise the deadline, for the timeout message.
    pub(crate) timeout_hint: &'a str,
}

impl Subject<'_> {
    /// The failure of an invocation that was cancelled or overran its deadline.
    pub(crate) fn aborted(&self, cause: AbortCause, stopped: bool) -> StepFailure {
        let stop = if stopped {
            format!(
                "; it was stopped after the abort grace of {} ms",
                self.grace.as_millis()
            )
        } else {
            String::new()
        };
        match cause {
            AbortCause::Cancelled => {
                StepFailure::new("cancelled", format!("{} was cancelled{stop}", self.what))
                    .not_retryable()
            }
            AbortCause::Timeout => {
                let limit = self
                    .deadline
                    .map(|d| format!(" of {} ms", d.as_millis()))
                    .unwrap_or_default();
                StepFailure::new(
                    "timeout",
                    format!(
                        "{} did not finish within its deadline{limit}{stop}{}",
                        self.what, self.timeout_hint
                    ),
                )
            }
        }
    }

    /// The failure for an error out of wasmtime (trap, exit, limit).
    pub(crate) fn error(
        &self,
        err: &wasmtime::Error,
        observed_limit: Option<&str>,
        memory_denied: bool,
        panic: Option<&PanicReport>,
    ) -> StepFailure {
        if let Some(limit) = err.downcast_ref::<OutputLimit>() {
            return StepFailure::new("output-limit", limit.0.clone());
        }
        if let Some(limit) = observed_limit {
            return StepFailure::new("output-limit", limit.to_string());
        }
        let trap = err.downcast_ref::<wasmtime::Trap>().copied();
        if trap == Some(wasmtime::Trap::OutOfFuel) {
            let fuel = self
                .fuel
                .map(|f| format!(" ({f} units)"))
                .unwrap_or_default();
            return StepFailure::new(
                "fuel-exhausted",
                format!(
                    "{} used up its fuel{fuel}; raise limits.fuel in the workflow file",
                    self.what
                ),
            );
        }
        if memory_denied {
            return StepFailure::new(
                "memory-limit",
                format!(
                    "{} needed more memory than limits.memory-mib ({} MiB); raise \
                     limits.memory-mib in the workflow file",
                    self.what, self.memory_mib
                ),
            );
        }
        if let Some(exit) = err.downcast_ref::<wasmtime_wasi::I32Exit>() {
            return StepFailure::new("trap", format!("plugin exited with status {}", exit.0));
        }
        if trap == Some(wasmtime::Trap::Interrupt) {
            // Only the host interrupts, and only once an abort cause exists; if it got here the
            // cause was decided elsewhere, so call it a timeout.
            return self.aborted(AbortCause::Timeout, true);
        }
        // S84: a panic's message is its reason alone; where it happened and the trap it caused
        // go to the host's log (see `Plugin::log_guest_error`).
        let message = match panic.and_then(|p| p.message.as_deref()) {
            Some(reason) if !reason.is_empty() => format!("plugin panicked: {reason}"),
            _ if panic.is_some() => "plugin panicked".to_string(),
            _ => match trap {
                Some(trap) => trap.to_string(),
                None => one_line(err),
            },
        };
        StepFailure::new("trap", single_line(&message))
    }

    /// Parses a JSON text the guest handed back (`done`, `bail`, a suspend payload, a tool
    /// result): `output-limit` when too large, `malformed-result` when not JSON.
    pub(crate) fn json(&self, part: &str, text: &str) -> Result<Value, StepFailure> {
        if text.len() as u64 > self.max_output_bytes {
            return Err(StepFailure::new(
                "output-limit",
                format!(
                    "the {part} of {} is {} bytes, over limits.max-output-mib ({} MiB); raise \
                     limits.max-output-mib in the workflow file",
                    self.what,
                    text.len(),
                    self.max_output_mib
                ),
            ));
        }
        serde_json::from_str(text).map_err(|err| {
            StepFailure::new(
                "malformed-result",
                format!("the {part} of {} is not valid JSON: {err}", self.what),
            )
        })
    }

    /// Maps a returned outcome, parsing its JSON texts.
    pub(crate) fn outcome(&self, outcome: types::Outcome) -> Result<StepOutcome, StepFailure> {
        Ok(match outcome {
            types::Outcome::Done(text) => StepOutcome::Done(self.json("done result", &text)?),
            types::Outcome::Bail(text) => StepOutcome::Bail(self.json("bail result", &text)?),
            types::Outcome::Suspend(s) => StepOutcome::Suspend {
                payload: self.json("suspend payload", &s.payload)?,
                labels: s.labels,
            },
        })
    }
}

/// The failure a guest returned, mapped (S83, S110): default code, details as an object.
pub(crate) fn guest_failure(failure: types::Failure) -> StepFailure {
    let code = failure
        .code
        .filter(|c| !c.trim().is_empty())
        .unwrap_or_else(|| STEP_FAILED.to_string());
    StepFailure {
        message: failure.message,
        code,
        retryable: failure.retryable,
        details: failure.details.map(|text| details_object(&text)),
        tripwire: failure.tripwire.map(|t| Tripwire {
            reason: t.reason,
            retry: t.retry,
            metadata: t
                .metadata
                .map(|text| serde_json::from_str(&text).unwrap_or(Value::String(text))),
            processor_id: t.processor_id,
        }),
    }
}

/// `details` text as a JSON object: a non-object is wrapped as `{"value": ...}`, text that is not
/// JSON as `{"value": "<text>"}`.
pub(crate) fn details_object(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Value::Object(map),
        Ok(other) => wrap(other),
        Err(_) => wrap(Value::String(text.to_string())),
    }
}

fn wrap(value: Value) -> Value {
    let mut map = Map::new();
    map.insert("value".into(), value);
    Value::Object(map)
}

/// The failure of an invalid `set-state` patch (S16).
pub(crate) fn bad_patch_failure(what: &str, why: &str) -> StepFailure {
    StepFailure::new(
        "invalid-state-patch",
        format!("{what}: {why}; a state patch must be a JSON object of top-level keys"),
    )
}

/// The first line of a message, trimmed.
pub(crate) fn single_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn subject() -> Subject<'static> {
        Subject {
            what: "step `s`",
            memory_mib: 64,
            max_output_bytes: 16,
            max_output_mib: 8,
            fuel: Some(1000),
            deadline: Some(Duration::from_millis(100)),
            grace: Duration::from_millis(2000),
            timeout_hint: "",
        }
    }

    fn failure(code: Option<&str>, details: Option<&str>) -> types::Failure {
        types::Failure {
            message: "nope".into(),
            code: code.map(Into::into),
            retryable: false,
            details: details.map(Into::into),
            tripwire: None,
        }
    }

    #[test]
    fn guest_failures_get_a_default_code_and_object_details() {
        let f = guest_failure(failure(None, Some("[1,2]")));
        assert_eq!(f.code, "step-failed");
        assert!(!f.retryable);
        assert_eq!(f.details, Some(json!({"value": [1, 2]})));

        let f = guest_failure(failure(Some("upstream-timeout"), Some("{\"a\":1}")));
        assert_eq!(f.code, "upstream-timeout");
        assert_eq!(f.details, Some(json!({"a": 1})));

        let f = guest_failure(failure(Some(""), Some("not json")));
        assert_eq!(f.code, "step-failed");
        assert_eq!(f.details, Some(json!({"value": "not json"})));
    }

    #[test]
    fn tripwires_are_copied() {
        let mut raw = failure(None, None);
        raw.tripwire = Some(types::Tripwire {
            reason: "guard".into(),
            retry: true,
            metadata: Some("{\"a\":1}".into()),
            processor_id: Some("p1".into()),
        });
        let f = guest_failure(raw);
        assert_eq!(
            f.tripwire,
            Some(Tripwire {
                reason: "guard".into(),
                retry: true,
                metadata: Some(json!({"a": 1})),
                processor_id: Some("p1".into()),
            })
        );
    }

    #[test]
    fn results_are_parsed_or_refused() {
        let s = subject();
        assert_eq!(s.json("done result", "[1]").expect("json"), json!([1]));
        let err = s.json("done result", "{not json").expect_err("malformed");
        assert_eq!(err.code, "malformed-result");
        assert!(
            err.message.contains("step `s`") && err.message.contains("column"),
            "{}",
            err.message
        );
        let err = s
            .json("done result", &format!("\"{}\"", "x".repeat(20)))
            .expect_err("big");
        assert_eq!(err.code, "output-limit");
        assert!(
            err.message.contains("limits.max-output-mib"),
            "{}",
            err.message
        );

        let out = s
            .outcome(types::Outcome::Suspend(types::Suspension {
                payload: "{}".into(),
                labels: vec!["approve".into()],
            }))
            .expect("ok");
        assert_eq!(
            out,
            StepOutcome::Suspend {
                payload: json!({}),
                labels: vec!["approve".into()]
            }
        );
    }

    #[test]
    fn errors_map_to_codes() {
        let s = subject();
        let trap = wasmtime::Error::new(wasmtime::Trap::UnreachableCodeReached)
            .context("error while executing at wasm backtrace:\n    0: 0x1 - foo");
        let f = s.error(&trap, None, false, None);
        assert_eq!(f.code, "trap");
        assert_eq!(
            f.message,
            "wasm trap: wasm `unreachable` instruction executed"
        );
        let panic = PanicReport {
            message: Some("boom".into()),
            location: Some("src/lib.rs:1:2".into()),
        };
        assert_eq!(
            s.error(&trap, None, false, Some(&panic)).message,
            "plugin panicked: boom"
        );
        let unnamed = PanicReport {
            message: None,
            location: Some("src/lib.rs:1:2".into()),
        };
        assert_eq!(
            s.error(&trap, None, false, Some(&unnamed)).message,
            "plugin panicked"
        );
        assert_eq!(s.error(&trap, None, true, None).code, "memory-limit");
        assert_eq!(
            s.error(&trap, Some("too many"), false, None).code,
            "output-limit"
        );

        let fuel = wasmtime::Error::new(wasmtime::Trap::OutOfFuel);
        assert_eq!(s.error(&fuel, None, false, None).code, "fuel-exhausted");

        let exit = wasmtime::Error::new(wasmtime_wasi::I32Exit(3));
        let f = s.error(&exit, None, false, None);
        assert_eq!(
            (f.code.as_str(), f.message.as_str()),
            ("trap", "plugin exited with status 3")
        );

        let limit = wasmtime::Error::new(OutputLimit("over".into()));
        assert_eq!(s.error(&limit, None, false, None).code, "output-limit");

        let other = wasmtime::Error::msg("first line\nsecond line");
        assert_eq!(s.error(&other, None, false, None).message, "first line");
    }

    #[test]
    fn aborts_map_to_timeout_and_cancelled() {
        let s = subject();
        let t = s.aborted(AbortCause::Timeout, true);
        assert_eq!(t.code, "timeout");
        assert!(t.retryable);
        assert!(
            t.message.contains("100 ms") && t.message.contains("2000 ms"),
            "{}",
            t.message
        );
        let c = s.aborted(AbortCause::Cancelled, false);
        assert_eq!(c.code, "cancelled");
        assert!(!c.retryable);
    }

    #[test]
    fn bad_patches_name_the_rule() {
        let f = bad_patch_failure(
            "step `s`",
            "run.set-state was given an array, not a JSON object",
        );
        assert_eq!(f.code, "invalid-state-patch");
    }
}
