//! The kernel tier's set-up (tests/tests/kernel_matrix.rs): Debian's cloud kernels for
//! the LTS lines fleets run, as `target/kernels/<label>/vmlinuz` (arm64 ones as
//! `target/kernels/arm64/<label>/vmlinuz`), fetched with `apt-get download` and
//! unpacked with `dpkg-deb` (nothing is installed), plus the tools that boot them: QEMU
//! (TCG, no KVM needed) and busybox-static for the initramfs (for arm64 guests, Debian's
//! arm64 programs: `guest_userland.rs`).
//!
//! The REDIRECT case needs a NAT rule in the VM: the modules for `nft` redirects and a
//! dummy interface (with what they depend on) are kept too, uncompressed, in load order
//! (`target/kernels/<label>/modules/order`).
//!
//! The exact package is what apt resolves the meta package to at set-up time (its name
//! and version are kept in `target/kernels/<label>/package`); a kernel already there is
//! not fetched again.

use std::{fs, path::Path, process::Command};

use anyhow::{Context, bail};

use crate::{
    host::{Apt, have, package_installed},
    private_apt::{download_deb, private_apt_for},
    run::{checked, output, workspace_root},
};

/// One kernel of the tier.
pub struct KernelSpec {
    /// The version line, e.g. `6.1`.
    pub label: &'static str,
    /// Debian's architecture name.
    pub arch: &'static str,
    /// The meta package, whose `Depends` names the real image.
    pub meta: &'static str,
    /// `None` uses the machine's own apt sources; a suite is read through a private apt
    /// configuration under `target/kernels/apt-<suite>[-<arch>]/` (Debian's archive key,
    /// the machine's sources and state untouched). Foreign architectures need one.
    pub suite: Option<&'static str>,
}

pub const KERNELS: [KernelSpec; 4] = [
    // Debian 11's cloud kernel: the 5.10 LTS (Amazon Linux 2's line).
    KernelSpec {
        label: "5.10",
        arch: "amd64",
        meta: "linux-image-cloud-amd64",
        suite: Some("bullseye"),
    },
    // Debian 12's default cloud kernel.
    KernelSpec {
        label: "6.1",
        arch: "amd64",
        meta: "linux-image-cloud-amd64",
        suite: None,
    },
    KernelSpec {
        label: "6.12",
        arch: "amd64",
        meta: "linux-image-6.12-cloud-amd64",
        suite: None,
    },
    // Debian 12's arm64 cloud kernel (Graviton, Ampere), for the cross-built agent.
    KernelSpec {
        label: "6.1",
        arch: "arm64",
        meta: "linux-image-cloud-arm64",
        suite: Some("bookworm"),
    },
];

impl KernelSpec {
    /// Where it goes: `target/kernels/<label>` (the host's amd64), or
    /// `target/kernels/<arch>/<label>`.
    fn dir(&self, root: &Path) -> std::path::PathBuf {
        match self.arch {
            "amd64" => root.join(self.label),
            arch => root.join(arch).join(self.label),
        }
    }

    fn foreign_arch(&self) -> Option<&'static str> {
        (self.arch != "amd64").then_some(self.arch)
    }
}
pub const KERNELS_DIR: &str = "target/kernels";

/// The tools the tier needs, from Debian, when missing.
pub fn want_tools(apt: &mut Apt) {
    if !have("qemu-system-x86_64") {
        apt.want(&["qemu-system-x86"]);
    }
    if !have("qemu-system-aarch64") {
        apt.want(&["qemu-system-arm"]);
    }
    if !package_installed("busybox-static") {
        apt.want(&["busybox-static"]);
    }
    // `nft` (with the libraries ldd lists) goes into the VM for the REDIRECT rule.
    if !have("nft") {
        apt.want(&["nftables"]);
    }
    if !have("xz") {
        apt.want(&["xz-utils"]);
    }
    // readelf lists what the arm64 guest's programs load (`guest_userland.rs`).
    if !have("readelf") {
        apt.want(&["binutils"]);
    }
}

/// Fetches every kernel that is not in `target/kernels/` yet, and the arm64 guest's
/// programs.
pub fn ensure(apt: &mut Apt) -> anyhow::Result<()> {
    let root = workspace_root().join(KERNELS_DIR);
    for spec in &KERNELS {
        let KernelSpec {
            label, meta, suite, ..
        } = *spec;
        let dir = spec.dir(&root);
        let unavailable = dir.with_file_name(format!("{label}.unavailable"));
        if dir.join("vmlinuz").is_file() && dir.join("modules/order").is_file() {
            let _ = fs::remove_file(&unavailable);
            continue;
        }
        let result = (|| {
            let options = match suite {
                None => Vec::new(),
                Some(suite) => private_apt_for(&root, suite, spec.foreign_arch())?,
            };
            let (package, version) = resolve(apt, &options, meta, label)?;
            eprintln!(
                "xtask: fetching the {} kernel {label}: {package} {version}",
                spec.arch
            );
            fetch(&root, &dir, &options, &package, &version)
        })();
        match (result, suite) {
            (Ok(()), _) => {
                let _ = fs::remove_file(&unavailable);
            }
            // An older release's kernel may leave the mirror one day: its test then
            // skips, saying why, instead of failing every set-up.
            (Err(e), Some(suite)) => {
                eprintln!(
                    "xtask: warning: the {} {label} kernel from Debian {suite} cannot be had \
                     ({e:#}); the kernel tier skips it",
                    spec.arch
                );
                fs::create_dir_all(unavailable.parent().expect("under target/kernels"))?;
                fs::write(&unavailable, format!("Debian {suite}: {e:#}\n"))?;
            }
            (Err(e), None) => return Err(e),
        }
    }
    crate::guest_userland::ensure(&root)
}

