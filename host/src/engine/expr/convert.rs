//! JSON (`serde_json`) ⇄ jaq values, with bounds on depth and size.

use serde_json::{Map, Number, Value};

use jaq_json::Val;

pub use crate::limits::MAX_VALUE_DEPTH;

/// How deep an expression's input may nest.
const MAX_INPUT_DEPTH: usize = 512;

/// The expression's input as a jaq value.
pub(super) fn to_val(v: &Value) -> Result<Val, String> {
    to_val_at(v, 0)
}

fn to_val_at(v: &Value, depth: usize) -> Result<Val, String> {
    if depth > MAX_INPUT_DEPTH {
        return Err(format!(
            "the expression's input nests more than {MAX_INPUT_DEPTH} levels deep"
        ));
    }
    Ok(match v {
        Value::Null => Val::Null,
        Value::Bool(b) => Val::Bool(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64().and_then(|i| isize::try_from(i).ok()) {
                Val::from(i)
            } else if let Some(big) = n
                .is_u64()
                .then(|| jaq_json::Num::from_str_radix(&n.to_string(), 10))
                .flatten()
            {
                // Beyond isize: a big integer, as jaq reads such a literal, so that it passes
                // through an expression exactly.
                Val::Num(big)
            } else {
                Val::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::String(s) => Val::from(s.clone()),
        Value::Array(a) => a
            .iter()
            .map(|v| to_val_at(v, depth + 1))
            .collect::<Result<Val, String>>()?,
        Value::Object(o) => {
            let mut m = jaq_json::Map::default();
            for (k, v) in o {
                m.insert(Val::from(k.clone()), to_val_at(v, depth + 1)?);
            }
            Val::obj(m)
        }
    })
}

/// A value the expression yielded, as JSON; refused when deeper than [`MAX_VALUE_DEPTH`] or
/// larger than `limit` bytes of JSON (the run's value limit, counted as the value is built, so
/// an oversized value is never built whole).
pub(super) fn from_val(v: &Val, limit: u64) -> Result<Value, String> {
    let mut size = Size { bytes: 0, limit };
    from_val_at(v, 0, &mut size)
}

/// The bytes of JSON counted so far against a limit.
struct Size {
    bytes: u64,
    limit: u64,
}

impl Size {
    /// Counts `n` more bytes; an error past the limit.
    fn grow(&mut self, n: usize) -> Result<(), String> {
        self.bytes = self.bytes.saturating_add(n as u64);
        if self.bytes > self.limit {
            Err(format!(
                "the expression's value is larger than the limit of {} on each value a run \
                 makes (raise it with {})",
                crate::limits::bytes_text(self.limit),
                crate::limits::VALUES_SETTING
            ))
        } else {
            Ok(())
        }
    }
}

fn from_val_at(v: &Val, depth: usize, bytes: &mut Size) -> Result<Value, String> {
    if matches!(v, Val::Arr(_) | Val::Obj(_)) && depth >= MAX_VALUE_DEPTH {
        return Err(crate::limits::too_deep("the expression's value"));
    }
    Ok(match v {
        Val::Null => {
            bytes.grow(4)?;
            Value::Null
        }
        Val::Bool(b) => {
            bytes.grow(5)?;
            Value::Bool(*b)
        }
        Val::Num(_) => {
            let text = v.to_string();
            bytes.grow(text.len())?;
            match serde_json::from_str::<Number>(&text) {
                Ok(n) => Value::Number(n),
                Err(_) => Value::Null,
            }
        }
        Val::TStr(b) | Val::BStr(b) => {
            bytes.grow(b.len() + 2)?;
            Value::String(String::from_utf8_lossy(b).into_owned())
        }
        Val::Arr(a) => {
            bytes.grow(a.len() + 2)?;
            let mut out = Vec::with_capacity(a.len());
            for item in a.iter() {
                out.push(from_val_at(item, depth + 1, bytes)?);
            }
            Value::Array(out)
        }
        Val::Obj(o) => {
            bytes.grow(o.len() * 2 + 2)?;
            let mut m = Map::new();
            for (k, v) in o.iter() {
                let key = match k {
                    Val::TStr(b) | Val::BStr(b) => String::from_utf8_lossy(b).into_owned(),
                    other => {
                        return Err(format!(
                            "object key {} is not a string",
                            super::describe::short(other)
                        ));
                    }
                };
                bytes.grow(key.len() + 2)?;
                m.insert(key, from_val_at(v, depth + 1, bytes)?);
            }
            Value::Object(m)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LIMIT: u64 = crate::limits::DEFAULT_MAX_VALUE_BYTES;

    #[test]
    fn values_round_trip() {
        let v = json!({"a": [1, 2.5, "x", null, true, {"b": {}}], "n": -3});
        assert_eq!(to_val(&v).and_then(|x| from_val(&x, LIMIT)), Ok(v));
    }

    #[test]
    fn integers_beyond_i64_pass_through_exactly() {
        let v = json!({"big": 18446744073709551615u64, "past": 9223372036854775808u64});
        assert_eq!(to_val(&v).and_then(|x| from_val(&x, LIMIT)), Ok(v));
    }

    #[test]
    fn too_deep_values_are_refused_both_ways() {
        let mut deep = json!(0);
        for _ in 0..(MAX_INPUT_DEPTH + 5) {
            deep = json!([deep]);
        }
        assert!(to_val(&deep).is_err());
        let mut val = Val::from(0isize);
        for _ in 0..MAX_VALUE_DEPTH {
            val = [val].into_iter().collect();
        }
        assert!(
            from_val(&val, LIMIT).is_ok(),
            "the limit itself is accepted"
        );
        let val: Val = [val].into_iter().collect();
        let err = from_val(&val, LIMIT).expect_err("too deep");
        assert!(err.contains("nests deeper than 64 levels"), "{err}");
    }

    #[test]
    fn a_value_over_the_limit_is_refused_naming_it_and_its_setting() {
        let v = json!({"s": "x".repeat(100)});
        let val = to_val(&v).expect("converts");
        assert_eq!(from_val(&val, 200), Ok(v.clone()));
        let err = from_val(&val, 50).expect_err("over the limit");
        assert!(err.contains("larger than the limit of 50 bytes"), "{err}");
        assert!(err.contains("--max-output-mib"), "{err}");
    }
}
