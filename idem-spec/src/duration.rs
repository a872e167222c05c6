//! Durations as the attribute, the configuration and the operator tool write them: `"30s"`,
//! `"15m"`, `"24h"`, `"7d"` and combinations of whole units from the largest to the smallest
//! (`"1h30m"`, `"2d12h"`).

use std::fmt;
use std::time::Duration;

/// The longest TTL an operation may have: 365 days. Keys kept longer are almost always a
/// mistake in the unit (`"365d"` meant as hours, say), and they grow the key table for ever.
pub const MAX_TTL: Duration = Duration::from_secs(365 * 86_400);

const UNITS: [(char, u64, &str); 4] = [
    ('d', 86_400, "day"),
    ('h', 3600, "hour"),
    ('m', 60, "minute"),
    ('s', 1, "second"),
];

/// Why a duration was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DurationError {
    /// Nothing to read.
    Empty,
    /// A unit without a number before it, or a number without a unit after it.
    Malformed,
    /// A unit other than `s`, `m`, `h`, `d` (lowercase).
    UnknownUnit,
    /// Units out of order (`"30m1h"`) or repeated (`"1h1h"`).
    Order,
    /// Zero in all.
    Zero,
    /// Beyond what a `u64` of seconds holds.
    Overflow,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Empty => "the duration is empty",
            Self::Malformed => "every number needs a unit after it, such as `30s`",
            Self::UnknownUnit => "units are `s`, `m`, `h` and `d`",
            Self::Order => "units go from the largest to the smallest, each once, such as `1h30m`",
            Self::Zero => "the duration must be longer than zero",
            Self::Overflow => "the duration is too long",
        })
    }
}

impl std::error::Error for DurationError {}

/// Parses a duration: whole numbers with units `d`, `h`, `m`, `s`, largest first, no spaces.
///
/// ```
/// use std::time::Duration;
/// use idem_spec::parse_duration;
///
/// assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
/// assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5_400)));
/// assert!(parse_duration("24H").is_err());
/// assert!(parse_duration("0s").is_err());
/// ```
///
/// # Errors
/// [`DurationError`] says what is wrong.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut rest = text;
    let mut total: u64 = 0;
    // Index into UNITS of the next unit allowed: strictly decreasing units.
    let mut next_unit = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(DurationError::Malformed);
        }
        let amount: u64 = rest[..digits]
            .parse()
            .map_err(|_| DurationError::Overflow)?;
        rest = &rest[digits..];
        let Some(unit) = rest.chars().next() else {
            return Err(DurationError::Malformed);
        };
        let position = UNITS
            .iter()
            .position(|(u, _, _)| *u == unit)
            .ok_or(DurationError::UnknownUnit)?;
        if position < next_unit {
            return Err(DurationError::Order);
        }
        next_unit = position + 1;
        rest = &rest[unit.len_utf8()..];
        let seconds = amount
            .checked_mul(UNITS[position].1)
            .ok_or(DurationError::Overflow)?;
        total = total.checked_add(seconds).ok_or(DurationError::Overflow)?;
    }
    if total == 0 {
        return Err(DurationError::Zero);
    }
    Ok(Duration::from_secs(total))
}

/// Writes whole seconds back in the syntax [`parse_duration`] reads (`"1h30m"`); sub-second
/// parts are dropped, and zero is `"0s"`.
///
/// ```
/// use std::time::Duration;
/// use idem_spec::format_duration;
///
/// assert_eq!(format_duration(Duration::from_secs(90_000)), "1d1h");
/// ```
#[must_use]
pub fn format_duration(duration: Duration) -> String {
    let mut secs = duration.as_secs();
    if secs == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    for (unit, size, _) in UNITS {
        if secs >= size {
            out.push_str(&(secs / size).to_string());
            out.push(unit);
            secs %= size;
        }
    }
    out
}

/// Says a duration in words, for documentation: `"24 hours"`, `"1 hour 30 minutes"`.
///
/// ```
/// use std::time::Duration;
/// use idem_spec::describe_duration;
///
/// assert_eq!(describe_duration(Duration::from_secs(86_400)), "24 hours");
/// assert_eq!(describe_duration(Duration::from_secs(7 * 86_400)), "7 days");
/// assert_eq!(describe_duration(Duration::from_secs(5_400)), "1 hour 30 minutes");
/// ```
#[must_use]
pub fn describe_duration(duration: Duration) -> String {
    let secs = duration.as_secs();
    // A whole number of days up to two reads better in hours ("24 hours", "48 hours").
    let units: &[(char, u64, &str)] = if secs.is_multiple_of(86_400) && secs > 2 * 86_400 {
        &UNITS
    } else {
        &UNITS[1..]
    };
    let mut rest = secs;
    let mut words = Vec::new();
    for &(_, size, name) in units {
        if rest >= size {
            let n = rest / size;
            rest %= size;
            words.push(format!("{n} {name}{}", if n == 1 { "" } else { "s" }));
        }
    }
    if words.is_empty() {
        return "0 seconds".to_owned();
    }
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(text: &str) -> Result<u64, DurationError> {
        parse_duration(text).map(|d| d.as_secs())
    }

    #[test]
    fn units_and_combinations() {
        assert_eq!(secs("30s"), Ok(30));
        assert_eq!(secs("15m"), Ok(900));
        assert_eq!(secs("24h"), Ok(86_400));
        assert_eq!(secs("7d"), Ok(604_800));
        assert_eq!(secs("1h30m"), Ok(5_400));
        assert_eq!(
            secs("2d12h30m15s"),
            Ok(2 * 86_400 + 12 * 3600 + 30 * 60 + 15)
        );
    }

    #[test]
    fn refused_with_a_reason() {
        assert_eq!(secs(""), Err(DurationError::Empty));
        assert_eq!(secs("24"), Err(DurationError::Malformed));
        assert_eq!(secs("h"), Err(DurationError::Malformed));
        assert_eq!(secs("1h 30m"), Err(DurationError::Malformed));
        assert_eq!(secs("24 parsecs"), Err(DurationError::UnknownUnit));
        assert_eq!(secs("24H"), Err(DurationError::UnknownUnit));
        assert_eq!(secs("-1h"), Err(DurationError::Malformed));
        assert_eq!(secs("1.5h"), Err(DurationError::UnknownUnit));
        assert_eq!(secs("0s"), Err(DurationError::Zero));
        assert_eq!(secs("30m1h"), Err(DurationError::Order));
        assert_eq!(secs("1h1h"), Err(DurationError::Order));
        assert_eq!(secs("99999999999999999999d"), Err(DurationError::Overflow));
        assert_eq!(secs("999999999999999999d"), Err(DurationError::Overflow));
        assert_eq!(secs("1h€"), Err(DurationError::Malformed));
        assert_eq!(secs("1€"), Err(DurationError::UnknownUnit));
    }

    #[test]
    fn formatting_round_trips() {
        for text in ["30s", "15m", "7d", "1h30m", "1d1s", "365d"] {
            let parsed = parse_duration(text).unwrap_or_default();
            assert_eq!(format_duration(parsed), text);
        }
        assert_eq!(format_duration(Duration::from_secs(86_400)), "1d");
        assert_eq!(format_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn words() {
        assert_eq!(describe_duration(Duration::from_secs(30)), "30 seconds");
        assert_eq!(describe_duration(Duration::from_secs(60)), "1 minute");
        assert_eq!(
            describe_duration(Duration::from_secs(2 * 86_400)),
            "48 hours"
        );
        assert_eq!(describe_duration(MAX_TTL), "365 days");
    }
}
