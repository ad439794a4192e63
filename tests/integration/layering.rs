//! The engine depends on nothing else of weft's but the limits module (docs/ARCHITECTURE.md):
//! no file under `host/src/engine` names a path that leaves it, in code or in its docs.
//!
//! A path leaves the engine when it starts at the crate (`crate::`, `$crate::`, `weft::`) and
//! goes on to anything but `engine` or `limits`, or when a chain of `super::` climbs above the
//! `engine` module from where it is written. Comments count too, so an intra-doc link never
//! points up (`[Runtime](crate::driver::Runtime)`); string literals do not.

use std::path::{Path, PathBuf};

/// The top-level modules the engine may name.
const ALLOWED: [&str; 2] = ["engine", "limits"];

/// The engine's source directory.
fn engine_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine")
}

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// How deep the module a file holds sits below the crate: `engine/mod.rs` 1, `engine/x.rs`
/// and `engine/x/mod.rs` 2, `engine/x/y.rs` 3.
fn file_depth(relative: &Path) -> usize {
    let parts: Vec<_> = relative.components().collect();
    let is_mod = relative.file_name().is_some_and(|n| n == "mod.rs");
    1 + parts.len() - usize::from(is_mod)
}

/// A path that leaves the engine: where, and what it names.
struct Leak {
    line: usize,
    path: String,
}

/// The paths of `source` (a file whose module sits at `depth`) that leave the engine.
fn leaks(source: &str, depth: usize) -> Vec<Leak> {
    let s: Vec<char> = source.chars().collect();
    let mut found = Vec::new();
    let mut line = 1;
    let mut braces = 0usize;
    // The brace depth at which each inline `mod NAME {` opened.
    let mut inline: Vec<usize> = Vec::new();
    let mut i = 0;
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let starts = |i: usize, word: &str| {
        word.chars()
            .enumerate()
            .all(|(k, c)| s.get(i + k) == Some(&c))
    };
    while i < s.len() {
        let c = s[i];
        let comment = starts(i, "//") || starts(i, "/*");
        if comment {
            // A comment: checked for paths like code, at this module depth.
            let block = starts(i, "/*");
            let mut end = i + 2;
            let mut nest = 1;
            while end < s.len() {
                if block {
                    if starts(end, "/*") {
                        nest += 1;
                        end += 1;
                    } else if starts(end, "*/") {
                        nest -= 1;
                        if nest == 0 {
                            end += 2;
                            break;
                        }
                        end += 1;
                    }
                } else if s[end] == '\n' {
                    break;
                }
                end += 1;
            }
            let text: String = s[i..end.min(s.len())].iter().collect();
            for (k, piece) in text.split('\n').enumerate() {
                check(piece, line + k, depth + inline.len(), &mut found);
            }
            line += text.matches('\n').count();
            i = end;
            continue;
        }
        if c == '"' || ((c == 'r' || c == 'b') && raw_string_at(&s, i).is_some()) {
            // A string literal: skipped, newlines counted.
            let end = if c == '"' {
                let mut end = i + 1;
                while end < s.len() && s[end] != '"' {
                    end += if s[end] == '\\' { 2 } else { 1 };
                }
                end + 1
            } else {
                let (open, hashes) = raw_string_at(&s, i).unwrap_or((i, 0));
                let mut end = open + 1;
                while end < s.len()
                    && !(s[end] == '"' && (1..=hashes).all(|h| s.get(end + h) == Some(&'#')))
                {
                    end += 1;
                }
                end + 1 + hashes
            };
            line += s[i..end.min(s.len())]
                .iter()
                .filter(|&&c| c == '\n')
                .count();
            i = end;
            continue;
        }
        if c == '\'' {
            // A char literal is skipped; a lifetime is not one.
            if s.get(i + 1) == Some(&'\\') {
                let mut end = i + 2;
                while end < s.len() && s[end] != '\'' {
                    end += 1;
                }
                i = end + 1;
                continue;
            }
            if s.get(i + 2) == Some(&'\'') {
                i += 3;
                continue;
            }
        }
        if c == '\n' {
            line += 1;
        } else if c == '{' {
            braces += 1;
        } else if c == '}' {
            if inline.last() == Some(&braces) {
                inline.pop();
            }
            braces = braces.saturating_sub(1);
        } else if starts(i, "mod") && (i == 0 || !ident(s[i - 1])) {
            let mut k = i + 3;
            if s.get(k).is_some_and(|c| c.is_whitespace()) {
                while s.get(k).is_some_and(|c| c.is_whitespace()) {
                    k += 1;
                }
                while s.get(k).is_some_and(|&c| ident(c)) {
                    k += 1;
                }
                while s.get(k).is_some_and(|c| c.is_whitespace()) {
                    k += 1;
                }
                if s.get(k) == Some(&'{') {
                    inline.push(braces + 1);
                }
            }
        }
        if (c == 'c' || c == 's' || c == 'w' || c == '$') && (i == 0 || !ident(s[i - 1])) {
            let rest: String = s[i..(i + 200).min(s.len())].iter().collect();
            let head = rest
                .split(|c: char| !(ident(c) || c == ':' || c == '$'))
                .next();
            if let Some(head) = head {
                check(head, line, depth + inline.len(), &mut found);
                i += head.chars().count().max(1);
                continue;
            }
        }
        i += 1;
    }
    found
}

