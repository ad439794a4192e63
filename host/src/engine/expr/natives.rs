//! The native filters expressions may call: jaq's own, with a few replaced.
//!
//! - `halt/1` would end the whole process (`halt`, `halt_error`); here it raises an error.
//! - `env/0` (and `$ENV`) would read the host's environment; here it raises an error.
//! - `range/3` yields values without running terms; here each value is a step.
//! - `has/1` counts negative indices of an array as jaq does not and jq does: not there.
//! - `fromjson/0` parses recursively; here input nesting deeper than [`MAX_VALUE_DEPTH`] is
//!   refused first, and text that does not parse raises one error (jaq's reader repeats it
//!   for ever).
//! - `tojson/0` and `tostring/0` measure what they would write first (`sized`).
//! - `_weft_mul_checked/2`, which `*` becomes (`rewrite`), reserves the bytes of a repeated
//!   string from the memory budget before it builds it.

use jaq_core::native::{Fun, bome, v};
use jaq_core::{Error, Exn, ValX};
use jaq_json::Val;
use jaq_std::ValT as _;

use super::MAX_VALUE_DEPTH;
use super::budget::Metered;
use super::describe;

/// Every native filter, replacements included.
pub(super) fn funs() -> impl Iterator<Item = Fun<Metered>> {
    let replaced = |(name, args, _): &Fun<Metered>| {
        matches!(
            (*name, args.len()),
            ("halt", 1) | ("env", 0) | ("range", 3) | ("fromjson", 0) | ("has", 1)
        ) || super::sized::NAMES.contains(&(*name, args.len()))
    };
    jaq_core::funs()
        .chain(jaq_std::funs())
        .chain(jaq_json::funs())
        .filter(move |f| !replaced(f))
        .chain(replacements())
        .chain(super::sized::funs())
}

fn replacements() -> impl Iterator<Item = Fun<Metered>> {
    let halt: Fun<Metered> = (
        "halt",
        v(1),
        jaq_core::Native::new(|_| {
            bome(Err(Error::str(
                "halt is not available in weft expressions; raise an error with `error(...)`",
            )))
        }),
    );
    let env: Fun<Metered> = (
        "env",
        v(0),
        jaq_core::Native::new(|_| {
            bome(Err(Error::str(
                "env is not available: expressions cannot read the host's environment",
            )))
        }),
    );
    let range: Fun<Metered> = (
        "range",
        v(3),
        jaq_core::Native::new(|mut cv| {
            let meter = cv.0.data().meter;
            let by = cv.0.pop_var();
            let to = cv.0.pop_var();
            let from = cv.0.pop_var();
            Box::new(range(from, to, by).inspect(move |_| meter.tick()))
        }),
    );
    let fromjson: Fun<Metered> = (
        "fromjson",
        v(0),
        jaq_core::Native::new(|cv| {
            let text = match cv.1.try_as_utf8_bytes() {
                Ok(text) => text,
                Err(e) => return bome(Err(e)),
            };
            if nesting(text) > MAX_VALUE_DEPTH {
                return bome(Err(Error::str(format!(
                    "fromjson: the JSON nests more than {MAX_VALUE_DEPTH} levels deep"
                ))));
            }
            // jaq's reader does not move past what it cannot parse: after an error it yields
            // the same error for ever, so the values end at the first error.
            let mut values = Vec::new();
            for r in jaq_json::read::parse_many(text) {
                match r {
                    Ok(v) => values.push(Ok(v)),
                    Err(e) => {
                        values.push(Err(Exn::from(Error::str(format!(
                            "cannot parse {} as JSON: {e}",
                            describe::short(&cv.1)
                        )))));
                        break;
                    }
                }
            }
            Box::new(values.into_iter())
        }),
    );
    let has: Fun<Metered> = (
        "has",
        v(1),
        jaq_core::Native::new(|mut cv| {
            let key = cv.0.pop_var();
            bome(has(&cv.1, &key))
        }),
    );
    let mul: Fun<Metered> = (
        super::rewrite::CHECKED_MUL,
        v(2),
        jaq_core::Native::new(|mut cv| {
            let r = cv.0.pop_var();
            let l = cv.0.pop_var();
            if let Some(bytes) = repeated_len(&l, &r) {
                cv.0.data().meter.reserve(bytes);
            }
            bome(l * r)
        }),
    );
    [halt, env, range, fromjson, has, mul].into_iter()
}

/// The bytes `l * r` builds when it repeats a string (a string and a positive integer, either
/// way round); `None` for any other multiplication. An integer too large for `isize` counts as
/// no end of bytes.
fn repeated_len(l: &Val, r: &Val) -> Option<u64> {
    let (s, n) = match (l, r) {
        (Val::TStr(s) | Val::BStr(s), n @ Val::Num(_))
        | (n @ Val::Num(_), Val::TStr(s) | Val::BStr(s)) => (s, n),
        _ => return None,
    };
    match n.as_isize() {
        Some(n) if n <= 0 => None,
        Some(n) => Some((s.len() as u64).saturating_mul(n as u64)),
        None => Some(u64::MAX),
    }
}

/// Whether `value` has `key`, as jq says: an array has the integers from 0 to its length
/// (jaq also counts negative ones, from the end, which jq does not), an object its keys, null
/// nothing.
fn has(value: &Val, key: &Val) -> Result<Val, Error<Val>> {
    let refuse = || {
        Error::str(format!(
            "cannot check whether {} has the key {}",
            describe::short(value),
            describe::short(key)
        ))
    };
    match value {
        Val::Arr(a) => {
            let i = key.as_isize().ok_or_else(refuse)?;
            Ok(Val::from(usize::try_from(i).is_ok_and(|i| i < a.len())))
        }
        Val::Obj(o) => Ok(Val::from(o.contains_key(key))),
        Val::Null => Ok(Val::from(false)),
        _ => Err(refuse()),
    }
}

/// `from`, `from + by`, … while short of `to` (as jaq's own `range/3`).
fn range<'a>(from: Val, to: Val, by: Val) -> impl Iterator<Item = ValX<'a, Val>> + 'a {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let direction = by.partial_cmp(&Val::from(0isize)).unwrap_or(Equal);
    let mut next = Some(Ok(from));
    std::iter::from_fn(move || match next.take()? {
        Ok(x) => {
            let more = match direction {
                Greater => x < to,
                Less => x > to,
                Equal => x != to,
            };
            if more {
                next = Some((x.clone() + by.clone()).map_err(Exn::from));
                Some(Ok(x))
            } else {
                None
            }
        }
        Err(e) => Some(Err(e)),
    })
}

/// How deep JSON text nests its arrays and objects (brackets inside strings not counted).
fn nesting(text: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in text {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_nesting_ignores_brackets_in_strings() {
        assert_eq!(nesting(br#"[{"a": "[[[\"[["}, []]"#), 2);
        assert_eq!(nesting(b"1"), 0);
    }
}
