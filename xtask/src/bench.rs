//! `cargo xtask bench`: what the agent costs the workloads it watches, as ratios
//! measured side by side in one run (never as timed assertions in tests).
//!
//! Two workloads, each run with and without the agent attached, alternating (which
//! goes first switches every round), five rounds, medians compared; connects close with
//! a reset so no TIME_WAIT piles up between runs:
//! - 20,000 successful connects to a local listener: the common path, which costs a
//!   map insert and delete in the kernel and sends nothing to the agent;
//! - 20,000 refused connects: every one is an event through the ring buffer to the
//!   agent, which also decodes, attributes and counts it (its CPU time is reported).

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::run::workspace_root;

const CONNECTS: u32 = 20_000;
const ROUNDS: usize = 5;

pub fn bench() -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc_geteuid() } != 0 {
        bail!("the benchmark attaches eBPF programs: run it as root");
    }
    let bin = workspace_root().join("target/release");
    let workloads = [("successful connects", true), ("refused connects", false)];
    println!(
        "{CONNECTS} connects per run, {ROUNDS} rounds, medians; agent: `run --pods-from none --events=false`\n"
    );
    println!(
        "{:<22} {:>12} {:>12} {:>8} {:>16}",
        "workload", "without", "with agent", "ratio", "agent CPU/run"
    );
    for (name, listening) in workloads {
        let mut without = Vec::new();
        let mut with = Vec::new();
        let mut agent_cpu = Vec::new();
        for round in 0..ROUNDS {
            // Alternate which goes first, so drift on the machine cancels out.
            if round % 2 == 0 {
                without.push(dial(&bin, listening)?);
            }
            let agent = Agent::start(&bin)?;
            let cpu0 = agent.cpu()?;
            with.push(dial(&bin, listening)?);
            // Let the agent drain what the run sent it before reading its CPU time.
            std::thread::sleep(Duration::from_millis(500));
            agent_cpu.push(agent.cpu()? - cpu0);
            drop(agent);
            if round % 2 == 1 {
                without.push(dial(&bin, listening)?);
            }
        }
        let (a, b) = (median(&mut without), median(&mut with));
        println!(
            "{name:<22} {:>10.0}ms {:>10.0}ms {:>7.2}x {:>14.0}ms",
            a.as_secs_f64() * 1e3,
            b.as_secs_f64() * 1e3,
            b.as_secs_f64() / a.as_secs_f64(),
            median(&mut agent_cpu).as_secs_f64() * 1e3
        );
    }
    Ok(())
}

/// One run of connects, to a fresh port each time (TIME_WAIT of earlier runs must not
/// slow this one down): listened on, or closed.
fn dial(bin: &Path, listening: bool) -> anyhow::Result<Duration> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let target = listener.local_addr()?.to_string();
    if listening {
        // A deep accept queue: with std's 128, a briefly descheduled accept thread drops
        // SYNs and the client waits a second per retransmit, which would be measured.
        use std::os::fd::AsRawFd;
        // SAFETY: listen(2) again on our listening socket only raises its backlog.
        unsafe { libc_listen(listener.as_raw_fd(), 4096) };
        std::thread::spawn(move || listener.incoming().for_each(drop));
    } else {
        drop(listener);
    }
    let start = Instant::now();
    let status = Command::new(bin.join("sr-app"))
        .args([
            "--connect",
            &target,
            "--interval-ms",
            "0",
            "--keep-dialing",
            "--reset-on-close",
            "--attempts",
        ])
        .arg(CONNECTS.to_string())
        .stdout(Stdio::null())
        .status()
        .context("run sr-app")?;
    if !status.success() {
        bail!("sr-app failed: {status}");
    }
    Ok(start.elapsed())
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

struct Agent(Child);

impl Agent {
    fn start(bin: &Path) -> anyhow::Result<Self> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr = format!("127.0.0.1:{port}");
        let child = Command::new(bin.join("sidecar-race-agent"))
            .args([
                "run",
                "--listen",
                &addr,
                "--pods-from",
                "none",
                "--events=false",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start the agent")?;
        let agent = Agent(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ready(&addr) {
            if Instant::now() > deadline {
                bail!("the agent did not become ready");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(agent)
    }

    /// User + system CPU time so far.
    fn cpu(&self) -> anyhow::Result<Duration> {
        let stat = std::fs::read_to_string(PathBuf::from(format!("/proc/{}/stat", self.0.id())))?;
        let after_comm = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let fields: Vec<&str> = after_comm.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of stat; 12 and 13 after the comm.
        let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
        Ok(Duration::from_millis(ticks * 10)) // USER_HZ is 100 on Linux
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ready(addr: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = write!(
        s,
        "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    resp.starts_with("HTTP/1.1 200")
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
    #[link_name = "listen"]
    fn libc_listen(fd: i32, backlog: i32) -> i32;
}