/// Where a raw string (`r"`, `r#"`, `br"`...) starting at `i` opens, and its `#` count.
fn raw_string_at(s: &[char], i: usize) -> Option<(usize, usize)> {
    if i > 0 && (s[i - 1].is_alphanumeric() || s[i - 1] == '_') {
        return None;
    }
    let mut k = i;
    if s.get(k) == Some(&'b') {
        k += 1;
    }
    if s.get(k) != Some(&'r') {
        return None;
    }
    k += 1;
    let mut hashes = 0;
    while s.get(k) == Some(&'#') {
        hashes += 1;
        k += 1;
    }
    (s.get(k) == Some(&'"')).then_some((k, hashes))
}

/// Records every path in `text` (code or a comment line, in a module at `depth`) that leaves
/// the engine.
fn check(text: &str, line: usize, depth: usize, found: &mut Vec<Leak>) {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        if i > 0 && (ident(bytes[i - 1]) || bytes[i - 1] == '$') {
            i += 1;
            continue;
        }
        let rest: String = bytes[i..].iter().collect();
        let path: String = rest
            .chars()
            .take_while(|&c| ident(c) || c == ':' || c == '$')
            .collect();
        let segments: Vec<&str> = path.split("::").collect();
        let root = matches!(segments[0], "crate" | "$crate" | "weft");
        if root && segments.len() > 1 && !ALLOWED.contains(&segments[1]) {
            found.push(Leak {
                line,
                path: path.clone(),
            });
        } else if segments[0] == "super" {
            let climbs = segments.iter().take_while(|s| **s == "super").count();
            if climbs >= depth {
                found.push(Leak {
                    line,
                    path: path.clone(),
                });
            }
        }
        i += path.chars().count().max(1);
    }
}

#[test]
fn the_engine_names_nothing_of_weft_but_itself_and_the_limits() {
    let dir = engine_dir();
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    files.sort();
    assert!(files.len() > 20, "the engine's files are found");
    let mut problems = Vec::new();
    for path in &files {
        let relative = path.strip_prefix(&dir).expect("below the engine");
        let source = std::fs::read_to_string(path).expect("readable");
        for leak in leaks(&source, file_depth(relative)) {
            problems.push(format!(
                "host/src/engine/{}:{}: `{}` leaves the engine",
                relative.display(),
                leak.line,
                leak.path
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the engine may name only crate::engine and crate::limits:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_layering_check_sees_what_leaves_and_what_does_not() {
    let source = r#"//! See [`Runtime`](crate::driver::Runtime).
use super::model::Graph;
use crate::limits::MAX;
use crate::store::Store;
fn f() -> &'static str { let c = '{'; "crate::driver is only text" }
#[cfg(test)]
mod tests {
    use super::super::sim;
    use super::super::super::store;
}
use super::super::outside;
"#;
    let found: Vec<(usize, String)> = leaks(source, 2)
        .into_iter()
        .map(|l| (l.line, l.path))
        .collect();
    assert_eq!(
        found,
        [
            (1, "crate::driver::Runtime".to_owned()),
            (4, "crate::store::Store".to_owned()),
            (9, "super::super::super::store".to_owned()),
            (11, "super::super::outside".to_owned()),
        ]
    );
    assert_eq!(file_depth(Path::new("mod.rs")), 1);
    assert_eq!(file_depth(Path::new("drive.rs")), 2);
    assert_eq!(file_depth(Path::new("machines/mod.rs")), 2);
    assert_eq!(file_depth(Path::new("machines/agent/tools.rs")), 4);
}
