//! Durations as weft reads them where a person writes one (`weft prune --older-than`,
//! `POST /prune`, `weft serve --retention`, a workflow's `retention:`): numbers with units,
//! `30d`, `12h`, `90m`, `1h 30m`, read by humantime.
//!
//! The form taken is exact, so the API's document can say it as a pattern ([`AGE_PATTERN`])
//! and the server takes every string that matches it and no other: up to [`MAX_PARTS`] parts
//! separated by one space, each 1 to 9 digits and a unit, no sign, no fraction. Nine digits of
//! years, eight times over, stay far inside what a duration holds.

use std::time::Duration;

/// The units a part may carry, longest first where one starts another.
const UNITS: [&str; 30] = [
    "nsec", "ns", "usec", "us", "msec", "ms", "seconds", "second", "sec", "s", "minutes", "minute",
    "min", "m", "hours", "hour", "hr", "h", "days", "day", "d", "weeks", "week", "w", "months",
    "month", "M", "years", "year", "y",
];

/// The most parts a duration has.
const MAX_PARTS: usize = 8;

/// [`parse_age`]'s form as a regular expression (ECMA 262, as OpenAPI documents take it).
#[cfg(any(feature = "server", test))]
pub(crate) const AGE_PATTERN: &str = "^[0-9]{1,9}(nsec|ns|usec|us|msec|ms|seconds|second|sec|s|minutes|minute|min|m|hours|hour|hr|h|days|day|d|weeks|week|w|months|month|M|years|year|y)( [0-9]{1,9}(nsec|ns|usec|us|msec|ms|seconds|second|sec|s|minutes|minute|min|m|hours|hour|hr|h|days|day|d|weeks|week|w|months|month|M|years|year|y)){0,7}$";

/// Whether `part` is 1 to 9 digits and a unit.
fn is_part(part: &str) -> bool {
    let digits = part.bytes().take_while(u8::is_ascii_digit).count();
    (1..=9).contains(&digits) && UNITS.contains(&&part[digits..])
}

/// The duration `text` says; the error names what to write.
pub(crate) fn parse_age(text: &str) -> Result<Duration, String> {
    let refuse = || {
        let shown: String = text.chars().take(40).collect();
        format!(
            "{shown:?} is not a duration: write numbers with units, e.g. `30d`, `12h`, `90m` or \
             `1h 30m` (s, m, h, d, w, M, y and their long names)"
        )
    };
    let parts: Vec<&str> = text.split(' ').collect();
    if parts.len() > MAX_PARTS || !parts.iter().all(|p| is_part(p)) {
        return Err(refuse());
    }
    humantime::parse_duration(text).map_err(|_| refuse())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_reads_and_the_form_is_exact() {
        for unit in UNITS {
            assert!(parse_age(&format!("2{unit}")).is_ok(), "{unit}");
            assert!(
                AGE_PATTERN.contains(&format!("|{unit}|"))
                    || AGE_PATTERN.contains(&format!("({unit}|"))
                    || AGE_PATTERN.contains(&format!("|{unit})")),
                "{unit}"
            );
        }
        assert_eq!(parse_age("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_age("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_age("0s"), Ok(Duration::ZERO));
        for bad in [
            "",
            "00",
            " 1d",
            "1d ",
            "1 d",
            "1.5h",
            "-1d",
            "1x",
            "1234567890s",
            "1d  1h",
        ] {
            assert!(parse_age(bad).is_err(), "{bad:?}");
        }
        let most = ["999999999y"; MAX_PARTS].join(" ");
        assert!(parse_age(&most).is_ok(), "the largest form fits a duration");
        assert!(parse_age(&["1s"; MAX_PARTS + 1].join(" ")).is_err());
    }
}
