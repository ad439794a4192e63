//! String repetition and interpolation held to the memory budget: jaq builds `"x" * n`, and
//! `"\(.)"` of a value that shares its parts many times over, in one step, with one allocation
//! of the whole result, which no step check can stop (`"x" * 1e11` grew a process by 1.3 GB a
//! second). An expression with a `*`, a `*=` or an interpolation is compiled from its own
//! syntax tree printed again, with each multiplication made a call of `_weft_mul`, which
//! reserves the size of a repeated string from the budget before building it and multiplies as
//! `*` does otherwise (`natives`), and each interpolated value passed through `tostring`, which
//! measures what it would write first (`sized`). Expressions without one compile as written.
//!
//! The printer puts every operand in parentheses, so the printed expression parses to the tree
//! it came from; evaluation order is kept (`_weft_mul` binds its left operand first, as jaq's
//! `*` does, and `l *= r` is what jaq defines it as, `r as $x | l |= . * $x`).

use jaq_core::load::lex::StrPart;
use jaq_core::load::parse::{BinaryOp, Def, Pattern, Term};
use jaq_core::load::{Lexer, Parser};
use jaq_core::ops::{Cmp, Math};
use jaq_core::path::{Opt, Part, Path};

use super::sized::MEASURED;

/// The name of the checked multiplication the rewritten expression calls.
pub(super) const CHECKED_MUL: &str = "_weft_mul_checked";

/// The variable `*=` binds its right operand to.
const RHS: &str = "$__weft_mul_rhs";

/// `source` with every `*`, `*=` and interpolation checked, when it has one and parses; `None`
/// otherwise (compile it as written: a parse error is then reported on the text its author
/// wrote).
pub(super) fn checked(source: &str) -> Option<String> {
    let tokens = Lexer::new(source).lex().ok()?;
    let term = Parser::new(&tokens).parse(|p| p.term()).ok()?;
    // The definition the rewritten expression starts with.
    let mut out = format!("def _weft_mul(l; r): l as $l | r as $r | {CHECKED_MUL}($l; $r); ");
    let mut p = Printer {
        out: &mut out,
        changed: false,
    };
    p.term(&term);
    p.changed.then_some(out)
}

/// The printer's state: where it writes, and whether it changed anything.
struct Printer<'o> {
    out: &'o mut String,
    changed: bool,
}

impl<'s> Printer<'_> {
    fn push(&mut self, s: &str) {
        self.out.push_str(s);
    }

