//! jq expressions (through jaq): `when`, loop tests, `map`, `sleep.until`.
//!
//! An [`Expr`] keeps its source; the compiled filter lives in a per-thread cache, because jaq's
//! values are not `Send`. Evaluation is pure: no I/O and no clock.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, data, unwrap_valr};
use jaq_json::Val;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

type Filter = jaq_core::Filter<data::JustLut<Val>>;

/// A jq expression, by its source text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Expr {
    /// The jq source.
    pub source: String,
}

thread_local! {
    static COMPILED: RefCell<HashMap<String, Rc<Filter>>> = RefCell::new(HashMap::new());
}

/// The most compiled expressions kept per thread before the cache starts afresh.
const CACHE_LIMIT: usize = 4096;

impl Expr {
    /// An expression from its source; [`Expr::check`] tells whether it compiles.
    pub fn new(source: impl Into<String>) -> Self {
        Self {
            source: source.into(),
        }
    }

    /// Compiles the expression, or says why it does not compile.
    pub fn check(&self) -> Result<(), String> {
        self.compiled().map(|_| ())
    }

    fn compiled(&self) -> Result<Rc<Filter>, String> {
        if let Some(f) = COMPILED.with(|c| c.borrow().get(&self.source).cloned()) {
            return Ok(f);
        }
        let filter = Rc::new(compile(&self.source)?);
        COMPILED.with(|c| {
            let mut cache = c.borrow_mut();
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
            cache.insert(self.source.clone(), filter.clone());
        });
        Ok(filter)
    }

    /// Every value the expression yields for `input`, or the first error it raises.
    pub fn eval(&self, input: &Value) -> Result<Vec<Value>, String> {
        let filter = self.compiled()?;
        let input = to_val(input)?;
        let ctx = Ctx::<data::JustLut<Val>>::new(&filter.lut, Vars::new([]));
        filter
            .id
            .run((ctx, input))
            .map(unwrap_valr)
            .map(|r| r.map_err(|e| e.to_string()).and_then(|v| from_val(&v)))
            .collect()
    }

    /// The one value the expression yields; none or several are an error (S40).
    pub fn eval_one(&self, input: &Value) -> Result<Value, String> {
        let mut values = self.eval(input)?;
        match values.len() {
            1 => Ok(values.remove(0)),
            0 => Err("expression yielded no value".into()),
            n => Err(format!("expression yielded {n} values; expected one")),
        }
    }

    /// Whether the test holds: its first value is neither `false` nor `null` (S21, S32).
    pub fn holds(&self, input: &Value) -> Result<bool, String> {
        let values = self.eval(input)?;
        Ok(matches!(values.first(), Some(v) if !matches!(v, Value::Null | Value::Bool(false))))
    }
}

fn compile(code: &str) -> Result<Filter, String> {
    let defs = jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs());
    let funs = jaq_core::funs()
        .chain(jaq_std::funs())
        .chain(jaq_json::funs());
    let loader = Loader::new(defs);
    let arena = Arena::default();
    let modules = loader
        .load(&arena, File { code, path: () })
        .map_err(|errs| format!("cannot parse `{code}`: {}", describe_errors(&errs)))?;
    Compiler::default()
        .with_funs(funs)
        .compile(modules)
        .map_err(|errs| format!("cannot compile `{code}`: {}", describe_errors(&errs)))
}

fn describe_errors<T: std::fmt::Debug>(errs: &[T]) -> String {
    let text = format!("{errs:?}");
    if text.len() > 300 {
        format!("{}…", &text[..text.floor_char_boundary(300)])
    } else {
        text
    }
}

fn to_val(v: &Value) -> Result<Val, String> {
    Ok(match v {
        Value::Null => Val::Null,
        Value::Bool(b) => Val::Bool(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64().and_then(|i| isize::try_from(i).ok()) {
                Val::from(i)
            } else {
                Val::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::String(s) => Val::from(s.clone()),
        Value::Array(a) => a.iter().map(to_val).collect::<Result<Val, String>>()?,
        Value::Object(o) => {
            let mut m = jaq_json::Map::default();
            for (k, v) in o {
                m.insert(Val::from(k.clone()), to_val(v)?);
            }
            Val::obj(m)
        }
    })
}

fn from_val(v: &Val) -> Result<Value, String> {
    Ok(match v {
        Val::Null => Value::Null,
        Val::Bool(b) => Value::Bool(*b),
        Val::Num(_) => {
            let text = v.to_string();
            match serde_json::from_str::<Number>(&text) {
                Ok(n) => Value::Number(n),
                Err(_) => Value::Null,
            }
        }
        Val::TStr(b) | Val::BStr(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
        Val::Arr(a) => Value::Array(a.iter().map(from_val).collect::<Result<_, _>>()?),
        Val::Obj(o) => {
            let mut m = Map::new();
            for (k, v) in o.iter() {
                let key = match k {
                    Val::TStr(b) | Val::BStr(b) => String::from_utf8_lossy(b).into_owned(),
                    other => return Err(format!("object key {other} is not a string")),
                };
                m.insert(key, from_val(v)?);
            }
            Value::Object(m)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn s40_map_yields_one_value_and_refuses_none_or_several() {
        let input = json!({"input": {"a": [1, 2]}, "steps": {"x": {"total": 3}}});
        let e = Expr::new("{ total: .steps.x.total, n: (.input.a | length) }");
        assert_eq!(e.eval_one(&input), Ok(json!({"total": 3, "n": 2})));
        assert!(Expr::new(".input.a[]").eval_one(&input).is_err());
        assert!(Expr::new("empty").eval_one(&input).is_err());
    }

    #[test]
    fn s21_a_test_holds_unless_false_or_null() {
        let input = json!({"input": {"price": 1200, "flag": null}});
        assert_eq!(Expr::new(".input.price > 1000").holds(&input), Ok(true));
        assert_eq!(Expr::new(".input.flag").holds(&input), Ok(false));
        assert_eq!(Expr::new(".input.price").holds(&input), Ok(true));
    }

    #[test]
    fn s23_an_error_is_an_error_unless_caught() {
        let input = json!({"input": {"a": "text"}});
        assert!(Expr::new(".input.a.b > 3").holds(&input).is_err());
        assert_eq!(
            Expr::new("try (.input.a.b > 3) catch false").holds(&input),
            Ok(false)
        );
    }

    #[test]
    fn a_bad_expression_does_not_compile() {
        assert!(Expr::new(".input | ][").check().is_err());
        assert!(Expr::new("nosuchfn(1)").check().is_err());
    }
}
