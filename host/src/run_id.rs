//! Run ids: the one alphabet and length every way in accepts — the command line, the HTTP API
//! and the embedding API all check ids with [`check_run_id`].
//!
//! A run id is 1 to [`MAX_RUN_ID_LEN`] characters of `A-Z a-z 0-9 . _ -` and does not start
//! with `.`: it is safe in a file name, a URL path segment and a shell word, and it can never
//! hold the separators a storage key or a path uses. Generated ids (ULIDs) are of this form.
//!
//! The ids of workflow tools' child runs (S125) are a namespace of their own, which only the
//! agent calling the tool may use: a new run started from outside ([`check_new_run_id`]: the
//! command line, the HTTP API, the embedding API) is refused an id in it, so nobody can plant
//! a run where an agent would look for its child.

/// The longest run id accepted, in characters.
pub(crate) const MAX_RUN_ID_LEN: usize = 128;

/// How a valid run id is made, as refusals print it.
pub(crate) const RUN_ID_RULE: &str =
    "a run id is 1 to 128 characters of A-Z a-z 0-9 . _ - and does not start with `.`";

/// A run id that breaks the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid run id {shown}: {reason}; {RUN_ID_RULE}")]
pub struct InvalidRunId {
    /// The id as shown in the message: quoted, escaped, and cut when long.
    pub shown: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The longest part of a refused id a message repeats.
const SHOWN_CHARS: usize = 40;

/// Checks `id` against the rule; the error says what is wrong and what is allowed.
pub(crate) fn check_run_id(id: &str) -> Result<(), InvalidRunId> {
    let refuse = |reason: String| {
        let mut cut: String = id.chars().take(SHOWN_CHARS).collect();
        if cut.len() < id.len() {
            cut.push('…');
        }
        Err(InvalidRunId {
            shown: format!("{cut:?}"),
            reason,
        })
    };
    if id.is_empty() {
        return refuse("it is empty".into());
    }
    let chars = id.chars().count();
    if chars > MAX_RUN_ID_LEN {
        return refuse(format!("it is {chars} characters long"));
    }
    if id.starts_with('.') {
        return refuse("it starts with `.`".into());
    }
    if let Some((at, c)) = id
        .chars()
        .enumerate()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return refuse(format!(
            "character {} is {c:?} (U+{:04X})",
            at + 1,
            u32::from(c)
        ));
    }
    Ok(())
}

/// Whether `id` lies in the namespace of workflow tools' child runs: a `.`-separated segment
/// after the first that starts with `tool-` (an agent's tool call, `AGENT.tool-CALLID`), or a
/// last segment of 32 lowercase hex digits (a child id cut to length and ended with a digest).
pub(crate) fn in_child_namespace(id: &str) -> bool {
    let mut segments = id.split('.').skip(1).peekable();
    while let Some(segment) = segments.next() {
        if segment.starts_with("tool-") {
            return true;
        }
        if segments.peek().is_none()
            && segment.len() == 32
            && segment
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return true;
        }
    }
    false
}

/// Checks the id of a new run started from outside: the rule of run ids, and not in the
/// namespace of workflow tools' child runs ([`in_child_namespace`]).
pub(crate) fn check_new_run_id(id: &str) -> Result<(), InvalidRunId> {
    check_run_id(id)?;
    if in_child_namespace(id) {
        let mut cut: String = id.chars().take(SHOWN_CHARS).collect();
        if cut.len() < id.len() {
            cut.push('…');
        }
        return Err(InvalidRunId {
            shown: format!("{cut:?}"),
            reason: "it lies in the namespace of the child runs weft starts for an agent's workflow tool calls (a segment after a `.` starting with `tool-`, or a last segment of 32 hex digits), which only the agent making the call may use; choose an id outside it".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alphabet_and_length_are_enforced() {
        for ok in [
            "a",
            "01JABCDEF",
            "order-42_v1.2",
            "A.b",
            &"x".repeat(MAX_RUN_ID_LEN),
        ] {
            assert_eq!(check_run_id(ok), Ok(()), "{ok}");
        }
        let ulid = ulid::Ulid::new().to_string();
        assert_eq!(check_run_id(&ulid), Ok(()));
        for (bad, why) in [
            ("", "empty"),
            (".hidden", "starts with `.`"),
            ("victim\u{0}zz", "'\\0'"),
            ("a b", "' '"),
            ("a/b", "'/'"),
            ("tab\there", "'\\t'"),
            ("é", "'é'"),
        ] {
            let err = check_run_id(bad).expect_err(bad);
            assert!(err.to_string().contains(why), "{bad:?}: {err}");
            assert!(err.to_string().contains(RUN_ID_RULE), "{err}");
        }
        for child in [
            "r1.helper.tool-call_1",
            "r1.outer.helper.tool-c.i0.n2",
            "r1.0123456789abcdef0123456789abcdef",
        ] {
            assert_eq!(check_run_id(child), Ok(()), "{child}");
            assert!(in_child_namespace(child), "{child}");
            let err = check_new_run_id(child).expect_err(child);
            assert!(err.to_string().contains("workflow tool"), "{err}");
        }
        for outside in [
            "tool-1",
            "order-42_v1.2",
            "a.tools",
            "a.my-tool-x",
            "0123456789abcdef0123456789abcdef",
            "a.0123456789ABCDEF0123456789ABCDEF",
            "a.0123456789abcdef0123456789abcde",
        ] {
            assert_eq!(check_new_run_id(outside), Ok(()), "{outside}");
        }
        let long = "y".repeat(100_000);
        let err = check_run_id(&long).expect_err("long");
        assert!(err.to_string().contains("100000 characters"), "{err}");
        assert!(
            err.to_string().len() < 400,
            "the message repeats the whole id"
        );
    }
}
