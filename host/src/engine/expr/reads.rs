//! What of its input an expression can read, found from its syntax once, when it compiles.
//!
//! An expression's input holds the run's input, state and initial input and the output of
//! every step before it (`.steps`), so building the whole of it for each evaluation made a
//! sequence of N steps, or a foreach of N items, cost N² (issue 53, item 9). Most expressions
//! read a few fields by name (`.steps.price.total`, `.input.n`); [`Reads`] says which, and
//! `Cx::expr_input` builds only those. The analysis is conservative: whatever it cannot follow
//! (the input passed whole to a function, `..`, a computed key, an update, a syntax it does
//! not know) reads the whole input, so an expression never sees less than it could reach.

use std::collections::{BTreeMap, BTreeSet};

use jaq_core::load::lex::StrPart;
use jaq_core::load::parse::{BinaryOp, Pattern, Term};
use jaq_core::load::{Lexer, Parser};
use jaq_core::path::{Part, Path};
use serde_json::Value;

/// The parts of an expression's input it can read: every field, or the fields named in
/// `fields`, each whole (`None`) or only its members named in the set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Reads {
    whole: bool,
    fields: BTreeMap<String, Option<BTreeSet<String>>>,
}

/// What an expression reads of one field of its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldReads<'a> {
    /// Nothing: the field may be left out of the input.
    Nothing,
    /// The field whole.
    Whole,
    /// Only these members of the field, when it is an object.
    Members(&'a BTreeSet<String>),
}

impl FieldReads<'_> {
    /// What of `value`, a field of the input, the expression can read: none of it, all of
    /// it, or the object with only the members it names (a field that is not an object whole,
    /// so that an error the expression raises on it quotes it as it is).
    pub(crate) fn pick(self, value: &Value) -> Option<Value> {
        match (self, value) {
            (FieldReads::Nothing, _) => None,
            (FieldReads::Members(members), Value::Object(object)) => Some(Value::Object(
                members
                    .iter()
                    .filter_map(|m| Some((m.clone(), object.get(m)?.clone())))
                    .collect(),
            )),
            (FieldReads::Whole | FieldReads::Members(_), _) => Some(value.clone()),
        }
    }
}

impl Reads {
    /// Reads everything.
    pub(crate) fn everything() -> Self {
        Self {
            whole: true,
            fields: BTreeMap::new(),
        }
    }

    /// What `source` reads of its input; everything when it does not parse.
    pub(super) fn of(source: &str) -> Self {
        let Ok(tokens) = Lexer::new(source).lex() else {
            return Self::everything();
        };
        let Ok(term) = Parser::new(&tokens).parse(|p| p.term()) else {
            return Self::everything();
        };
        let mut reads = Self::default();
        reads.term(&term, true);
        reads
    }

