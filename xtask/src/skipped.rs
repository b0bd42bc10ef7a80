//! Tests that skipped instead of running: each leaves a file named after it, holding
//! why, in a directory the test run is given (`SIDECAR_RACE_SKIP_DIR`, read by
//! `tests/src/root.rs`). libtest counts a skipped test as passed; the summary does not.

use std::{collections::BTreeMap, io, path::Path};

/// The variable that tells the tests where to record their skips.
pub const DIR_ENV: &str = "SIDECAR_RACE_SKIP_DIR";

/// Empties `dir` (created if missing) before a test run.
pub fn fresh(dir: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::create_dir_all(dir)
}

/// How many tests skipped, by reason.
pub fn by_reason(dir: &Path) -> io::Result<BTreeMap<String, u64>> {
    let mut reasons = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let reason = std::fs::read_to_string(entry?.path())?;
        *reasons.entry(reason.trim().to_string()).or_insert(0) += 1;
    }
    Ok(reasons)
}

/// The closing lines of a test run: one per skip reason, then
/// `tests: N passed, N failed, N skipped`, where skipped tests are not passed ones.
pub fn summary(passed: u64, failed: u64, skipped: &BTreeMap<String, u64>) -> Vec<String> {
    let total: u64 = skipped.values().sum();
    let mut lines: Vec<String> = skipped
        .iter()
        .map(|(reason, n)| format!("skipped {n} tests: {reason}"))
        .collect();
    lines.push(format!(
        "tests: {} passed, {failed} failed, {total} skipped",
        passed.saturating_sub(total)
    ));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skipped_tests_are_counted_apart_from_passed_ones_with_their_reason() {
        let dir = std::env::temp_dir().join(format!("xtask-skips-{}", std::process::id()));
        fresh(&dir).unwrap();
        std::fs::write(dir.join("verdicts.a"), "needs root (eBPF)").unwrap();
        std::fs::write(dir.join("scenarios.b"), "needs root (eBPF)\n").unwrap();
        let skipped = by_reason(&dir).unwrap();
        fresh(&dir).unwrap();
        assert!(by_reason(&dir).unwrap().is_empty(), "fresh empties it");
        std::fs::remove_dir(&dir).unwrap();
        assert_eq!(
            summary(10, 1, &skipped),
            [
                "skipped 2 tests: needs root (eBPF)",
                "tests: 8 passed, 1 failed, 2 skipped",
            ]
        );
        assert_eq!(
            summary(10, 0, &BTreeMap::new()),
            ["tests: 10 passed, 0 failed, 0 skipped"]
        );
    }
}
