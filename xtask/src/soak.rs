//! `cargo xtask soak --minutes N [--restart-every-minutes M] [--out FILE]`: builds the
//! release binaries and runs
//! the soak (`sr-soak`, the test kit's `soak` module) against the release agent:
//! pod churn with racing and fixed pods plus a refusal storm, the agent's RSS and open
//! descriptors sampled, incidents checked, the agent restarted mid-race every M
//! minutes (default 5; 0: never). Prints the summary table and writes it to
//! FILE (default target/soak/SOAK.md). Needs root, like the other root tiers.

use std::path::PathBuf;

use crate::run;

pub fn soak(minutes: f64, restart_every_minutes: f64, out: Option<PathBuf>) -> anyhow::Result<()> {
    run::checked(run::cargo().args(["build", "--release", "--workspace", "--bins"]))?;
    let root = run::workspace_root();
    let out = out.unwrap_or_else(|| root.join("target/soak/SOAK.md"));
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    run::checked(
        std::process::Command::new(run::target_dir().join("release/sr-soak"))
            .arg("--minutes")
            .arg(minutes.to_string())
            .arg("--restart-every-minutes")
            .arg(restart_every_minutes.to_string())
            .arg("--out")
            .arg(&out),
    )?;
    eprintln!("xtask: soak table written to {}", out.display());
    Ok(())
}
