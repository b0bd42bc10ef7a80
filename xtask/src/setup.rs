//! Detects what a verb needs and installs what is missing: each verb asks for its own
//! tier (`Tier`), so the demo waits for the eBPF toolchain alone.
//!
//! eBPF toolchain (every tier), first route that applies:
//! 1. Debian's `rustc-web` + `libstd-rust-web-dev-bpf` (a precompiled BPF `core`);
//! 2. a rustup nightly with `rust-src` (the usual aya route, `-Z build-std=core`);
//! 3. otherwise install route 1 with apt-get.
//!
//! Plus `bpf-linker` (cargo install, built against Debian's LLVM 22 or 23).
//!
//! The demo adds iproute2 (the simulated pods' network namespaces); the bench, bpftool.
//! The cluster tier adds the node's runtime (Debian's `containerd`, `runc`,
//! `containernetworking-plugins`), `iptables` for kube-proxy, `busybox-static`, `curl`
//! and `binutils` (readelf) for its images, `openssl` for its PKI, and the Go builds
//! (`cluster/build.rs`).
//!
//! The test tier adds the rest: `protobuf-compiler` (the CRI bindings of the tests
//! crate), the checkers of `deploy/` (tests/tests/deploy_manifests.rs): `kubectl` for
//! kustomize (Debian's `kubernetes-client` when there is no kubectl), `promtool`
//! (Debian's `prometheus`; the server it ships is not left running), and
//! `kubernetes-validate` from PyPI, pinned, in a venv under `target/deploy-tools/`
//! (so neither the system's nor pyenv's Python is modified); `skopeo` for the
//! real-runtime tier (tests/tests/cri_runtime.rs); the kernel tier's QEMU, nft and
//! kernels (`kernels.rs`); the arm64 cross linker; krew; and the cluster tier's CRI-O
//! variant: CRI-O and crictl built from their Go modules, with `libseccomp-dev`,
//! `pkg-config`, `gcc` and `make` to build and `conmon` to run
//! (`cluster/runtime/cri_o/build.rs`); and its Kubernetes 1.36 variant: Kubernetes
//! 1.36, containerd 2 and runc (cgo with libseccomp) from their Go modules
//! (`cluster/kubernetes.rs`, `cluster/runtime/containerd2/build.rs`). containerd 1.6.20 in
//! bookworm has a default seccomp profile that allows `bpf` and `perf_event_open` to
//! holders of CAP_BPF and CAP_PERFMON (tests/tests/runtime_default_seccomp.rs).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, bail};

use crate::{
    cluster::runtime::cri_o::build as cri_o,
    host::{Apt, have, package_installed},
    run::{checked, output, succeeds, workspace_root},
};

const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
const DEBIAN_BPF_CORE: &str = "/usr/lib/rustlib/bpfel-unknown-none/lib";
const BPF_LINKER_VERSION: &str = "0.13.0";
/// LLVM majors for bpf-linker 0.13: 22 (what rustc 1.96 emits; verified here) first;
/// it must be at least as new as the rustc that made the bitcode.
const LLVM_MAJORS: [u32; 2] = [22, 23];
/// Verified here: it ships the schemas of Kubernetes 1.25 to 1.37.
const KUBERNETES_VALIDATE_VERSION: &str = "1.37.0";
/// Under the workspace root; tests/tests/deploy_manifests.rs looks for it there.
const DEPLOY_TOOLS_VENV: &str = "target/deploy-tools/venv";
/// Where Debian's containernetworking-plugins puts bridge, host-local, loopback.
const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// What a verb installs: each asks for the tier it runs, nothing more. A newcomer's
/// `cargo xtask demo` waits for the eBPF toolchain, not for every test tier's tools.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Tier {
    /// `build`, `image`, `krew`: the eBPF toolchain (the agent embeds its object).
    Build,
    /// `demo`, `soak`: the build's, and iproute2 for the simulated pods' namespaces.
    Demo,
    /// `bench`: the demo's, and bpftool (the programs' run-time statistics).
    Bench,
    /// `cluster up`: the demo's, the node's runtime and network (containerd, runc,
    /// the CNI plugins, iptables for kube-proxy, busybox-static, curl and binutils
    /// for the images, openssl for the PKI), and the Go builds of Kubernetes, etcd, helm, the
    /// Prometheus Operator and Prometheus.
    Cluster,
    /// `setup`, `test`: every tier's tools, the kernel tier's kernels and krew.
    Test,
}

