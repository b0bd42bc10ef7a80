//! The statically linked agent the image and krew ship: glibc with `crt-static` for
//! `<arch>-unknown-linux-gnu` (rustup's standard library; no musl toolchain is needed),
//! `--locked`, source paths remapped to `/src` and `/cargo` so that the bytes do not
//! depend on where the checkout or `CARGO_HOME` live; arm64 is cross-built on x86_64
//! with `cross.rs`. Each binary is checked to be a static ELF file of its architecture.

use std::{fs, path::PathBuf, process::Command};

use anyhow::{Context, bail, ensure};

use super::release::{BINARY, VERSION};
use crate::{
    cross,
    run::{cargo, checked, output, workspace_root},
};

/// `<arch>-unknown-linux-gnu` of the host, and the OCI architecture name.
pub fn target() -> anyhow::Result<(String, &'static str)> {
    let vv = output(Command::new("rustc").arg("-vV")).context("cannot run `rustc -vV`")?;
    let host = vv
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .context("no host in `rustc -vV`")?
        .to_string();
    let arch = match host.split('-').next() {
        Some("x86_64") => "amd64",
        Some("aarch64") => "arm64",
        _ => bail!("no image for host {host} (x86_64 and aarch64 Linux only)"),
    };
    ensure!(
        host.ends_with("-unknown-linux-gnu"),
        "the static build needs a *-unknown-linux-gnu host toolchain, not {host}"
    );
    Ok((host, arch))
}

/// The Rust target of an OCI architecture name.
pub fn triple_of(arch: &str) -> anyhow::Result<&'static str> {
    match arch {
        "amd64" => Ok("x86_64-unknown-linux-gnu"),
        "arm64" => Ok(cross::ARM64_TRIPLE),
        _ => bail!("no image for architecture {arch} (amd64 and arm64 only)"),
    }
}

/// ELF `e_machine` of each architecture.
fn elf_machine(arch: &str) -> u16 {
    match arch {
        "arm64" => 183,
        _ => 62,
    }
}

/// The cargo profile of a static build.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// The image's and krew's: optimized, `--locked`.
    Release,
    /// The kernel tier's arm64 guest: quick to build, like the amd64 tier's binaries.
    Dev,
}

/// Builds the static agent for `arch` (the host's, or arm64 cross-built on x86_64
/// with `cross.rs`); its path.
pub fn build_static_agent(arch: &str) -> anyhow::Result<PathBuf> {
    let bin = build_static(arch, Profile::Release, &[("sidecar-race-agent", &[BINARY])])?
        .pop()
        .expect("one binary");
    if arch == target()?.1 {
        let version = output(Command::new(&bin).arg("--version"))
            .with_context(|| format!("{} does not run", bin.display()))?;
        ensure!(
            version.contains(VERSION),
            "{} --version says {version:?}, expected {VERSION}",
            bin.display()
        );
    }
    Ok(bin)
}

/// Builds `(package, binaries)` statically linked for `arch` with `profile`, checking
/// each is a static `arch` ELF file; their paths.
pub fn build_static(
    arch: &str,
    profile: Profile,
    packages: &[(&str, &[&str])],
) -> anyhow::Result<Vec<PathBuf>> {
    let (host, host_arch) = target()?;
    let triple = triple_of(arch)?;
    let root = workspace_root();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .context("neither CARGO_HOME nor HOME is set")?;
    let remaps = [
        (root.display().to_string(), "/src"),
        (cargo_home.display().to_string(), "/cargo"),
    ];
    // Target-only flags: with `--target`, build scripts and proc macros are built
    // without them (and the agent's build.rs clears them for the nested eBPF build).
    // Debug info stripped (symbols kept, for backtraces): 25 MB → 19 MB.
    let mut rustflags = vec![
        "-C".to_string(),
        "target-feature=+crt-static".to_string(),
        "-C".to_string(),
        "strip=debuginfo".to_string(),
    ];
    let mut cflags = Vec::new();
    for (from, to) in &remaps {
        rustflags.push(format!("--remap-path-prefix={from}={to}"));
        cflags.push(format!("-ffile-prefix-map={from}={to}"));
    }
    let env_triple = triple.replace('-', "_");
    let mut build = cargo();
    build.args(["build", "--locked"]);
    if profile == Profile::Release {
        build.arg("--release");
    }
    for (package, bins) in packages {
        build.args(["-p", package]);
        for bin in *bins {
            build.args(["--bin", bin]);
        }
    }
    build.args(["--target", triple]).env_remove("RUSTFLAGS");
    if arch != host_arch {
        ensure!(
            arch == "arm64" && host_arch == "amd64",
            "cross-building for {arch} on {host} is not set up (arm64 on x86_64 only)"
        );
        let tc = cross::arm64()?;
        rustflags.push(format!("--sysroot={}", tc.sysroot.display()));
        build
            .env("RUSTC", &tc.rustc)
            .env(
                format!("CARGO_TARGET_{}_LINKER", env_triple.to_uppercase()),
                tc.linker,
            )
            .env(format!("CC_{env_triple}"), tc.linker);
    }
    checked(
        build
            .env("CARGO_ENCODED_RUSTFLAGS", rustflags.join("\x1f"))
            .env(format!("CFLAGS_{env_triple}"), cflags.join(" ")),
    )?;
    let dir = crate::run::target_dir().join(triple).join(match profile {
        Profile::Release => "release",
        Profile::Dev => "debug",
    });
    let mut built = Vec::new();
    for bin in packages.iter().flat_map(|(_, bins)| bins.iter()) {
        let bin = dir.join(bin);
        let elf = fs::read(&bin).with_context(|| format!("cannot read {}", bin.display()))?;
        ensure!(
            !has_interpreter(&elf)?,
            "{} is dynamically linked (it has a program interpreter)",
            bin.display()
        );
        ensure!(
            u16::from_le_bytes([elf[18], elf[19]]) == elf_machine(arch),
            "{} is not an {arch} ELF file",
            bin.display()
        );
        built.push(bin);
    }
    Ok(built)
}

/// Whether a 64-bit little-endian ELF has a PT_INTERP program header.
fn has_interpreter(elf: &[u8]) -> anyhow::Result<bool> {
    ensure!(
        elf.len() > 64 && &elf[..4] == b"\x7fELF" && elf[4] == 2 && elf[5] == 1,
        "not a 64-bit little-endian ELF file"
    );
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[32..40].try_into()?) as usize;
    let (phentsize, phnum) = (u16_at(54), u16_at(56));
    Ok((0..phnum).any(|i| {
        let o = phoff + i * phentsize;
        elf.get(o..o + 4)
            .is_some_and(|t| u32::from_le_bytes(t.try_into().unwrap()) == 3)
    }))
}
