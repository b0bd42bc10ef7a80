//! The cluster's processes: started detached (own session, output to a log file), their
//! pids in `<state>/pids/<name>.pid` with the process's start time and executable,
//! stopped by those pids only, and only while both still match: after a reboot (or a
//! long time) a recorded pid may name any process.

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
    let pid = child.id();
    let identity =
        Identity::of(pid).with_context(|| format!("{name} (pid {pid}) exited at once"))?;
    fs::write(pid_file(name), identity.record(pid))?;
    Ok(pid)
}

/// What tells a process from a later one with the same pid: its start time (clock
/// ticks since boot, `/proc/<pid>/stat` field 22) and its executable.
#[derive(Debug, PartialEq, Eq)]
struct Identity {
    start_ticks: u64,
    exe: PathBuf,
}

impl Identity {
    fn of(pid: u32) -> Option<Self> {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Some(Self {
            start_ticks: start_ticks(&stat)?,
            exe: fs::read_link(format!("/proc/{pid}/exe")).ok()?,
        })
    }

    /// The pid file's line: `<pid> <start ticks> <exe>`.
    fn record(&self, pid: u32) -> String {
        format!("{pid} {} {}", self.start_ticks, self.exe.display())
    }

    fn parse(line: &str) -> Option<(u32, Self)> {
        let mut parts = line.trim().splitn(3, ' ');
        let pid = parts.next()?.parse().ok()?;
        let start_ticks = parts.next()?.parse().ok()?;
        let exe = PathBuf::from(parts.next()?);
        Some((pid, Self { start_ticks, exe }))
    }
}

/// Field 22 of a `/proc/<pid>/stat` line (the name in parentheses may hold spaces).
fn start_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    // Field 3 (state) is the first after the name; 22 is 19 further.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The recorded pid of `name` when that process still runs and is still the one `up`
/// started (same start time and executable); a pid file without them is not trusted.
pub fn running(name: &str) -> Option<u32> {
    let (pid, recorded) = Identity::parse(&fs::read_to_string(pid_file(name)).ok()?)?;
    if !alive(pid) {
        return None;
    }
    if Identity::of(pid).as_ref() != Some(&recorded) {
        eprintln!(
            "xtask: pid {pid} of {name} is now another process ({}): not signalled",
            fs::read_link(format!("/proc/{pid}/exe"))
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| "unknown".into())
        );
        return None;
    }
    Some(pid)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_ticks_is_field_22_whatever_the_name_holds() {
        let stat = "4242 (kube apiserver) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 12 0 987654 1000 50";
        assert_eq!(start_ticks(stat), Some(987654));
    }

    #[test]
    fn a_recorded_pid_names_this_process_only_while_start_and_exe_match() {
        let me = std::process::id();
        let identity = Identity::of(me).expect("this process");
        let (pid, parsed) = Identity::parse(&identity.record(me)).unwrap();
        assert_eq!((pid, &parsed), (me, &identity));
        let later = Identity {
            start_ticks: identity.start_ticks + 1,
            ..Identity::of(me).unwrap()
        };
        assert_ne!(Identity::of(me).as_ref(), Some(&later), "a later process");
        let other_exe = Identity {
            exe: PathBuf::from("/bin/true"),
            ..Identity::of(me).unwrap()
        };
        assert_ne!(
            Identity::of(me).as_ref(),
            Some(&other_exe),
            "another program"
        );
    }
}
