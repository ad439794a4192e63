//! jq expressions (through jaq): `when`, loop tests, `map`, `sleep.until`.
//!
//! An [`Expr`] keeps its source; compiled filters are cached per process. Evaluation is pure (no
//! I/O, no clock) and bounded, whatever the expression:
//!
//! - at load, the source is at most [`MAX_SOURCE_BYTES`] long and nests brackets at most
//!   [`MAX_NESTING`] deep (`scan`); parsing and compiling run on a thread with a large stack;
//! - every evaluation has a step budget ([`step_budget`], [`set_step_budget`]): each term jaq
//!   runs and each value `range` yields is a step; a run out of steps fails with a message naming
//!   the budget (`budget`);
//! - every evaluation has a memory budget ([`memory_budget`]), measured by the allocator the
//!   `weft` binary installs and looked at every step (`budget`); what writes a value out
//!   measures what it would write first (`sized`), and a repeated string reserves its size
//!   before it is built (`rewrite`);
//! - recursion is bounded by a stack guard, and values by the step budget; an evaluation that
//!   outgrows a small first allowance on the caller's thread is run again, from scratch, on a
//!   thread whose stack is sized for the whole budget ([`Expr::eval`]);
//! - `halt` and `env` raise errors instead of ending the process or reading its environment
//!   (`natives`); results nest at most [`MAX_VALUE_DEPTH`] deep (`convert`).

mod budget;
mod convert;
mod describe;
mod natives;
mod reads;
mod rewrite;
mod scan;
mod sized;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use jaq_core::Compiler;
use jaq_core::load::{Arena, File, Loader};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use budget::{Metered, Stop};
pub use convert::MAX_VALUE_DEPTH;
pub(crate) use reads::{FieldReads, Reads};
pub(crate) use scan::{MAX_NESTING, MAX_SOURCE_BYTES};

type Filter = jaq_core::Filter<Metered>;

/// A compiled expression and what it reads of its input.
struct Compiled {
    filter: Filter,
    reads: Arc<Reads>,
}

/// A jq expression, by its source text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Expr {
    /// The jq source.
    pub source: String,
}

/// Why an expression cannot be used; its `Display` is one plain sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    /// The source is longer than the limit of an expression's source.
    #[error("the expression is {len} bytes long; at most {MAX_SOURCE_BYTES} are allowed")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// Brackets nest deeper than the limit of an expression's nesting.
    #[error("the expression nests too deeply at {at} (more than {MAX_NESTING} levels)")]
    TooDeep {
        /// Where the limit is crossed, e.g. `column 65` or `line 3, column 12`.
        at: String,
    },
    /// jaq cannot parse it.
    #[error("the expression does not parse: {0}")]
    Parse(String),
    /// It parses but names something undefined.
    #[error("the expression does not compile: {0}")]
    Compile(String),
    /// Compiling it failed inside jaq or could not be started.
    #[error("the expression could not be compiled: {0}")]
    Internal(String),
}

/// The default [`step_budget`]: about a tenth of a second of evaluation in a release build.
pub(crate) const DEFAULT_STEP_BUDGET: u64 = 500_000;

static STEP_BUDGET: AtomicU64 = AtomicU64::new(DEFAULT_STEP_BUDGET);

/// The most steps one evaluation may take (default [`DEFAULT_STEP_BUDGET`]).
pub(crate) fn step_budget() -> u64 {
    STEP_BUDGET.load(Ordering::Relaxed)
}

/// Sets [`step_budget`] for every evaluation in this process from now on (at least 1).
/// The driver's runtime sets it when it opens, from its configuration's `expr_steps`, which the
/// CLI takes from `--expr-steps` / `WEFT_EXPR_STEPS`.
pub(crate) fn set_step_budget(steps: u64) {
    STEP_BUDGET.store(steps.max(1), Ordering::Relaxed);
}

