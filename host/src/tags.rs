//! Run tags: `key: value` pairs given when a run starts, listed with it and searched by
//! (`weft run --tag`, `weft runs --tag`, `POST /runs {"tags"}`, `GET /runs?tag=`).
//!
//! A key is 1 to [`MAX_TAG_KEY`] characters of `A-Z a-z 0-9 . _ -`; a value is at most
//! [`MAX_TAG_VALUE`] characters with no control character (C0, DEL or C1) and no `,` (which separates the tags of a
//! filter); a run carries at most [`MAX_TAGS`]. A tag is written `key:value` on the command line
//! and in a filter, the value being everything after the first `:`.

use std::collections::BTreeMap;

/// The most tags a run may carry.
pub(crate) const MAX_TAGS: usize = 16;

/// The longest tag key, in characters.
pub(crate) const MAX_TAG_KEY: usize = 64;

/// The longest tag value, in characters.
pub(crate) const MAX_TAG_VALUE: usize = 256;

/// A key, as a regular expression (the API's document states it).
#[cfg(feature = "server")]
pub(crate) const KEY_PATTERN: &str = r"^[A-Za-z0-9._-]{1,64}$";

/// A value, as a regular expression (its length, 256 characters, stated apart).
#[cfg(feature = "server")]
pub(crate) const VALUE_PATTERN: &str = r"^[^,\x00-\x1f\x7f-\x9f]*$";

/// A filter of tags, [`parse_filter`]'s form, as a regular expression.
#[cfg(feature = "server")]
pub(crate) const FILTER_PATTERN: &str = r"^[A-Za-z0-9._-]{1,64}:[^,\x00-\x1f\x7f-\x9f]{0,256}(,[A-Za-z0-9._-]{1,64}:[^,\x00-\x1f\x7f-\x9f]{0,256})*$";

/// A tag or a set of tags that breaks the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid tag {shown}: {reason}")]
pub struct InvalidTag {
    /// The tag as shown in the message: quoted and cut when long.
    pub shown: String,
    /// What is wrong, and what is allowed.
    pub reason: String,
}

/// `text` quoted for a message, cut at 60 characters.
fn shown(text: &str) -> String {
    let mut cut: String = text.chars().take(60).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    format!("{cut:?}")
}

/// Checks one tag against the rule.
pub(crate) fn check_tag(key: &str, value: &str) -> Result<(), InvalidTag> {
    let refuse = |reason: String| {
        Err(InvalidTag {
            shown: shown(&format!("{key}:{value}")),
            reason,
        })
    };
    if key.is_empty() || key.chars().count() > MAX_TAG_KEY {
        return refuse(format!("a key is 1 to {MAX_TAG_KEY} characters"));
    }
    if !key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return refuse("a key is made of A-Z a-z 0-9 . _ - only".into());
    }
    if value.chars().count() > MAX_TAG_VALUE {
        return refuse(format!("a value is at most {MAX_TAG_VALUE} characters"));
    }
    if value.chars().any(|c| c.is_control() || c == ',') {
        return refuse("a value holds no control character and no `,`".into());
    }
    Ok(())
}

/// Checks a run's tags: each one, and how many.
pub(crate) fn check_tags(tags: &BTreeMap<String, String>) -> Result<(), InvalidTag> {
    if tags.len() > MAX_TAGS {
        return Err(InvalidTag {
            shown: format!("({} tags)", tags.len()),
            reason: format!("a run carries at most {MAX_TAGS} tags"),
        });
    }
    tags.iter().try_for_each(|(k, v)| check_tag(k, v))
}

/// One tag written `key:value`, checked.
#[cfg(any(feature = "cli", feature = "server"))]
pub(crate) fn parse_tag(text: &str) -> Result<(String, String), InvalidTag> {
    let Some((key, value)) = text.split_once(':') else {
        return Err(InvalidTag {
            shown: shown(text),
            reason: "write a tag as `key:value`, e.g. `team:payments`".into(),
        });
    };
    check_tag(key, value)?;
    Ok((key.to_owned(), value.to_owned()))
}

/// A filter of tags written `key:value,key:value` (every one must match), checked.
#[cfg(feature = "server")]
pub(crate) fn parse_filter(text: &str) -> Result<Vec<(String, String)>, InvalidTag> {
    text.split(',').map(parse_tag).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_read_as_key_and_value_and_refused_saying_the_rule() {
        assert_eq!(
            parse_tag("env:https://x.example:8080"),
            Ok(("env".into(), "https://x.example:8080".into()))
        );
        assert_eq!(parse_tag("empty:"), Ok(("empty".into(), String::new())));
        assert!(
            parse_tag("novalue")
                .unwrap_err()
                .reason
                .contains("key:value")
        );
        assert!(parse_tag("bad key:x").unwrap_err().reason.contains("A-Z"));
        assert!(parse_tag(":x").unwrap_err().reason.contains("1 to 64"));
        assert!(parse_tag("k:a\nb").unwrap_err().reason.contains("control"));
        let long = format!("k:{}", "x".repeat(MAX_TAG_VALUE + 1));
        assert!(parse_tag(&long).unwrap_err().reason.contains("256"));
        // Counted in characters, as the API's document counts them.
        assert!(parse_tag(&format!("k:{}", "é".repeat(MAX_TAG_VALUE))).is_ok());
        assert!(
            parse_tag("k:a\u{85}b")
                .unwrap_err()
                .reason
                .contains("control")
        );
        assert_eq!(
            parse_filter("team:a,env:prod"),
            Ok(vec![
                ("team".into(), "a".into()),
                ("env".into(), "prod".into())
            ])
        );
        let many: BTreeMap<String, String> = (0..=MAX_TAGS)
            .map(|i| (format!("k{i}"), String::new()))
            .collect();
        assert!(check_tags(&many).unwrap_err().reason.contains("at most 16"));
    }
}
