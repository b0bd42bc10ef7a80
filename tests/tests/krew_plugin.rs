//! The kubectl plugin as krew users get it: krew itself (built from its Go module by
//! `cargo xtask setup`) installs what `cargo xtask krew` wrote under target/krew/ —
//! offline, with `--manifest` and `--archive`, a throwaway `KREW_ROOT` and
//! `KREW_DEFAULT_INDEX_URI` at a local git repository — and the real kubectl then runs
//! `kubectl sidecar-race lint` through the installed plugin.
//!
//! No root and no cluster needed. `cargo xtask test` builds the archive first; run
//! `cargo xtask krew` before running this test alone.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use serde_json::Value;
use sidecar_race_tests::{agent::agent_binary, tools::workspace};

const VERSION: &str = env!("CARGO_PKG_VERSION");
/// What `cargo xtask setup` builds (xtask/src/krew.rs, KREW_VERSION).
const DEFAULT_KREW: &str = ".cache/sidecar-race/go/krew-v0.4.4/bin/krew";
/// What `cargo xtask setup` builds for the cluster tier (xtask/src/cluster/versions.rs).
const DEFAULT_KUBECTL: &str = ".cache/sidecar-race/go/k8s-v1.34.4/bin/kubectl";

/// `var`, or `default` under $HOME; it must exist.
fn tool(var: &str, default: &str, what: &str) -> PathBuf {
    let path = std::env::var_os(var).map_or_else(
        || PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(default),
        PathBuf::from,
    );
    assert!(
        path.exists(),
        "{} is missing: {what} (or set {var})",
        path.display()
    );
    path
}

fn krew_output(file: &str) -> PathBuf {
    let path = workspace().join("target/krew").join(file);
    assert!(
        path.exists(),
        "{} is missing: `cargo xtask krew` writes it (`cargo xtask test` does first)",
        path.display()
    );
    path
}

fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => panic!("no plugin archive for {other}"),
    }
}