/// The default [`memory_budget`]: 256 MiB.
pub(crate) const DEFAULT_MEMORY_BUDGET: u64 = 256 << 20;

static MEMORY_BUDGET: AtomicU64 = AtomicU64::new(DEFAULT_MEMORY_BUDGET);

/// The most memory one evaluation may hold, in bytes (default [`DEFAULT_MEMORY_BUDGET`]):
/// measured where a [`crate::limits::memory::MeteredAlloc`] is the global allocator (the
/// `weft` binary); what writing a value out or repeating a string would build is held to it
/// everywhere.
pub(crate) fn memory_budget() -> u64 {
    MEMORY_BUDGET.load(Ordering::Relaxed)
}

/// Sets [`memory_budget`] for every evaluation in this process from now on (at least 1 MiB);
/// the runtime sets it when it opens, from `RuntimeConfig::expr_memory_bytes`.
pub(crate) fn set_memory_budget(bytes: u64) {
    MEMORY_BUDGET.store(bytes.max(1 << 20), Ordering::Relaxed);
}

/// The most compiled expressions kept before the cache starts afresh.
const CACHE_LIMIT: usize = 4096;

static COMPILED: Mutex<Option<HashMap<String, Arc<Compiled>>>> = Mutex::new(None);

/// Parsing and compiling recurse along the expression's syntax tree, which a 64 KiB source can
/// make thousands of levels deep (`1+1+…`); they run on a thread with this much stack (reserved,
/// touched only as used).
const COMPILE_STACK: usize = 256 << 20;

impl Expr {
    /// An expression from its source; [`Expr::check`] tells whether it compiles.
    pub fn new(source: impl Into<String>) -> Self {
        Self {
            source: source.into(),
        }
    }

    /// Compiles the expression, or says why it cannot be used.
    pub fn check(&self) -> Result<(), ExprError> {
        self.compiled().map(|_| ())
    }

    /// What the expression reads of its input (all of it when it does not compile), so that
    /// only that is built for it.
    pub(crate) fn reads(&self) -> Arc<Reads> {
        self.compiled()
            .map_or_else(|_| Arc::new(Reads::everything()), |c| Arc::clone(&c.reads))
    }

