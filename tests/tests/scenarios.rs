//! Detection end to end on the real kernel: simulated pods race, the agent binary runs
//! as users run it (`run`), and `/api/v1/incidents` must tell the story.

use std::{path::PathBuf, time::Duration};

use serde_json::{Value, json};
use sidecar_race_tests::{
    agent::RunAgent,
    pod::{Decl, Declared, SimContainer, SimPod, mark_deleting, sibling_binary, write_pod_list},
    root::{have, is_root_or_skip},
    scenario::{CountedApp, app, app_done, app_named, app_refused, proxy, proxy_serving},
};

const SETTLE: Duration = Duration::from_secs(10);

fn one(incidents: Vec<Value>) -> Value {
    assert_eq!(
        incidents.len(),
        1,
        "expected exactly one incident: {incidents:#?}"
    );
    incidents.into_iter().next().unwrap()
}

/// The agent, reading a pods file, then a new pod `name` (Deployment shop/checkout:
/// app `a`, classic sidecar `p`) whose proxy listens on 127.0.0.1:15001 1.5 s late.
/// The agent watches before the pod starts (it would not call a race in a pod it
/// found running a startup race). Returns the agent, the pod, `p`, `a` and the file.
fn late_proxy_pod(name: &str) -> (RunAgent, SimPod, SimContainer, SimContainer, PathBuf) {
    let (agent, pods_file) = RunAgent::start_with_pods_file(&format!("scn-{name}"), &[]);
    let mut pod = SimPod::new(name).unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    let manifest = pod.app_and_proxy_manifest("shop", "checkout", &a, &p, Declared::App);
    write_pod_list(&pods_file, &[manifest]);
    // Both containers start together; the proxy is slow to listen.
    proxy(
        &mut pod,
        &p,
        &["--listen", "127.0.0.1:15001", "--delay-ms", "1500"],
    );
    (agent, pod, p, a, pods_file)
}

fn window(i: &Value) -> f64 {
    i["race_window_seconds"]
        .as_f64()
        .unwrap_or_else(|| panic!("no window: {i:#}"))
}

#[test]
fn classic_startup_race_is_one_startup_incident_with_the_right_window() {
    if !is_root_or_skip("classic_startup_race_is_one_startup_incident_with_the_right_window") {
        return;
    }
    let (agent, mut pod, p, a, pods_file) = late_proxy_pod("startup");
    app_done(
        &mut pod,
        &a,
        &["--connect", "127.0.0.1:15001", "--interval-ms", "50"],
    );
    let i = one(agent.wait_incidents(&pod.uid, SETTLE, |i| {
        i.iter().any(|i| i["state"] == "resolved")
    }));
    assert_eq!(i["phase"], "startup");
    assert_eq!(i["state"], "resolved");
    assert_eq!(i["namespace"], "shop");
    assert_eq!(
        i["workload"],
        serde_json::json!({"kind": "Deployment", "name": "checkout"})
    );
    assert_eq!(i["container"], "app");
    assert_eq!(i["container_id"], a.id.as_str());
    assert_eq!(i["sidecar"], "proxy");
    assert_eq!(i["sidecar_container_id"], p.id.as_str());
    assert_eq!(i["pattern"], "classic");
    assert_eq!(i["port"], 15001);
    assert_eq!(i["destination"], "127.0.0.1:15001");
    assert!(i["refused_count"].as_u64().unwrap() >= 20, "{i:#}");
    assert!(
        (window(&i) - 1.5).abs() < 0.2,
        "window {} vs the proxy's 1.5 s delay",
        window(&i)
    );
    assert!(
        i["advice"]
            .as_str()
            .unwrap()
            .starts_with("Move proxy from containers to initContainers"),
        "{i:#}"
    );
    let log = agent.stop();
    assert!(
        log.iter().any(|l| l.contains("incident opened")),
        "one log line per incident opened"
    );
    assert!(
        log.iter()
            .any(|l| l.contains("incident resolved") && l.contains("startup"))
    );
    std::fs::remove_file(pods_file).unwrap();
}