    /// Each of `items` printed by `each`, `sep` between two.
    fn list<T>(&mut self, items: &[T], sep: &str, mut each: impl FnMut(&mut Self, &T)) {
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                self.push(sep);
            }
            each(self, item);
        }
    }

    /// `term` in parentheses.
    fn wrapped(&mut self, term: &Term<&'s str>) {
        self.push("(");
        self.term(term);
        self.push(")");
    }

    fn term(&mut self, term: &Term<&'s str>) {
        match term {
            Term::Id => self.push("."),
            Term::Recurse => self.push(".."),
            Term::Num(n) => self.push(n),
            Term::Str(format, parts) => self.string(*format, parts),
            Term::Arr(None) => self.push("[]"),
            Term::Arr(Some(inner)) => {
                self.push("[");
                self.wrapped(inner);
                self.push("]");
            }
            Term::Obj(entries) => {
                self.push("{");
                self.list(entries, ", ", |p, (key, value)| match value {
                    Some(value) => {
                        p.wrapped(key);
                        p.push(": ");
                        p.wrapped(value);
                    }
                    // `{$x}` and `{"a"}`: a variable or a string key alone.
                    None => p.term(key),
                });
                self.push("}");
            }
            Term::Neg(t) => {
                self.push("-");
                self.wrapped(t);
            }
            Term::BinOp(l, op, r) => self.binop(l, op, r),
            Term::Label(x, t) => {
                self.push("label ");
                self.push(x);
                self.push(" | ");
                self.wrapped(t);
            }
            Term::Break(x) => {
                self.push("break ");
                self.push(x);
            }
            Term::Fold(name, xs, pattern, args) => {
                self.push(name);
                self.push(" ");
                self.wrapped(xs);
                self.push(" as ");
                self.pattern(pattern);
                self.args(args);
            }
            Term::TryCatch(body, catch) => {
                self.push("try ");
                self.wrapped(body);
                if let Some(c) = catch {
                    self.push(" catch ");
                    self.wrapped(c);
                }
            }
            Term::IfThenElse(arms, otherwise) => {
                for (i, (cond, then)) in arms.iter().enumerate() {
                    self.push(if i == 0 { "if " } else { " elif " });
                    self.wrapped(cond);
                    self.push(" then ");
                    self.wrapped(then);
                }
                if let Some(e) = otherwise {
                    self.push(" else ");
                    self.wrapped(e);
                }
                self.push(" end");
            }
            Term::Def(defs, body) => {
                for def in defs {
                    self.def(def);
                }
                self.wrapped(body);
            }
            Term::Call(name, args) => {
                // `tostring` and the formats write their input out (jq definitions over
                // interpolation, which no rewriting reaches): measured first.
                let writes = args.is_empty() && (*name == "tostring" || name.starts_with('@'));
                if writes {
                    self.changed = true;
                    self.push("(");
                    self.push(MEASURED);
                    self.push(" | ");
                }
                self.push(name);
                self.args(args);
                if writes {
                    self.push(")");
                }
            }
            Term::Var(x) => self.push(x),
            Term::Path(head, path) => self.path(head, path),
        }
    }

    fn binop(&mut self, l: &Term<&'s str>, op: &BinaryOp<&'s str>, r: &Term<&'s str>) {
        let symbol = match op {
            BinaryOp::Math(Math::Mul) => {
                self.changed = true;
                self.push("_weft_mul(");
                self.wrapped(l);
                self.push("; ");
                self.wrapped(r);
                self.push(")");
                return;
            }
            BinaryOp::UpdateMath(Math::Mul) => {
                self.changed = true;
                self.wrapped(r);
                self.push(" as ");
                self.push(RHS);
                self.push(" | ");
                self.wrapped(l);
                self.push(" |= _weft_mul(.; ");
                self.push(RHS);
                self.push(")");
                return;
            }
            BinaryOp::Pipe(Some(pattern)) => {
                self.wrapped(l);
                self.push(" as ");
                self.pattern(pattern);
                self.push(" | ");
                self.wrapped(r);
                return;
            }
            BinaryOp::Pipe(None) => "|".to_owned(),
            BinaryOp::Comma => ",".to_owned(),
            BinaryOp::Alt => "//".to_owned(),
            BinaryOp::Or => "or".to_owned(),
            BinaryOp::And => "and".to_owned(),
            BinaryOp::Math(m) => math(*m).to_owned(),
            BinaryOp::Cmp(c) => cmp(*c).to_owned(),
            BinaryOp::Assign => "=".to_owned(),
            BinaryOp::Update => "|=".to_owned(),
            BinaryOp::UpdateMath(m) => format!("{}=", math(*m)),
            BinaryOp::UpdateAlt => "//=".to_owned(),
        };
        self.wrapped(l);
        self.push(" ");
        self.push(&symbol);
        self.push(" ");
        self.wrapped(r);
    }

    fn string(&mut self, format: Option<&'s str>, parts: &[StrPart<&'s str, Term<&'s str>>]) {
        if let Some(f) = format {
            self.push(f);
            self.push(" ");
        }
        self.push("\"");
        for part in parts {
            match part {
                StrPart::Str(s) => self.push(s),
                StrPart::Term(t) => {
                    // What is interpolated is written out: measured first (`sized`).
                    self.changed = true;
                    self.push("\\((");
                    self.term(t);
                    self.push(") | ");
                    self.push(MEASURED);
                    self.push(")");
                }
                StrPart::Char(c) => {
                    // As JSON writes it: `\n`, `\"`, `\u0001`, or the character itself.
                    let quoted = serde_json::to_string(&c.to_string()).unwrap_or_default();
                    let inner = quoted.strip_prefix('"').and_then(|q| q.strip_suffix('"'));
                    self.push(inner.unwrap_or_default());
                }
            }
        }
        self.push("\"");
    }

    fn args(&mut self, args: &[Term<&'s str>]) {
        if args.is_empty() {
            return;
        }
        self.push("(");
        self.list(args, "; ", Self::term);
        self.push(")");
    }

    fn def(&mut self, def: &Def<&'s str, Term<&'s str>>) {
        self.push("def ");
        self.push(def.name);
        if !def.args.is_empty() {
            self.push("(");
            self.push(&def.args.join("; "));
            self.push(")");
        }
        self.push(": ");
        self.term(&def.body);
        self.push("; ");
    }

    fn pattern(&mut self, pattern: &Pattern<&'s str>) {
        match pattern {
            Pattern::Var(x) => self.push(x),
            Pattern::Arr(items) => {
                self.push("[");
                self.list(items, ", ", Self::pattern);
                self.push("]");
            }
            Pattern::Obj(entries) => {
                self.push("{");
                self.list(entries, ", ", |p, (key, pattern)| {
                    p.wrapped(key);
                    p.push(": ");
                    p.pattern(pattern);
                });
                self.push("}");
            }
        }
    }

    fn path(&mut self, head: &Term<&'s str>, path: &Path<Term<&'s str>>) {
        if matches!(head, Term::Id) {
            self.push(".");
        } else {
            self.wrapped(head);
        }
        for (part, opt) in &path.0 {
            match part {
                Part::Index(i) => {
                    self.push("[");
                    self.wrapped(i);
                    self.push("]");
                }
                Part::Range(from, to) => {
                    self.push("[");
                    if let Some(f) = from {
                        self.wrapped(f);
                    }
                    if from.is_some() || to.is_some() {
                        self.push(":");
                    }
                    if let Some(t) = to {
                        self.wrapped(t);
                    }
                    self.push("]");
                }
            }
            if matches!(opt, Opt::Optional) {
                self.push("?");
            }
        }
    }
}

