//! `trace` stopped by Ctrl-C while it is still starting (loading its programs): it
//! must end as on any Ctrl-C, with its summary line, not die without it.

use std::{
    io::Read,
    os::fd::AsRawFd,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use sidecar_race_tests::{
    agent::{READY_MESSAGE, agent_binary},
    root::is_root_or_skip,
};

/// Whether `pid` has a handler for SIGINT (`SigCgt` in /proc/PID/status).
fn catches_sigint(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (libc::SIGINT - 1)) != 0)
}

/// The state letter of /proc/PID/stat (`T`: stopped).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(child.id() as i32, sig) };
}

/// Everything the stopped child wrote to stderr so far, without blocking.
fn written_so_far(child: &mut Child) -> String {
    let err = child.stderr.as_mut().expect("piped stderr");
    let fd = err.as_raw_fd();
    // SAFETY: fcntl on a pipe fd we own.
    unsafe {
        libc::fcntl(
            fd,
            libc::F_SETFL,
            libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
        )
    };
    let mut buf = Vec::new();
    let _ = err.read_to_end(&mut buf); // stops at EAGAIN: the pipe is empty
    // SAFETY: as above.
    unsafe {
        libc::fcntl(
            fd,
            libc::F_SETFL,
            libc::fcntl(fd, libc::F_GETFL) & !libc::O_NONBLOCK,
        )
    };
    String::from_utf8_lossy(&buf).into_owned()
}

/// Starts `trace`, freezes it the moment it catches SIGINT, and if it had not printed
/// that it watches the kernel yet, sends SIGINT then: its exit and full stderr.
/// `None` when this poller was too slow to catch it before that line.
fn sigint_while_starting() -> Option<(std::process::ExitStatus, String)> {
    let mut child = Command::new(agent_binary())
        .args(["trace", "--pods-from", "none"])
        .env("SIDECAR_RACE_LOG_FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the agent");
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !catches_sigint(pid) {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "trace exited ({status}) before catching SIGINT:\n{}",
                written_so_far(&mut child)
            );
        }
        assert!(Instant::now() < deadline, "trace never caught SIGINT");
        std::hint::spin_loop();
    }
    signal(&child, libc::SIGSTOP);
    while state(pid) != Some('T') {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut stderr = written_so_far(&mut child);
    let starting = !stderr.contains(READY_MESSAGE);
    signal(&child, libc::SIGINT);
    signal(&child, libc::SIGCONT);
    let status = child.wait().expect("trace exits");
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    starting.then_some((status, stderr))
}

#[test]
fn ctrl_c_while_trace_starts_still_prints_the_summary() {
    if !is_root_or_skip("ctrl_c_while_trace_starts_still_prints_the_summary") {
        return;
    }
    // Caught before the start, SIGINT handling is seen before the ready line on the
    // first try; a slow poller may miss the start, so a few tries. Handlers installed
    // only after the start can never be seen in time.
    let (status, stderr) = (0..5)
        .find_map(|_| sigint_while_starting())
        .unwrap_or_else(|| panic!("trace never caught SIGINT before printing `{READY_MESSAGE}`"));
    assert!(status.success(), "trace exited with {status}:\n{stderr}");
    assert!(
        stderr.contains(READY_MESSAGE) && stderr.contains(r#"{"summary":"#),
        "trace must finish its start and print its summary:\n{stderr}"
    );
}