fn run(cmd: &mut Command) -> Output {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    eprintln!(
        "$ {shown}\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(out.status.success(), "{cmd:?} failed");
    String::from_utf8(out.stdout).unwrap()
}

/// A one-commit git repository holding the manifest where krew-index keeps them.
fn local_index(dir: &Path, manifest: &Path) {
    std::fs::create_dir_all(dir.join("plugins")).unwrap();
    std::fs::copy(manifest, dir.join("plugins/sidecar-race.yaml")).unwrap();
    let git = |args: &[&str]| {
        ok(Command::new("git")
            .current_dir(dir)
            .args(["-c", "user.name=test", "-c", "user.email=test@localhost"])
            .args(args))
    };
    git(&["init", "--quiet"]);
    git(&["add", "."]);
    git(&["commit", "--quiet", "-m", "index"]);
}

#[test]
fn krew_installs_the_plugin_and_kubectl_runs_its_lint() {
    let manifest = krew_output("sidecar-race.yaml");
    let archive = krew_output(&format!(
        "kubectl-sidecar_race-v{VERSION}-linux-{}.tar.gz",
        host_arch()
    ));
    let krew = tool(
        "SIDECAR_RACE_KREW",
        DEFAULT_KREW,
        "`cargo xtask setup` builds krew from its Go module",
    );
    let kubectl = tool(
        "SIDECAR_RACE_KUBECTL",
        DEFAULT_KUBECTL,
        "`cargo xtask setup` builds kubectl from its Go module",
    );

    let tmp = std::env::temp_dir().join(format!("sr-krew-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let (index, root, bin) = (tmp.join("index"), tmp.join("krew"), tmp.join("bin"));
    local_index(&index, &manifest);
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(&krew, bin.join("kubectl-krew")).unwrap();
    let path = format!(
        "{}:{}:{}",
        root.join("bin").display(),
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let kubectl_cmd = |args: &[&str]| {
        let mut c = Command::new(&kubectl);
        c.args(args)
            .stdin(std::process::Stdio::null())
            .env("PATH", &path)
            .env("HOME", &tmp)
            .env("KREW_ROOT", &root)
            .env("KREW_DEFAULT_INDEX_URI", &index)
            .env("KREW_NO_UPGRADE_CHECK", "1")
            // No kubeconfig: lint of files needs no cluster.
            .env("KUBECONFIG", tmp.join("no-kubeconfig"));
        c
    };

    let version = ok(&mut kubectl_cmd(&["krew", "version"]));
    assert!(version.contains("v0.4.4"), "krew version: {version}");
    // The first update clones the index from KREW_DEFAULT_INDEX_URI: the local repository.
    ok(&mut kubectl_cmd(&["krew", "update"]));
    let search = ok(&mut kubectl_cmd(&["krew", "search", "sidecar-race"]));
    assert!(
        search.contains("sidecar-race"),
        "the local index lists the plugin: {search}"
    );
    let installed = run(&mut kubectl_cmd(&[
        "krew",
        "install",
        &format!("--manifest={}", manifest.display()),
        &format!("--archive={}", archive.display()),
    ]));
    assert!(installed.status.success(), "krew install failed");
    let said = String::from_utf8_lossy(&installed.stderr);
    assert!(
        said.contains("Installed plugin: sidecar-race"),
        "krew reports the install: {said}"
    );
    let list = ok(&mut kubectl_cmd(&["krew", "list"]));
    // Installed from a manifest rather than from an index: krew calls it detached.
    assert!(
        list.lines().any(|l| l.trim() == "detached/sidecar-race"),
        "krew list: {list}"
    );
    let link = root.join("bin/kubectl-sidecar_race");
    let target = std::fs::read_link(&link).expect("krew links the plugin into KREW_ROOT/bin");
    assert!(
        target.starts_with(root.join(format!("store/sidecar-race/v{VERSION}"))),
        "{} -> {}",
        link.display(),
        target.display()
    );
    assert!(
        ok(&mut kubectl_cmd(&["plugin", "list"])).contains(&link.display().to_string()),
        "kubectl finds the installed plugin"
    );

    // lint through kubectl: the classic-sidecar example's finding, as the binary gives it.
    let example = workspace().join("deploy/examples/checkout-classic.yaml");
    let lint_args = [
        "lint",
        example.to_str().unwrap(),
        "--format",
        "json",
        "--fail-on",
        "none",
    ];
    let mut args = vec!["sidecar-race"];
    args.extend(lint_args);
    let via_kubectl: Value = serde_json::from_str(&ok(&mut kubectl_cmd(&args))).unwrap();
    let findings = via_kubectl["findings"].as_array().unwrap();
    let classic = findings
        .iter()
        .find(|f| f["rule"] == "classic-sidecar-serves-port")
        .unwrap_or_else(|| panic!("no classic-sidecar-serves-port finding: {via_kubectl:#}"));
    assert_eq!(classic["kind"], "Deployment", "{classic:#}");
    assert_eq!(classic["name"], "checkout-classic", "{classic:#}");
    assert_eq!(
        classic["containers"],
        serde_json::json!(["proxy", "app"]),
        "{classic:#}"
    );
    assert_eq!(classic["severity"], "error", "{classic:#}");
    let direct: Value =
        serde_json::from_str(&ok(Command::new(agent_binary()).args(lint_args))).unwrap();
    assert_eq!(
        via_kubectl, direct,
        "the installed plugin is the agent's lint"
    );
    // Its exit status is lint's: an error finding fails by default.
    let failing = run(&mut kubectl_cmd(&[
        "sidecar-race",
        "lint",
        example.to_str().unwrap(),
    ]));
    assert!(!failing.status.success(), "lint fails on an error finding");

    ok(&mut kubectl_cmd(&["krew", "uninstall", "sidecar-race"]));
    assert!(!link.exists(), "uninstall removes the plugin");
    let _ = std::fs::remove_dir_all(&tmp);
}