#[test]
fn ordered_start_gives_no_incident() {
    if !is_root_or_skip("ordered_start_gives_no_incident") {
        return;
    }
    let agent = RunAgent::start(&["--pods-from", "none"]);
    let mut pod = SimPod::new("ordered").unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    proxy_serving(&mut pod, &p, 15001);
    app_done(
        &mut pod,
        &a,
        &["--connect", "127.0.0.1:15001", "--interval-ms", "50"],
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(agent.incidents_of(&pod.uid).is_empty());
}

#[test]
fn drain_race_is_one_drain_incident() {
    if !is_root_or_skip("drain_race_is_one_drain_incident") {
        return;
    }
    let agent = RunAgent::start(&["--pods-from", "none"]);
    let mut pod = SimPod::new("drain").unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    // The proxy stops listening after 1 s (it got SIGTERM with the app); the app keeps
    // working (dialing every 100 ms) for 2 s more, then everything exits.
    proxy(
        &mut pod,
        &p,
        &["--listen", "127.0.0.1:15001", "--close-after-ms", "1000"],
    );
    std::thread::sleep(Duration::from_millis(300));
    app_done(
        &mut pod,
        &a,
        &[
            "--connect",
            "127.0.0.1:15001",
            "--interval-ms",
            "100",
            "--attempts",
            "27",
            "--keep-dialing",
        ],
    );
    let uid = pod.uid.clone();
    drop(pod); // containers and pod torn down
    let i = one(agent.wait_incidents(&uid, SETTLE, |i| i.iter().any(|i| i["state"] == "resolved")));
    assert_eq!(
        (i["phase"].as_str(), i["state"].as_str()),
        (Some("drain"), Some("resolved")),
        "{i:#}"
    );
    assert_eq!(i["container_id"], a.id.as_str());
    assert!(i["listener_closed_at"].is_string());
    assert!(
        (window(&i) - 1.9).abs() < 0.4,
        "listener gone → last refusal: {}",
        window(&i)
    );
}

#[test]
fn sidecar_restart_mid_life_is_one_steady_incident() {
    if !is_root_or_skip("sidecar_restart_mid_life_is_one_steady_incident") {
        return;
    }
    let agent = RunAgent::start(&["--pods-from", "none"]);
    let mut pod = SimPod::new("steady").unwrap();
    let p1 = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    let first = proxy(
        &mut pod,
        &p1,
        &["--listen", "127.0.0.1:15001", "--close-after-ms", "1000"],
    );
    std::thread::sleep(Duration::from_millis(300));
    let dialer = app(
        &mut pod,
        &a,
        &[
            "--connect",
            "127.0.0.1:15001",
            "--interval-ms",
            "100",
            "--attempts",
            "35",
            "--keep-dialing",
        ],
    );
    assert!(pod.wait(first).unwrap().success());
    // The kubelet restarts it: a new container of the same pod, listening 1 s later.
    let p2 = pod.container("proxy-restarted").unwrap();
    proxy(
        &mut pod,
        &p2,
        &["--listen", "127.0.0.1:15001", "--delay-ms", "1000"],
    );
    assert!(pod.wait(dialer).unwrap().success());
    let i = one(agent.wait_incidents(&pod.uid, SETTLE, |i| {
        i.iter().any(|i| i["state"] == "resolved")
    }));
    assert_eq!(
        (i["phase"].as_str(), i["state"].as_str()),
        (Some("steady"), Some("resolved")),
        "{i:#}"
    );
    assert_eq!(
        i["sidecar_container_id"],
        p2.id.as_str(),
        "the listener that came back"
    );
    assert!(
        (window(&i) - 1.0).abs() < 0.3,
        "gone → back: {}",
        window(&i)
    );
}

#[test]
fn a_port_nobody_opens_is_unresolved() {
    if !is_root_or_skip("a_port_nobody_opens_is_unresolved") {
        return;
    }
    let agent = RunAgent::start(&["--pods-from", "none", "--unresolved-after-seconds", "2"]);
    let mut pod = SimPod::new("unres").unwrap();
    let a = pod.container("app").unwrap();
    app_done(
        &mut pod,
        &a,
        &[
            "--connect",
            "127.0.0.1:9999",
            "--interval-ms",
            "100",
            "--attempts",
            "5",
        ],
    );
    let i = one(agent.wait_incidents(&pod.uid, SETTLE, |i| {
        i.iter().any(|i| i["phase"] == "unresolved")
    }));
    assert_eq!(
        (i["phase"].as_str(), i["state"].as_str()),
        (Some("unresolved"), Some("open")),
        "{i:#}"
    );
    assert_eq!(i["refused_count"], 5);
    assert!(i["race_window_seconds"].is_null() && i["sidecar"].is_null());
    assert_eq!(
        agent
            .incidents("phase=unresolved&state=open")
            .iter()
            .filter(|x| x["pod_uid"] == pod.uid.as_str())
            .count(),
        1
    );
    let uid = pod.uid.clone();
    drop(pod);
    let i = one(agent.wait_incidents(&uid, SETTLE, |i| i.iter().any(|i| i["state"] == "resolved")));
    assert_eq!(
        (i["phase"].as_str(), i["state"].as_str()),
        (Some("unresolved"), Some("resolved"))
    );
}

#[test]
fn a_redirected_connect_races_on_the_local_port() {
    if !is_root_or_skip("a_redirected_connect_races_on_the_local_port") {
        return;
    }
    assert!(
        have("iptables"),
        "iptables is needed: `cargo xtask setup` installs it"
    );
    let agent = RunAgent::start(&["--pods-from", "none"]);
    let mut pod = SimPod::new("mesh").unwrap();
    pod.redirect_service("10.96.0.10", 80, 15001).unwrap();
    let p = pod.container("istio-proxy").unwrap();
    let a = pod.container("app").unwrap();
    proxy(
        &mut pod,
        &p,
        &["--listen", "0.0.0.0:15001", "--delay-ms", "1000"],
    );
    app_done(
        &mut pod,
        &a,
        &["--connect", "10.96.0.10:80", "--interval-ms", "50"],
    );
    let i = one(agent.wait_incidents(&pod.uid, SETTLE, |i| {
        i.iter().any(|i| i["state"] == "resolved")
    }));
    assert_eq!(i["phase"], "startup");
    assert_eq!(i["port"], 15001);
    assert_eq!(i["destination"], "10.96.0.10:80");
    assert_eq!(i["local_destination"], "127.0.0.1:15001");
    assert_eq!(i["sidecar_container_id"], p.id.as_str());
}

#[test]
fn filters_and_bad_queries() {
    if !is_root_or_skip("filters_and_bad_queries") {
        return;
    }
    let agent = RunAgent::start(&["--pods-from", "none"]);
    let (status, body) =
        sidecar_race_tests::http::get(&agent.addr, "/api/v1/incidents?phase=sometimes").unwrap();
    assert_eq!(status, 400);
    assert!(body.contains("unknown phase `sometimes`"), "{body}");
    assert_eq!(
        sidecar_race_tests::http::get(&agent.addr, "/api/v1/incidents?state=closed")
            .unwrap()
            .0,
        400
    );
    // With no pod source nothing has a namespace, so a namespace filter finds nothing.
    assert!(agent.incidents("namespace=shop").is_empty());
}

/// The incident names the refused processes by process, not by thread: the app's
/// threaded client dials from a worker thread with a name of its own, and a `curl`
/// wait loop in the same container dials too. Exact counts, and `guarded`.
#[test]
fn the_incident_names_the_refused_processes_and_a_wait_tool_guards_it() {
    if !is_root_or_skip("the_incident_names_the_refused_processes_and_a_wait_tool_guards_it") {
        return;
    }
    let (agent, mut pod, _, a, pods_file) = late_proxy_pod("processes");
    let dial = ["--connect", "127.0.0.1:15001", "--interval-ms", "50"];
    let wait_loop = CountedApp::start(
        &mut pod,
        &a,
        &app_named("curl"),
        &[&dial[..], &["--attempts", "3"]].concat(),
    );
    let threaded = CountedApp::start(
        &mut pod,
        &a,
        &sibling_binary("sr-app"),
        &[&dial[..], &["--dial-thread", "pool-1-worker"]].concat(),
    );
    let curl = wait_loop.refused(&mut pod);
    let app = threaded.refused(&mut pod);
    assert_eq!(
        curl, 3,
        "every attempt of the wait loop came before the proxy"
    );
    let i = agent.one_resolved_holding(&pod.uid, app + curl, SETTLE);
    assert_eq!(i["phase"], "startup", "{i:#}");
    assert_eq!(i["refused_count"], app + curl, "{i:#}");
    assert_eq!(
        i["processes"],
        json!([{"name": "sr-app", "count": app}, {"name": "curl", "count": curl}]),
        "named by process (not `pool-1-worker`), most refused first: {i:#}"
    );
    assert_eq!(i["guarded"], true, "{i:#}");
    let advice = i["advice"].as_str().unwrap();
    assert!(
        advice.contains("The pod works around the start order: curl waits until port 15001"),
        "{advice}"
    );
    let log = agent.stop();
    let summary = format!("sr-app x{app}, curl x{curl}");
    assert!(
        log.iter()
            .any(|l| l.contains("incident resolved") && l.contains(&summary)),
        "the log line names them: {log:#?}"
    );
    std::fs::remove_file(pods_file).unwrap();
}

/// The pod `shop/checkout` with `app` (port 8080) and the native sidecar instance
/// `proxy`, which declares no port (its exec probe dials 15001).
fn with_native_proxy(pod: &SimPod, a: &SimContainer, proxy: &SimContainer) -> Value {
    let decl = |container, declared, ports| Decl {
        container,
        declared,
        ports,
        with_status: true,
    };
    pod.manifest(
        "shop",
        Some("checkout"),
        &[
            decl(a, Declared::App, &[8080]),
            decl(proxy, Declared::NativeSidecar, &[]),
        ],
    )
}

/// #19 round 2 (#32): a native sidecar's exec probe is refused by its own first
/// instance; the kubelet replaces the container, and the new instance listens before
/// the pod source names it. Its own probe: no incident, counted as a self-refusal.
#[test]
fn a_replaced_native_sidecars_own_probe_is_no_incident() {
    if !is_root_or_skip("a_replaced_native_sidecars_own_probe_is_no_incident") {
        return;
    }
    let (agent, pods_file) = RunAgent::start_with_pods_file("scn-replaced", &[]);
    let mut pod = SimPod::new("replaced").unwrap();
    let first = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    write_pod_list(&pods_file, &[with_native_proxy(&pod, &a, &first)]);
    std::thread::sleep(Duration::from_millis(300));
    // The startupProbe's exec, in the sidecar's own container, before it listens.
    let probe = [
        "--connect",
        "127.0.0.1:15001",
        "--interval-ms",
        "100",
        "--attempts",
        "8",
    ];
    let refused = app_refused(&mut pod, &first, &probe);
    assert_eq!(refused, 8);
    // The kubelet kills the first instance and starts a second, which serves at once;
    // the pod source names it half a second later.
    pod.remove_container(&first).unwrap();
    let second = pod.container("proxy").unwrap();
    proxy(&mut pod, &second, &["--listen", "0.0.0.0:15001"]);
    std::thread::sleep(Duration::from_millis(500));
    write_pod_list(&pods_file, &[with_native_proxy(&pod, &a, &second)]);
    std::thread::sleep(SETTLE / 2);
    assert_eq!(agent.incidents_of(&pod.uid), Vec::<Value>::new());
    assert!(agent.counter("self_refusals") >= refused);
}

/// #19 round 2 (#32): a rollout undone while the proxy has not listened yet. The API
/// server writes `deletionTimestamp` in the future (the deletion plus the grace
/// period), the containers stop a second later, the pod leaves the source, and its
/// cgroup stays past the unresolved timeout. A startup race, with its refusals.
#[test]
fn a_startup_cut_short_by_a_graceful_deletion_is_a_startup_incident() {
    if !is_root_or_skip("a_startup_cut_short_by_a_graceful_deletion_is_a_startup_incident") {
        return;
    }
    let (agent, pods_file) =
        RunAgent::start_with_pods_file("scn-undone", &["--unresolved-after-seconds", "4"]);
    let mut pod = SimPod::new("undone").unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    let mut m = pod.app_and_proxy_manifest("shop", "checkout", &a, &p, Declared::App);
    write_pod_list(&pods_file, &[m.clone()]);
    let slow = proxy(
        &mut pod,
        &p,
        &["--listen", "127.0.0.1:15001", "--delay-ms", "60000"],
    );
    let args = [
        "--connect",
        "127.0.0.1:15001",
        "--interval-ms",
        "100",
        "--attempts",
        "15",
    ];
    let refused = app_refused(&mut pod, &a, &args);
    assert_eq!(refused, 15);
    mark_deleting(&mut m, 30);
    write_pod_list(&pods_file, &[m]);
    std::thread::sleep(Duration::from_secs(1));
    pod.terminate(slow);
    let _ = pod.wait(slow);
    pod.remove_container(&a).unwrap();
    pod.remove_container(&p).unwrap();
    write_pod_list(&pods_file, &[]);
    // Past the unresolved timeout, the pod's cgroup still there.
    std::thread::sleep(Duration::from_secs(6));
    let i = one(agent.incidents_of(&pod.uid));
    assert_eq!(
        (
            i["phase"].as_str(),
            i["state"].as_str(),
            i["refused_count"].as_u64()
        ),
        (Some("startup"), Some("resolved"), Some(refused)),
        "{i:#}"
    );
    assert_eq!(i["sidecar"], "proxy", "{i:#}");
}