    fn compiled(&self) -> Result<Arc<Compiled>, ExprError> {
        let cached = |c: &mut Option<HashMap<String, Arc<Compiled>>>| {
            c.as_ref().and_then(|m| m.get(&self.source).cloned())
        };
        if let Some(f) = cached(&mut COMPILED.lock().unwrap_or_else(PoisonError::into_inner)) {
            return Ok(f);
        }
        scan::check_source(&self.source)?;
        let source = self.source.as_str();
        let filter = std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("weft-expr-compile".into())
                .stack_size(COMPILE_STACK)
                .spawn_scoped(s, || {
                    compile(source).map(|filter| Compiled {
                        filter,
                        reads: Arc::new(Reads::of(source)),
                    })
                })
                .map_err(|e| ExprError::Internal(format!("cannot start a thread: {e}")))?
                .join()
                .unwrap_or_else(|payload| Err(ExprError::Internal(budget::panic_text(&*payload))))
        })?;
        let filter = Arc::new(filter);
        let mut cache = COMPILED.lock().unwrap_or_else(PoisonError::into_inner);
        let map = cache.get_or_insert_with(HashMap::new);
        if map.len() >= CACHE_LIMIT {
            map.clear();
        }
        map.insert(self.source.clone(), filter.clone());
        Ok(filter)
    }

    /// Every value the expression yields for `input`, or the first error it raises (an error
    /// also when it runs out of its step budget, recurses too deeply, or yields a value larger
    /// than `value_limit` bytes of JSON: the run's `RunState::value_limit`).
    pub fn eval(&self, input: &Value, value_limit: u64) -> Result<Vec<Value>, String> {
        self.eval_within(input, step_budget(), value_limit)
    }

    /// [`Expr::eval`] with a budget of `steps` (at least 1) instead of the process-wide budget.
    pub fn eval_within(
        &self,
        input: &Value,
        steps: u64,
        value_limit: u64,
    ) -> Result<Vec<Value>, String> {
        let compiled = self.compiled().map_err(|e| e.to_string())?;
        let filter = &compiled.filter;
        let steps = steps.max(1);
        let first = steps.min(budget::INLINE_STEPS);
        let bytes = memory_budget();
        match budget::evaluate(
            filter,
            input,
            first,
            budget::INLINE_STACK,
            bytes,
            value_limit,
        ) {
            Err(Stop::Steps) if first < steps => {}
            Err(Stop::Stack) => {}
            done => return finish(done, steps),
        }
        // Too big for the caller's stack: again, from scratch, on a thread sized for the budget.
        let stack = budget::stack_for(steps);
        std::thread::scope(|s| {
            let spawned = std::thread::Builder::new()
                .name("weft-expr".into())
                .stack_size(stack)
                .spawn_scoped(s, || {
                    let stack = budget::guard_for(stack);
                    let done = budget::evaluate(filter, input, steps, stack, bytes, value_limit);
                    finish(done, steps)
                });
            match spawned {
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|payload| Err(budget::panic_text(&*payload))),
                Err(e) => Err(format!(
                    "cannot start a thread to evaluate the expression: {e}"
                )),
            }
        })
    }

    /// The one value the expression yields; none or several are an error (S40).
    pub fn eval_one(&self, input: &Value, value_limit: u64) -> Result<Value, String> {
        let mut values = self.eval(input, value_limit)?;
        match values.len() {
            1 => Ok(values.remove(0)),
            0 => Err("expression yielded no value".into()),
            n => Err(format!("expression yielded {n} values; expected one")),
        }
    }

    /// Whether the test holds: its first value is neither `false` nor `null` (S21, S32).
    pub fn holds(&self, input: &Value, value_limit: u64) -> Result<bool, String> {
        let values = self.eval(input, value_limit)?;
        Ok(matches!(values.first(), Some(v) if !matches!(v, Value::Null | Value::Bool(false))))
    }
}

/// An evaluation's outcome as the caller reads it.
fn finish(
    done: Result<Result<Vec<Value>, String>, Stop>,
    steps: u64,
) -> Result<Vec<Value>, String> {
    match done {
        Ok(result) => result,
        Err(Stop::Steps) => Err(format!(
            "expression did not finish within {steps} steps (raise the budget with --expr-steps, WEFT_EXPR_STEPS or RuntimeConfig::expr_steps)"
        )),
        Err(Stop::Stack) => Err("expression recursed too deeply".into()),
        Err(Stop::Memory) => Err(format!(
            "expression needed more than its memory budget of {} MiB (raise it with \
             --expr-memory-mib, WEFT_EXPR_MEMORY_MIB or RuntimeConfig::expr_memory_bytes)",
            memory_budget() >> 20
        )),
        Err(Stop::Panicked(text)) => Err(text),
    }
}

/// `code` compiled; with its multiplications checked ([`rewrite`]) when it has any.
fn compile(code: &str) -> Result<Filter, ExprError> {
    // The expression as written first: its errors name the author's text, and a rewriting may
    // not make an expression compile that does not (it defines `_weft_mul`).
    let filter = compile_text(code)?;
    let Some(checked) = rewrite::checked(code) else {
        return Ok(filter);
    };
    compile_text(&checked).map_err(|e| {
        // The expression as written compiles; so must its rewriting, else the printer is wrong.
        ExprError::Internal(format!(
            "weft could not hold this expression's `*` to the memory budget ({e}); please \
             report it"
        ))
    })
}

