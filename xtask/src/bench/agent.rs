//! The agent as the benchmark runs it: a child process, its CPU time and memory read
//! from /proc.

use std::{
    fs::File,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

/// Which Unix socket hooks a benchmark agent runs with (`--unix-hooks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnixHooks {
    /// As shipped: `auto` (`fexit`, else kprobes, else none).
    AsShipped,
    /// The syscall tracepoints, asked for: the only Unix hooks a kernel without `fexit`
    /// and kprobes has, so the Unix rows measure them.
    Syscalls,
    /// None: a TCP-only agent.
    Off,
}

impl UnixHooks {
    pub fn flag(self) -> &'static str {
        match self {
            UnixHooks::AsShipped => "auto",
            UnixHooks::Syscalls => "syscalls",
            UnixHooks::Off => "off",
        }
    }
}

pub struct Agent {
    child: Child,
    pub addr: String,
    /// Time from spawn to `/readyz` answering 200.
    pub ready_after: Duration,
    /// The agent's log (stderr), for what `auto` chose.
    log: PathBuf,
}

impl Agent {
    /// `run` without a pod source or Events, with `hooks`, plus `extra` arguments.
    pub fn start(bin: &Path, hooks: UnixHooks, extra: &[&str]) -> anyhow::Result<Self> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr = format!("127.0.0.1:{port}");
        let log = std::env::temp_dir().join(format!("sr-bench-agent-{port}.log"));
        let started = Instant::now();
        let child = Command::new(bin.join("sidecar-race-agent"))
            .args(["run", "--listen", &addr, "--events=false"])
            .args(["--unix-hooks", hooks.flag()])
            .args(extra)
            // Nothing may stay attached after a run: the next measures a bare kernel.
            .env("SIDECAR_RACE_PIN", "off")
            .stdout(Stdio::null())
            .stderr(File::create(&log).with_context(|| log.display().to_string())?)
            .spawn()
            .context("start the agent")?;
        let mut agent = Agent {
            child,
            addr,
            ready_after: Duration::ZERO,
            log,
        };
        let deadline = started + Duration::from_secs(30);
        while !http_get(&agent.addr, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200")) {
            if Instant::now() > deadline {
                bail!("the agent did not become ready within 30 s");
            }
            if let Some(status) = agent.child.try_wait()? {
                bail!("the agent exited before it was ready: {status}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        agent.ready_after = started.elapsed();
        Ok(agent)
    }

    /// The Unix hooks the agent attached, as its start-up line names them (`fexit`,
    /// `kprobes`, `syscalls`, `missing`), once it is ready.
    pub fn unix_hooks_attached(&self) -> Option<String> {
        unix_hooks_in(&std::fs::read_to_string(&self.log).ok()?)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU time so far (nanosecond runtime, see `cpu_of`).
    pub fn cpu(&self) -> anyhow::Result<Duration> {
        cpu_of(self.child.id())
    }

    /// Waits until the agent spends under 1 ms of CPU in 100 ms (its start-up is over:
    /// idle, it spends ~0.2 ms), or 5 s passed.
    pub fn wait_quiet(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut last = self.cpu()?;
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            let now = self.cpu()?;
            if now - last < Duration::from_millis(1) {
                break;
            }
            last = now;
        }
        Ok(())
    }

    /// (current, peak) resident set size in bytes.
    pub fn rss(&self) -> anyhow::Result<(u64, u64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .map(|k| k * 1024)
        };
        match (kib("VmRSS:"), kib("VmHWM:")) {
            (Some(now), Some(peak)) => Ok((now, peak)),
            _ => bail!("no VmRSS/VmHWM in /proc/{}/status", self.child.id()),
        }
    }

    /// `/api/v1/incidents` (empty when the agent does not answer).
    pub fn incidents(&self) -> Vec<serde_json::Value> {
        let body = http_get(&self.addr, "/api/v1/incidents?limit=10000")
            .and_then(|r| Some(r.split_once("\r\n\r\n")?.1.to_string()))
            .unwrap_or_default();
        serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["incidents"].as_array().cloned())
            .unwrap_or_default()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// `unix_hooks=NAME` (or `"unix_hooks":"NAME"`) in the agent's log.
fn unix_hooks_in(log: &str) -> Option<String> {
    let at = log.find("unix_hooks")? + "unix_hooks".len();
    let name: String = log[at..]
        .trim_start_matches(['=', '"', ':', ' '])
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();
    (!name.is_empty()).then_some(name)
}

/// CPU time of a process so far, in nanoseconds: the sum of its threads' runtimes
/// from `/proc/<pid>/task/*/schedstat` (threads that already exited are not in it;
/// the agent's threads live as long as it does).
pub fn cpu_of(pid: u32) -> anyhow::Result<Duration> {
    let tasks = format!("/proc/{pid}/task");
    let mut ns = 0u64;
    for task in std::fs::read_dir(&tasks).with_context(|| tasks.clone())? {
        let Ok(stat) = std::fs::read_to_string(task?.path().join("schedstat")) else {
            continue; // the thread just exited
        };
        ns += stat
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .context("schedstat")?;
    }
    Ok(Duration::from_nanos(ns))
}

fn http_get(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    Some(resp)
}

#[cfg(test)]
mod tests {
    use super::unix_hooks_in;

    #[test]
    fn the_start_up_line_names_the_unix_hooks_in_either_log_format() {
        let text = "2026-12-03T09:00:00Z  INFO watching the kernel kernel=6.18 \
                    unix_hooks=\"missing\" set_state_hook=tp_btf";
        assert_eq!(unix_hooks_in(text).as_deref(), Some("missing"));
        let json = r#"{"message":"watching the kernel","unix_hooks":"syscalls"}"#;
        assert_eq!(unix_hooks_in(json).as_deref(), Some("syscalls"));
        assert_eq!(unix_hooks_in("no such line"), None);
    }
}
