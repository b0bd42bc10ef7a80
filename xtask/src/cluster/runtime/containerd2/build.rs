//! containerd 2 (`containerd`, `containerd-shim-runc-v2`, `ctr`) and runc, built from
//! their Go modules once per machine into
//! `~/.cache/sidecar-race/go/containerd-<version>/bin/` and
//! `~/.cache/sidecar-race/go/runc-<version>/bin/runc`, beside the 1.34 cluster's
//! binaries. Neither module has replace directives, so a wrapper module requiring it is
//! enough. Flags as their Makefiles set them: containerd without cgo (its btrfs
//! snapshotter, the only cgo part, is then left out), the shim without gRPC; runc with
//! cgo and libseccomp (`seccomp`). Each binary's build time goes to `build.log`.

use std::path::PathBuf;

use crate::{
    cluster::{
        go_module::{build_tagged, cache_root, go, wrapper},
        versions::{CONTAINERD2_VERSION, RUNC_VERSION},
    },
    host::{Apt, package_installed},
};

const CONTAINERD: &str = "github.com/containerd/containerd/v2";
const RUNC: &str = "github.com/opencontainers/runc";

/// containerd's commands: the daemon, the shim it starts per pod, and its client.
const COMMANDS: [(&str, &str); 3] = [
    ("containerd", "urfave_cli_no_docs"),
    ("containerd-shim-runc-v2", "urfave_cli_no_docs,no_grpc"),
    ("ctr", "urfave_cli_no_docs"),
];

fn containerd_dir() -> PathBuf {
    cache_root().join(format!("containerd-{CONTAINERD2_VERSION}"))
}

fn runc_dir() -> PathBuf {
    cache_root().join(format!("runc-{RUNC_VERSION}"))
}

/// containerd 2's binaries' directory: put first on its PATH, so that it starts this
/// shim and not Debian's.
pub fn bin_dir() -> PathBuf {
    containerd_dir().join("bin")
}

pub fn containerd_bin() -> PathBuf {
    bin_dir().join("containerd")
}

pub fn ctr_bin() -> PathBuf {
    bin_dir().join("ctr")
}

pub fn runc_bin() -> PathBuf {
    runc_dir().join("bin/runc")
}

/// What the 1.36 node's runtime needs built and is not.
pub fn missing() -> Vec<PathBuf> {
    COMMANDS
        .iter()
        .map(|(name, _)| bin_dir().join(name))
        .chain([runc_bin()])
        .filter(|p| !p.exists())
        .collect()
}

/// Debian's packages runc builds with (cgo and libseccomp): libseccomp's headers,
/// pkg-config to find them, a C compiler.
pub fn want_tools(apt: &mut Apt) {
    if !package_installed("libseccomp-dev") {
        apt.want(&["libseccomp-dev"]);
    }
    apt.want_tools(&[("pkg-config", "pkg-config"), ("gcc", "gcc")]);
}

/// Builds what is missing (cold: a few minutes; runc needs libseccomp-dev, pkg-config
/// and gcc, which the CRI-O variant's set-up installs too).
pub fn ensure() -> anyhow::Result<()> {
    if missing().is_empty() {
        return Ok(());
    }
    let go = go()?;
    let dir = runc_dir();
    let runc = RUNC.to_string();
    let body = format!("require {RUNC} {RUNC_VERSION}\n");
    wrapper(
        &go,
        &dir,
        "sidecar-race.local/runc",
        &body,
        std::slice::from_ref(&runc),
    )?;
    eprintln!("xtask: building runc {RUNC_VERSION}");
    // runc embeds its version (its VERSION file); the commit is the tag.
    let ldflags = format!("-s -w -X main.gitCommit={RUNC_VERSION}");
    build_tagged(
        &go,
        &dir,
        "runc",
        &runc,
        &ldflags,
        "seccomp,urfave_cli_no_docs",
        true,
    )?;

    let dir = containerd_dir();
    let packages: Vec<String> = COMMANDS
        .iter()
        .map(|(name, _)| format!("{CONTAINERD}/cmd/{name}"))
        .collect();
    let body = format!("require {CONTAINERD} {CONTAINERD2_VERSION}\n");
    wrapper(&go, &dir, "sidecar-race.local/containerd", &body, &packages)?;
    let v = format!("{CONTAINERD}/version");
    let ldflags = format!(
        "-s -w -X {v}.Version={CONTAINERD2_VERSION} -X {v}.Revision={CONTAINERD2_VERSION} \
         -X {v}.Package={CONTAINERD}"
    );
    for ((name, tags), package) in COMMANDS.iter().zip(&packages) {
        eprintln!("xtask: building {name} {CONTAINERD2_VERSION}");
        build_tagged(&go, &dir, name, package, &ldflags, tags, false)?;
    }
    Ok(())
}
