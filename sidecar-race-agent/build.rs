//! Builds the eBPF programs (`sidecar-race-ebpf`, target `bpfel-unknown-none`) and
//! hands the object to the agent, which embeds it.
//!
//! Two toolchain routes, detected in this order (`cargo xtask setup` installs one):
//! 1. Debian's `rustc-web` with the precompiled BPF `core` (`libstd-rust-web-dev-bpf`):
//!    no build-std needed.
//! 2. A rustup nightly with `rust-src`: the usual aya route with `-Z build-std=core`.
//!
//! `SIDECAR_RACE_EBPF_OBJECT=/path/to/object` skips the build and embeds that file.
//! This is our own script rather than `aya-build` because aya-build always asks for
//! build-std, which Debian's route does not have.

use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

const EBPF_PACKAGE: &str = "sidecar-race-ebpf";
const EBPF_BIN: &str = "sidecar-race";
const TARGET: &str = "bpfel-unknown-none";
const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
const DEBIAN_BPF_CORE: &str = "/usr/lib/rustlib/bpfel-unknown-none/lib";

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let workspace = manifest_dir.parent().unwrap().to_path_buf();
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let dest = out_dir.join("sidecar-race.bpf.o");

    println!("cargo:rerun-if-env-changed=SIDECAR_RACE_EBPF_OBJECT");
    if let Ok(prebuilt) = env::var("SIDECAR_RACE_EBPF_OBJECT") {
        println!("cargo:rerun-if-changed={prebuilt}");
        std::fs::copy(&prebuilt, &dest)
            .unwrap_or_else(|e| fail(&format!("cannot copy {prebuilt}: {e}")));
        return;
    }
    let ebpf_dir = workspace.join(EBPF_PACKAGE);
    for p in ["src", "Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", ebpf_dir.join(p).display());
    }
    println!(
        "cargo:rerun-if-changed={}",
        workspace.join("Cargo.lock").display()
    );

    let target_dir = workspace_target_dir(&out_dir).join("bpf");
    let mut cmd = nested_cargo(&workspace);
    cmd.args([
        "build",
        "--release",
        "--target",
        TARGET,
        "--package",
        EBPF_PACKAGE,
    ])
    .args(["--bin", EBPF_BIN, "--target-dir"])
    .arg(&target_dir);
    let status = cmd
        .status()
        .unwrap_or_else(|e| fail(&format!("cannot run cargo for the eBPF build: {e}")));
    if !status.success() {
        fail("the eBPF build failed (see the errors above)");
    }
    let object = target_dir.join(TARGET).join("release").join(EBPF_BIN);
    std::fs::copy(&object, &dest)
        .unwrap_or_else(|e| fail(&format!("cannot copy {}: {e}", object.display())));
}

/// A cargo command set up for one of the two toolchain routes, with the outer
/// build's flags removed so they do not leak into the BPF build.
fn nested_cargo(workspace: &Path) -> Command {
    let bpf_linker = which("bpf-linker")
        .unwrap_or_else(|| fail("bpf-linker is not installed: run `cargo xtask setup`"));
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd;
    if Path::new(DEBIAN_RUSTC).exists() && Path::new(DEBIAN_BPF_CORE).is_dir() {
        cmd = Command::new(cargo);
        cmd.env("RUSTC", DEBIAN_RUSTC).env("RUSTC_BOOTSTRAP", "1");
    } else if nightly_has_rust_src() {
        cmd = Command::new("rustup");
        cmd.args(["run", "nightly", "cargo"]);
        cmd.env_remove("RUSTC");
        cmd.env_remove("CARGO");
        cmd.env_remove("RUSTUP_TOOLCHAIN");
        cmd.arg("-Zbuild-std=core");
    } else {
        fail(
            "no toolchain can build eBPF here: install Debian's rustc-web and \
             libstd-rust-web-dev-bpf, or a rustup nightly with rust-src (`cargo xtask setup` does this)",
        );
    }
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_MAKEFLAGS",
        "CARGO_LLVM_COV",
        "RUSTDOCFLAGS",
    ] {
        cmd.env_remove(var);
    }
    // Nested rustc must find bpf-linker even when PATH lacks ~/.cargo/bin.
    cmd.env(
        "CARGO_TARGET_BPFEL_UNKNOWN_NONE_LINKER",
        bpf_linker.as_os_str(),
    );
    cmd.current_dir(workspace);
    cmd
}

fn nightly_has_rust_src() -> bool {
    Command::new("rustup")
        .args(["run", "nightly", "rustc", "--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            let sysroot = String::from_utf8_lossy(&o.stdout).trim().to_string();
            Path::new(&sysroot)
                .join("lib/rustlib/src/rust/library/core")
                .is_dir()
        })
        .unwrap_or(false)
}

fn which(bin: &str) -> Option<PathBuf> {
    let home_bin = env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo/bin"));
    env::var_os("PATH")
        .map(|p| env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(home_bin)
        .map(|dir| dir.join(bin))
        .find(|p| p.is_file())
}

/// `<target>/<profile>/build/<pkg>/out` → `<target>`.
fn workspace_target_dir(out_dir: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .find(|p| p.file_name().is_some_and(|n| n == "build"))
        .and_then(|build| build.parent())
        .and_then(|profile| profile.parent())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| out_dir.join("ebpf"))
}

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1);
}
