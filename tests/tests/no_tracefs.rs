//! A host that gives the agent no tracefs (none mounted in its container, and no
//! right to mount one), as some fleets' nodes do: where the kernel has BTF, every
//! tracepoint the agent needs is hooked as a BTF tracepoint, which needs no tracefs.
//! The agent starts, says what is off (the local-redirect hook, which only tracefs
//! gives) and detects a real startup race with the app's exact count: the reset and
//! the container's cgroup (its start, without any pod source) seen through BTF alone.

use std::time::Duration;

use serde_json::Value;
use sidecar_race_tests::{
    agent::RunAgent,
    pod::SimPod,
    root::{is_root_or_skip, skip},
    scenario::late_proxy_race,
};

const TEST: &str = "without_tracefs_the_btf_tracepoints_see_a_startup_race_exactly";

#[test]
fn without_tracefs_the_btf_tracepoints_see_a_startup_race_exactly() {
    if !is_root_or_skip(TEST) {
        return;
    }
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        skip(TEST, "this kernel has no BTF (/sys/kernel/btf/vmlinux)");
        return;
    }
    let agent = RunAgent::start_without_tracefs(&["--pods-from", "none"]);
    let watching = agent.wait_log(&["watching the kernel"], Duration::from_secs(10));
    let line: Value = serde_json::from_str(&watching).expect("a JSON log line");
    assert_eq!(line["tracefs"], "none (BTF tracepoints)", "{line:#}");
    assert_eq!(line["set_state_hook"], "tp_btf", "{line:#}");
    let attached = line["attached"].as_str().unwrap_or_default();
    for tp in [
        "inet_sock_set_state",
        "tcp_receive_reset",
        "cgroup_mkdir",
        "cgroup_rmdir",
    ] {
        assert!(attached.contains(tp), "{tp} not attached: {line:#}");
    }
    let log = agent.stderr().join("\n");
    assert!(
        log.contains("degraded") && log.contains("tcp:tcp_send_reset"),
        "the hook only tracefs gives is said to be off:\n{log}"
    );

    let mut pod = SimPod::new("notracefs").unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    let refused = late_proxy_race(&mut pod, &p, &a, 1000);
    assert!(refused > 0, "the app was never refused");
    let race = agent.one_resolved_holding(&pod.uid, refused, Duration::from_secs(10));
    // `startup`, not `steady`: the container's start came from the cgroup hook.
    assert_eq!(
        (race["phase"].as_str(), race["refused_count"].as_u64()),
        (Some("startup"), Some(refused)),
        "{race:#}"
    );
}
