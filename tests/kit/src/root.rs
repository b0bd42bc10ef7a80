//! Root-only tests fail when not root, unless `SIDECAR_RACE_SKIP_ROOT=1` lets them skip;
//! a skip is then recorded so `cargo xtask test` counts it in its summary.

use std::path::PathBuf;

/// Set to `1` to let root tests skip (and pass) when not root.
pub const SKIP_ROOT_ENV: &str = "SIDECAR_RACE_SKIP_ROOT";
/// A directory where each skipped test leaves a file named after it, holding the reason
/// (`cargo xtask test` sets it and counts the files).
pub const SKIP_DIR_ENV: &str = "SIDECAR_RACE_SKIP_DIR";
/// Why a root test cannot run otherwise.
pub const NEEDS_ROOT: &str = "needs root (eBPF, network namespaces, cgroups)";

/// True when this process is root. Otherwise panics, or, with
/// `SIDECAR_RACE_SKIP_ROOT=1`, records the skip and returns false.
pub fn is_root_or_skip(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(
        skip_allowed(std::env::var_os(SKIP_ROOT_ENV)),
        "{test} {NEEDS_ROOT}: run it as root, or set {SKIP_ROOT_ENV}=1 to skip the root tests"
    );
    skip(
        test,
        &format!("{NEEDS_ROOT}; not root and {SKIP_ROOT_ENV}=1"),
    );
    false
}

fn skip_allowed(value: Option<std::ffi::OsString>) -> bool {
    value.is_some_and(|v| v == "1")
}

/// Prints `SKIPPED <test>: <reason>` and leaves `<test binary>.<test>` holding the
/// reason in the directory `SIDECAR_RACE_SKIP_DIR` names, if set.
pub fn skip(test: &str, reason: &str) {
    let line = format!("SKIPPED {test}: {reason}");
    eprintln!("{line}");
    if let Some(dir) = std::env::var_os(SKIP_DIR_ENV).map(PathBuf::from) {
        let binary = std::env::current_exe()
            .ok()
            .and_then(|p| Some(p.file_stem()?.to_string_lossy().into_owned()))
            .unwrap_or_default();
        let file = dir.join(format!("{binary}.{test}"));
        if let Err(e) = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&file, reason)) {
            panic!("{line}, but {} cannot be written: {e}", file.display());
        }
    }
}

/// Whether a command exists on PATH.
pub fn have(bin: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {bin}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_lets_root_tests_skip() {
        assert!(skip_allowed(Some("1".into())));
        for v in [None, Some("0".into()), Some("".into()), Some("yes".into())] {
            assert!(!skip_allowed(v.clone()), "{v:?}");
        }
    }
}
