//! The real eBPF object on the real kernel: simulated pods make refused connects,
//! listen and close, and the agent's `trace` must report exactly that.

use std::{process::Command, time::Duration};

use serde_json::Value;
use sidecar_race_tests::{
    agent::{TraceAgent, of},
    pod::{SimContainer, SimPod, require_binary, sibling_binary},
    root::{have, is_root_or_skip},
};

const WAIT: Duration = Duration::from_secs(5);
/// After the expected events arrived, how long to keep watching for extra ones.
const SETTLE: Duration = Duration::from_millis(500);

fn app(args: &[&str]) -> Command {
    let mut c = Command::new(require_binary(&sibling_binary("sr-app")));
    c.args(args);
    c
}

fn proxy(args: &[&str]) -> Command {
    let mut c = Command::new(require_binary(&sibling_binary("sr-proxy")));
    c.args(args);
    c
}

/// Runs one `sr-app` in `container` to completion and returns its pid.
fn run_app(pod: &mut SimPod, container: &SimContainer, args: &[&str]) -> u32 {
    let pid = pod.spawn(container, app(args)).unwrap();
    assert!(pod.wait(pid).unwrap().success());
    pid
}

fn exactly_one(agent: &TraceAgent, kind: &'static str, c: &SimContainer) -> Value {
    agent.wait_for(1, WAIT, of(kind, c.cgroup_id));
    std::thread::sleep(SETTLE);
    let found = agent.events(of(kind, c.cgroup_id));
    assert_eq!(
        found.len(),
        1,
        "expected exactly one {kind} event from {}: {found:#?}",
        c.name
    );
    found.into_iter().next().unwrap()
}

fn assert_owner(ev: &Value, c: &SimContainer, pid: u32, comm: &str) {
    assert_eq!(ev["cgroup_id"], c.cgroup_id);
    assert_eq!(ev["cgroup_path"], c.cgroup_path.as_str());
    assert_eq!(ev["pid"], pid);
    assert_eq!(ev["tgid"], pid);
    assert_eq!(ev["comm"], comm);
}

#[test]
fn refused_ipv4_connect_gives_exactly_one_event() {
    if !is_root_or_skip("refused_ipv4_connect_gives_exactly_one_event") {
        return;
    }
    let agent = TraceAgent::start(&["--kinds", "refused"]);
    let mut pod = SimPod::new("v4").unwrap();
    let c = pod.container("app").unwrap();
    let pid = run_app(
        &mut pod,
        &c,
        &["--connect", "127.0.0.1:15001", "--attempts", "1"],
    );
    let ev = exactly_one(&agent, "refused", &c);
    assert_owner(&ev, &c, pid, "sr-app");
    assert_eq!(ev["family"], "ipv4");
    assert_eq!(ev["dst"], "127.0.0.1:15001");
    assert!(
        ev["src"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{ev}"
    );
    assert!(ev["local_dst"].is_null(), "not redirected: {ev}");
    assert!(ev["ts"].as_str().unwrap().ends_with('Z'));
}

#[test]
fn refused_ipv6_and_v4_mapped_connects_give_one_event_each() {
    if !is_root_or_skip("refused_ipv6_and_v4_mapped_connects_give_one_event_each") {
        return;
    }
    let agent = TraceAgent::start(&["--kinds", "refused"]);
    let mut pod = SimPod::new("v6").unwrap();
    let v6 = pod.container("app6").unwrap();
    let mapped = pod.container("mapped").unwrap();
    let pid6 = run_app(
        &mut pod,
        &v6,
        &["--connect", "[::1]:15001", "--attempts", "1"],
    );
    let pid_m = run_app(
        &mut pod,
        &mapped,
        &["--connect", "[::ffff:127.0.0.1]:15002", "--attempts", "1"],
    );
    let ev = exactly_one(&agent, "refused", &v6);
    assert_owner(&ev, &v6, pid6, "sr-app");
    assert_eq!(ev["family"], "ipv6");
    assert_eq!(ev["dst"], "[::1]:15001");
    assert!(ev["local_dst"].is_null(), "{ev}");
    let ev = exactly_one(&agent, "refused", &mapped);
    assert_owner(&ev, &mapped, pid_m, "sr-app");
    assert_eq!(ev["family"], "ipv6");
    assert_eq!(ev["dst"], "[::ffff:127.0.0.1]:15002");
    assert!(ev["local_dst"].is_null(), "{ev}");
}

#[test]
fn successful_connect_gives_no_event_and_listeners_are_reported() {
    if !is_root_or_skip("successful_connect_gives_no_event_and_listeners_are_reported") {
        return;
    }
    let agent = TraceAgent::start(&[]);
    let mut pod = SimPod::new("ok").unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    let proxy_pid = pod
        .spawn(
            &p,
            proxy(&["--listen", "127.0.0.1:15001", "--close-after-ms", "1500"]),
        )
        .unwrap();
    let listen = exactly_one(&agent, "listen", &p);
    assert_owner(&listen, &p, proxy_pid, "sr-proxy");
    assert_eq!(listen["src"], "127.0.0.1:15001");
    assert!(listen["dst"].is_null());
    run_app(
        &mut pod,
        &a,
        &["--connect", "127.0.0.1:15001", "--attempts", "1"],
    );
    assert!(pod.wait(proxy_pid).unwrap().success());
    let closed = exactly_one(&agent, "listen_closed", &p);
    assert_eq!(closed["cgroup_id"], p.cgroup_id);
    assert_eq!(closed["src"], "127.0.0.1:15001");
    assert_eq!(closed["comm"], "sr-proxy");
    let from_app: Vec<Value> = agent.events(|v| {
        v["cgroup_id"] == a.cgroup_id && !v["kind"].as_str().unwrap().starts_with("cgroup_")
    });
    assert!(
        from_app.is_empty(),
        "a successful connect must send nothing: {from_app:#?}"
    );
}

#[test]
fn redirected_connect_reports_the_local_destination() {
    if !is_root_or_skip("redirected_connect_reports_the_local_destination") {
        return;
    }
    if !have("iptables") {
        panic!("iptables is needed for the REDIRECT case: `cargo xtask setup` installs it");
    }
    let agent = TraceAgent::start(&["--kinds", "refused"]);
    let mut pod = SimPod::new("redir").unwrap();
    pod.redirect_service("10.96.0.10", 80, 15001).unwrap();
    let c = pod.container("app").unwrap();
    let pid = run_app(
        &mut pod,
        &c,
        &["--connect", "10.96.0.10:80", "--attempts", "1"],
    );
    let ev = exactly_one(&agent, "refused", &c);
    assert_owner(&ev, &c, pid, "sr-app");
    assert_eq!(ev["dst"], "10.96.0.10:80");
    assert_eq!(ev["local_dst"], "127.0.0.1:15001");
    assert!(
        ev["src"].as_str().unwrap().starts_with("10.200.0.2:"),
        "{ev}"
    );
}

#[test]
fn container_cgroups_created_and_removed_are_reported() {
    if !is_root_or_skip("container_cgroups_created_and_removed_are_reported") {
        return;
    }
    let agent = TraceAgent::start(&["--kinds", "cgroup_created,cgroup_removed"]);
    let mut pod = SimPod::new("cg").unwrap();
    let c = pod.container("app").unwrap();
    let created = exactly_one(&agent, "cgroup_created", &c);
    assert_eq!(created["cgroup_path"], c.cgroup_path.as_str());
    assert!(created["pid"].is_null());
    drop(pod);
    let removed = exactly_one(&agent, "cgroup_removed", &c);
    assert_eq!(removed["cgroup_path"], c.cgroup_path.as_str());
}
