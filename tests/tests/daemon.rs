//! `sidecar-race-agent run` as the DaemonSet runs it: health endpoints, clean stop,
//! and clear errors for a broken node.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use sidecar_race_tests::{agent::agent_binary, http::get, root::is_root_or_skip};

#[test]
fn run_serves_health_and_readiness_and_stops_on_sigterm() {
    if !is_root_or_skip("run_serves_health_and_readiness_and_stops_on_sigterm") {
        return;
    }
    let addr = format!("127.0.0.1:{}", 20_000 + std::process::id() % 20_000);
    let child = Command::new(agent_binary())
        .args(["run", "--listen", &addr])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let ready = loop {
        if let Some(r) = get(&addr, "/readyz")
            && r.0 == 200
        {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "agent never became ready on {addr}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(ready.1, "ready\n");
    assert_eq!(get(&addr, "/healthz").unwrap(), (200, "ok\n".into()));
    assert_eq!(get(&addr, "/nope").unwrap().0, 404);
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("kernel event counts"), "{stderr}");
}

#[test]
fn a_tracefs_without_the_tracepoints_fails_with_one_sentence_each() {
    let empty = std::env::temp_dir().join(format!("sr-no-tracefs-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let out = Command::new(agent_binary())
        .args(["trace", "--tracefs"])
        .arg(&empty)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&empty).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("this node cannot run the agent"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "tracepoint sock:inet_sock_set_state is unusable (this kernel does not have it)"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("tracepoint tcp:tcp_receive_reset is unusable"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}
