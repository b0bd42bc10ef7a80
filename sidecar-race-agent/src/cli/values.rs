//! Value parsers and clean-ups shared by several subcommands.

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

/// A polling interval: at least 0.1 s (the pod source would spin below).
pub(super) fn parse_poll_seconds(s: &str) -> Result<f64, String> {
    let v = parse_seconds(s)?;
    if v < 0.1 {
        return Err(format!("`{s}` seconds: a poll interval is at least 0.1"));
    }
    Ok(v)
}
