//! The refusal loops: a client in the sidecar pod's app container, pinned to the loop
//! CPU (see `cpu`), dialing as fast as it can what the proxy would serve: `sr-app` its
//! closed TCP port, `sr-uds` the shared volume's absent path (`ENOENT`) and its stale
//! socket file (`ECONNREFUSED`), half each.

use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use super::{cpu, sidecar_pod::SidecarPod};

/// `n` refused TCP connects; their wall time.
pub fn tcp(bin: &Path, pod: &SidecarPod, n: u32) -> anyhow::Result<Duration> {
    let mut cmd = Command::new(bin.join("sr-app"));
    cmd.args(["--connect", &format!("127.0.0.1:{}", pod.port)])
        .args(["--interval-ms", "0", "--keep-dialing", "--attempts"])
        .arg(n.to_string());
    timed(pod, cmd)
}

/// `n` refused UDS connects; their wall time.
pub fn uds(bin: &Path, pod: &SidecarPod, n: u32) -> anyhow::Result<Duration> {
    let mut wall = Duration::ZERO;
    for (path, n) in [(&pod.absent, n / 2), (&pod.stale, n - n / 2)] {
        let mut cmd = Command::new(bin.join("sr-uds"));
        cmd.arg("connect")
            .arg(path)
            .args(["--interval-ms", "0", "--keep-dialing", "--attempts"])
            .arg(n.to_string());
        wall += timed(pod, cmd)?;
    }
    Ok(wall)
}

/// Runs `cmd` in the pod's app container on the loop CPU; its wall time.
fn timed(pod: &SidecarPod, mut cmd: Command) -> anyhow::Result<Duration> {
    let on = cpu::loop_cpu();
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    pod.in_app(&mut cmd)?;
    // SAFETY: the closure only makes one syscall (async-signal-safe) before exec.
    unsafe { std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || cpu::pin_current(on)) };
    let start = Instant::now();
    let status = cmd.status().with_context(|| format!("run {cmd:?}"))?;
    let wall = start.elapsed();
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(wall)
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
