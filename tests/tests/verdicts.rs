//! Verdicts an engineer who knows these pods would sign, on the real kernel: simulated
//! pods shaped like the ones users run (a mesh proxy forwarding to its app, a sidecar
//! probing itself, an init container waiting for a sidecar, a Job with a proxy), the
//! agent binary run as users run it, and what `/api/v1/incidents` and `/metrics` say.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use sidecar_race_tests::{
    agent::RunAgent,
    http::get,
    pod::{Decl, Declared, SimContainer, SimPod, write_pod_list},
    root::is_root_or_skip,
    scenario::{app, app_done, app_refused, late_proxy_race, proxy},
};

const SETTLE: Duration = Duration::from_secs(10);

/// A pods file of the test's own, empty at first, and the `--pods-from` for it.
struct PodsFile(PathBuf);

impl PodsFile {
    fn new(name: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("sr-verdict-{name}-{}.json", std::process::id()));
        write_pod_list(&path, &[]);
        Self(path)
    }

    /// The agent reading this file every 0.1 s, with `extra` arguments.
    fn agent(&self, extra: &[&str]) -> RunAgent {
        let source = format!("file:{}", self.0.display());
        let mut args = vec!["--pods-from", &source, "--pods-poll-seconds", "0.1"];
        args.extend(extra);
        RunAgent::start(&args)
    }

    fn write(&self, pods: &[Value]) {
        write_pod_list(&self.0, pods);
    }
}

impl Drop for PodsFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn decl<'a>(c: &'a SimContainer, declared: Declared, ports: &'a [u16]) -> Decl<'a> {
    Decl {
        container: c,
        declared,
        ports,
        with_status: true,
    }
}

fn metrics(agent: &RunAgent) -> String {
    let (status, body) = get(&agent.addr, "/metrics").expect("GET /metrics");
    assert_eq!(status, 200);
    body
}

