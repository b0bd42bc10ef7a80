//! Root-only tests skip with a clear message when not root (CI is root).

/// True when this process is root; otherwise prints why the test is skipped.
pub fn is_root_or_skip(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!(
            "SKIPPED {test}: needs root (eBPF, network namespaces, cgroups); CI runs as root"
        );
    }
    root
}

/// Whether a command exists on PATH.
pub fn have(bin: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {bin}")])
        .output()
        .is_ok_and(|o| o.status.success())
}
