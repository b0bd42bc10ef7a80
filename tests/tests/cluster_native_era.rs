//! The `cluster` tier's cases for the native-sidecar era (issue #48 item 6): Istio and
//! Linkerd inject native sidecars by default now, so the races left on a real kubelet
//! are a native sidecar whose startupProbe tests another port than the app dials, one
//! with no probe at all, and drains. Run on the Kubernetes 1.36 variant by `cargo xtask
//! test` (and `cargo xtask test kube-1.36` / `kube-1.37`), against the cluster of
//! `cargo xtask cluster up --kubernetes 1.36`.
//!
//! Every count is checked against the app's own: what its dialer printed, or the lines
//! it wrote to a host file (one per refused dial) that outlives the pod.
//!
//! Ignored by a plain `cargo test`; without a cluster each case fails with the reason.

use std::time::Duration;

use serde_json::{Value, json};
use sidecar_race_tests::{
    cluster::{
        cluster, container_id, container_pids, name, refused_printed, running_pod,
        running_pod_matching, uid, wait_event, wait_until,
    },
    cluster_cases::{
        fresh_namespace, incidents_of, lines_left_by, metrics, named_and_resolved, wait_incident,
    },
    stand_in::{LATE_S, deployment, dialer, listen, listener, shell},
};

/// Where an app writes one line per refused dial (a hostPath the pod mounts, under the
/// cluster's state directory, which `down` removes).
fn evidence_dir(ns: &str) -> String {
    format!("/var/lib/sidecar-race-cluster/evidence/{ns}")
}

/// A native sidecar `proxy` running `script`, with its ports declared.
fn native_proxy(script: &str, ports: &[u16]) -> Value {
    let mut proxy = shell("proxy", script);
    proxy["restartPolicy"] = json!("Always");
    proxy["ports"] = json!(
        ports
            .iter()
            .map(|p| json!({"containerPort": p, "name": format!("p{p}")}))
            .collect::<Vec<_>>()
    );
    proxy
}

