//! Detects what the build and tests need and installs what is missing.
//!
//! eBPF toolchain, first route that applies:
//! 1. Debian's `rustc-web` + `libstd-rust-web-dev-bpf` (a precompiled BPF `core`);
//! 2. a rustup nightly with `rust-src` (the usual aya route, `-Z build-std=core`);
//! 3. otherwise install route 1 with apt-get.
//!
//! Plus `bpf-linker` (cargo install, built against Debian's LLVM 22 or 23) and the
//! tools the root tests drive: iproute2, iptables.

use std::{path::Path, process::Command};

use anyhow::{Context, bail};

use crate::run::{checked, output, succeeds};

const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
const DEBIAN_BPF_CORE: &str = "/usr/lib/rustlib/bpfel-unknown-none/lib";
const BPF_LINKER_VERSION: &str = "0.13.0";
/// LLVM majors for bpf-linker 0.13: 22 (what rustc 1.96 emits; verified here) first;
/// it must be at least as new as the rustc that made the bitcode.
const LLVM_MAJORS: [u32; 2] = [22, 23];

pub fn ensure() -> anyhow::Result<()> {
    let mut apt = Apt::default();
    if !ebpf_toolchain_present() {
        apt.want(&["rustc-web", "libstd-rust-web-dev-bpf"]);
    }
    for (tool, package) in [("ip", "iproute2"), ("iptables", "iptables")] {
        if !have(tool) {
            apt.want(&[package]);
        }
    }
    let need_linker = which_bpf_linker().is_none();
    if need_linker {
        let llvm = LLVM_MAJORS
            .into_iter()
            .find(|m| Path::new(&format!("/usr/lib/llvm-{m}/lib/libLLVM.so")).exists())
            .or_else(|| {
                apt.first_available(&LLVM_MAJORS.map(|m| format!("llvm-{m}-dev")))
                    .map(|i| LLVM_MAJORS[i])
            });
        let Some(major) = llvm else {
            bail!("no LLVM 22 or 23 development package is available to build bpf-linker");
        };
        apt.want(&[
            &format!("llvm-{major}-dev"),
            &format!("libpolly-{major}-dev"),
        ]);
        apt.install()?;
        install_bpf_linker(major)?;
    } else {
        apt.install()?;
    }
    if !ebpf_toolchain_present() {
        bail!(
            "no eBPF toolchain after setup: install Debian's rustc-web and libstd-rust-web-dev-bpf, \
             or `rustup toolchain install nightly --component rust-src`"
        );
    }
    eprintln!("xtask: setup complete");
    Ok(())
}

/// apt-get packages to install, with one `apt-get update` at most.
#[derive(Default)]
struct Apt {
    wanted: Vec<String>,
    updated: bool,
}

impl Apt {
    fn want(&mut self, packages: &[&str]) {
        self.wanted.extend(packages.iter().map(|p| p.to_string()));
    }

    fn update(&mut self) -> anyhow::Result<()> {
        if !self.updated {
            if !have("apt-get") {
                bail!(
                    "missing {}, and this is not a Debian/Ubuntu machine (no apt-get): install them by hand",
                    self.wanted.join(", ")
                );
            }
            checked(Command::new("apt-get").args(["update", "-q"]))?;
            self.updated = true;
        }
        Ok(())
    }

    /// Index of the first package apt knows about.
    fn first_available(&mut self, packages: &[String]) -> Option<usize> {
        self.update().ok()?;
        packages.iter().position(|p| {
            output(Command::new("apt-cache").args(["policy", p]))
                .is_some_and(|o| o.contains("Candidate:") && !o.contains("Candidate: (none)"))
        })
    }

    fn install(&mut self) -> anyhow::Result<()> {
        if self.wanted.is_empty() {
            return Ok(());
        }
        self.update()?;
        eprintln!("xtask: installing {}", self.wanted.join(" "));
        checked(
            Command::new("apt-get")
                .args(["install", "-y", "-q", "--no-install-recommends"])
                .args(&self.wanted)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
        .context("apt-get install failed (are you root?)")?;
        self.wanted.clear();
        Ok(())
    }
}

fn install_bpf_linker(llvm_major: u32) -> anyhow::Result<()> {
    eprintln!(
        "xtask: building bpf-linker {BPF_LINKER_VERSION} against LLVM {llvm_major} (about a minute)"
    );
    checked(
        Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .args(["install", "bpf-linker", "--version", BPF_LINKER_VERSION])
            .args([
                "--no-default-features",
                "--features",
                &format!("llvm-{llvm_major}"),
            ])
            .env("LLVM_PREFIX", format!("/usr/lib/llvm-{llvm_major}")),
    )
}

fn which_bpf_linker() -> Option<String> {
    output(Command::new("sh").args(["-c", "command -v bpf-linker"])).or_else(|| {
        let home = std::env::var("HOME").ok()?;
        let p = format!("{home}/.cargo/bin/bpf-linker");
        Path::new(&p).exists().then_some(p)
    })
}

/// Debian's route (precompiled BPF core) or a nightly with rust-src.
fn ebpf_toolchain_present() -> bool {
    (Path::new(DEBIAN_RUSTC).exists() && Path::new(DEBIAN_BPF_CORE).is_dir())
        || nightly_has_rust_src()
}

fn nightly_has_rust_src() -> bool {
    output(Command::new("rustup").args(["run", "nightly", "rustc", "--print", "sysroot"]))
        .is_some_and(|sysroot| {
            Path::new(&sysroot)
                .join("lib/rustlib/src/rust/library/core")
                .is_dir()
        })
}

fn have(tool: &str) -> bool {
    succeeds(Command::new("sh").args(["-c", &format!("command -v {tool}")]))
}