/// Installs what `tier` needs and is missing.
pub fn ensure(tier: Tier) -> anyhow::Result<()> {
    let mut apt = Apt::default();
    if !ebpf_toolchain_present() {
        apt.want(&["rustc-web", "libstd-rust-web-dev-bpf"]);
    }
    let mut tools: Vec<(&str, &str)> = Vec::new();
    if tier >= Tier::Demo {
        tools.push(("ip", "iproute2"));
    }
    if tier >= Tier::Bench {
        // The bench's statistics, and the restart fault test's count of programs.
        tools.push(("bpftool", "bpftool"));
    }
    if tier >= Tier::Cluster {
        tools.extend([
            ("iptables", "iptables"),
            ("containerd", "containerd"),
            ("ctr", "containerd"),
            ("runc", "runc"),
            ("openssl", "openssl"),
            ("modprobe", "kmod"),
            // The glibc test image (tests/testbed/src/images.rs): readelf lists what
            // its programs load; curl is one of them (getent, logger and perl are in
            // Debian's essential packages).
            ("readelf", "binutils"),
            ("curl", "curl"),
            // psql, the glibc image's client of the Cloud SQL proxy (cluster case 17).
            ("psql", "postgresql-client"),
            // socat, the glibc image's Unix datagram log relay (cluster case 20).
            ("socat", "socat"),
        ]);
        if !package_installed("busybox-static") {
            apt.want(&["busybox-static"]);
        }
        if !Path::new(&format!("{CNI_BIN_DIR}/bridge")).exists() {
            apt.want(&["containernetworking-plugins"]);
        }
    }
    let everything = tier == Tier::Test;
    if everything {
        // protoc: the CRI client bindings (k8s-cri) of the test kit are generated at
        // build time.
        tools.push(("protoc", "protobuf-compiler"));
        // The html report's browser test (tests/tests/report_html.rs): Debian's
        // chromium renders the page headless.
        tools.push(("chromium", "chromium"));
    }
    apt.want_tools(&tools);
    let mut installing_prometheus = false;
    if everything {
        if !have("kubectl") {
            apt.want(&["kubernetes-client"]);
        }
        if !have("promtool") {
            apt.want(&["prometheus"]);
            installing_prometheus = true;
        }
        if !have("python3") {
            apt.want(&["python3", "python3-venv"]);
        } else if !python_can_make_venvs() {
            apt.want(&["python3-venv"]);
        }
        // The kernel tier: QEMU, busybox-static (also the CRI tier's images), nft.
        crate::kernels::want_tools(&mut apt);
        // The real-runtime tier (tests/tests/cri_runtime.rs): skopeo inspects the
        // image archive.
        if !have("skopeo") {
            apt.want(&["skopeo"]);
        }
        // `cargo xtask image --arch arm64`: the cross linker, when apt has it.
        crate::cross::want_tools(&mut apt);
        // The cluster tier's CRI-O variant: its build and its runtime's helpers (runc's
        // build for the Kubernetes 1.36 variant needs a subset of them).
        cri_o::want_tools(&mut apt);
    }
    install_ebpf_toolchain(&mut apt)?;
    if installing_prometheus {
        stop_prometheus_server();
    }
    if everything {
        ensure_kubernetes_validate()?;
        crate::kernels::ensure(&mut apt)?;
        // krew, which tests/tests/krew_plugin.rs installs the kubectl plugin with (Go).
        crate::krew::ensure_tool()?;
        // The OpenTelemetry Collector the OTLP tests push to and the cluster tier runs as
        // a sidecar (xtask/otelcol, Go), and the cluster tier's other real sidecars.
        crate::cluster::otelcol::ensure()?;
        crate::cluster::sidecars::ensure()?;
        cri_o::ensure()?;
    }
    if tier >= Tier::Cluster {
        // The cluster tier's Kubernetes, etcd and Prometheus Operator, built once per
        // machine (Go).
        crate::cluster::build_binaries()?;
    }
    if everything {
        // The cluster tier's Kubernetes 1.36 variant: 1.36, containerd 2 and runc.
        crate::cluster::Kubernetes::V1_36.ensure()?;
    }
    eprintln!("xtask: setup complete ({tier:?} tier)");
    Ok(())
}

