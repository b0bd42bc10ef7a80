//! Running the programs the cluster kit drives (kubectl, Prometheus, the agent's CLI)
//! and finding them: the workspace, and the Go tools `cargo xtask setup` builds.

use std::{
    io::Write,
    path::PathBuf,
    process::{Command, Stdio},
};

/// The workspace root (this crate is tests/kit).
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("workspace root")
        .to_path_buf()
}

/// A Go tool `cargo xtask setup` builds into the per-user cache: the path in the
/// environment variable `env` (`cargo xtask test` sets it), else `~/<default>`.
pub fn go_tool(env: &str, default: &str) -> PathBuf {
    let bin = std::env::var_os(env).map_or_else(
        || PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(default),
        PathBuf::from,
    );
    assert!(
        bin.exists(),
        "{} is missing: `cargo xtask setup` builds it from its Go module",
        bin.display()
    );
    bin
}

/// Runs `cmd` (with `stdin` when given) to its end, whatever its exit status.
pub fn output(cmd: &mut Command, stdin: Option<&str>) -> std::process::Output {
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("piped")
            .write_all(input.as_bytes())
            .unwrap_or_else(|e| panic!("cannot write to {shown}: {e}"));
    }
    child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("{shown}: {e}"))
}

/// Runs `cmd` (with `stdin` when given); its stdout, or a panic with all it printed.
pub fn run(cmd: &mut Command, stdin: Option<&str>) -> String {
    let shown = format!("{cmd:?}");
    let out = output(cmd, stdin);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{shown} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
