//! Containers started again in a pod that keeps running, on the real kernel through
//! `run` and `/api/v1/incidents`: Kubernetes 1.36's in-place restart of all containers
//! (KEP-5532) is a new pod start whose race is `startup`; one container restarted
//! after a crash is not; a native sidecar the kubelet restarts while its pod
//! terminates (KEP-4438) makes one `drain` incident marked `sidecar_restarting`;
//! containers restarted by their exit-code rules (KEP-5307) are new instances: an app
//! instance racing its sidecar is that instance's `startup` race, a sidecar restarted
//! mid-life is `steady`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sidecar_race_tests::{
    agent::RunAgent,
    pod::{Declared, SimContainer, SimPod, mark_deleting, sibling_binary, write_pod_list},
    root::is_root_or_skip,
    scenario::{CountedApp, app_refused, proxy, proxy_serving},
};

const SETTLE: Duration = Duration::from_secs(15);
const OWNER: &str = r#"namespace="shop",workload_kind="Deployment",workload="checkout""#;

/// The pod source's status of `manifest`'s containers after the kubelet started each
/// again: one restart, the instance before ended with `reason` and `exit_code`.
fn restarted_with(manifest: &mut Value, reason: &str, exit_code: i32) {
    for key in ["containerStatuses", "initContainerStatuses"] {
        for s in manifest["status"][key].as_array_mut().into_iter().flatten() {
            s["restartCount"] = json!(1);
            s["lastState"] = json!({"terminated": {"exitCode": exit_code, "reason": reason, "finishedAt": "2026-11-29T10:00:00Z"}});
        }
    }
}

/// [`restarted_with`] exit code 137: the kubelet killed the instances before.
fn restarted(manifest: &mut Value, reason: &str) {
    restarted_with(manifest, reason, 137);
}

/// The app in `a` dials 127.0.0.1:15001 every 50 ms from its start while the proxy in
/// `p` listens 1 s late: the app's own count of refused connects.
fn race(pod: &mut SimPod, p: &SimContainer, a: &SimContainer) -> (u32, u64) {
    let pid = proxy(
        pod,
        p,
        &["--listen", "127.0.0.1:15001", "--delay-ms", "1000"],
    );
    let refused = app_refused(
        pod,
        a,
        &["--connect", "127.0.0.1:15001", "--interval-ms", "50"],
    );
    (pid, refused)
}

/// Waits until the pod has `n` resolved incidents holding `refused` refusals in all.
fn resolved(agent: &RunAgent, uid: &str, n: usize, refused: u64) -> Vec<Value> {
    let held = |i: &[Value]| {
        i.iter()
            .map(|i| i["refused_count"].as_u64().unwrap_or(0))
            .sum::<u64>()
    };
    let found = agent.wait_incidents(uid, SETTLE, |i| {
        i.len() >= n && i.iter().all(|i| i["state"] == "resolved") && held(i) >= refused
    });
    assert_eq!(found.len(), n, "{found:#?}");
    assert_eq!(held(&found), refused, "{found:#?}");
    found
}