/// The real image package `meta` depends on, and its candidate version.
fn resolve(
    apt: &mut Apt,
    options: &[String],
    meta: &str,
    label: &str,
) -> anyhow::Result<(String, String)> {
    let depends = || {
        output(
            Command::new("apt-cache")
                .args(options)
                .args(["depends", meta]),
        )
        .and_then(|text| {
            text.lines()
                .filter_map(|l| l.trim().strip_prefix("Depends: "))
                .map(str::trim)
                .find(|p| p.starts_with("linux-image-"))
                .map(str::to_string)
        })
    };
    let package = match depends() {
        Some(p) => p,
        None if options.is_empty() => {
            apt.update()?;
            depends().with_context(|| {
                format!("apt does not know {meta} (the {label} kernel of the kernel tier)")
            })?
        }
        None => bail!("apt does not know {meta} (the {label} kernel of the kernel tier)"),
    };
    if !package.starts_with(&format!("linux-image-{label}.")) {
        bail!(
            "{meta} resolves to {package}, not a {label} kernel: this distribution's kernel tier \
             needs another meta package in xtask/src/kernels.rs"
        );
    }
    let policy = output(
        Command::new("apt-cache")
            .args(options)
            .args(["policy", &package]),
    )
    .unwrap_or_default();
    let version = policy
        .lines()
        .find_map(|l| l.trim().strip_prefix("Candidate: "))
        .filter(|v| *v != "(none)")
        .with_context(|| format!("apt has no candidate for {package}"))?
        .to_string();
    Ok((package, version))
}

fn fetch(
    root: &Path,
    dir: &Path,
    options: &[String],
    package: &str,
    version: &str,
) -> anyhow::Result<()> {
    let cache = root.join("download");
    let deb = download_deb(options, &format!("{package}={version}"), &cache)?;
    let unpacked = cache.join("x");
    checked(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked))?;
    let vmlinuz = fs::read_dir(unpacked.join("boot"))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
        .with_context(|| format!("{} has no boot/vmlinuz-*", deb.display()))?;
    fs::create_dir_all(dir)?;
    extract_modules(&unpacked, &dir.join("modules"))?;
    fs::write(dir.join("package"), format!("{package} {version}\n"))?;
    fs::copy(&vmlinuz, dir.join("vmlinuz.tmp"))?;
    fs::rename(dir.join("vmlinuz.tmp"), dir.join("vmlinuz"))?;
    fs::remove_dir_all(&cache)?;
    Ok(())
}

/// Modules the guest loads for the REDIRECT case (nftables NAT redirect, a dummy
/// interface for the pod address); their dependencies are added.
const REDIRECT_MODULES: [&str; 3] = ["nft_redir", "nft_chain_nat", "dummy"];

/// Copies `REDIRECT_MODULES` and their dependencies out of an unpacked image package,
/// decompressed (busybox's insmod takes plain `.ko`), with `order` listing them
/// dependencies first.
fn extract_modules(unpacked: &Path, to: &Path) -> anyhow::Result<()> {
    let mut all = std::collections::HashMap::new();
    let mut stack = vec![unpacked.join("lib/modules")];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d)?.filter_map(Result::ok) {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Some(name) = p.file_name().and_then(|n| n.to_str())
                && let Some(stem) = name
                    .strip_suffix(".ko.xz")
                    .or_else(|| name.strip_suffix(".ko"))
            {
                all.insert(stem.replace('-', "_"), p.clone());
            }
        }
    }
    fs::create_dir_all(to)?;
    let mut order: Vec<String> = Vec::new();
    fn visit(
        name: &str,
        all: &std::collections::HashMap<String, std::path::PathBuf>,
        to: &Path,
        order: &mut Vec<String>,
        depth: usize,
    ) -> anyhow::Result<()> {
        if order.iter().any(|o| o == name) {
            return Ok(());
        }
        if depth > 32 {
            bail!("module dependencies of {name} loop");
        }
        let Some(path) = all.get(name) else {
            // Built in (or absent): nothing to load.
            return Ok(());
        };
        let bytes = if path.extension().is_some_and(|e| e == "xz") {
            let out = Command::new("xz")
                .arg("-dc")
                .arg(path)
                .output()
                .context("running xz (Debian: xz-utils)")?;
            if !out.status.success() {
                bail!("xz -dc {} failed", path.display());
            }
            out.stdout
        } else {
            fs::read(path)?
        };
        for dep in modinfo_depends(&bytes) {
            visit(&dep, all, to, order, depth + 1)?;
        }
        fs::write(to.join(format!("{name}.ko")), &bytes)?;
        order.push(name.to_string());
        Ok(())
    }
    for m in REDIRECT_MODULES {
        if !all.contains_key(m) {
            bail!("the kernel package has no module {m}");
        }
        visit(m, &all, to, &mut order, 0)?;
    }
    fs::write(to.join("order"), order.join("\n") + "\n")?;
    Ok(())
}

/// The `depends=` entry of a module's `.modinfo`.
fn modinfo_depends(ko: &[u8]) -> Vec<String> {
    let key = b"\0depends=";
    let Some(at) = ko.windows(key.len()).position(|w| w == key) else {
        return Vec::new();
    };
    let rest = &ko[at + key.len()..];
    let end = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
    String::from_utf8_lossy(&rest[..end])
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.replace('-', "_"))
        .collect()
}
