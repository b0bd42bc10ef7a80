//! Value parsers and clean-ups shared by several subcommands.

use std::time::Duration;

/// `--sidecar-names` entries trimmed, empty ones dropped.
pub fn clean_names(names: &[String]) -> Vec<String> {
    names
        .iter()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

/// The most seconds a duration flag takes: a day is beyond any sensible setting, and
/// keeps every derived duration far from overflowing.
const MAX_SECONDS: f64 = 86_400.0;

/// A duration in seconds: a finite number from 0 to `MAX_SECONDS`.
pub(super) fn parse_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !v.is_finite() || !(0.0..=MAX_SECONDS).contains(&v) {
        return Err(format!(
            "`{s}` seconds: expected a finite number from 0 to {MAX_SECONDS}"
        ));
    }
    Ok(v)
}

/// The longest `--series-ttl` and the like: a week.
const MAX_DURATION: Duration = Duration::from_secs(7 * 86_400);

/// A duration with a unit, `90s`, `30m` or `1h` (a bare number is seconds), from 1 s
/// to a week.
pub(super) fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (number, unit) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((at, _)) => t.split_at(at),
        None => (t, "s"),
    };
    let per_unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(format!("`{s}`: expected a duration like 90s, 30m or 1h")),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{s}`: expected a duration like 90s, 30m or 1h"))?;
    let d = Duration::from_secs(n.saturating_mul(per_unit));
    if d < Duration::from_secs(1) || d > MAX_DURATION {
        return Err(format!("`{s}`: expected a duration from 1s to 168h"));
    }
    Ok(d)
}

/// A polling interval: at least 0.1 s (the pod source would spin below).
pub(super) fn parse_poll_seconds(s: &str) -> Result<f64, String> {
    let v = parse_seconds(s)?;
    if v < 0.1 {
        return Err(format!("`{s}` seconds: a poll interval is at least 0.1"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("120"), Ok(Duration::from_secs(120)));
        for bad in ["0s", "1d", "h", "-1h", "200h", "1.5h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
