//! Rules on single values of a workflow file that serde's types do not express: id syntax,
//! retry numbers, and the shape and range of a plugin's `limits:` and `grants:`.

use serde_json::Value;

use super::raw::RawRetry;
use crate::plugin::Sandbox;

/// The largest `retry.delay-ms` and `retry.max-delay-ms`: 30 days.
pub(crate) const MAX_RETRY_DELAY_MS: u64 = 30 * 24 * 60 * 60 * 1000;

/// The most `retry.attempts`: a step that fails at once with no delay is invoked this many
/// times at most, so a careless count cannot have one run write without end (issue 53).
pub(crate) const MAX_RETRY_ATTEMPTS: u32 = 1_000;

/// The most `max-iterations` of a loop: a loop of a million iterations writes about 100 MB of
/// records; a larger count is a runaway guard in name only (issue 53).
pub(crate) const MAX_LOOP_ITERATIONS: u32 = 1_000_000;

/// The largest `limits.memory-mib` and `limits.max-output-mib`: 64 GiB.
pub(crate) const MAX_LIMIT_MIB: u64 = 65_536;

/// Whether `id` is a valid workflow, entry or arm id: `[a-z0-9-_]+`.
pub(super) fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// What is wrong with a `retry:` policy, and how to fix it.
pub(super) fn retry(r: &RawRetry) -> Result<(), (String, &'static str)> {
    if r.attempts == Some(0) {
        return Err((
            "retry.attempts is 0".into(),
            "attempts counts invocations, the first included: use 1 for no retry",
        ));
    }
    if let Some(n) = r.attempts
        && n > MAX_RETRY_ATTEMPTS
    {
        return Err((
            format!("retry.attempts is {n}; at most {MAX_RETRY_ATTEMPTS} are allowed"),
            "use fewer attempts and a delay (`delay-ms`, `backoff`) to wait longer between them",
        ));
    }
    if let Some(b) = r.backoff
        && !(b.is_finite() && b >= 1.0)
    {
        return Err((
            format!("retry.backoff is {b}; it must be a finite number of at least 1"),
            "write e.g. `backoff: 2.0` (each wait doubles) or `backoff: 1.0` (equal waits)",
        ));
    }
    for (name, value) in [("delay-ms", r.delay_ms), ("max-delay-ms", r.max_delay_ms)] {
        if let Some(ms) = value
            && ms > MAX_RETRY_DELAY_MS
        {
            return Err((
                format!("retry.{name} is {ms}; at most {MAX_RETRY_DELAY_MS} (30 days) is allowed"),
                "use a shorter wait; `max-delay-ms` caps waits that grow by `backoff`",
            ));
        }
    }
    Ok(())
}

/// What is wrong with the value of `grants.env` variable `name`: a string, or a mapping
/// `{from-host: NAME}` naming a variable of the host's environment.
fn env_value(name: &str, value: &Value) -> Result<(), String> {
    match value {
        Value::String(_) => Ok(()),
        Value::Object(m) if m.len() == 1 && m.get("from-host").is_some_and(Value::is_string) => {
            Ok(())
        }
        other => Err(format!(
            "`grants.env` `{name}` must be a string, or `{{ from-host: NAME }}` to take the \
             host's variable NAME when the step runs; it is {}",
            match other {
                Value::Object(_) => "a mapping of other keys".to_owned(),
                other => kind(other).to_owned(),
            }
        )),
    }
}

/// Which part of a plugin declaration a refusal is about.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Part {
    /// `limits:`.
    Limits,
    /// `grants:`.
    Grants,
}

/// What is wrong with the shape of a plugin's `limits:` and `grants:` as written (before serde
/// reads them: serde would read a list as a struct's fields in order).
pub(super) fn sandbox_shape(
    limits: Option<&Value>,
    grants: Option<&Value>,
) -> Result<(), (String, Part)> {
    shape(limits, grants).map_err(|(m, in_limits)| {
        (
            m,
            if in_limits {
                Part::Limits
            } else {
                Part::Grants
            },
        )
    })
}

