//! Limits on the values a run stores: their size in bytes (set in
//! [`RuntimeConfig`](crate::driver::RuntimeConfig)) and their depth ([`MAX_VALUE_DEPTH`]),
//! checked where values enter — run inputs, invocation results, state patches, resume data,
//! expression results — so a careless value is refused with the limit it broke instead of
//! bloating the home, or being stored and then unreadable by a JSON reader with the usual
//! recursion limit of 128. The files a workflow names have limits too ([`files`]).

pub(crate) mod files;
pub(crate) mod memory;

use serde::Serialize;
use serde_json::Value;

/// The deepest a value weft accepts may nest: 64 levels of arrays and objects (a scalar is 0
/// deep, `[]` and `{}` are 1, `[[1]]` is 2). What weft prints and serves wraps a value in a few
/// levels more (a run record, an event), well within what JSON readers accept.
pub const MAX_VALUE_DEPTH: usize = 64;

/// One MiB.
pub(crate) const MIB: u64 = 1 << 20;

/// The default of every size limit: 2 MiB, Temporal's limit on one payload. A run stores a
/// value several times over (in its records, its snapshot and the events it emits), so a larger
/// value costs the home many times its size; a deployment that needs larger values raises the
/// limits.
pub(crate) const DEFAULT_MAX_VALUE_BYTES: u64 = 2 * MIB;

/// The default of the most bytes of records one run may write in all: 512 MiB. A loop of a
/// million map iterations writes about 100 MB; a run past this is runaway, not work.
pub(crate) const DEFAULT_MAX_RUN_BYTES: u64 = 512 * MIB;

/// The setting of the one limit on every value a run makes and stores: what an invocation
/// returns and what an expression yields (a `map`'s value, a step's or an agent's input, a
/// sleep's duration). A run keeps the limit it started with ([`crate::engine::RunState`]'s
/// `value_limit`), so it replays and resumes alike under any process's setting.
pub(crate) const VALUES_SETTING: &str = "RuntimeConfig::max_output_bytes / --max-output-mib";

/// The value limit of a run stored before runs kept their own: the 64 MiB expression values
/// were held to then, so such a run replays as it ran.
pub(crate) const STORED_BEFORE_VALUE_LIMIT: u64 = 64 * MIB;

/// `bytes` as a reader takes it in: whole MiB as such (`2 MiB`), else bytes (`1500 bytes`).
pub(crate) fn bytes_text(bytes: u64) -> String {
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// A value over a limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// Too many bytes.
    #[error("{what} is {size} bytes; the limit is {limit} ({setting})")]
    TooLarge {
        /// Which value.
        what: String,
        /// Its size as compact JSON.
        size: u64,
        /// The limit.
        limit: u64,
        /// The setting that raises the limit.
        setting: &'static str,
    },
    /// Nested too deep.
    #[error(
        "{what} nests deeper than {MAX_VALUE_DEPTH} levels of arrays and objects, the most weft accepts"
    )]
    TooDeep {
        /// Which value.
        what: String,
    },
}

/// Whether `value` nests deeper than `max` levels; looks no deeper than `max + 1`.
pub(crate) fn deeper_than(value: &Value, max: usize) -> bool {
    match value {
        Value::Array(items) => max == 0 || items.iter().any(|m| deeper_than(m, max - 1)),
        Value::Object(map) => max == 0 || map.values().any(|m| deeper_than(m, max - 1)),
        _ => false,
    }
}

/// Refuses `value` (named `what`) when it nests deeper than [`MAX_VALUE_DEPTH`].
pub(crate) fn check_depth(what: &str, value: &Value) -> Result<(), LimitError> {
    if deeper_than(value, MAX_VALUE_DEPTH) {
        return Err(LimitError::TooDeep {
            what: what.to_owned(),
        });
    }
    Ok(())
}

/// The message of a value (named `what`) that nests deeper than [`MAX_VALUE_DEPTH`].
pub(crate) fn too_deep(what: &str) -> String {
    LimitError::TooDeep {
        what: what.to_owned(),
    }
    .to_string()
}

/// Counts what is written to it.
struct Counter(u64);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The size of `value` as compact JSON, without building the text.
pub(crate) fn json_len(value: &impl Serialize) -> u64 {
    let mut counter = Counter(0);
    // Writing to a counter cannot fail; a value that does not serialize is counted as far as
    // it got.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

/// A size limit and the setting that raises it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SizeLimit {
    /// The most bytes.
    pub bytes: u64,
    /// Where it is set, as refusals name it.
    pub setting: &'static str,
}

impl SizeLimit {
    /// Refuses a user value that nests too deep ([`check_depth`]) or is over the limit.
    pub(crate) fn check_value(&self, what: &str, value: &Value) -> Result<(), LimitError> {
        check_depth(what, value)?;
        self.check(what, value)
    }

    /// Refuses `value` (named `what`) when it is over the limit.
    pub(crate) fn check(&self, what: &str, value: &impl Serialize) -> Result<(), LimitError> {
        let size = json_len(value);
        if size > self.bytes {
            return Err(LimitError::TooLarge {
                what: what.to_owned(),
                size,
                limit: self.bytes,
                setting: self.setting,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sizes_read_in_mib_when_whole() {
        assert_eq!(bytes_text(2 * MIB), "2 MiB");
        assert_eq!(bytes_text(1500), "1500 bytes");
        assert_eq!(bytes_text(MIB + 1), "1048577 bytes");
    }

    #[test]
    fn sizes_are_compact_json_lengths() {
        let v = json!({"a": [1, 2, "x"]});
        assert_eq!(json_len(&v), v.to_string().len() as u64);
        let limit = SizeLimit {
            bytes: 10,
            setting: "S",
        };
        assert!(limit.check("small", &json!([1])).is_ok());
        let err = limit.check("big", &v).expect_err("over");
        assert_eq!(err.to_string(), "big is 15 bytes; the limit is 10 (S)");
    }

    fn nested(levels: usize) -> Value {
        (0..levels).fold(json!(1), |v, i| {
            if i % 2 == 0 {
                json!([v])
            } else {
                json!({"k": v})
            }
        })
    }

    #[test]
    fn depth_counts_arrays_and_objects() {
        assert!(!deeper_than(&json!(1), 0));
        assert!(deeper_than(&json!([]), 0));
        assert!(!deeper_than(&json!([]), 1));
        assert!(!deeper_than(&json!({"a": [1], "b": 2}), 2));
        assert!(deeper_than(&json!({"a": [[1]], "b": 2}), 2));
        assert!(check_depth("v", &nested(MAX_VALUE_DEPTH)).is_ok());
        let err = check_depth("v", &nested(MAX_VALUE_DEPTH + 1)).expect_err("too deep");
        assert_eq!(
            err.to_string(),
            "v nests deeper than 64 levels of arrays and objects, the most weft accepts"
        );
    }
}
