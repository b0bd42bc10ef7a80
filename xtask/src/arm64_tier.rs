//! The kernel tier on arm64, in `cargo xtask test`. Cross-builds the static agent
//! and the stand-ins (`sr-app`, `sr-proxy`, `sr-uds`) for aarch64 with the dev profile
//! (`cross.rs`, like the amd64 tier's debug binaries), then boots Debian's arm64 cloud
//! kernel under `qemu-system-aarch64` with them (tests/tests/kernel_matrix.rs
//! `kernel_6_1_arm64`, `#[ignore]`d in a plain `cargo test` so that it never runs stale
//! cross-built binaries).
//!
//! Part of the plain `cargo xtask test`, after the other tiers (its VM never runs beside
//! the amd64 ones); `cargo xtask test arm64` runs set-up, the build and this tier alone.

use std::time::Instant;

use crate::{
    image::{Profile, build_static},
    run::{Tally, cargo, tests},
};

/// The argument of `cargo xtask test` that runs this tier alone.
pub const NAME: &str = "arm64";
/// Where the kernel tier's test finds the cross-built binaries (tests/src/vm_arch.rs).
const BIN_DIR_ENV: &str = "SIDECAR_RACE_ARM64_BIN_DIR";
const TEST: &str = "kernel_6_1_arm64";

/// Runs the tier when `args` are empty (the whole suite) or name it; `extra` goes to
/// its `cargo test` (after `--`).
pub fn test_tier(args: &[String], extra: &[String], tally: &mut Tally) -> anyhow::Result<()> {
    if !args.is_empty() && !args.iter().any(|a| a.contains(NAME)) {
        return Ok(());
    }
    let started = Instant::now();
    let built = build_static(
        "arm64",
        Profile::Dev,
        &[
            ("sidecar-race-agent", &["sidecar-race-agent"]),
            ("sidecar-race-kit", &["sr-app", "sr-proxy"]),
            ("sidecar-race-tests", &["sr-uds"]),
        ],
    )?;
    let dir = built[0].parent().expect("a directory").to_path_buf();
    eprintln!(
        "xtask: arm64 cross-build took {} s",
        started.elapsed().as_secs()
    );
    let mut cmd = cargo();
    cmd.args(["test", "--no-fail-fast", "-p", "sidecar-race-tests"])
        .args([
            "--test",
            "kernel_matrix",
            "--",
            "--ignored",
            "--exact",
            TEST,
        ])
        .args(extra)
        .env(BIN_DIR_ENV, &dir);
    let result = tests(&mut cmd, tally);
    eprintln!(
        "xtask: arm64 kernel tier (cross-build, boot, checks) took {} s",
        started.elapsed().as_secs()
    );
    result
}
