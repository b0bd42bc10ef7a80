//! Grafana's own dashboard schema, as the Grafana Foundation SDK generates it
//! (`github.com/grafana/grafana-foundation-sdk/go`, Apache-2.0): the checker of
//! `tests/grafana-schema/` (a Go program on the SDK's types) built into the per-user
//! cache the first time a test asks for it, and run on a dashboard file. Grafana itself
//! (AGPL) is neither shipped nor run.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::Mutex,
};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::tools::{output, workspace};

/// The checker's module in the checkout, copied as is into the cache.
const SOURCES: [&str; 3] = ["go.mod", "go.sum", "main.go"];

/// `$XDG_CACHE_HOME/sidecar-race/go` or `~/.cache/sidecar-race/go`, as
/// `cargo xtask setup` caches its Go tools (xtask/src/cluster/go_module.rs).
fn cache_root() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/root/.cache"))
        .join("sidecar-race/go")
}

fn source_dir() -> PathBuf {
    workspace().join("tests/grafana-schema")
}

/// The cache directory is named by a digest of the sources, so an edited checker (or
/// another SDK version in go.mod) is built anew rather than an old one run.
fn build_dir() -> PathBuf {
    let mut digest = Sha256::new();
    for file in SOURCES {
        let text = std::fs::read(source_dir().join(file))
            .unwrap_or_else(|e| panic!("tests/grafana-schema/{file}: {e}"));
        digest.update(file.as_bytes());
        digest.update(text);
    }
    let hex: String = digest.finalize()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    cache_root().join(format!("grafana-schema-{hex}"))
}

/// The `go` command (the cluster tier's set-up installs it; so does any Go toolchain).
fn go() -> PathBuf {
    for candidate in ["go", "/usr/local/go/bin/go", "/usr/lib/go/bin/go"] {
        if Command::new(candidate).arg("version").output().is_ok() {
            return PathBuf::from(candidate);
        }
    }
    panic!(
        "Go is not installed: the dashboard check builds tests/grafana-schema from the \
         Grafana Foundation SDK's Go module (go 1.24 or newer, with the Go module proxy)"
    )
}

/// The checker's binary, built first if it is not cached yet (`go build`, the SDK
/// fetched through the module proxy; a cold build takes about a minute).
pub fn checker() -> PathBuf {
    // One build per test process (its tests run on threads); other processes build to
    // their own file below.
    static BUILDING: Mutex<()> = Mutex::new(());
    let _one = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = build_dir();
    let bin = dir.join("bin/grafana-schema");
    if bin.exists() {
        return bin;
    }
    std::fs::create_dir_all(dir.join("bin")).expect("the checker's cache directory");
    for file in SOURCES {
        std::fs::copy(source_dir().join(file), dir.join(file)).expect("copy the sources");
    }
    // Each process builds to its own name and renames, so a reader never sees half a
    // binary.
    let partial = dir.join(format!("bin/.grafana-schema.{}", std::process::id()));
    let out = output(
        Command::new(go())
            .current_dir(&dir)
            .env("CGO_ENABLED", "0")
            .env("GOFLAGS", "-mod=mod")
            .args(["build", "-trimpath", "-o"])
            .arg(&partial)
            .arg("."),
        None,
    );
    assert!(
        out.status.success(),
        "go build of the dashboard checker failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(&partial, &bin).expect("rename the built checker");
    bin
}

/// What the checker makes of `dashboard`: the panels it found and the PromQL of every
/// panel target, annotation and variable (`{"panels": N, "queries": [{"where",
/// "expr"}]}`), or everything it rejected, one path per line.
pub fn check(dashboard: &Path) -> Result<Value, String> {
    let out = output(Command::new(checker()).arg(dashboard), None);
    if out.status.success() {
        Ok(serde_json::from_slice(&out.stdout).expect("the checker prints JSON"))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}
