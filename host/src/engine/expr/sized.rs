//! What writes a value out, held to the memory budget before it writes: a value can share its
//! parts (`[., .]` forty times over is forty steps), and writing it out expands every share, so
//! its written size is measured first, without writing it, and refused over the budget. `tojson`
//! is replaced; `tostring`, the formats and string interpolation (jq definitions over jaq's own
//! interpolation) are preceded by [`MEASURED`] where an expression uses them (`rewrite`).

use jaq_core::native::{Fun, bome, v};
use jaq_core::{Native, ValT as _};
use jaq_json::Val;
use jaq_std::ValT as _;

use super::budget::Metered;

/// The replaced natives.
pub(super) const NAMES: [(&str, usize); 1] = [("tojson", 0)];

/// The filter that passes its input on once its written size fits the budget.
pub(super) const MEASURED: &str = "_weft_measured";

/// `tojson/0` as jaq's own, once the value's written size fits the budget, and [`MEASURED`].
pub(super) fn funs() -> impl Iterator<Item = Fun<Metered>> {
    let tojson: Fun<Metered> = (
        "tojson",
        v(0),
        Native::new(|cv| {
            reserve_written(cv.0.data().meter, &cv.1);
            // jaq writes JSON through `tostring` of anything but a string: of `[value]`, less
            // its brackets.
            let wrapped = std::iter::once(cv.1).collect::<Val>().into_string();
            let json = match wrapped.try_as_utf8_bytes() {
                Ok(text) => text
                    .get(1..text.len().saturating_sub(1))
                    .unwrap_or_default()
                    .to_vec(),
                Err(e) => return bome(Err(e)),
            };
            bome(Ok(Val::utf8_str(json)))
        }),
    );
    let measured: Fun<Metered> = (
        MEASURED,
        v(0),
        Native::new(|cv| {
            reserve_written(cv.0.data().meter, &cv.1);
            bome(Ok(cv.1))
        }),
    );
    [tojson, measured].into_iter()
}

/// Unwinds with the memory budget's stop unless `value`, written out, fits what the
/// evaluation may still hold.
fn reserve_written(meter: &super::budget::Meter, value: &Val) {
    let limit = meter.bytes;
    let size = written_size(value, limit).unwrap_or(u64::MAX);
    meter.reserve(size);
}

/// About how many bytes `value` takes written as JSON (at least that many), or `None` once
/// that passes `limit`: the walk stops there, so it costs at most `limit` nodes.
fn written_size(value: &Val, limit: u64) -> Option<u64> {
    let mut size = 0u64;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        size += match v {
            Val::Null | Val::Bool(_) | Val::Num(_) => 4,
            Val::BStr(s) | Val::TStr(s) => s.len() as u64 + 2,
            Val::Arr(a) => a.len() as u64 + 2,
            Val::Obj(o) => 2 * o.len() as u64 + 2,
        };
        if size > limit {
            return None;
        }
        match v {
            Val::Arr(a) => stack.extend(a.iter()),
            Val::Obj(o) => stack.extend(o.iter().flat_map(|(k, v)| [k, v])),
            _ => {}
        }
    }
    Some(size)
}
