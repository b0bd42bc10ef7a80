//! Running commands with what is being run shown, failing on a non-zero exit.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
};

use anyhow::{Context, bail};

use crate::skipped;

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// Where cargo puts what it builds: `CARGO_TARGET_DIR` when set (relative to the
/// workspace root, as cargo reads it), else `target/` there. Outputs of xtask's own
/// (images, reports, skip records) stay under the workspace's `target/`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => workspace_root().join(dir),
        _ => workspace_root().join("target"),
    }
}

/// `cargo` as the one running xtask, in the workspace root.
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(workspace_root());
    cmd
}

pub fn checked(cmd: &mut Command) -> anyhow::Result<()> {
    eprintln!("xtask: running {}", show(cmd));
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {}", show(cmd)))?;
    if !status.success() {
        bail!("{} failed ({status})", show(cmd));
    }
    Ok(())
}

/// What the test runs of one `cargo xtask test` counted, summed for its closing line.
#[derive(Debug, Default)]
pub struct Tally {
    passed: u64,
    failed: u64,
    skipped: std::collections::BTreeMap<String, u64>,
}

impl Tally {
    /// `n` tests of a tier that did not run (e.g. not root, with
    /// `SIDECAR_RACE_SKIP_ROOT=1`), each a skipped test with the tier's reason.
    pub fn skip_tests(&mut self, n: u64, reason: &str) {
        // The summary takes skips out of libtest's passed count; a tier that never
        // reached libtest was not counted there.
        self.passed += n;
        *self.skipped.entry(reason.to_string()).or_insert(0) += n;
    }

    /// A check xtask makes itself (not a libtest test), printed as libtest prints one.
    pub fn record(&mut self, name: &str, outcome: Result<(), String>) {
        match outcome {
            Ok(()) => {
                println!("test {name} ... ok");
                self.passed += 1;
            }
            Err(why) => {
                println!("test {name} ... FAILED: {why}");
                self.failed += 1;
            }
        }
    }

    /// One line per reason tests skipped for, then the plain closing line
    /// `tests: N passed, N failed, N skipped`.
    pub fn print(&self) {
        for line in skipped::summary(self.passed, self.failed, &self.skipped) {
            println!("{line}");
        }
    }
}

/// Runs a `cargo test` command, passing its output through, and adds every test
/// binary's result and the tests that skipped (with their reasons) to `tally`.
pub fn tests(cmd: &mut Command, tally: &mut Tally) -> anyhow::Result<()> {
    use std::io::{BufRead, BufReader};
    let skips = workspace_root().join("target/test-skips");
    skipped::fresh(&skips).with_context(|| format!("cannot empty {}", skips.display()))?;
    cmd.env(skipped::DIR_ENV, &skips);
    eprintln!("xtask: running {}", show(cmd));
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {}", show(cmd)))?;
    let stdout = child.stdout.take().expect("piped stdout");
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading the test output")?;
        println!("{line}");
        if let Some((p, f)) = result_counts(&line) {
            tally.passed += p;
            tally.failed += f;
        }
    }
    let status = child.wait()?;
    let skipped =
        skipped::by_reason(&skips).with_context(|| format!("cannot read {}", skips.display()))?;
    for (reason, n) in skipped {
        *tally.skipped.entry(reason).or_insert(0) += n;
    }
    if !status.success() {
        bail!("{} failed ({status})", show(cmd));
    }
    Ok(())
}

/// `test result: ok. 12 passed; 1 failed; …` → (12, 1).
fn result_counts(line: &str) -> Option<(u64, u64)> {
    let rest = line.strip_prefix("test result: ")?;
    let count = |word: &str| {
        rest.split(';').find_map(|part| {
            part.trim()
                .strip_suffix(word)?
                .trim()
                .rsplit(' ')
                .next()?
                .parse()
                .ok()
        })
    };
    Some((count("passed")?, count("failed")?))
}

/// Whether `cmd` runs and exits 0, output discarded.
pub fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// stdout of `cmd` when it succeeds.
pub fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.stderr(Stdio::null()).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn show(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|s| s.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn sums_cargo_test_result_lines() {
        assert_eq!(
            super::result_counts(
                "test result: ok. 114 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.14s"
            ),
            Some((114, 0))
        );
        assert_eq!(
            super::result_counts("test result: FAILED. 8 passed; 1 failed; 0 ignored"),
            Some((8, 1))
        );
        assert_eq!(super::result_counts("running 3 tests"), None);
    }
}
