//! A cheap look at an expression's text before jaq parses it: its length and how deep its
//! brackets nest.

use super::ExprError;
use super::describe;

/// The longest expression source, in bytes.
pub(crate) const MAX_SOURCE_BYTES: usize = 64 << 10;

/// How deep brackets (`(`, `[`, `{`), strings and string interpolations `\(…)` may nest.
pub(crate) const MAX_NESTING: usize = 64;

#[derive(Clone, Copy, PartialEq)]
enum Frame {
    Paren,
    Bracket,
    Brace,
    Str,
    Interpolation,
}

/// Refuses a source longer than [`MAX_SOURCE_BYTES`] or nesting deeper than [`MAX_NESTING`].
pub(super) fn check_source(code: &str) -> Result<(), ExprError> {
    if code.len() > MAX_SOURCE_BYTES {
        return Err(ExprError::TooLong { len: code.len() });
    }
    let mut stack: Vec<Frame> = Vec::new();
    let mut chars = code.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let open = |frame: Frame, stack: &mut Vec<Frame>| {
            stack.push(frame);
            if stack.len() > MAX_NESTING {
                Err(ExprError::TooDeep {
                    at: describe::at(code, &code[..i]),
                })
            } else {
                Ok(())
            }
        };
        if stack.last() == Some(&Frame::Str) {
            match c {
                '"' => {
                    stack.pop();
                }
                '\\' => {
                    if let Some((_, '(')) = chars.next() {
                        open(Frame::Interpolation, &mut stack)?;
                    }
                }
                _ => {}
            }
            continue;
        }
        match c {
            '"' => open(Frame::Str, &mut stack)?,
            '(' => open(Frame::Paren, &mut stack)?,
            '[' => open(Frame::Bracket, &mut stack)?,
            '{' => open(Frame::Brace, &mut stack)?,
            ')' | ']' | '}' => {
                let closes = match c {
                    ')' => matches!(stack.last(), Some(Frame::Paren | Frame::Interpolation)),
                    ']' => stack.last() == Some(&Frame::Bracket),
                    _ => stack.last() == Some(&Frame::Brace),
                };
                if closes {
                    stack.pop();
                }
            }
            '#' => while chars.next_if(|(_, c)| *c != '\n').is_some() {},
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(n: usize) -> String {
        format!("{}1{}", "(".repeat(n), ")".repeat(n))
    }

    #[test]
    fn nesting_up_to_the_limit_passes_and_one_more_is_refused_with_its_column() {
        assert_eq!(check_source(&nested(MAX_NESTING)), Ok(()));
        assert_eq!(
            check_source(&nested(MAX_NESTING + 1)),
            Err(ExprError::TooDeep {
                at: format!("column {}", MAX_NESTING + 1)
            })
        );
    }

    #[test]
    fn strings_comments_and_interpolations_are_read_as_jq_reads_them() {
        let many = "(".repeat(MAX_NESTING + 1);
        assert_eq!(check_source(&format!("\"{many}\"")), Ok(()));
        assert_eq!(check_source(&format!("1 # {many}\n| 2")), Ok(()));
        assert_eq!(check_source(r#""a\"b" | "\(1 + (2))" | [.]"#), Ok(()));
        let interpolations = format!("{}1{}", "\"\\(".repeat(40), ")\"".repeat(40));
        assert!(matches!(
            check_source(&interpolations),
            Err(ExprError::TooDeep { .. })
        ));
    }

    #[test]
    fn long_sources_are_refused() {
        let long = "1".repeat(MAX_SOURCE_BYTES + 1);
        assert_eq!(
            check_source(&long),
            Err(ExprError::TooLong {
                len: MAX_SOURCE_BYTES + 1
            })
        );
    }
}
