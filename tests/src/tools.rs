//! The Kubernetes tools the manifest checks run: kubectl and kubernetes-validate (in a
//! venv under target/deploy-tools/, installed by `cargo xtask setup`). A missing tool
//! fails the test rather than skipping it (CI runs the set-up first).

use std::{path::PathBuf, process::Command};

use serde_json::Value;
// The kit's, where the tests have always found them.
pub use sidecar_race_kit::command::{go_tool, output, run, workspace};

/// Where `cargo xtask setup` puts kubernetes-validate (xtask/src/setup.rs).
pub const DEPLOY_TOOLS_VENV: &str = "target/deploy-tools/venv";

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
