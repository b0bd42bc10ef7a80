//! Attribution on the real kernel: processes in kubelet-layout cgroups make refused
//! connects; `trace` names their pod and container from the cgroup path alone, and
//! with `--pods-from file:` also namespace, pod and container names — even when the
//! container's status reaches the pod source after its first connect.

use std::{path::PathBuf, process::Command, time::Duration};

use sidecar_race_tests::{
    agent::{TraceAgent, of},
    pod::{Decl, Declared, SimPod, require_binary, sibling_binary, write_pod_list},
    root::is_root_or_skip,
};

fn pods_file(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("sr-pods-{tag}-{}.json", std::process::id()))
}

fn refuse_once(pod: &mut SimPod, c: &sidecar_race_tests::pod::SimContainer) {
    let mut app = Command::new(require_binary(&sibling_binary("sr-app")));
    app.args(["--connect", "127.0.0.1:15001", "--attempts", "1"]);
    let pid = pod.spawn(c, app).unwrap();
    assert!(pod.wait(pid).unwrap().success());
}

#[test]
fn trace_names_pod_and_container_from_the_cgroup_alone() {
    if !is_root_or_skip("trace_names_pod_and_container_from_the_cgroup_alone") {
        return;
    }
    let agent = TraceAgent::start(&["--kinds", "refused", "--pods-from", "none"]);
    let mut pod = SimPod::new("attr").unwrap();
    let app = pod.container("app").unwrap();
    refuse_once(&mut pod, &app);
    let ev = &agent.wait_for(1, Duration::from_secs(5), of("refused", app.cgroup_id))[0];
    assert_eq!(ev["pod_uid"], pod.uid.as_str());
    assert_eq!(ev["container_id"], app.id.as_str());
    assert!(
        ev["namespace"].is_null() && ev["pod"].is_null() && ev["container"].is_null(),
        "{ev}"
    );
}

#[test]
fn trace_names_come_from_a_pods_file_even_when_the_status_arrives_late() {
    if !is_root_or_skip("trace_names_come_from_a_pods_file_even_when_the_status_arrives_late") {
        return;
    }
    let path = pods_file("late");
    let mut pod = SimPod::new("named").unwrap();
    let app = pod.container("app").unwrap();
    let proxy = pod.container("proxy").unwrap();
    let decls = |with_status| {
        [
            Decl {
                container: &app,
                declared: Declared::App,
                ports: &[],
                with_status,
            },
            Decl {
                container: &proxy,
                declared: Declared::App,
                ports: &[15001],
                with_status,
            },
        ]
    };
    // The pod is known, but not yet its containers' ids (the kubelet has not reported them).
    write_pod_list(
        &path,
        &[pod.manifest("shop", Some("checkout"), &decls(false))],
    );
    let source = format!("file:{}", path.display());
    let agent = TraceAgent::start(&[
        "--kinds",
        "refused",
        "--pods-from",
        &source,
        "--pods-poll-seconds",
        "0.1",
        "--attribution-wait-ms",
        "3000",
    ]);
    std::thread::sleep(Duration::from_millis(300));
    refuse_once(&mut pod, &app);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        agent.events(of("refused", app.cgroup_id)).is_empty(),
        "the event waits for its container's name"
    );
    write_pod_list(
        &path,
        &[pod.manifest("shop", Some("checkout"), &decls(true))],
    );
    let ev = &agent.wait_for(1, Duration::from_secs(5), of("refused", app.cgroup_id))[0];
    assert_eq!(ev["pod_uid"], pod.uid.as_str());
    assert_eq!(ev["container_id"], app.id.as_str());
    assert_eq!(ev["namespace"], "shop");
    assert_eq!(
        ev["pod"],
        format!("checkout-5f7b8c9d6-{}", &pod.uid[..5]).as_str()
    );
    assert_eq!(ev["container"], "app");

    // Once known, names are there at once.
    refuse_once(&mut pod, &app);
    let evs = agent.wait_for(2, Duration::from_secs(5), of("refused", app.cgroup_id));
    assert_eq!(evs.len(), 2);
    assert_eq!(evs[1]["container"], "app");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_malformed_pods_file_is_reported_and_cgroup_attribution_continues() {
    if !is_root_or_skip("a_malformed_pods_file_is_reported_and_cgroup_attribution_continues") {
        return;
    }
    let path = pods_file("bad");
    std::fs::write(&path, "{ not json").unwrap();
    let source = format!("file:{}", path.display());
    let agent = TraceAgent::start(&[
        "--kinds",
        "refused",
        "--pods-from",
        &source,
        "--attribution-wait-ms",
        "300",
    ]);
    let mut pod = SimPod::new("badfile").unwrap();
    let app = pod.container("app").unwrap();
    refuse_once(&mut pod, &app);
    let ev = &agent.wait_for(1, Duration::from_secs(5), of("refused", app.cgroup_id))[0];
    assert_eq!(ev["pod_uid"], pod.uid.as_str());
    assert!(ev["container"].is_null());
    let (_, summary) = agent.stop();
    assert_eq!(summary["pod_source_errors"], 1, "{summary}");
    std::fs::remove_file(&path).unwrap();
}
