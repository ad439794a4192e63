//! The line of a workflow file an error names, quoted under the message with a caret at its
//! column, as a compiler shows it.

use std::path::Path;

use super::WorkflowError;
use crate::limits::files::{MAX_WORKFLOW_FILE_BYTES, read_at_most};

/// The most characters of a line quoted; a longer line is shown as a window around the column.
const LINE_CHARS: usize = 100;

/// `err` with the line it names quoted, the text of `path` taken from `text` when given, else
/// read again (an error of a nested file is quoted from that file).
pub(super) fn with_source(
    mut err: WorkflowError,
    path: &Path,
    text: Option<&str>,
) -> WorkflowError {
    let Some(line) = err.line.filter(|&l| l > 0) else {
        return err;
    };
    let read;
    let text = match text {
        Some(text) if err.file == path => text,
        _ => match read_at_most(&err.file, MAX_WORKFLOW_FILE_BYTES)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
        {
            Some(t) => {
                read = t;
                &read
            }
            None => return err,
        },
    };
    let Some(source) = text
        .lines()
        .nth(usize::try_from(line - 1).unwrap_or(usize::MAX))
    else {
        return err;
    };
    err.source_line = Some(quoted(source, err.column).into());
    err
}

/// The quote of one line: `source` made printable (no control character reaches the terminal)
/// and cut to a window of [`LINE_CHARS`] around `column`, with a caret line under it when the
/// column is known.
fn quoted(source: &str, column: Option<u64>) -> String {
    let chars: Vec<char> = source
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let col = column
        .and_then(|c| usize::try_from(c).ok())
        .map(|c| c.saturating_sub(1).min(chars.len()));
    let start = match col {
        Some(c) if c >= LINE_CHARS => c - LINE_CHARS / 2,
        _ => 0,
    };
    let end = chars.len().min(start + LINE_CHARS);
    let mut line = String::new();
    if start > 0 {
        line.push('…');
    }
    line.extend(&chars[start..end]);
    if end < chars.len() {
        line.push('…');
    }
    if let Some(c) = col {
        let offset = c - start + usize::from(start > 0);
        line.push('\n');
        line.extend(std::iter::repeat_n(' ', offset));
        line.push('^');
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_quoted_with_a_caret_at_its_column() {
        assert_eq!(quoted("  - b: [", Some(8)), "  - b: [\n       ^");
        assert_eq!(quoted("id: x", None), "id: x");
        // Control characters (a terminal escape) are shown as spaces.
        assert_eq!(quoted("a\u{1b}[2Jb", Some(1)), "a [2Jb\n^");
    }

    #[test]
    fn a_long_line_is_cut_around_its_column() {
        let long = format!("{}X{}", "a".repeat(500), "b".repeat(500));
        let q = quoted(&long, Some(501));
        let (line, caret) = q.split_once('\n').unwrap();
        assert!(line.starts_with('…') && line.ends_with('…'), "{line}");
        assert_eq!(line.chars().count(), LINE_CHARS + 2);
        assert_eq!(line.chars().nth(caret.len() - 1), Some('X'), "{q}");
    }
}
