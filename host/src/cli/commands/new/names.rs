//! Plugin names: the rule a name follows, and the names Rust and cargo reserve.

/// The longest plugin name: a tool name may have at most 64 characters.
const MAX_NAME_LEN: usize = 64;

/// The rule a plugin name follows, as refusals state it.
const NAME_RULE: &str = "a plugin name is 1 to 64 characters of lowercase letters a-z, digits \
                         0-9 and `-`, starting with a letter and not ending with `-` \
                         (e.g. `greet` or `word-count`)";

/// Names cargo refuses for a package, or that clash with the project's own dependencies.
pub(super) const RESERVED_NAMES: &[&str] = &[
    "test",
    "core",
    "std",
    "alloc",
    "proc-macro",
    "wit-bindgen",
    "serde",
    "serde-json",
    "weft-plugin",
    // Rust keywords (cargo refuses them as package names).
    "as",
    "async",
    "await",
    "box",
    "break",
    "const",
    "continue",
    "crate",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "fn",
    "for",
    "gen",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "match",
    "mod",
    "move",
    "mut",
    "pub",
    "ref",
    "return",
    "self",
    "static",
    "struct",
    "super",
    "trait",
    "true",
    "try",
    "type",
    "unsafe",
    "use",
    "where",
    "while",
    "yield",
    "abstract",
    "become",
    "do",
    "final",
    "macro",
    "override",
    "priv",
    "typeof",
    "unsized",
    "virtual",
];

/// Checks a plugin name: 1 to 64 characters of lowercase letters a-z, digits 0-9 and `-`,
/// starting with a letter and not ending with `-`, and not a name cargo or the project's own
/// dependencies reserve.
pub fn check_name(name: &str) -> Result<(), String> {
    let shown: String = name.chars().take(MAX_NAME_LEN + 8).collect();
    let fits = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !fits {
        return Err(format!("invalid plugin name {shown:?}: {NAME_RULE}"));
    }
    if RESERVED_NAMES.contains(&name) {
        return Err(format!(
            "invalid plugin name {name:?}: Rust or cargo reserves it; choose another, e.g. \
             `my-{name}`"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rule() {
        for good in ["greet", "word-count", "a1", "x"] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        let long = "a".repeat(MAX_NAME_LEN + 1);
        for bad in [
            "", "Greet", "1greet", "greet-", "my_step", "my step", "é", "../x", &long,
        ] {
            let err = check_name(bad).expect_err(bad);
            assert!(err.contains(NAME_RULE), "{err}");
        }
        for reserved in ["test", "fn", "serde-json"] {
            let err = check_name(reserved).expect_err(reserved);
            assert!(err.contains("reserves"), "{err}");
        }
    }
}
