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
        // Pinning is the restart test's (agent_restart.rs); this one leaves nothing.
        .env("SIDECAR_RACE_PIN", "off")
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

/// `--api-listen`: the incidents API moves to its own address (loopback, for
/// `kubectl port-forward`) or goes away; `/metrics` and the probes stay where
/// Prometheus and the kubelet look.
#[test]
fn api_listen_moves_the_incidents_api_off_the_main_address() {
    if !is_root_or_skip("api_listen_moves_the_incidents_api_off_the_main_address") {
        return;
    }
    let port = |p: u16| format!("127.0.0.1:{p}");
    let (main, api) = (
        port(sidecar_race_tests::http::free_port()),
        port(sidecar_race_tests::http::free_port()),
    );
    for (api_listen, api_addr) in [(api.as_str(), Some(api.as_str())), ("off", None)] {
        let child = Command::new(agent_binary())
            .args(["run", "--listen", &main, "--api-listen", api_listen])
            .env("SIDECAR_RACE_PIN", "off")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while get(&main, "/readyz").map(|r| r.0) != Some(200) {
            assert!(
                Instant::now() < deadline,
                "agent never became ready on {main}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            get(&main, "/api/v1/incidents").unwrap().0,
            404,
            "{api_listen}"
        );
        assert_eq!(get(&main, "/metrics").unwrap().0, 200);
        assert_eq!(get(&main, "/healthz").unwrap().0, 200);
        if let Some(api_addr) = api_addr {
            let (status, body) = get(api_addr, "/api/v1/incidents").unwrap();
            assert_eq!(status, 200, "{body}");
            assert!(body.starts_with("{\"incidents\":"), "{body}");
            assert_eq!(
                get(api_addr, "/metrics").unwrap().0,
                404,
                "only the API there"
            );
        }
        // SAFETY: kill(2) of our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        if api_addr.is_none() {
            assert!(stderr.contains("/api/v1/incidents is off"), "{stderr}");
        }
    }
}