    /// What the expression reads of the input's field `name`.
    pub(crate) fn field(&self, name: &str) -> FieldReads<'_> {
        if self.whole {
            return FieldReads::Whole;
        }
        match self.fields.get(name) {
            None => FieldReads::Nothing,
            Some(None) => FieldReads::Whole,
            Some(Some(members)) => FieldReads::Members(members),
        }
    }

    /// Adds what `other` reads.
    pub(crate) fn add(&mut self, other: &Reads) {
        self.whole |= other.whole;
        for (name, members) in &other.fields {
            match members {
                None => self.read_field(name),
                Some(ms) => ms.iter().for_each(|m| self.read_member(name, m)),
            }
        }
    }

    fn read_field(&mut self, name: &str) {
        self.fields.insert(name.to_owned(), None);
    }

    fn read_member(&mut self, name: &str, member: &str) {
        let entry = self
            .fields
            .entry(name.to_owned())
            .or_insert_with(|| Some(BTreeSet::new()));
        if let Some(members) = entry {
            members.insert(member.to_owned());
        }
    }

    /// Notes what `term` reads of the input when `on_input` (its input is the expression's
    /// input); a term whose input is some other value reads the input only through variables,
    /// and what a variable holds was read where it was bound.
    fn term(&mut self, term: &Term<&str>, on_input: bool) {
        match term {
            Term::Id | Term::Recurse => self.whole |= on_input,
            Term::Num(_) | Term::Var(_) | Term::Break(_) => {}
            Term::Str(format, parts) => {
                // `@json` alone formats its input; with a string, its interpolations.
                self.whole |= on_input && format.is_some() && parts.is_empty();
                self.str_parts(parts, on_input);
            }
            Term::Arr(inner) => {
                if let Some(t) = inner {
                    self.term(t, on_input);
                }
            }
            Term::Obj(entries) => {
                for (key, value) in entries {
                    match value {
                        Some(v) => {
                            self.term(key, on_input);
                            self.term(v, on_input);
                        }
                        // `{a}` is `{a: .a}`, `{$x}` is `{x: $x}`.
                        None => match key {
                            Term::Var(_) => {}
                            key => match plain(key) {
                                Some(name) if on_input => self.read_field(name),
                                Some(_) => {}
                                None => {
                                    self.whole |= on_input;
                                    self.term(key, on_input);
                                }
                            },
                        },
                    }
                }
            }
            Term::Neg(t) | Term::Label(_, t) => self.term(t, on_input),
            Term::BinOp(l, op, r) => match op {
                BinaryOp::Pipe(None) => {
                    self.term(l, on_input);
                    self.term(r, false);
                }
                BinaryOp::Pipe(Some(pattern)) => {
                    self.term(l, on_input);
                    self.pattern(pattern, on_input);
                    self.term(r, on_input);
                }
                BinaryOp::Assign
                | BinaryOp::Update
                | BinaryOp::UpdateMath(_)
                | BinaryOp::UpdateAlt => {
                    // The whole input, changed where `l` points.
                    self.whole |= on_input;
                    self.term(l, on_input);
                    self.term(r, on_input);
                }
                _ => {
                    self.term(l, on_input);
                    self.term(r, on_input);
                }
            },
            Term::Fold(_, xs, pattern, args) => {
                // `reduce xs as $x (init; update)`: `update` (and `foreach`'s extract) run on
                // the accumulator, the rest on the input.
                self.term(xs, on_input);
                self.pattern(pattern, on_input);
                let mut args = args.iter();
                if let Some(init) = args.next() {
                    self.term(init, on_input);
                }
                args.for_each(|t| self.term(t, false));
            }
            Term::TryCatch(body, catch) => {
                self.term(body, on_input);
                if let Some(c) = catch {
                    // A handler's input is the error.
                    self.term(c, false);
                }
            }
            Term::IfThenElse(arms, otherwise) => {
                for (cond, then) in arms {
                    self.term(cond, on_input);
                    self.term(then, on_input);
                }
                match otherwise {
                    Some(t) => self.term(t, on_input),
                    // `if c then t end` yields the input where `c` fails.
                    None => self.whole |= on_input,
                }
            }
            // A definition's body runs where it is called, and a call on the input reads it.
            Term::Def(_, body) => self.term(body, on_input),
            Term::Call(name, args) => {
                self.whole |= on_input && !matches!(*name, "empty" | "null" | "true" | "false");
                args.iter().for_each(|t| self.term(t, false));
            }
            Term::Path(head, path) => self.path(head, path, on_input),
        }
    }

    /// `head` followed by `path`: `.a.b` reads member `b` of field `a`, anything else the
    /// whole input (when `head` is `.`) or what `head` reads.
    fn path(&mut self, head: &Term<&str>, path: &Path<Term<&str>>, on_input: bool) {
        // Index terms run on the same input as the head.
        for (part, _) in &path.0 {
            match part {
                Part::Index(t) => self.term(t, on_input),
                Part::Range(from, to) => {
                    from.iter().chain(to).for_each(|t| self.term(t, on_input));
                }
            }
        }
        if !matches!(head, Term::Id) {
            self.term(head, on_input);
            return;
        }
        if !on_input {
            return;
        }
        let key = |i: usize| match path.0.get(i) {
            Some((Part::Index(t), _)) => plain(t),
            _ => None,
        };
        match (key(0), key(1)) {
            (Some(field), Some(member)) => self.read_member(field, member),
            (Some(field), None) => self.read_field(field),
            (None, _) => self.whole = true,
        }
    }

    fn pattern(&mut self, pattern: &Pattern<&str>, on_input: bool) {
        match pattern {
            Pattern::Var(_) => {}
            Pattern::Arr(items) => items.iter().for_each(|p| self.pattern(p, on_input)),
            Pattern::Obj(entries) => {
                for (key, p) in entries {
                    self.term(key, on_input);
                    self.pattern(p, on_input);
                }
            }
        }
    }

    fn str_parts(&mut self, parts: &[StrPart<&str, Term<&str>>], on_input: bool) {
        for part in parts {
            if let StrPart::Term(t) = part {
                self.term(t, on_input);
            }
        }
    }
}

