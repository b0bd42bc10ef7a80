//! The measured workload: `sr-app` dialing a loopback port as fast as it can, to a
//! listener (successful connects) or to a closed port (refused connects). Client and
//! server both run on one fixed CPU (see `cpu`).

use std::{
    net::{TcpListener, TcpStream},
    os::unix::process::CommandExt as _,
    path::Path,
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use super::cpu;

/// One run of the loop.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    pub wall: Duration,
    /// CPU time of the client process and the accepting thread (kernel work done on
    /// their behalf included, e.g. loopback softirqs and eBPF programs).
    pub cpu: Duration,
}

/// One run of `n` connects to a fresh port (TIME_WAIT of earlier runs must not slow
/// this one down); connects close with a reset so none pile up either.
pub fn dial(bin: &Path, listening: bool, n: u32) -> anyhow::Result<Run> {
    let on = cpu::loop_cpu();
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let target = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let server = if listening {
        // A deep accept queue: with std's 128, a briefly descheduled accept thread drops
        // SYNs and the client waits a second per retransmit, which would be measured.
        use std::os::fd::AsRawFd;
        // SAFETY: listen(2) again on our listening socket only raises its backlog.
        unsafe { libc::listen(listener.as_raw_fd(), 4096) };
        let stop = stop.clone();
        Some(std::thread::spawn(move || {
            let _ = cpu::pin_current(on);
            let cpu0 = cpu::thread_cpu();
            for s in listener.incoming() {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                drop(s);
            }
            cpu::thread_cpu() - cpu0
        }))
    } else {
        drop(listener);
        None
    };
    let children0 = cpu::children_cpu();
    let start = Instant::now();
    let mut cmd = Command::new(bin.join("sr-app"));
    cmd.args([
        "--connect",
        &target.to_string(),
        "--interval-ms",
        "0",
        "--keep-dialing",
        "--reset-on-close",
        "--attempts",
    ])
    .arg(n.to_string())
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    // SAFETY: the closure only makes one syscall (async-signal-safe) before exec.
    unsafe { cmd.pre_exec(move || cpu::pin_current(on)) };
    let status = cmd.status().context("run sr-app")?;
    let wall = start.elapsed();
    let client = cpu::children_cpu().saturating_sub(children0);
    let accept = match server {
        Some(t) => {
            stop.store(true, Ordering::Relaxed);
            // Wakes the accept loop so it sees `stop`.
            let _ = TcpStream::connect(target);
            t.join().unwrap_or_default()
        }
        None => Duration::ZERO,
    };
    if !status.success() {
        bail!("sr-app failed: {status}");
    }
    Ok(Run {
        wall,
        cpu: client + accept,
    })
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