/// `cargo xtask cluster up --runtime cri-o`, after the cluster tier's set-up: CRI-O
/// and crictl, built with what they need from apt.
pub fn ensure_cri_o() -> anyhow::Result<()> {
    let mut apt = Apt::default();
    cri_o::want_tools(&mut apt);
    apt.install()?;
    cri_o::ensure()
}

/// `cargo xtask cluster up --kubernetes <newer>`, after the cluster tier's set-up: that
/// Kubernetes, containerd 2 and runc, built with what runc's build needs from apt.
pub fn ensure_kubernetes(kubernetes: crate::cluster::Kubernetes) -> anyhow::Result<()> {
    let mut apt = Apt::default();
    crate::cluster::runtime::containerd2::build::want_tools(&mut apt);
    apt.install()?;
    kubernetes.ensure()
}

/// `cargo xtask image --arch arm64` (and krew's): the build's tier and the cross
/// toolchain, when apt has it.
pub fn ensure_cross() -> anyhow::Result<()> {
    let mut apt = Apt::default();
    crate::cross::want_tools(&mut apt);
    apt.install()?;
    ensure(Tier::Build)
}

/// The packages `apt` holds so far, then bpf-linker (built against Debian's LLVM when
/// it is missing), and a check that a BPF toolchain route is there.
fn install_ebpf_toolchain(apt: &mut Apt) -> anyhow::Result<()> {
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
    Ok(())
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

/// Debian's python3 needs python3-venv for `python3 -m venv` to bring pip.
fn python_can_make_venvs() -> bool {
    succeeds(Command::new("python3").args(["-m", "ensurepip", "--version"]))
}

/// We installed `prometheus` for its promtool only: on a systemd machine apt has
/// started the server; stop it and keep it from starting at boot.
fn stop_prometheus_server() {
    if Path::new("/run/systemd/system").is_dir() {
        eprintln!(
            "xtask: stopping the prometheus server the package started (only promtool is used)"
        );
        let _ = checked(Command::new("systemctl").args(["disable", "--now", "prometheus.service"]));
    }
}

/// `kubernetes-validate` at the pinned version in its own venv; nothing to do when
/// it is already there.
fn ensure_kubernetes_validate() -> anyhow::Result<()> {
    let venv = workspace_root().join(DEPLOY_TOOLS_VENV);
    let bin = venv.join("bin");
    let installed = output(Command::new(bin.join("kubernetes-validate")).arg("--version"));
    if installed.as_deref() == Some(KUBERNETES_VALIDATE_VERSION) {
        return Ok(());
    }
    let python: PathBuf = bin.join("python");
    // Not the pinned version, or not runnable: a venv's scripts name its path in their
    // `#!` line, so a moved or copied target/ leaves them pointing nowhere, and pip
    // would call the package already satisfied. Start from an empty venv.
    eprintln!(
        "xtask: creating a Python venv for kubernetes-validate in {}",
        venv.display()
    );
    checked(
        Command::new("python3")
            .args(["-m", "venv", "--clear"])
            .arg(&venv),
    )
    .context("cannot create the venv (Debian: apt-get install python3-venv)")?;
    eprintln!("xtask: installing kubernetes-validate {KUBERNETES_VALIDATE_VERSION} (PyPI) into it");
    checked(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg(format!(
                "kubernetes-validate=={KUBERNETES_VALIDATE_VERSION}"
            )),
    )
    .context("pip install kubernetes-validate failed (is PyPI reachable?)")
}