fn compile_text(code: &str) -> Result<Filter, ExprError> {
    let defs = jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs());
    let loader = Loader::new(defs);
    let arena = Arena::default();
    let modules = loader
        .load(&arena, File { code, path: () })
        .map_err(|errs| ExprError::Parse(describe::load_errors(code, &errs)))?;
    Compiler::default()
        .with_funs(natives::funs())
        .compile(modules)
        .map_err(|errs| ExprError::Compile(describe::compile_errors(code, &errs)))
}

#[cfg(test)]
mod tests {
    const LIMIT: u64 = crate::limits::DEFAULT_MAX_VALUE_BYTES;
    use super::*;
    use serde_json::json;

    #[test]
    fn s40_map_yields_one_value_and_refuses_none_or_several() {
        let input = json!({"input": {"a": [1, 2]}, "steps": {"x": {"total": 3}}});
        let e = Expr::new("{ total: .steps.x.total, n: (.input.a | length) }");
        assert_eq!(e.eval_one(&input, LIMIT), Ok(json!({"total": 3, "n": 2})));
        assert!(Expr::new(".input.a[]").eval_one(&input, LIMIT).is_err());
        assert!(Expr::new("empty").eval_one(&input, LIMIT).is_err());
    }

    #[test]
    fn s21_a_test_holds_unless_false_or_null() {
        let input = json!({"input": {"price": 1200, "flag": null}});
        assert_eq!(
            Expr::new(".input.price > 1000").holds(&input, LIMIT),
            Ok(true)
        );
        assert_eq!(Expr::new(".input.flag").holds(&input, LIMIT), Ok(false));
        assert_eq!(Expr::new(".input.price").holds(&input, LIMIT), Ok(true));
    }

    #[test]
    fn s23_an_error_is_an_error_unless_caught() {
        let input = json!({"input": {"a": "text"}});
        assert!(Expr::new(".input.a.b > 3").holds(&input, LIMIT).is_err());
        assert_eq!(
            Expr::new("try (.input.a.b > 3) catch false").holds(&input, LIMIT),
            Ok(false)
        );
    }

