//! What the YAML reader reports about a workflow file, as plain sentences (the file, line and
//! column are added by [`super::WorkflowError`]).

use std::borrow::Cow;

use serde_saphyr::budget::BudgetBreach;
use serde_saphyr::{Budget, Error, MessageFormatter, UserMessageFormatter};

/// The sentence for a YAML or shape error, without its position.
pub(super) fn message(e: &Error) -> String {
    let text: Cow<str> = match original(e) {
        Error::Budget { breach, .. } => Cow::Owned(budget(breach)),
        Error::AliasReplayCounterOverflow { .. }
        | Error::AliasReplayLimitExceeded { .. }
        | Error::AliasExpansionLimitExceeded { .. }
        | Error::AliasReplayStackDepthExceeded { .. } => Cow::Borrowed(BOMB),
        Error::InvalidScalar { ty, .. } => Cow::Owned(match *ty {
            "u64" => format!("expected a whole number from 0 to {}", u64::MAX),
            "u32" => format!("expected a whole number from 0 to {}", u32::MAX),
            "f64" | "f32" | "floating point" => "expected a number".into(),
            "bool" => "expected `true` or `false`".into(),
            other => format!("expected a value of type {other}"),
        }),
        Error::Unexpected { expected, .. } => Cow::Owned(match *expected {
            "mapping start" => {
                "expected a mapping (`key: value` lines, or `{ key: value }`)".into()
            }
            "sequence start" => "expected a list (`- item` lines, or `[a, b]`)".into(),
            "string scalar" => "expected a string".into(),
            other => format!("expected {other}"),
        }),
        other => UserMessageFormatter.format_message(other),
    };
    // One line, without control characters.
    text.lines()
        .next()
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_control())
        .collect()
}

/// The error itself, inside the wrappers that add a snippet or where an alias was used.
fn original(mut e: &Error) -> &Error {
    while let Error::AliasError { error, .. } | Error::WithSnippet { error, .. } = e {
        e = error;
    }
    e
}

/// What a file that repeats anchors and aliases beyond the reader's limits is told.
const BOMB: &str = "the file repeats anchors, aliases or merge keys too often (a YAML bomb?)";

fn budget(breach: &BudgetBreach) -> String {
    let limits = Budget::default();
    match breach {
        BudgetBreach::Depth { .. } => format!(
            "the file nests too deeply (more than {} levels)",
            limits.max_depth
        ),
        BudgetBreach::Nodes { .. } => format!(
            "the file has too many values (more than {})",
            limits.max_nodes
        ),
        BudgetBreach::Events { .. } => format!(
            "the file is too long for the YAML reader (more than {} parser events)",
            limits.max_events
        ),
        BudgetBreach::Documents { .. } => "the file holds too many YAML documents".into(),
        BudgetBreach::ScalarBytes { .. } => format!(
            "the file's strings are too long (more than {} MiB in all)",
            limits.max_total_scalar_bytes >> 20
        ),
        BudgetBreach::Aliases { .. }
        | BudgetBreach::Anchors { .. }
        | BudgetBreach::AliasAnchorRatio { .. }
        | BudgetBreach::MergeKeys { .. } => BOMB.into(),
        _ => "the file is too large or too complex for the YAML reader".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(text: &str) -> String {
        let r: Result<serde_json::Value, Error> = serde_saphyr::from_str(text);
        r.map(|_| String::new()).unwrap_or_else(|e| message(&e))
    }

    #[test]
    fn budget_breaches_are_sentences() {
        let deep = format!("{}1{}", "[".repeat(70), "]".repeat(70));
        assert_eq!(
            error_of(&deep),
            "the file nests too deeply (more than 64 levels)"
        );
    }

    #[test]
    fn a_yaml_bomb_is_refused_in_words_not_parser_debris() {
        // Ten levels of ten aliases each: the reader's limits end it, behind alias wrappers.
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let refs = vec![format!("*a{}", i - 1); 10].join(", ");
            bomb.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        assert_eq!(
            error_of(&bomb),
            "the file has too many values (more than 250000)"
        );
    }

    #[test]
    fn type_mismatches_say_what_was_expected() {
        let r: Result<std::collections::BTreeMap<String, u64>, Error> =
            serde_saphyr::from_str("a: -1");
        let e = r.expect_err("negative");
        assert_eq!(
            message(&e),
            format!("expected a whole number from 0 to {}", u64::MAX)
        );
    }
}
