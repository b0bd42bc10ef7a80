//! `inet_sock_set_state` has two hooks: the BTF tracepoint (the default where the
//! kernel has BTF) and the tracefs tracepoint (`--tp-btf=false`, and the fallback).
//! Two agents, one per hook, watch the same refused connects and listeners: they must
//! print the same events, field for field, and say which hook they use.

use std::{process::Command, time::Duration};

use serde_json::Value;
use sidecar_race_tests::{
    agent::TraceAgent,
    pod::{SimPod, require_binary, sibling_binary},
    root::is_root_or_skip,
};

fn bin(name: &str, args: &[&str]) -> Command {
    let mut c = Command::new(require_binary(&sibling_binary(name)));
    c.args(args);
    c
}

/// The `set_state_hook` field of the agent's "watching the kernel" line.
fn hook(agent: &TraceAgent) -> String {
    agent
        .log()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| v["set_state_hook"].as_str().map(String::from))
        .unwrap_or_else(|| panic!("no set_state_hook in the log: {:#?}", agent.log()))
}

#[test]
fn btf_and_tracefs_hooks_report_the_same_events() {
    if !is_root_or_skip("btf_and_tracefs_hooks_report_the_same_events") {
        return;
    }
    let btf = TraceAgent::start(&[]);
    let tracefs = TraceAgent::start(&["--tp-btf=false"]);
    assert_eq!(hook(&tracefs), "tracepoint");
    if std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        assert_eq!(hook(&btf), "tp_btf");
    }

    let mut pod = SimPod::new("hooks").unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    let mut pids = Vec::new();
    for listen in ["127.0.0.1:15001", "[::1]:15003"] {
        let args = ["--listen", listen, "--close-after-ms", "300"];
        pids.push(pod.spawn(&p, bin("sr-proxy", &args)).unwrap());
    }
    for target in ["127.0.0.1:15002", "[::1]:15002", "[::ffff:127.0.0.1]:15004"] {
        let args = ["--connect", target, "--attempts", "1"];
        pids.push(pod.spawn(&a, bin("sr-app", &args)).unwrap());
    }
    for pid in pids {
        assert!(pod.wait(pid).unwrap().success());
    }

    // 3 refusals, 2 listens, 2 listener closes from this pod, in each agent.
    let ours = |v: &Value| {
        (v["cgroup_id"] == p.cgroup_id || v["cgroup_id"] == a.cgroup_id)
            && !v["kind"].as_str().unwrap_or("").starts_with("cgroup_")
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while (btf.events(ours).len() < 7 || tracefs.events(ours).len() < 7)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    // The same events; only the timestamps differ (each program reads the clock).
    let normalized = |agent: &TraceAgent| {
        let mut v: Vec<String> = agent
            .events(ours)
            .into_iter()
            .map(|mut e| {
                e.as_object_mut().unwrap().remove("ts");
                e.to_string()
            })
            .collect();
        v.sort();
        v
    };
    let (b, t) = (normalized(&btf), normalized(&tracefs));
    assert_eq!(b.len(), 7, "{b:#?}");
    assert_eq!(b, t);
    for needle in [
        "\"dst\":\"127.0.0.1:15002\"",
        "\"dst\":\"[::1]:15002\"",
        "\"dst\":\"[::ffff:127.0.0.1]:15004\"",
        "\"src\":\"127.0.0.1:15001\"",
        "\"src\":\"[::1]:15003\"",
    ] {
        assert!(
            b.iter().any(|e| e.contains(needle)),
            "no {needle} in {b:#?}"
        );
    }
}

/// `--tcp-hooks=fentry` on a kernel that refuses trampolines (this host) is not an
/// error: the agent falls back to `inet_sock_set_state`, says so in one `degraded:`
/// sentence naming the flag, and still sees a refused connect with its owner.
#[test]
fn an_explicit_tcp_hook_the_kernel_refuses_falls_back_and_says_why() {
    if !is_root_or_skip("an_explicit_tcp_hook_the_kernel_refuses_falls_back_and_says_why") {
        return;
    }
    let agent = TraceAgent::start(&["--tcp-hooks", "fentry"]);
    let log: Vec<Value> = agent
        .log()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    let ready = log
        .iter()
        .find(|v| v["message"] == "watching the kernel")
        .unwrap_or_else(|| panic!("never watched the kernel: {log:#?}"));
    let tcp_degraded: Vec<&str> = log
        .iter()
        .filter_map(|v| v["message"].as_str())
        .filter(|m| m.starts_with("degraded: TCP"))
        .collect();
    if ready["tcp_hooks"] == "fentry" {
        // A kernel with trampolines: nothing to fall back from.
        assert!(tcp_degraded.is_empty(), "{tcp_degraded:?}");
        assert_eq!(ready["set_state_hook"], "off");
    } else {
        assert_eq!(ready["tcp_hooks"], "set_state", "{ready}");
        assert_eq!(tcp_degraded.len(), 1, "one sentence: {log:#?}");
        assert!(
            tcp_degraded[0].starts_with(
                "degraded: TCP listeners and connects are seen through the \
                 inet_sock_set_state tracepoint (--tcp-hooks=fentry cannot be used: "
            ),
            "{}",
            tcp_degraded[0]
        );
        assert!(tcp_degraded[0].contains("program runs"), "its cost");
        assert_ne!(ready["set_state_hook"], "off");
    }

    let mut pod = SimPod::new("tcphooks").unwrap();
    let a = pod.container("app").unwrap();
    let args = ["--connect", "127.0.0.1:15012", "--attempts", "1"];
    let pid = pod.spawn(&a, bin("sr-app", &args)).unwrap();
    assert!(pod.wait(pid).unwrap().success());
    let refused = |v: &Value| v["cgroup_id"] == a.cgroup_id && v["kind"] == "refused";
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while agent.events(refused).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let got = agent.events(refused);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0]["dst"], "127.0.0.1:15012", "{}", got[0]);
    assert_eq!(got[0]["comm"], "sr-app", "{}", got[0]);
}
