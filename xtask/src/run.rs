//! Running commands with what is being run shown, failing on a non-zero exit.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
};

use anyhow::{Context, bail};

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// `cargo` as the one running xtask, in the workspace root.
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(workspace_root());
    cmd
}

pub fn checked(cmd: &mut Command) -> anyhow::Result<()> {
    eprintln!("xtask: running {}", show(cmd));
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {}", show(cmd)))?;
    if !status.success() {
        bail!("{} failed ({status})", show(cmd));
    }
    Ok(())
}

/// Whether `cmd` runs and exits 0, output discarded.
pub fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// stdout of `cmd` when it succeeds.
pub fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.stderr(Stdio::null()).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn show(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|s| s.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}
