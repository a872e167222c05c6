//! Durations written as `"30s"`, `"15m"`, `"24h"`, `"7d"` or combinations (`"1h30m"`).

/// Parses a duration into whole seconds; `None` when it is not one, or is zero.
pub(crate) fn parse_seconds(text: &str) -> Option<u64> {
    let mut total: u64 = 0;
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let amount: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total = total.checked_add(amount.checked_mul(unit)?)?;
    }
    (total > 0).then_some(total)
}

#[cfg(test)]
mod tests {
    use super::parse_seconds;

    #[test]
    fn units_and_combinations() {
        assert_eq!(parse_seconds("30s"), Some(30));
        assert_eq!(parse_seconds("15m"), Some(900));
        assert_eq!(parse_seconds("24h"), Some(86_400));
        assert_eq!(parse_seconds("7d"), Some(604_800));
        assert_eq!(parse_seconds("1h30m"), Some(5_400));
    }

    #[test]
    fn refused() {
        for bad in [
            "",
            "24",
            "h",
            "24 parsecs",
            "0s",
            "24H",
            "-1h",
            "1.5h",
            "1h 30m",
        ] {
            assert_eq!(parse_seconds(bad), None, "{bad:?}");
        }
        assert_eq!(parse_seconds("99999999999999999999d"), None);
    }
}
