//! Cross-building the static agent for arm64 on an x86_64 host with Debian's
//! toolchain, without adding a dpkg architecture (which can break `apt-get update` on
//! a machine whose mirrors serve one architecture):
//! - the compiler is Debian's `rustc-web` (the eBPF build's), whose arm64 standard
//!   library `libstd-rust-web-dev:arm64` is fetched at rustc's exact version with
//!   `apt-get download` through a private apt state (the kernel tier's way to fetch
//!   kernels) and unpacked under `target/cross/aarch64-unknown-linux-gnu/sysroot`;
//! - `gcc-aarch64-linux-gnu` links and builds the C in the dependency tree (ring), with
//!   `libc6-dev-arm64-cross`'s static glibc.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, bail, ensure};

use crate::{
    host::{Apt, have, package_installed},
    private_apt::{codename, download_deb, private_apt_for},
    run::{checked, output, workspace_root},
};

pub const ARM64_TRIPLE: &str = "aarch64-unknown-linux-gnu";
const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
const LINKER: &str = "aarch64-linux-gnu-gcc";
/// What the cross build needs from the host's own architecture.
const HOST_PACKAGES: [&str; 2] = ["gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross"];

/// How to build for `ARM64_TRIPLE`: the compiler, its arm64 sysroot, the linker.
pub struct Toolchain {
    pub rustc: PathBuf,
    pub sysroot: PathBuf,
    pub linker: &'static str,
}

/// Asks for the cross compiler when apt has it; a machine without it cannot build
/// arm64 images, which `cargo xtask image --arch arm64` then says.
pub fn want_tools(apt: &mut Apt) {
    if HOST_PACKAGES.iter().all(|p| package_installed(p)) {
        return;
    }
    let wanted: Vec<String> = HOST_PACKAGES.iter().map(|p| p.to_string()).collect();
    if apt.first_available(&wanted) == Some(0) {
        apt.want(&HOST_PACKAGES);
    } else {
        eprintln!(
            "xtask: warning: apt has no {}: arm64 images cannot be built here",
            HOST_PACKAGES.join(" / ")
        );
    }
}

fn sysroot_dir() -> PathBuf {
    workspace_root().join("target/cross").join(ARM64_TRIPLE)
}

/// The installed `rustc-web` version, e.g. `1.96.0+dfsg1-1~deb12u2`.
fn rustc_web_version() -> anyhow::Result<String> {
    output(Command::new("dpkg-query").args(["-W", "-f=${Version}", "rustc-web"]))
        .filter(|v| !v.is_empty())
        .context("Debian's rustc-web is not installed (`cargo xtask setup` installs it)")
}

/// The toolchain, fetching the arm64 standard library when it is not there yet.
pub fn arm64() -> anyhow::Result<Toolchain> {
    ensure!(
        have(LINKER),
        "{LINKER} is missing: `cargo xtask setup` installs {} when apt has them",
        HOST_PACKAGES.join(" and ")
    );
    let version = rustc_web_version()?;
    let dir = sysroot_dir();
    let sysroot = dir.join("sysroot/usr");
    let stamp = dir.join("version");
    let lib = sysroot.join("lib/rustlib").join(ARM64_TRIPLE).join("lib");
    if fs::read_to_string(&stamp).ok().as_deref() != Some(version.as_str()) || !lib.is_dir() {
        fetch_std(&dir, &version)?;
        fs::write(&stamp, &version)?;
    }
    Ok(Toolchain {
        rustc: PathBuf::from(DEBIAN_RUSTC),
        sysroot,
        linker: LINKER,
    })
}

/// `libstd-rust-web-dev:arm64` at `version`, unpacked into `dir/sysroot`.
fn fetch_std(dir: &Path, version: &str) -> anyhow::Result<()> {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir)?;
    let options = private_apt_for(dir, &codename()?, Some("arm64"))?;
    let package = format!("libstd-rust-web-dev:arm64={version}");
    eprintln!("xtask: fetching {package} (the arm64 standard library of rustc-web)");
    let download = dir.join("download");
    let deb = download_deb(&options, &package, &download)?;
    checked(
        Command::new("dpkg-deb")
            .arg("-x")
            .arg(&deb)
            .arg(dir.join("sysroot")),
    )?;
    fs::remove_dir_all(&download)?;
    if !dir
        .join("sysroot/usr/lib/rustlib")
        .join(ARM64_TRIPLE)
        .is_dir()
    {
        bail!("{} has no lib/rustlib/{ARM64_TRIPLE}", deb.display());
    }
    Ok(())
}