    #[test]
    fn has_is_jqs_for_negative_indices_and_a_huge_integer_passes_through() {
        let yes_no = |src: &str| Expr::new(src).eval_one(&json!(null), LIMIT);
        assert_eq!(yes_no("[1] | has(-1)"), Ok(json!(false)));
        assert_eq!(yes_no("[1] | has(0)"), Ok(json!(true)));
        assert_eq!(yes_no("[1] | has(1)"), Ok(json!(false)));
        assert_eq!(yes_no(r#"{a: 1} | has("a"), has("b")"#).ok(), None);
        assert_eq!(
            Expr::new(r#"{a: 1} | has("a"), has("b")"#).eval(&json!(null), LIMIT),
            Ok(vec![json!(true), json!(false)])
        );
        let err = yes_no(r#""text" | has(0)"#).expect_err("a string has no keys");
        assert!(err.contains("cannot check whether"), "{err}");
        let input = json!({"input": {"id": 18446744073709551615u64}});
        assert_eq!(
            Expr::new(".input.id").eval_one(&input, LIMIT),
            Ok(json!(18446744073709551615u64))
        );
    }

    #[test]
    fn a_bad_expression_does_not_compile() {
        assert!(Expr::new(".input | ][").check().is_err());
        assert!(Expr::new("nosuchfn(1)").check().is_err());
    }
}

#[cfg(test)]
mod hardening_tests {
    const LIMIT: u64 = crate::limits::DEFAULT_MAX_VALUE_BYTES;
    use super::*;
    use serde_json::json;

    #[test]
    fn deep_brackets_are_refused_before_jaq_parses_them() {
        for (open, close) in [("(", ")"), ("[", "]"), ("{a:", "}")] {
            let src = format!("{}1{}", open.repeat(1000), close.repeat(1000));
            let err = Expr::new(src).check().expect_err("too deep");
            assert!(err.to_string().contains("more than 64 levels"), "{err}");
        }
    }

    #[test]
    fn a_long_chain_compiles_and_evaluates() {
        let src = vec!["1"; 2000].join("+");
        assert_eq!(
            Expr::new(src).eval_one(&json!(null), LIMIT),
            Ok(json!(2000))
        );
    }

    #[test]
    fn a_deep_value_is_an_error_not_a_crash() {
        let err = Expr::new("reduce range(100000) as $i (0; [.])")
            .eval_one(&json!(null), LIMIT)
            .expect_err("too deep");
        assert!(err.contains("nests deeper than 64 levels"), "{err}");
        let len = Expr::new("reduce range(100000) as $i (0; [.]) | length");
        assert_eq!(len.eval_one(&json!(null), LIMIT), Ok(json!(1)));
    }

    #[test]
    fn deep_recursion_is_an_error_not_a_crash() {
        let err = Expr::new("def f: [f]; f")
            .eval_one(&json!(null), LIMIT)
            .expect_err("too deep");
        assert!(err.contains("recursed too deeply"), "{err}");
    }

    #[test]
    fn endless_expressions_run_out_of_steps() {
        for src in ["def f: f; f", "last(range(1e18))", "[repeat(1)]"] {
            let err = Expr::new(src).eval(&json!(null), LIMIT).expect_err(src);
            assert!(err.contains("steps"), "{src}: {err}");
        }
    }

    #[test]
    fn a_value_doubled_step_after_step_fails_within_the_memory_budget() {
        // Forty doublings would build 1 TiB (a string) or 16 TiB (an array of numbers).
        for src in [
            r#"reduce range(40) as $i ("x"; . + .)"#,
            "reduce range(40) as $i ([1]; . + .)",
            r#"reduce range(40) as $i ("x"; [., .]) | tojson"#,
        ] {
            let err = Expr::new(src).eval(&json!(null), LIMIT).expect_err(src);
            assert!(err.contains("memory budget of 256 MiB"), "{src}: {err}");
            assert!(err.contains("--expr-memory-mib"), "{src}: {err}");
        }
        // Written out, values are measured first; within the budget they are written as jq does.
        assert_eq!(
            Expr::new(r#"[1, "a", {b: null}] | tojson, ("x" | tojson), ([2] | tostring)"#)
                .eval(&json!(null), LIMIT),
            Ok(vec![
                json!(r#"[1,"a",{"b":null}]"#),
                json!(r#""x""#),
                json!("[2]")
            ])
        );
        // Within the budget, the same doublings go on.
        assert_eq!(
            Expr::new(r#"reduce range(20) as $i ("x"; . + .) | length"#)
                .eval_one(&json!(null), LIMIT),
            Ok(json!(1 << 20))
        );
    }

    #[test]
    fn s40_fromjson_of_text_that_does_not_parse_fails_once_instead_of_for_ever() {
        // jaq's reader repeats its error for ever; collecting them hung and grew without end.
        for src in [
            r#""0x10" | fromjson"#,
            r#""0x10" | tonumber"#,
            r#""[1," | fromjson"#,
        ] {
            let err = Expr::new(src).eval(&json!(null), LIMIT).expect_err(src);
            assert!(err.contains("cannot parse"), "{src}: {err}");
        }
        let values = Expr::new(r#""1 2 x 3" | try fromjson catch "bad""#).eval(&json!(null), LIMIT);
        assert_eq!(values, Ok(vec![json!(1), json!(2), json!("bad")]));
    }

    #[test]
    fn halt_and_env_raise_errors() {
        for src in ["halt", "halt_error", "env", "$ENV"] {
            let e = Expr::new(src);
            let err = e
                .check()
                .map_err(|e| e.to_string())
                .and_then(|()| e.eval(&json!(null), LIMIT).map(|v| format!("{v:?}")));
            assert!(err.is_err(), "{src}: {err:?}");
        }
    }
}