fn tcp_startup_probe(port: u16) -> Value {
    json!({"tcpSocket": {"port": port}, "periodSeconds": 1, "failureThreshold": 30})
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn native_sidecar_whose_startup_probe_tests_another_port_races_and_the_advice_names_both_ports() {
    let c = cluster();
    let addr = c.agent_addr();
    let ns = &fresh_namespace("wrongprobe");
    // Istio's shape: the probe tests the health port (15021), which serves at once,
    // while the app dials the proxy's port (15001), which serves LATE_S s later.
    let mut proxy = native_proxy(
        &format!(
            "trap 'exit 0' TERM; {}sleep {LATE_S}; {}wait",
            listen(15021),
            listen(15001)
        ),
        &[15001, 15021],
    );
    proxy["startupProbe"] = tcp_startup_probe(15021);
    c.apply(&deployment(
        ns,
        "checkout",
        json!({"initContainers": [proxy], "containers": [shell("app", &dialer(15001))]}),
    ));
    let pod = running_pod(ns, "checkout");
    let refused = refused_printed(ns, &name(&pod), "app");
    assert!(
        refused >= 5,
        "the probe passed on 15021 while 15001 was {LATE_S} s away: {refused} refusals"
    );
    let race = wait_incident(
        &addr,
        &uid(&pod),
        "the mis-probed sidecar's incident",
        Duration::from_secs(30),
        named_and_resolved,
    );
    eprintln!("incident: {race:#}");
    assert_eq!(race["kind"], "sidecar_race");
    assert_eq!(race["phase"], "startup");
    assert_eq!(race["pattern"], "native_probed", "{race:#}");
    assert_eq!(race["sidecar"], "proxy");
    assert_eq!(race["sidecar_role"], "native_sidecar");
    assert_eq!(race["container"], "app");
    assert_eq!(race["port"], 15001);
    assert_eq!(race["container_id"], container_id(&pod, "app").as_str());
    assert_eq!(
        race["refused_count"], refused,
        "the agent's count is the app's own"
    );
    let advice = race["advice"].as_str().unwrap_or_default();
    assert!(
        advice.starts_with(
            "The startupProbe of proxy tests port 15021, not port 15001 that app dials: make it test port 15001."
        ),
        "{advice}"
    );
    let all = incidents_of(&addr, &uid(&pod));
    assert_eq!(all.len(), 1, "one incident for the pod: {all:#?}");
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn native_sidecar_without_a_startup_probe_races_counted_exactly_with_its_event_and_series() {
    let c = cluster();
    let addr = c.agent_addr();
    let ns = &fresh_namespace("noprobe");
    let proxy = native_proxy(
        &format!("trap 'exit 0' TERM; sleep {LATE_S}; {}wait", listen(15001)),
        &[15001],
    );
    c.apply(&deployment(
        ns,
        "ledger",
        json!({"initContainers": [proxy], "containers": [shell("app", &dialer(15001))]}),
    ));
    let pod = running_pod(ns, "ledger");
    let refused = refused_printed(ns, &name(&pod), "app");
    assert!(refused >= 5, "{refused}");
    let race = wait_incident(
        &addr,
        &uid(&pod),
        "the unprobed sidecar's incident",
        Duration::from_secs(30),
        named_and_resolved,
    );
    eprintln!("incident: {race:#}");
    assert_eq!(race["phase"], "startup");
    assert_eq!(race["pattern"], "native");
    assert_eq!(
        race["sidecar_container_id"],
        container_id(&pod, "proxy").as_str()
    );
    assert_eq!(race["refused_count"], refused, "{race:#}");
    let advice = race["advice"].as_str().unwrap_or_default();
    assert!(
        advice.starts_with("Give native sidecar proxy a startupProbe that tests port 15001"),
        "{advice}"
    );
    let event = wait_event(ns, &name(&pod), "SidecarStartupRace");
    assert_eq!(
        event["involvedObject"]["uid"],
        uid(&pod).as_str(),
        "{event:#}"
    );
    let series = format!(
        "sidecar_race_refused_connections_total{{namespace=\"{ns}\",workload_kind=\"Deployment\",workload=\"ledger\",container=\"app\",sidecar=\"proxy\",port=\"15001\",phase=\"startup\",protocol=\"tcp\"}} {refused}"
    );
    let body = metrics(&addr);
    assert!(
        body.lines().any(|l| l == series),
        "no `{series}` in:\n{body}"
    );
}

/// A bare pod `name` (label `app=<name>`) in `ns`: `app` counting each refused dial of
/// 127.0.0.1:15001 as a line in its evidence file, and each dial served after its
/// SIGTERM in `<file>.served`; it handles SIGTERM by dialing on for 15 rounds (about
/// 3 s) before it exits. Its native sidecar `proxy` serves 15001 at once (probed, so
/// no startup race) and exits at SIGTERM.
fn draining_pod(ns: &str, name: &str) -> String {
    let app = "trap 'stop=1' TERM; f=/evidence/$(hostname); n=0; \
               while :; do \
               if nc -w 1 127.0.0.1 15001 </dev/null >/dev/null 2>&1; then [ -n \"$stop\" ] && echo served >> $f.served; \
               else echo refused >> $f; fi; sleep 0.2; \
               if [ -n \"$stop\" ]; then n=$((n+1)); [ \"$n\" -ge 15 ] && exit 0; fi; done";
    let mut app = shell("app", app);
    app["volumeMounts"] = json!([{"name": "evidence", "mountPath": "/evidence"}]);
    let mut proxy = native_proxy(&listener(15001), &[15001]);
    proxy["startupProbe"] = tcp_startup_probe(15001);
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {
            "terminationGracePeriodSeconds": 15,
            "initContainers": [proxy],
            "containers": [app],
            "volumes": [{"name": "evidence", "hostPath": {"path": evidence_dir(ns), "type": "DirectoryOrCreate"}}],
        },
    })
    .to_string()
}

