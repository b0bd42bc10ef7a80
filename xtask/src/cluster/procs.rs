//! The cluster's processes: started detached (own session, output to a log file), their
//! pids in `<state>/pids/<name>.pid`, stopped by those pids only.

use std::{
    fs::{self, File},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::Context;

use super::node::{LOG_DIR, STATE_DIR};

fn pid_file(name: &str) -> PathBuf {
    Path::new(STATE_DIR)
        .join("pids")
        .join(format!("{name}.pid"))
}

pub fn log_file(name: &str) -> PathBuf {
    Path::new(LOG_DIR).join(format!("{name}.log"))
}

/// Starts `cmd` in its own session with stdout and stderr in `<log dir>/<name>.log`.
pub fn spawn(name: &str, cmd: &mut Command) -> anyhow::Result<u32> {
    fs::create_dir_all(Path::new(STATE_DIR).join("pids"))?;
    fs::create_dir_all(LOG_DIR)?;
    let log = File::create(log_file(name))?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot start {name} ({:?})", cmd.get_program()))?;
    fs::write(pid_file(name), child.id().to_string())?;
    Ok(child.id())
}

/// The recorded pid of `name` when that process still runs.
pub fn running(name: &str) -> Option<u32> {
    let pid: u32 = fs::read_to_string(pid_file(name))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    alive(pid).then_some(pid)
}

pub fn alive(pid: u32) -> bool {
    // A zombie (exited, not yet reaped by its parent) counts as gone.
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .is_some_and(|zombie| !zombie)
}

/// SIGTERM, then SIGKILL after `grace`; waits until the process is gone.
pub fn stop_pid(pid: u32, grace: Duration) {
    let pid_t = pid as libc::pid_t;
    // SAFETY: kill(2) on a pid we started (read from our pid file or found by its
    // command line naming our state directory).
    unsafe { libc::kill(pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + grace;
    while alive(pid) && Instant::now() < deadline {
        sleep(Duration::from_millis(100));
    }
    if alive(pid) {
        // SAFETY: as above.
        unsafe { libc::kill(pid_t, libc::SIGKILL) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(pid) && Instant::now() < deadline {
            sleep(Duration::from_millis(50));
        }
    }
}

/// Stops `name` if it runs; whether it did.
pub fn stop(name: &str, grace: Duration) -> bool {
    let was = running(name);
    if let Some(pid) = was {
        stop_pid(pid, grace);
    }
    let _ = fs::remove_file(pid_file(name));
    was.is_some()
}

/// Pids whose command line contains `needle` (e.g. containerd shims started with our
/// socket's path).
pub fn pids_with_arg(needle: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let cmdline = fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(needle) {
            pids.push(pid);
        }
    }
    pids
}

/// The last `n` lines of a component's log, for error messages.
pub fn log_tail(name: &str, n: usize) -> String {
    let text = fs::read_to_string(log_file(name)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Waits until `ready` holds or `name` exits or `timeout` passes.
pub fn wait_ready(
    name: &str,
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if ready() {
            return Ok(());
        }
        if running(name).is_none() {
            anyhow::bail!(
                "{name} exited during start-up; the end of {}:\n{}",
                log_file(name).display(),
                log_tail(name, 25)
            );
        }
        if Instant::now() >= deadline {
            anyhow::bail!(
                "{name} was not ready within {} s; the end of {}:\n{}",
                timeout.as_secs(),
                log_file(name).display(),
                log_tail(name, 25)
            );
        }
        sleep(Duration::from_millis(250));
    }
}
