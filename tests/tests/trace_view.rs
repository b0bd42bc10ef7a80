//! `trace` for a person at a terminal, on the real kernel: `--port` keeps only the
//! events on that port, and `--format table` prints a header and aligned rows with the
//! refusal's addresses. (Name filters and column layout are unit-tested in
//! `sidecar-race-agent/src/trace/view.rs`.)

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use sidecar_race_tests::{
    agent::{TraceAgent, agent_binary},
    pod::SimPod,
    root::is_root_or_skip,
    scenario::app_done,
};

#[test]
fn port_filter_keeps_only_that_port() {
    if !is_root_or_skip("port_filter_keeps_only_that_port") {
        return;
    }
    let agent = TraceAgent::start(&["--kinds", "refused", "--port", "15071"]);
    let mut pod = SimPod::new("tport").unwrap();
    let c = pod.container("app").unwrap();
    app_done(
        &mut pod,
        &c,
        &["--connect", "127.0.0.1:15072", "--attempts", "1"],
    );
    app_done(
        &mut pod,
        &c,
        &["--connect", "127.0.0.1:15071", "--attempts", "1"],
    );
    let mine = |v: &serde_json::Value| v["cgroup_id"] == c.cgroup_id;
    agent.wait_for(1, Duration::from_secs(5), mine);
    std::thread::sleep(Duration::from_millis(500));
    let found = agent.events(mine);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0]["dst"], "127.0.0.1:15071");
    drop(agent);
}

#[test]
fn table_format_prints_aligned_rows() {
    if !is_root_or_skip("table_format_prints_aligned_rows") {
        return;
    }
    let mut child = Command::new(agent_binary())
        .args([
            "trace", "--kinds", "refused", "--port", "15073", "--format", "table",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let header = rx.recv_timeout(Duration::from_secs(30)).expect("a header");
    assert!(header.starts_with("TIME "), "{header}");
    let mut pod = SimPod::new("ttable").unwrap();
    let c = pod.container("app").unwrap();
    app_done(
        &mut pod,
        &c,
        &["--connect", "127.0.0.1:15073", "--attempts", "1"],
    );
    let line = rx.recv_timeout(Duration::from_secs(5)).expect("a row");
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let _ = child.wait();
    let column = |s: &str, needle: &str| s[..s.find(needle).unwrap()].chars().count();
    assert_eq!(
        column(&line, "refused"),
        column(&header, "KIND"),
        "{header}\n{line}"
    );
    assert_eq!(
        column(&line, "sr-app"),
        column(&header, "COMM"),
        "{header}\n{line}"
    );
    assert!(line.ends_with("→ 127.0.0.1:15073"), "{line}");
    assert_eq!(line.as_bytes()[2], b':', "a clock time first: {line}");
}