/// Deletes pod `name` without waiting; returns once the API shows it terminating.
fn delete_and_wait_terminating(ns: &str, name: &str) {
    let c = cluster();
    c.kubectl(&["-n", ns, "delete", "pod", name, "--wait=false"]);
    wait_until(
        "the pod's deletionTimestamp",
        Duration::from_secs(30),
        || {
            let p = c.json(&["-n", ns, "get", "pod", name]);
            p["metadata"]["deletionTimestamp"].is_string().then_some(())
        },
    );
}

/// Dials the app served after its SIGTERM (its `<pod>.served` file).
fn served_after_sigterm(ns: &str, pod: &str) -> u64 {
    std::fs::read_to_string(format!("{}/{pod}.served", evidence_dir(ns)))
        .unwrap_or_default()
        .lines()
        .count() as u64
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn native_sidecar_outlives_an_app_that_dials_through_its_own_sigterm_so_the_drain_is_quiet() {
    let c = cluster();
    let addr = c.agent_addr();
    let ns = &fresh_namespace("quietdrain");
    c.apply(&draining_pod(ns, "worker"));
    let pod = running_pod_matching(ns, "app=worker");
    std::thread::sleep(Duration::from_secs(3));
    delete_and_wait_terminating(ns, "worker");
    // The kubelet stops the app first and the native sidecar only once the app has
    // exited: every dial of the app's SIGTERM handling is served.
    let refused = lines_left_by(ns, &pod, &evidence_dir(ns));
    let served = served_after_sigterm(ns, "worker");
    eprintln!("app after SIGTERM: {served} dials served, {refused} refused");
    assert_eq!(refused, 0, "the app was refused: the sidecar stopped first");
    assert!(
        served >= 10,
        "the app dialed on through its SIGTERM: {served} served"
    );
    // The pod is gone; the agent polls the kubelet's pods every few seconds and takes
    // its events in time order: 10 s is past both.
    std::thread::sleep(Duration::from_secs(10));
    let all = incidents_of(&addr, &uid(&pod));
    assert!(all.is_empty(), "a quiet drain got incidents: {all:#?}");
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn native_sidecar_sigkilled_mid_drain_is_one_drain_incident_counted_exactly() {
    let c = cluster();
    let addr = c.agent_addr();
    let ns = &fresh_namespace("killeddrain");
    c.apply(&draining_pod(ns, "worker"));
    let pod = running_pod_matching(ns, "app=worker");
    let proxy_id = container_id(&pod, "proxy");
    std::thread::sleep(Duration::from_secs(3));
    delete_and_wait_terminating(ns, "worker");
    // The app is in its SIGTERM handling, the sidecar still serves: kill it, as an
    // OOM kill or a crash would, so the app's last dials are refused.
    std::thread::sleep(Duration::from_millis(500));
    let pids = container_pids(&proxy_id);
    assert!(!pids.is_empty(), "no process of the sidecar {proxy_id}");
    for pid in &pids {
        // SAFETY: kill has no memory preconditions; the pids are the sidecar's.
        unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
    }
    let app_count = lines_left_by(ns, &pod, &evidence_dir(ns));
    assert!(app_count >= 1, "the app was never refused after the kill");
    let drain = wait_incident(
        &addr,
        &uid(&pod),
        "the drain incident's final count",
        Duration::from_secs(60),
        |i| i["phase"] == "drain" && i["refused_count"].as_u64() == Some(app_count),
    );
    eprintln!("drain incident: {drain:#}");
    assert_eq!(drain["kind"], "sidecar_race");
    assert_eq!(drain["container"], "app");
    assert_eq!(drain["sidecar"], "proxy");
    assert_eq!(drain["sidecar_role"], "native_sidecar");
    assert_eq!(drain["container_id"], container_id(&pod, "app").as_str());
    let all = incidents_of(&addr, &uid(&pod));
    assert_eq!(all.len(), 1, "only the drain: {all:#?}");
}