/// The value of a series on the agent's `/metrics` once it is `want`, or what it is
/// after the wait.
fn series(agent: &RunAgent, name: &str, want: u64) -> Option<u64> {
    let prefix = format!("sidecar_race_{name}{{{OWNER}}} ");
    let read = || {
        agent
            .metrics()
            .lines()
            .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
    };
    let deadline = Instant::now() + SETTLE;
    loop {
        let v = read();
        if v == Some(want) || Instant::now() >= deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A Deployment's pod (app, classic sidecar proxy) races at its start; then the
/// kubelet kills both containers and starts them again in the same pod cgroup, their
/// statuses saying the instances before ended with `reason`, and the pod races again.
/// The agent, the pod's uid, both incidents (oldest first) and the app's counts.
fn restart_both(name: &str, reason: &str) -> (RunAgent, String, Vec<Value>, (u64, u64)) {
    let (agent, pods_file) = RunAgent::start_with_pods_file(name, &[]);
    let mut pod = SimPod::new(name).unwrap();
    let p1 = pod.container("proxy").unwrap();
    let a1 = pod.container("app").unwrap();
    let manifest = pod.app_and_proxy_manifest("shop", "checkout", &a1, &p1, Declared::App);
    write_pod_list(&pods_file, &[manifest]);
    let (proxy1, first) = race(&mut pod, &p1, &a1);
    resolved(&agent, &pod.uid, 1, first);
    // Every container stopped and removed, the sandbox kept.
    pod.terminate(proxy1);
    let _ = pod.wait(proxy1);
    pod.remove_container(&a1).unwrap();
    pod.remove_container(&p1).unwrap();
    let p2 = pod.container("proxy").unwrap();
    let a2 = pod.container("app").unwrap();
    let mut manifest = pod.app_and_proxy_manifest("shop", "checkout", &a2, &p2, Declared::App);
    restarted(&mut manifest, reason);
    write_pod_list(&pods_file, &[manifest]);
    let (_, second) = race(&mut pod, &p2, &a2);
    let mut incidents = resolved(&agent, &pod.uid, 2, first + second);
    incidents.sort_by_key(|i| i["id"].as_u64());
    assert_eq!(incidents[1]["container_id"], a2.id.as_str());
    assert_eq!(incidents[1]["sidecar_container_id"], p2.id.as_str());
    let uid = pod.uid.clone();
    (agent, uid, incidents, (first, second))
}

#[test]
fn all_containers_restarted_in_place_is_a_second_pod_start_racing_at_startup() {
    if !is_root_or_skip("all_containers_restarted_in_place_is_a_second_pod_start_racing_at_startup")
    {
        return;
    }
    let (agent, _, incidents, (first, second)) = restart_both("inplace", "RestartingAllContainers");
    eprintln!("in-place restart: the app counted {first} then {second} refusals");
    let got = |i: &Value| {
        (
            i["phase"].as_str().map(str::to_string),
            i["pod_start"].as_str().map(str::to_string),
            i["refused_count"].as_u64(),
        )
    };
    let want = |pod_start: &str, n: u64| (Some("startup".into()), Some(pod_start.into()), Some(n));
    assert_eq!(
        got(&incidents[1]),
        want("restarted_in_place", second),
        "{:#}",
        incidents[1]
    );
    assert_eq!(
        got(&incidents[0]),
        want("created", first),
        "{:#}",
        incidents[0]
    );
    assert_eq!(series(&agent, "pod_starts_total", 2), Some(2));
    assert_eq!(series(&agent, "affected_pod_starts_total", 2), Some(2));
}

#[test]
fn containers_restarted_after_a_crash_are_no_pod_start() {
    if !is_root_or_skip("containers_restarted_after_a_crash_are_no_pod_start") {
        return;
    }
    let (agent, _, incidents, (first, second)) = restart_both("crashed", "Error");
    // Each app instance still raced its proxy at its own start.
    for (i, n) in incidents.iter().zip([first, second]) {
        assert_eq!(
            (
                i["phase"].as_str(),
                i["pod_start"].as_str(),
                i["refused_count"].as_u64()
            ),
            (Some("startup"), Some("created"), Some(n)),
            "{i:#}"
        );
    }
    assert_eq!(series(&agent, "pod_starts_total", 1), Some(1));
    assert_eq!(series(&agent, "affected_pod_starts_total", 1), Some(1));
}

#[test]
fn a_native_sidecar_restarted_while_its_pod_terminates_is_one_drain_marked_restarting() {
    if !is_root_or_skip(
        "a_native_sidecar_restarted_while_its_pod_terminates_is_one_drain_marked_restarting",
    ) {
        return;
    }
    // KEP-4438's sequence (its feature gate is alpha in 1.37; the 1.37.2 kubelet built
    // here does not know it): the pod is deleted, the kubelet kills the native sidecar
    // while the app still works, then starts the sidecar again, which listens anew.
    let (agent, pods_file) = RunAgent::start_with_pods_file("kep4438", &[]);
    let mut pod = SimPod::new("kep4438").unwrap();
    let p1 = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    let mut manifest =
        pod.app_and_proxy_manifest("shop", "checkout", &a, &p1, Declared::NativeSidecar);
    write_pod_list(&pods_file, &[manifest.clone()]);
    let first = proxy_serving(&mut pod, &p1, 15001);
    let app = CountedApp::start(
        &mut pod,
        &a,
        &sibling_binary("sr-app"),
        &[
            "--connect",
            "127.0.0.1:15001",
            "--interval-ms",
            "50",
            "--attempts",
            "80",
            "--keep-dialing",
        ],
    );
    std::thread::sleep(Duration::from_millis(500));
    mark_deleting(&mut manifest, 30);
    write_pod_list(&pods_file, &[manifest.clone()]);
    std::thread::sleep(Duration::from_millis(500));
    pod.terminate(first);
    let _ = pod.wait(first);
    pod.remove_container(&p1).unwrap();
    let p2 = pod.container("proxy").unwrap();
    let mut restarted_manifest =
        pod.app_and_proxy_manifest("shop", "checkout", &a, &p2, Declared::NativeSidecar);
    restarted_manifest["metadata"] = manifest["metadata"].clone();
    restarted(&mut restarted_manifest, "Error");
    write_pod_list(&pods_file, &[restarted_manifest]);
    proxy(
        &mut pod,
        &p2,
        &["--listen", "127.0.0.1:15001", "--delay-ms", "1000"],
    );
    let refused = app.refused(&mut pod);
    eprintln!("KEP-4438 drain: the app counted {refused} refusals");
    let i = agent.one_resolved_holding(&pod.uid, refused, SETTLE);
    assert_eq!(
        (
            i["phase"].as_str(),
            i["drain_sub_phase"].as_str(),
            i["refused_count"].as_u64()
        ),
        (Some("drain"), Some("sidecar_restarting"), Some(refused)),
        "{i:#}"
    );
    assert_eq!(i["sidecar_container_id"], p2.id.as_str(), "{i:#}");
    assert_eq!(i["pod_start"], "created", "{i:#}");
}

/// A Deployment's pod whose proxy serves before its app starts (no race at the pod's
/// start); 4 s later, past the agent's 3 s startup bound, the proxy exits with code 42,
/// which its `restartPolicyRules` restart it on (KEP-5307): a new instance listening
/// 1 s after it starts. With `app_restarted` the app exits so too and its new instance
/// dials at once; else the app runs all along, dialing every 50 ms. The agent, the
/// pod, the client's container and the app's own count of refusals.
fn restarted_by_rules(name: &str, app_restarted: bool) -> (RunAgent, SimPod, SimContainer, u64) {
    let (agent, pods_file) =
        RunAgent::start_with_pods_file(name, &["--startup-bound-seconds", "3"]);
    let mut pod = SimPod::new(name).unwrap();
    let p1 = pod.container("proxy").unwrap();
    let a1 = pod.container("app").unwrap();
    let manifest = pod.app_and_proxy_manifest("shop", "checkout", &a1, &p1, Declared::App);
    write_pod_list(&pods_file, &[manifest]);
    let first = proxy_serving(&mut pod, &p1, 15001);
    let dialing = (!app_restarted).then(|| {
        CountedApp::start(
            &mut pod,
            &a1,
            &sibling_binary("sr-app"),
            &[
                "--connect",
                "127.0.0.1:15001",
                "--interval-ms",
                "50",
                "--attempts",
                "120",
                "--keep-dialing",
            ],
        )
    });
    std::thread::sleep(Duration::from_secs(4));
    pod.terminate(first);
    let _ = pod.wait(first);
    pod.remove_container(&p1).unwrap();
    let p2 = pod.container("proxy").unwrap();
    let a2 = if app_restarted {
        pod.remove_container(&a1).unwrap();
        pod.container("app").unwrap()
    } else {
        a1.clone()
    };
    let mut manifest = pod.app_and_proxy_manifest("shop", "checkout", &a2, &p2, Declared::App);
    restarted_with(&mut manifest, "Error", 42);
    if !app_restarted {
        // The app's status is its first instance's.
        let app = &mut manifest["status"]["containerStatuses"][0];
        app["restartCount"] = json!(0);
        app["lastState"] = json!({});
    }
    write_pod_list(&pods_file, &[manifest]);
    let refused = match dialing {
        Some(app) => {
            proxy(
                &mut pod,
                &p2,
                &["--listen", "127.0.0.1:15001", "--delay-ms", "1000"],
            );
            app.refused(&mut pod)
        }
        None => race(&mut pod, &p2, &a2).1,
    };
    (agent, pod, a2, refused)
}

#[test]
fn an_app_restarted_by_a_rule_racing_its_sidecar_is_a_startup_of_that_instance() {
    if !is_root_or_skip(
        "an_app_restarted_by_a_rule_racing_its_sidecar_is_a_startup_of_that_instance",
    ) {
        return;
    }
    let (agent, pod, a2, refused) = restarted_by_rules("rule-app", true);
    eprintln!("KEP-5307 app instance: the app counted {refused} refusals");
    let i = agent.one_resolved_holding(&pod.uid, refused, SETTLE);
    assert_eq!(
        (
            i["phase"].as_str(),
            i["pod_start"].as_str(),
            i["refused_count"].as_u64()
        ),
        (Some("startup"), Some("created"), Some(refused)),
        "{i:#}"
    );
    assert_eq!(i["container_id"], a2.id.as_str(), "{i:#}");
    assert_eq!(series(&agent, "pod_starts_total", 1), Some(1));
}

#[test]
fn a_sidecar_restarted_by_a_rule_mid_life_is_steady() {
    if !is_root_or_skip("a_sidecar_restarted_by_a_rule_mid_life_is_steady") {
        return;
    }
    let (agent, pod, a, refused) = restarted_by_rules("rule-sidecar", false);
    eprintln!("KEP-5307 sidecar restart: the app counted {refused} refusals");
    let i = agent.one_resolved_holding(&pod.uid, refused, SETTLE);
    assert_eq!(
        (
            i["phase"].as_str(),
            i["drain_sub_phase"].as_str(),
            i["pod_start"].as_str(),
            i["refused_count"].as_u64()
        ),
        (Some("steady"), None, Some("created"), Some(refused)),
        "{i:#}"
    );
    assert_eq!(i["container_id"], a.id.as_str(), "{i:#}");
    assert_eq!(series(&agent, "pod_starts_total", 1), Some(1));
}
