//! The Kubernetes tools the manifest checks run: kubectl and kubernetes-validate (in a
//! venv under target/deploy-tools/, installed by `cargo xtask setup`). A missing tool
//! fails the test rather than skipping it (CI runs the set-up first).

use std::{
    io::Write,
    path::PathBuf,
    process::{Command, Stdio},
};

use serde_json::Value;

/// Where `cargo xtask setup` puts kubernetes-validate (xtask/src/setup.rs).
pub const DEPLOY_TOOLS_VENV: &str = "target/deploy-tools/venv";

pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn missing(tool: &str) -> ! {
    panic!(
        "{tool} is not installed: run `cargo xtask setup`, which installs what the \
         manifest checks need (kubectl, promtool, kubernetes-validate in {DEPLOY_TOOLS_VENV})"
    )
}

/// A program of the deploy-tools venv.
pub fn venv_bin(name: &str) -> PathBuf {
    let bin = workspace().join(DEPLOY_TOOLS_VENV).join("bin").join(name);
    if !bin.exists() {
        missing(&bin.display().to_string());
    }
    bin
}

/// A tool on PATH (kubectl, promtool).
pub fn on_path(tool: &str) -> PathBuf {
    if !sidecar_race_kit::root::have(tool) {
        missing(tool);
    }
    PathBuf::from(tool)
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

/// `kubernetes-validate --strict` of built-in kinds, for each version; every document
/// must be reported as passed (none skipped for want of a schema).
pub fn validate_strictly(label: &str, docs: &[&Value], versions: &[String]) {
    let path = std::env::temp_dir().join(format!(
        "sidecar-race-validate-{}-{label}.yaml",
        std::process::id()
    ));
    let text = docs
        .iter()
        .map(|d| serde_json::to_string_pretty(d).expect("serializes"))
        .collect::<Vec<_>>()
        .join("\n---\n");
    std::fs::write(&path, text).expect("temp file");
    for version in versions {
        let out = run(
            Command::new(venv_bin("kubernetes-validate"))
                .args(["--strict", "--kubernetes-version", version])
                .arg(&path),
            None,
        );
        let passed = out
            .lines()
            .filter(|l| l.contains(" passed for resource "))
            .count();
        assert_eq!(
            passed,
            docs.len(),
            "{label}: {} documents, {passed} passed against {version}:\n{out}",
            docs.len()
        );
        assert!(
            !out.contains("Couldn't find schema"),
            "{label}: a built-in kind was not validated against {version}:\n{out}"
        );
    }
    let _ = std::fs::remove_file(&path);
}
