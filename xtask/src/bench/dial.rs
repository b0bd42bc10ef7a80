//! The measured workload: `sr-app` dialing a loopback port as fast as it can, to a
//! listener (successful connects) or to a closed port (refused connects).

use std::{
    net::TcpListener,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

/// One run of `n` connects to a fresh port (TIME_WAIT of earlier runs must not slow
/// this one down); connects close with a reset so none pile up either.
pub fn dial(bin: &Path, listening: bool, n: u32) -> anyhow::Result<Duration> {
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
        .arg(n.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("run sr-app")?;
    if !status.success() {
        bail!("sr-app failed: {status}");
    }
    Ok(start.elapsed())
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc_geteuid() == 0 }
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
    #[link_name = "listen"]
    fn libc_listen(fd: i32, backlog: i32) -> i32;
}