fn shape(limits: Option<&Value>, grants: Option<&Value>) -> Result<(), (String, bool)> {
    let mapping = |v: Option<&Value>, what: &str| match v {
        None | Some(Value::Object(_)) => Ok(()),
        Some(other) => Err(format!(
            "`{what}` must be a mapping (`key: value` pairs), not {}",
            kind(other)
        )),
    };
    mapping(limits, "limits").map_err(|m| (m, true))?;
    let mapping = |v: Option<&Value>, what: &str| mapping(v, what).map_err(|m| (m, false));
    mapping(grants, "grants")?;
    let Some(grants) = grants else {
        return Ok(());
    };
    mapping(grants.get("env"), "grants.env")?;
    if let Some(Value::Object(env)) = grants.get("env") {
        for (name, value) in env {
            env_value(name, value).map_err(|m| (m, false))?;
        }
    }
    for (list, what) in [("dirs", "grants.dirs"), ("http", "grants.http")] {
        match grants.get(list) {
            None | Some(Value::Array(_)) => {}
            Some(other) => {
                return Err((
                    format!("`{what}` must be a list, not {}", kind(other)),
                    false,
                ));
            }
        }
    }
    for dir in grants
        .get("dirs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        mapping(Some(dir), "grants.dirs[]")?;
    }
    Ok(())
}

/// What is wrong with a sandbox's values beyond what [`Sandbox::check`] covers.
pub(super) fn sandbox_values(sandbox: &Sandbox) -> Result<(), (String, Part)> {
    let limits = &sandbox.limits;
    for (name, value) in [
        ("memory-mib", limits.memory_mib),
        ("max-output-mib", limits.max_output_mib),
    ] {
        if let Some(mib) = value
            && mib > MAX_LIMIT_MIB
        {
            return Err((
                format!("limits.{name} is {mib}; at most {MAX_LIMIT_MIB} (64 GiB) is allowed"),
                Part::Limits,
            ));
        }
    }
    for dir in &sandbox.grants.dirs {
        let guest = &dir.guest;
        if !guest.starts_with('/') || guest.split('/').any(|part| part == "..") {
            return Err((
                format!(
                    "grants.dirs guest path `{guest}` must be absolute and must not contain \
                     `..`: write e.g. `/data`"
                ),
                Part::Grants,
            ));
        }
    }
    Ok(())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_are_lowercase_ascii_digits_dashes_and_underscores() {
        for good in ["a", "step-1", "snake_case", "0"] {
            assert!(valid_id(good), "{good}");
        }
        for bad in ["", "Step", "a b", "a/b", "a.b", "é", "ａ"] {
            assert!(!valid_id(bad), "{bad}");
        }
    }

    #[test]
    fn s51_retry_numbers_outside_their_range_are_refused() {
        let ok = RawRetry {
            attempts: Some(3),
            delay_ms: Some(100),
            backoff: Some(2.0),
            max_delay_ms: Some(5000),
        };
        assert!(retry(&ok).is_ok());
        let most = RawRetry {
            attempts: Some(MAX_RETRY_ATTEMPTS),
            ..ok.clone()
        };
        assert!(retry(&most).is_ok());
        for bad in [
            RawRetry {
                attempts: Some(MAX_RETRY_ATTEMPTS + 1),
                ..ok.clone()
            },
            RawRetry {
                attempts: Some(0),
                ..ok.clone()
            },
            RawRetry {
                backoff: Some(f64::NAN),
                ..ok.clone()
            },
            RawRetry {
                backoff: Some(f64::INFINITY),
                ..ok.clone()
            },
            RawRetry {
                backoff: Some(0.5),
                ..ok.clone()
            },
            RawRetry {
                delay_ms: Some(u64::MAX),
                ..ok.clone()
            },
            RawRetry {
                max_delay_ms: Some(MAX_RETRY_DELAY_MS + 1),
                ..ok.clone()
            },
        ] {
            assert!(retry(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn s52_waits_for_huge_attempt_counts_saturate_instead_of_overflowing() {
        use crate::engine::model::RetryPolicy;
        let p = RetryPolicy {
            attempts: u32::MAX,
            delay_ms: MAX_RETRY_DELAY_MS,
            backoff: f64::MAX,
            max_delay_ms: None,
        };
        assert_eq!(p.delay_before(u32::MAX), u64::MAX);
        let capped = RetryPolicy {
            max_delay_ms: Some(MAX_RETRY_DELAY_MS),
            ..p
        };
        assert_eq!(capped.delay_before(u32::MAX), MAX_RETRY_DELAY_MS);
    }

    #[test]
    fn limits_and_grants_must_be_mappings() {
        assert!(sandbox_shape(Some(&json!({"memory-mib": 1})), None).is_ok());
        assert!(sandbox_shape(Some(&json!([1, 2])), None).is_err());
        assert!(sandbox_shape(None, Some(&json!("x"))).is_err());
        assert!(sandbox_shape(None, Some(&json!({"dirs": [["/a", "/b"]]}))).is_err());
        assert!(sandbox_shape(None, Some(&json!({"env": ["A"]}))).is_err());
    }
}