/// A math operator as written.
fn math(m: Math) -> &'static str {
    match m {
        Math::Add => "+",
        Math::Sub => "-",
        Math::Mul => "*",
        Math::Div => "/",
        Math::Rem => "%",
    }
}

/// A comparison as written.
fn cmp(c: Cmp) -> &'static str {
    match c {
        Cmp::Eq => "==",
        Cmp::Ne => "!=",
        Cmp::Lt => "<",
        Cmp::Le => "<=",
        Cmp::Gt => ">",
        Cmp::Ge => ">=",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::budget::{INLINE_STACK, evaluate};
    use super::super::{Expr, compile_text};
    use super::checked;

    const LIMIT: u64 = crate::limits::DEFAULT_MAX_VALUE_BYTES;

    /// `source` on `input`, compiled as written (no check of its `*`).
    fn unchecked(source: &str, input: &Value) -> Result<Vec<Value>, String> {
        let filter = compile_text(source).map_err(|e| e.to_string())?;
        evaluate(&filter, input, 1_000_000, 64 << 20, 256 << 20, LIMIT)
            .unwrap_or_else(|_| Err("stopped".into()))
    }

    #[test]
    fn checked_multiplications_give_what_jaq_gives_values_order_and_errors_alike() {
        let input = json!({"a": 2, "xs": [1, 2, 3], "o": {"k": {"m": 1}}, "p": [[2, {"b": 3}]]});
        let sources = [
            "2 * 3",
            "[(1, 2) * (3, 4)]",
            "\"ab\" * 3",
            "3 * \"ab\"",
            "[\"x\" * 0, \"x\" * -1]",
            "\"é\" * 2",
            "{a: 1} * {b: {c: 2}}",
            ".o * {k: {n: 2}}",
            "[.xs[] | . * 2]",
            ".a *= 3",
            ".xs[] *= 2",
            ".xs |= map(. * 10)",
            "reduce range(5) as $i (1; . * 2)",
            "foreach (1, 2) as $x (0; . + $x; . * 10)",
            "def f(x): x * x; f(3)",
            "def g($n): $n * $n; [g(.xs[])]",
            "{\"k\": (2 * 3), a}",
            "\"a\\n\\(1 * 2)\\u00e9\\t\\\"q\\\"\"",
            "@base64 \"x\\(2 * 2)\"",
            ".missing? * 2",
            "try (null * {}) catch .",
            "if .a > 1 then 2 * 2 elif false then 1 else 0 end",
            "label $out | (2 * 3, break $out, 4)",
            "[.p[] as [$x, {b: $y}] | $x * $y]",
            ".xs[1:] | map(. * 2)",
            "-(2) * 3 - 1 / 2 % 5",
            "(. * 2) as $d | $d | keys",
            "[limit(3; 1 | recurse(. * 2))]",
            "1 * null",
            ".xs[0] * .a == 2 and (.a * .a) >= 4 or false",
            ".o.k.m // 0 * 7",
            "[.xs[] | select(. * 2 > 3)] | length",
            "\"n: \\(.xs) and \\(.a) \\(\"s\")\"",
            "\"\\(.o)\" | length",
            "@json \"v: \\(.o)\"",
            "@base64 \"\\(.xs)\"",
            "[.xs[] | tostring] | join(\",\")",
            ".o | @html, @text, @json",
        ];
        for src in sources {
            assert!(checked(src).is_some(), "{src} is rewritten");
            let e = Expr::new(src);
            assert_eq!(e.eval(&input, LIMIT), unchecked(src, &input), "{src}");
        }
        assert_eq!(
            checked(".a + 1"),
            None,
            "nothing to check: compiled as written"
        );
    }

    #[test]
    fn a_string_repeated_past_the_memory_budget_fails_before_it_is_built() {
        let input = json!({"n": 100_000_000_000u64});
        for src in [
            "\"x\" * 100000000000 | length",
            "\"xy\" * .n",
            ".n * \"x\"",
            "\"x\" * 1e300",
            "{s: \"x\"} | .s *= 100000000000",
            "def rep(s; n): s * n; rep(\"x\"; .n)",
            "reduce range(40) as $i (1; [., .]) | \"\\(.)\" | length",
            "reduce range(40) as $i (1; [., .]) | tostring | length",
            "reduce range(40) as $i (1; [., .]) | @base64 | length",
            "reduce range(40) as $i (1; [., .]) | @text \"\\(.)\" | length",
        ] {
            let filter = compile_text(&checked(src).expect("rewritten")).expect("compiles");
            let done = evaluate(&filter, &input, 1_000_000, INLINE_STACK, 64 << 20, LIMIT);
            assert!(
                matches!(done, Err(super::super::budget::Stop::Memory)),
                "{src}: {done:?}"
            );
        }
        // Within the budget it is built as before.
        assert_eq!(
            Expr::new("\"ab\" * 1000 | length").eval_one(&json!(null), LIMIT),
            Ok(json!(2000))
        );
    }
}