/// A string literal with no escape and no interpolation, as `.a` and `."a"` give.
fn plain<'a>(term: &Term<&'a str>) -> Option<&'a str> {
    match term {
        Term::Str(None, parts) => match parts.as_slice() {
            [StrPart::Str(s)] => Some(s),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    const LIMIT: u64 = crate::limits::DEFAULT_MAX_VALUE_BYTES;
    use super::*;
    use crate::engine::expr::Expr;
    use serde_json::{Map, json};

    fn members(field: &str, source: &str) -> Option<Vec<String>> {
        match Reads::of(source).field(field) {
            FieldReads::Members(m) => Some(m.iter().cloned().collect()),
            _ => None,
        }
    }

    #[test]
    fn named_steps_and_fields_are_all_that_is_read() {
        let src = "{ text: .steps.shout.text, n: .steps.count.count, c: (.input.chunks | length) }";
        let reads = Reads::of(src);
        assert_eq!(
            members("steps", src),
            Some(vec!["count".into(), "shout".into()])
        );
        assert_eq!(members("input", src), Some(vec!["chunks".into()]));
        assert_eq!(reads.field("init"), FieldReads::Nothing);
        assert_eq!(reads.field("state"), FieldReads::Nothing);
        assert_eq!(Reads::of(".input * 2").field("input"), FieldReads::Whole);
        assert_eq!(
            members("steps", r#".steps."a b"?, .steps["c"]"#),
            Some(vec!["a b".into(), "c".into()])
        );
    }

    #[test]
    fn whatever_reaches_the_input_whole_reads_everything() {
        for src in [
            ".",
            "keys",
            ". as $r | $r.steps.a",
            "..",
            ".[\"st\" + \"eps\"]",
            "to_entries",
            ".steps.a |= 1",
            "if .input then 1 end",
            "@json",
            "map(.)",
            "def f: .steps.a; f",
            "getpath([\"steps\"])",
            "import \"x\" as x; 1",
        ] {
            assert!(Reads::of(src).whole, "{src}");
        }
        assert_eq!(Reads::of(".steps | keys").field("steps"), FieldReads::Whole);
        assert_eq!(
            Reads::of("{(.input): 1} | .x").field("input"),
            FieldReads::Whole
        );
        assert_eq!(
            Reads::of(".steps[.input.k]").field("steps"),
            FieldReads::Whole
        );
    }

    #[test]
    fn what_runs_on_other_values_reads_nothing_of_the_input() {
        let src = "reduce .input[] as $x (0; . + $x) | tostring | [., .steps?]";
        let reads = Reads::of(src);
        assert!(!reads.whole);
        assert_eq!(reads.field("input"), FieldReads::Whole);
        assert_eq!(reads.field("steps"), FieldReads::Nothing);
        let caught = Reads::of("try .input.a catch .");
        assert!(!caught.whole);
        let mapped = Reads::of("[.input[] | . * 2] | map(. + 1)");
        assert!(!mapped.whole);
        assert_eq!(Reads::of("{a, $__loc__}").field("a"), FieldReads::Whole);
    }

    #[test]
    fn an_expression_yields_the_same_on_what_it_reads_as_on_the_whole_input() {
        let full = json!({
            "input": {"n": 2, "a": [1, 2, 3], "s": "x"},
            "state": {"k": 1, "m": {"z": true}},
            "init": [5, 6],
            "steps": {"a": {"n": 1}, "b": [1, 2], "c": "t"},
        });
        let sources = [
            ".input.n",
            ".input.a.b",
            ".steps.c.x",
            ".state.m | keys",
            ".steps.a?.n",
            "[.steps[]]",
            ".input as $i | .steps.a",
            "reduce .init[] as $x (0; . + $x)",
            ".steps | length",
            "{a: .input.n} | .a",
            "\"v\\(.input.n)\"",
            "try error(\"x\") catch .",
            "if .input.n > 1 then .steps.b else .init end",
            "[.input.a[] | select(. > 1)]",
            ".input.a | map(. * 2)",
            "label $out | .steps.a",
            "def f: .n; .steps.a | f",
            "{input}",
            ".missing",
            "(.steps.a, .steps.b) | tojson",
            "limit(1; .init[])",
            ".input.a[1:]",
            ".state[\"k\"]",
            "@base64 \"\\(.input.s)\"",
            ".init | first",
            ". == .",
            "[paths] | length",
            ".steps.a.n += 1 | .steps.a",
            ".steps.zz // .steps.b",
            ".input.n * .steps.a.n + (.init | add)",
            "[.steps.a, .input.s] | @json",
            "foreach .input.a[] as $x (0; . + $x; [$x, .])",
        ];
        for src in sources {
            let reads = Reads::of(src);
            let picked: Map<String, Value> = full
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| Some((k.clone(), reads.field(k).pick(v)?)))
                .collect();
            let e = Expr::new(src);
            assert_eq!(
                e.eval(&full, LIMIT),
                e.eval(&Value::Object(picked), LIMIT),
                "{src}"
            );
        }
    }
}
