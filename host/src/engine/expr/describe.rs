//! jaq's errors as plain sentences, with positions inside the expression and values cut short.

use std::fmt::{self, Display, Write};

use jaq_core::Exn;
use jaq_core::compile::Undefined;
use jaq_core::load::{self, lex, parse};
use jaq_json::Val;

/// The most bytes of a value or message quoted in an error.
const QUOTE_LIMIT: usize = 200;

/// Where in `code` the slice `part` starts: `column 7`, or `line 2, column 3` when the expression
/// spans lines. `None` when `part` is not inside `code`.
pub(super) fn position(code: &str, part: &str) -> Option<String> {
    let offset = (part.as_ptr() as usize).checked_sub(code.as_ptr() as usize)?;
    if offset.checked_add(part.len())? > code.len() {
        return None;
    }
    let before = code.get(..offset)?;
    Some(at(code, before))
}

/// The position just after `before`, a prefix of `code`.
pub(super) fn at(code: &str, before: &str) -> String {
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    if code.contains('\n') {
        format!("line {line}, column {column}")
    } else {
        format!("column {column}")
    }
}

/// `display` as text, at most `limit` bytes (then `…`); formatting stops there, so a deeply
/// nested value is not walked to its bottom.
pub(super) fn bounded(display: &dyn Display, limit: usize) -> String {
    struct Capped {
        text: String,
        limit: usize,
        cut: bool,
    }
    impl Write for Capped {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            let room = self.limit - self.text.len();
            if s.len() <= room {
                self.text.push_str(s);
                Ok(())
            } else {
                self.text.push_str(&s[..s.floor_char_boundary(room)]);
                self.cut = true;
                Err(fmt::Error)
            }
        }
    }
    let mut out = Capped {
        text: String::new(),
        limit,
        cut: false,
    };
    let _ = write!(out, "{display}");
    if out.cut {
        out.text.push('…');
    }
    out.text
}

/// A value quoted in a message.
pub(super) fn short(v: &Val) -> String {
    bounded(v, QUOTE_LIMIT)
}

/// What an evaluation raised, as a sentence.
pub(super) fn exception(e: Exn<'_, Val>) -> String {
    match e.get_err() {
        Ok(err) => bounded(&err, QUOTE_LIMIT),
        Err(other) => match other.get_halt() {
            Ok(code) => format!("the expression tried to halt (exit code {code})"),
            Err(_) => "the expression broke out of jq's control flow".into(),
        },
    }
}

/// Why jaq could not parse `code`.
pub(super) fn load_errors(code: &str, errs: &load::Errors<&str, ()>) -> String {
    let mut out = Vec::new();
    for (_file, err) in errs {
        match err {
            load::Error::Io(items) => {
                for (path, why) in items {
                    out.push(format!("cannot import `{path}`: {why}"));
                }
            }
            load::Error::Lex(items) => {
                for (expect, rest) in items {
                    out.push(lex_error(code, expect, rest));
                }
            }
            load::Error::Parse(items) => {
                for (expect, found) in items {
                    out.push(parse_error(code, expect, found));
                }
            }
        }
    }
    joined(out)
}

fn lex_error(code: &str, expect: &lex::Expect<&str>, rest: &str) -> String {
    let at = position(code, rest).unwrap_or_else(|| "the end".into());
    match expect {
        lex::Expect::Delim(open) => {
            let opened = position(code, open).unwrap_or_else(|| "somewhere".into());
            format!("`{open}` opened at {opened} is not closed (stopped at {at})")
        }
        lex::Expect::Digit => format!("expected a digit at {at}"),
        lex::Expect::Ident => format!("expected a name at {at}"),
        lex::Expect::Escape => format!("unknown escape sequence in a string at {at}"),
        lex::Expect::Unicode => format!("expected 4 hexadecimal digits after `\\u` at {at}"),
        lex::Expect::Token => format!("unexpected character at {at}"),
        _ => format!("cannot read the expression at {at}"),
    }
}

fn parse_error(code: &str, expect: &parse::Expect<&str>, found: &str) -> String {
    let what = match expect {
        parse::Expect::Just(s) => format!("`{s}`"),
        parse::Expect::Nothing => "the end of the expression".into(),
        other => other.as_str().to_owned(),
    };
    if found.is_empty() {
        format!("expected {what}, but the expression ends")
    } else {
        let at = position(code, found).unwrap_or_else(|| "somewhere".into());
        format!(
            "expected {what} at {at}, found `{}`",
            bounded(&found, QUOTE_LIMIT)
        )
    }
}

/// Why jaq could not compile `code`.
pub(super) fn compile_errors(code: &str, errs: &jaq_core::compile::Errors<&str, ()>) -> String {
    let mut out = Vec::new();
    for (_file, items) in errs {
        for (name, undefined) in items {
            let what = match undefined {
                Undefined::Filter(arity) => format!("filter `{name}/{arity}`"),
                Undefined::Var => format!("variable `{name}`"),
                Undefined::Label => format!("label `{name}`"),
                Undefined::Mod => format!("module `{name}`"),
                _ => format!("`{name}`"),
            };
            match position(code, name) {
                Some(at) => out.push(format!("{what} at {at} is not defined")),
                None => out.push(format!("{what} is not defined")),
            }
        }
    }
    joined(out)
}

fn joined(mut out: Vec<String>) -> String {
    const SHOWN: usize = 3;
    if out.is_empty() {
        return "jaq gave no reason".into();
    }
    let more = out.len().saturating_sub(SHOWN);
    out.truncate(SHOWN);
    let mut text = out.join("; ");
    if more > 0 {
        text.push_str(&format!(" (and {more} more)"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_text_stops_early() {
        assert_eq!(bounded(&"abcdef", 3), "abc…");
        assert_eq!(bounded(&"abc", 3), "abc");
        assert_eq!(bounded(&"ééé", 3), "é…");
    }

    #[test]
    fn positions_count_lines_and_characters() {
        let code = "a |\n  é | b";
        let b = &code[code.find('b').unwrap_or(0)..];
        assert_eq!(position(code, b), Some("line 2, column 7".into()));
        assert_eq!(position("x y", &"x y"[2..]), Some("column 3".into()));
        assert_eq!(position("x y", "elsewhere"), None);
    }
}