/// Waits until `/metrics` has a line starting with `prefix` (a series with its labels).
fn wait_metric(agent: &RunAgent, prefix: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let body = metrics(agent);
        if let Some(line) = body.lines().find(|l| l.starts_with(prefix)) {
            return line.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no series `{prefix}` in /metrics:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until `/metrics` counts at least `refused` self-refusals (copied there every
/// second; other pods on the node may add theirs).
fn wait_self_refusals(agent: &RunAgent, refused: u64) {
    let deadline = Instant::now() + SETTLE;
    loop {
        let line = wait_metric(agent, "sidecar_race_self_refusals_total", SETTLE);
        let n: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        if n >= refused as f64 {
            return;
        }
        assert!(Instant::now() < deadline, "{line}, {refused} refused");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The proxy in `p` serves 127.0.0.1:15001 for 1 s and exits; the app in `a` keeps
/// dialing through the outage, then exits (its cgroup removed). Its refusals.
fn outage_while_the_app_exits(pod: &mut SimPod, p: &SimContainer, a: &SimContainer) -> u64 {
    let first = proxy(
        pod,
        p,
        &["--listen", "127.0.0.1:15001", "--close-after-ms", "1000"],
    );
    std::thread::sleep(Duration::from_millis(200));
    let refused = app_refused(
        pod,
        a,
        &[
            "--connect",
            "127.0.0.1:15001",
            "--interval-ms",
            "100",
            "--attempts",
            "15",
            "--keep-dialing",
        ],
    );
    pod.remove_container(a).unwrap();
    assert!(pod.wait(first).unwrap().success());
    assert!(refused > 0, "the app was never refused during the outage");
    refused
}

fn one(incidents: Vec<Value>) -> Value {
    assert_eq!(incidents.len(), 1, "expected one incident: {incidents:#?}");
    incidents.into_iter().next().unwrap()
}

#[test]
fn a_mesh_proxy_dialing_its_app_before_it_listens_is_not_a_sidecar_race() {
    if !is_root_or_skip("a_mesh_proxy_dialing_its_app_before_it_listens_is_not_a_sidecar_race") {
        return;
    }
    let pods = PodsFile::new("mesh");
    let agent = pods.agent(&[]);
    let mut pod = SimPod::new("istio").unwrap();
    let a = pod.container("app").unwrap();
    let p = pod.container("istio-proxy").unwrap();
    pods.write(&[pod.manifest(
        "shop",
        Some("checkout"),
        &[
            decl(&a, Declared::App, &[8080]),
            decl(&p, Declared::App, &[15001]),
        ],
    )]);
    std::thread::sleep(Duration::from_millis(500));
    // The proxy serves at once and forwards inbound requests (and the kubelet's
    // rewritten probes) to the app, which listens on 8080 only after 1 s.
    proxy(&mut pod, &p, &["--listen", "127.0.0.1:15001"]);
    proxy(
        &mut pod,
        &a,
        &["--listen", "0.0.0.0:8080", "--delay-ms", "1000"],
    );
    app_done(
        &mut pod,
        &p,
        &["--connect", "127.0.0.1:8080", "--interval-ms", "50"],
    );
    let i = agent.one_resolved(&pod.uid, SETTLE);
    assert_eq!(i["kind"], "app_not_ready", "{i:#}");
    assert_eq!(
        (i["container"].as_str(), i["sidecar"].as_str()),
        (Some("istio-proxy"), Some("app"))
    );
    assert_eq!(
        (i["container_role"].as_str(), i["sidecar_role"].as_str()),
        (Some("classic_sidecar"), Some("app"))
    );
    let advice = i["advice"].as_str().unwrap();
    assert!(advice.starts_with("Not a sidecar race"), "{advice}");
    assert!(!advice.contains("initContainers"), "no migration: {advice}");
    assert!(
        agent
            .incidents("kind=sidecar_race")
            .iter()
            .all(|x| x["pod_uid"] != pod.uid.as_str())
    );
    let line = wait_metric(
        &agent,
        r#"sidecar_race_app_not_ready_refusals_total{namespace="shop",workload_kind="Deployment",workload="checkout",container="istio-proxy",app="app",port="8080",protocol="tcp"}"#,
        SETTLE,
    );
    assert!(!line.ends_with(" 0"), "{line}");
    let body = metrics(&agent);
    assert!(
        !body
            .lines()
            .any(|l| l.starts_with("sidecar_race_incidents_total") && l.contains("checkout")),
        "never counted as a race:\n{body}"
    );
    assert!(
        !body
            .lines()
            .any(|l| l.starts_with("sidecar_race_affected_pod_starts_total")
                && l.contains("checkout")
                && !l.ends_with(" 0")),
        "never an affected start:\n{body}"
    );
}

#[test]
fn a_sidecar_probing_its_own_port_is_no_incident() {
    if !is_root_or_skip("a_sidecar_probing_its_own_port_is_no_incident") {
        return;
    }
    let agent = RunAgent::start(&["--pods-from", "none"]);
    let mut pod = SimPod::new("selfprobe").unwrap();
    let p = pod.container("proxy").unwrap();
    // Its exec startupProbe dials the proxy's own port until it listens.
    proxy(
        &mut pod,
        &p,
        &["--listen", "127.0.0.1:15001", "--delay-ms", "800"],
    );
    let refused = app_refused(
        &mut pod,
        &p,
        &["--connect", "127.0.0.1:15001", "--interval-ms", "50"],
    );
    assert!(refused >= 5, "the probe was refused {refused} times");
    // Counted where they belong (copied into /metrics every second): the agent has
    // seen them all, and made no incident of them.
    wait_self_refusals(&agent, refused);
    assert!(agent.incidents_of(&pod.uid).is_empty());
}

#[test]
fn containers_started_after_the_agent_in_an_existing_pod_race_at_startup() {
    if !is_root_or_skip("containers_started_after_the_agent_in_an_existing_pod_race_at_startup") {
        return;
    }
    // The pod's cgroup exists before the agent starts (an agent restarted while the
    // pod was set up); its containers are created afterwards.
    let mut pod = SimPod::new("late-agent").unwrap();
    let agent = RunAgent::start(&["--pods-from", "none"]);
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    let refused = late_proxy_race(&mut pod, &p, &a, 1000);
    let i = agent.one_resolved_holding(&pod.uid, refused, SETTLE);
    assert_eq!(i["refused_count"], refused, "{i:#}");
    assert_eq!(
        (i["phase"].as_str(), i["kind"].as_str()),
        (Some("startup"), Some("sidecar_race"))
    );
    assert_eq!(
        i["container_role"], "unknown",
        "no pod source: roles unknown"
    );
}

#[test]
fn a_sidecar_restarted_while_the_app_exits_is_steady_never_drain() {
    if !is_root_or_skip("a_sidecar_restarted_while_the_app_exits_is_steady_never_drain") {
        return;
    }
    let pods = PodsFile::new("restart");
    let agent = pods.agent(&[]);
    let mut pod = SimPod::new("restart").unwrap();
    let p1 = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    let manifest = pod.app_and_proxy_manifest("shop", "cart", &a, &p1, Declared::App);
    pods.write(&[manifest]);
    let refused = outage_while_the_app_exits(&mut pod, &p1, &a);
    // Once every refusal the app counted is in the pod's incidents:
    let during = agent.wait_incidents(&pod.uid, SETTLE, |i| {
        i.iter()
            .map(|i| i["refused_count"].as_u64().unwrap_or(0))
            .sum::<u64>()
            >= refused
    });
    assert!(
        !during.is_empty() && during.iter().all(|i| i["phase"] != "drain"),
        "an incident of the {refused} refusals, not a drain while the pod runs: {during:#?}"
    );
    // The kubelet restarts the proxy: listening again 0.5 s later.
    let p2 = pod.container("proxy-restarted").unwrap();
    proxy(
        &mut pod,
        &p2,
        &["--listen", "127.0.0.1:15001", "--delay-ms", "500"],
    );
    let i = agent.one_resolved(&pod.uid, SETTLE);
    assert_eq!(
        (i["phase"].as_str(), i["state"].as_str()),
        (Some("steady"), Some("resolved")),
        "{i:#}"
    );
    assert!(i["race_window_seconds"].as_f64().unwrap() > 0.5, "{i:#}");
}

/// A pod whose init container `wait-for-proxy` polls port 5432 of `sidecar`, declared
/// as `declared` after it, which never starts; the pod's one incident once it is
/// `unresolved` (after 2 s), with the agent, the pods file and the pod still up.
fn init_container_waiting_for(
    sidecar: &str,
    declared: Declared,
) -> (Value, RunAgent, PodsFile, SimPod) {
    let pods = PodsFile::new(sidecar);
    let agent = pods.agent(&["--unresolved-after-seconds", "2"]);
    let mut pod = SimPod::new(sidecar).unwrap();
    let init = pod.container("wait-for-proxy").unwrap();
    let a = pod.container("app").unwrap();
    let p = pod.container(sidecar).unwrap();
    let not_started = |c, declared, ports| Decl {
        with_status: false,
        ..decl(c, declared, ports)
    };
    pods.write(&[pod.manifest(
        "billing",
        Some("ledger"),
        &[
            decl(&init, Declared::Init, &[]),
            not_started(&a, Declared::App, &[8080]),
            not_started(&p, declared, &[5432]),
        ],
    )]);
    std::thread::sleep(Duration::from_millis(500));
    // Only the init container runs, so nothing listens.
    app_done(
        &mut pod,
        &init,
        &[
            "--connect",
            "127.0.0.1:5432",
            "--interval-ms",
            "100",
            "--attempts",
            "10",
        ],
    );
    let i = one(agent.wait_incidents(&pod.uid, SETTLE, |i| {
        i.iter().any(|i| i["phase"] == "unresolved")
    }));
    assert_eq!(i["kind"], "init_deadlock", "{i:#}");
    assert_eq!(
        (i["container"].as_str(), i["sidecar"].as_str()),
        (Some("wait-for-proxy"), Some(sidecar))
    );
    (i, agent, pods, pod)
}

#[test]
fn an_init_container_polling_a_classic_sidecar_is_a_deadlock() {
    if !is_root_or_skip("an_init_container_polling_a_classic_sidecar_is_a_deadlock") {
        return;
    }
    // `containers` start only after every init container.
    let (i, agent, _pods, _pod) = init_container_waiting_for("cloud-sql-proxy", Declared::App);
    let advice = i["advice"].as_str().unwrap();
    assert!(
        advice.contains("Make cloud-sql-proxy a native sidecar (initContainers, restartPolicy: Always) listed before wait-for-proxy"),
        "{advice}"
    );
    assert!(!advice.contains("check the address"), "{advice}");
    let line = wait_metric(
        &agent,
        r#"sidecar_race_incidents_total{namespace="billing",workload_kind="Deployment",workload="ledger",sidecar="cloud-sql-proxy",phase="unresolved",pattern="classic",kind="init_deadlock",protocol="tcp"}"#,
        SETTLE,
    );
    assert!(line.ends_with(" 1"), "{line}");
}

#[test]
fn a_job_pod_kept_running_by_its_sidecar_is_reported_stuck() {
    if !is_root_or_skip("a_job_pod_kept_running_by_its_sidecar_is_reported_stuck") {
        return;
    }
    let pods = PodsFile::new("job");
    let agent = pods.agent(&["--stuck-job-after-seconds", "1"]);
    let mut pod = SimPod::new("job").unwrap();
    let a = pod.container("app").unwrap();
    let p = pod.container("cloud-sql-proxy").unwrap();
    let mut base = pod.manifest(
        "batch",
        None,
        &[
            decl(&a, Declared::App, &[]),
            decl(&p, Declared::App, &[5432]),
        ],
    );
    base["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job",
        "name": "reindex", "uid": "00000000-0000-4000-8000-0000000000aa", "controller": true}]);
    let job_pod = |app_state: Value, proxy_state: Value| {
        let mut m = base.clone();
        m["status"]["containerStatuses"][0]["state"] = app_state;
        m["status"]["containerStatuses"][1]["state"] = proxy_state;
        m
    };
    let running = json!({"running": {"startedAt": "2026-11-29T10:00:00Z"}});
    let done = |at: &str| {
        json!({"terminated": {"exitCode": 0, "reason": "Completed",
        "startedAt": "2026-11-29T10:00:00Z", "finishedAt": at}})
    };
    pods.write(&[job_pod(running.clone(), running.clone())]);
    // The proxy serves; the Job's app does its work through it and exits.
    proxy(&mut pod, &p, &["--listen", "127.0.0.1:5432"]);
    std::thread::sleep(Duration::from_millis(300));
    app_done(&mut pod, &a, &["--connect", "127.0.0.1:5432"]);
    pod.remove_container(&a).unwrap();
    let finished = now_rfc3339();
    pods.write(&[job_pod(done(&finished), running.clone())]);
    let i = one(agent.wait_incidents(&pod.uid, SETTLE, |i| {
        i.iter().any(|i| i["kind"] == "stuck_job")
    }));
    assert_eq!(
        (i["state"].as_str(), i["sidecar"].as_str()),
        (Some("open"), Some("cloud-sql-proxy"))
    );
    assert_eq!(i["workload"], json!({"kind": "Job", "name": "reindex"}));
    assert!(i["port"].is_null() && i["race_window_seconds"].is_null());
    assert!(
        i["advice"]
            .as_str()
            .unwrap()
            .contains("the Job never completes"),
        "{i:#}"
    );
    let gauge = r#"sidecar_race_stuck_job_pods{namespace="batch",workload_kind="Job",workload="reindex",sidecar="cloud-sql-proxy"}"#;
    assert!(wait_metric(&agent, gauge, SETTLE).ends_with(" 1"));
    // The sidecar is finally stopped: resolved, and the gauge drops.
    pods.write(&[job_pod(done(&finished), done(&now_rfc3339()))]);
    let i = agent.one_resolved(&pod.uid, SETTLE);
    assert!(i["race_window_seconds"].as_f64().unwrap() > 0.5, "{i:#}");
    let deadline = Instant::now() + SETTLE;
    while !wait_metric(&agent, gauge, SETTLE).ends_with(" 0") {
        assert!(Instant::now() < deadline, "the gauge stays up");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn dual_stack_loopback_dialing_is_one_startup_incident_resolved() {
    if !is_root_or_skip("dual_stack_loopback_dialing_is_one_startup_incident_resolved") {
        return;
    }
    let agent = RunAgent::start(&["--pods-from", "none"]);
    let mut pod = SimPod::new("dualstack").unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    // The proxy listens on IPv4 loopback only; the app dials `localhost`: ::1 first.
    proxy(
        &mut pod,
        &p,
        &["--listen", "127.0.0.1:15001", "--delay-ms", "1000"],
    );
    let refused = app_refused(
        &mut pod,
        &a,
        &[
            "--connect",
            "[::1]:15001",
            "--connect",
            "127.0.0.1:15001",
            "--interval-ms",
            "50",
        ],
    );
    // The last ::1 attempt may come once 127.0.0.1 listens: a fallback, not the race.
    let i = agent.one_resolved_holding(&pod.uid, refused - 1, SETTLE);
    assert_eq!(
        (i["phase"].as_str(), i["state"].as_str()),
        (Some("startup"), Some("resolved")),
        "{i:#}"
    );
    let counted = i["refused_count"].as_u64().unwrap();
    assert!(
        counted >= 20 && counted + 1 >= refused,
        "{refused} refused: {i:#}"
    );
}

#[test]
fn a_pods_file_written_after_the_race_still_labels_the_metrics() {
    if !is_root_or_skip("a_pods_file_written_after_the_race_still_labels_the_metrics") {
        return;
    }
    let pods = PodsFile::new("late");
    let agent = RunAgent::start(&[
        "--pods-from",
        &format!("file:{}", pods.0.display()),
        "--pods-poll-seconds",
        "0.5",
    ]);
    let mut pod = SimPod::new("late").unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    let refused = late_proxy_race(&mut pod, &p, &a, 1000);
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        agent.incidents_of(&pod.uid).is_empty(),
        "waits for the pod's metadata"
    );
    pods.write(&[pod.app_and_proxy_manifest("shop", "late-writer", &a, &p, Declared::App)]);
    let i = agent.one_resolved_holding(&pod.uid, refused, SETTLE);
    assert_eq!(i["namespace"], "shop", "{i:#}");
    let line = wait_metric(
        &agent,
        r#"sidecar_race_incidents_total{namespace="shop",workload_kind="Deployment",workload="late-writer",sidecar="proxy",phase="startup",pattern="classic",kind="sidecar_race",protocol="tcp"}"#,
        Duration::from_secs(15),
    );
    assert!(line.ends_with(" 1"), "{line}");
    let body = metrics(&agent);
    assert!(
        !body
            .lines()
            .any(|l| l.starts_with("sidecar_race_incidents_total")
                && l.contains(r#"namespace="unknown""#)),
        "counted once, under the names:\n{body}"
    );
}

#[test]
fn an_unknown_pod_makes_the_pods_file_be_read_at_once() {
    if !is_root_or_skip("an_unknown_pod_makes_the_pods_file_be_read_at_once") {
        return;
    }
    let pods = PodsFile::new("refresh");
    // Read once at start, then only every 60 s: names within the race can only come
    // from a re-read when the agent sees a pod it does not know.
    let agent = RunAgent::start(&[
        "--pods-from",
        &format!("file:{}", pods.0.display()),
        "--pods-poll-seconds",
        "60",
    ]);
    std::thread::sleep(Duration::from_millis(300));
    let mut pod = SimPod::new("refresh").unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    pods.write(&[pod.app_and_proxy_manifest("shop", "fresh", &a, &p, Declared::App)]);
    proxy(
        &mut pod,
        &p,
        &["--listen", "127.0.0.1:15001", "--delay-ms", "1000"],
    );
    app(
        &mut pod,
        &a,
        &["--connect", "127.0.0.1:15001", "--interval-ms", "50"],
    );
    let i = agent.one_resolved(&pod.uid, SETTLE);
    assert_eq!(
        (i["namespace"].as_str(), i["container"].as_str()),
        (Some("shop"), Some("app")),
        "{i:#}"
    );
    wait_metric(
        &agent,
        r#"sidecar_race_incidents_total{namespace="shop",workload_kind="Deployment",workload="fresh","#,
        SETTLE,
    );
}

#[test]
fn an_init_container_declared_before_its_native_sidecar_is_a_deadlock() {
    if !is_root_or_skip("an_init_container_declared_before_its_native_sidecar_is_a_deadlock") {
        return;
    }
    // initContainers: [wait-for-proxy, proxy (restartPolicy: Always)]: the kubelet
    // starts them in order, so the proxy never starts.
    let (i, ..) = init_container_waiting_for("proxy", Declared::NativeSidecar);
    let advice = i["advice"].as_str().unwrap();
    assert!(
        advice.contains("Move proxy above wait-for-proxy in initContainers"),
        "{advice}"
    );
}

#[test]
fn a_listener_on_the_other_family_leaves_the_client_unresolved() {
    if !is_root_or_skip("a_listener_on_the_other_family_leaves_the_client_unresolved") {
        return;
    }
    let pods = PodsFile::new("family");
    let agent = pods.agent(&["--unresolved-after-seconds", "3"]);
    let mut pod = SimPod::new("family").unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    pods.write(&[pod.app_and_proxy_manifest("shop", "family", &a, &p, Declared::App)]);
    // The proxy serves [::1] only; the app dials 127.0.0.1 and never connects.
    proxy(&mut pod, &p, &["--listen", "[::1]:15001"]);
    std::thread::sleep(Duration::from_millis(300));
    let refused = app_refused(
        &mut pod,
        &a,
        &[
            "--connect",
            "127.0.0.1:15001",
            "--interval-ms",
            "100",
            "--attempts",
            "10",
        ],
    );
    assert_eq!(refused, 10);
    let i = one(agent.wait_incidents(&pod.uid, SETTLE, |i| {
        i.iter().any(|i| i["phase"] == "unresolved")
    }));
    assert_eq!(i["refused_count"], refused, "{i:#}");
    let advice = i["advice"].as_str().unwrap();
    assert!(
        advice.contains("proxy listens on [::1]:15001")
            && advice.contains("connections to 127.0.0.1:15001"),
        "{advice}"
    );
}

#[test]
fn a_pod_force_deleted_while_it_runs_drains_once_never_unresolved() {
    if !is_root_or_skip("a_pod_force_deleted_while_it_runs_drains_once_never_unresolved") {
        return;
    }
    let pods = PodsFile::new("force");
    let agent = pods.agent(&[]);
    let mut pod = SimPod::new("force").unwrap();
    let uid = pod.uid.clone();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    pods.write(&[pod.app_and_proxy_manifest("shop", "force", &a, &p, Declared::App)]);
    // The proxy serves, then goes down 1.5 s later: the kubelet's SIGTERM.
    let sidecar = proxy(
        &mut pod,
        &p,
        &["--listen", "127.0.0.1:15001", "--close-after-ms", "1500"],
    );
    std::thread::sleep(Duration::from_millis(300));
    // `kubectl delete pod --grace-period=0 --force`: gone from the API at once, while
    // its containers still run.
    pods.write(&[]);
    let refused = app_refused(
        &mut pod,
        &a,
        &[
            "--connect",
            "127.0.0.1:15001",
            "--interval-ms",
            "100",
            "--attempts",
            "25",
            "--keep-dialing",
        ],
    );
    assert!(pod.wait(sidecar).unwrap().success());
    assert!(refused > 5, "the app was refused {refused} times");
    drop(pod); // the containers and the pod cgroup go
    let incidents = agent.wait_incidents(&uid, SETTLE, |i| {
        i.iter().all(|i| i["state"] == "resolved")
            && i.iter()
                .map(|i| i["refused_count"].as_u64().unwrap_or(0))
                .sum::<u64>()
                >= refused
    });
    let i = one(incidents);
    assert_eq!(
        (i["phase"].as_str(), i["state"].as_str()),
        (Some("drain"), Some("resolved")),
        "{i:#}"
    );
    assert_eq!(i["refused_count"], refused, "{i:#}");
}

#[test]
fn without_a_pod_source_a_sidecar_restarting_in_place_while_the_app_restarts_is_steady() {
    if !is_root_or_skip(
        "without_a_pod_source_a_sidecar_restarting_in_place_while_the_app_restarts_is_steady",
    ) {
        return;
    }
    let agent = RunAgent::start(&["--pods-from", "none"]);
    let mut pod = SimPod::new("inplace").unwrap();
    let p = pod.container("proxy").unwrap();
    let a1 = pod.container("app").unwrap();
    outage_while_the_app_exits(&mut pod, &p, &a1);
    // The app is restarted; the proxy restarts in its own container and listens again
    // 0.5 s later.
    let a2 = pod.container("app-restarted").unwrap();
    proxy(
        &mut pod,
        &p,
        &["--listen", "127.0.0.1:15001", "--delay-ms", "500"],
    );
    app_done(
        &mut pod,
        &a2,
        &["--connect", "127.0.0.1:15001", "--interval-ms", "50"],
    );
    let incidents = agent.wait_incidents(&pod.uid, SETTLE, |i| {
        i.len() == 2 && i.iter().all(|i| i["state"] == "resolved")
    });
    // Never a drain while the pod runs: the app running when the proxy went is in a
    // steady outage; its new instance, started while nothing listened, is refused
    // before any listener of its own life, a startup race of that instance (KEP-5307:
    // a container started again is timed from its own start).
    let phase_of = |c: &SimContainer| {
        incidents
            .iter()
            .find(|i| i["container_id"] == c.id.as_str())
            .map(|i| i["phase"].clone())
    };
    assert_eq!(
        (phase_of(&a1), phase_of(&a2), incidents.len()),
        (Some("steady".into()), Some("startup".into()), 2),
        "{incidents:#?}"
    );
}

#[test]
fn a_sidecar_refused_by_its_probe_then_replaced_is_a_self_refusal() {
    if !is_root_or_skip("a_sidecar_refused_by_its_probe_then_replaced_is_a_self_refusal") {
        return;
    }
    let pods = PodsFile::new("replaced");
    let agent = pods.agent(&[]);
    let mut pod = SimPod::new("replaced").unwrap();
    let p1 = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    pods.write(&[pod.app_and_proxy_manifest("shop", "replaced", &a, &p1, Declared::App)]);
    std::thread::sleep(Duration::from_millis(300));
    // The proxy's exec probe dials its own admin port, which nothing serves yet.
    let refused = app_refused(
        &mut pod,
        &p1,
        &[
            "--connect",
            "127.0.0.1:15020",
            "--interval-ms",
            "50",
            "--attempts",
            "8",
        ],
    );
    assert_eq!(refused, 8);
    // The kubelet replaces the proxy: a new container named `proxy`, which listens.
    pod.remove_container(&p1).unwrap();
    let mut p2 = pod.container("proxy-2").unwrap();
    p2.name = "proxy".into();
    pods.write(&[pod.app_and_proxy_manifest("shop", "replaced", &a, &p2, Declared::App)]);
    std::thread::sleep(Duration::from_millis(300));
    proxy(&mut pod, &p2, &["--listen", "0.0.0.0:15020"]);
    wait_self_refusals(&agent, refused);
    assert!(
        agent.incidents_of(&pod.uid).is_empty(),
        "{:#?}",
        agent.incidents_of(&pod.uid)
    );
}

#[test]
fn a_host_network_pod_known_late_reports_nothing() {
    if !is_root_or_skip("a_host_network_pod_known_late_reports_nothing") {
        return;
    }
    let pods = PodsFile::new("hostnet");
    let agent = pods.agent(&["--unresolved-after-seconds", "2"]);
    let mut pod = SimPod::new("hostnet").unwrap();
    let a = pod.container("app").unwrap();
    // The app dials a node port nothing in the pod serves, before the pod is known.
    let refused = app_refused(
        &mut pod,
        &a,
        &[
            "--connect",
            "127.0.0.1:7777",
            "--interval-ms",
            "100",
            "--attempts",
            "5",
        ],
    );
    assert_eq!(refused, 5);
    std::thread::sleep(Duration::from_millis(1000));
    assert!(agent.incidents_of(&pod.uid).is_empty(), "waits for the pod");
    let mut manifest = pod.manifest("infra", Some("node-agent"), &[decl(&a, Declared::App, &[])]);
    manifest["spec"]["hostNetwork"] = json!(true);
    pods.write(&[manifest]);
    // Past the unresolved timeout: a hostNetwork pod's loopback is the node's.
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        agent.incidents_of(&pod.uid).is_empty(),
        "{:#?}",
        agent.incidents_of(&pod.uid)
    );
    let body = metrics(&agent);
    // Its start and its template's date are counted (the pod started); nothing else.
    assert!(
        !body.lines().any(|l| l.starts_with("sidecar_race_")
            && l.contains("node-agent")
            && !l.starts_with("sidecar_race_pod_starts")
            && !l.starts_with("sidecar_race_pod_template_created")),
        "nothing counted:\n{body}"
    );
}

fn now_rfc3339() -> String {
    let ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128;
    sidecar_race_agent::clock::rfc3339_nanos(ns)
}
