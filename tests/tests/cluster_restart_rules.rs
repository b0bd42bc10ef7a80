//! The `cluster` tier's cases for container restart rules on the newer kubelets (issue
//! #48 items 3 and 4): KEP-5307 (a container with `restartPolicy: Never` restarted by
//! an exit-code rule; beta and on by default from 1.35) and KEP-5532 (a rule whose
//! action restarts all of the pod's containers in place; beta and on by default in
//! 1.36). Run on the Kubernetes 1.36 variant by `cargo xtask test` (and `cargo xtask
//! test kube-1.36` / `kube-1.37`).
//!
//! The pods are bare (`restartPolicy: Never`, as a Job's would be) so that only a rule
//! restarts a container. An `emptyDir` (which outlives a container, and an in-place
//! restart of all of them) tells a container instance whether it is the first.
//!
//! Ignored by a plain `cargo test`; without a cluster each case fails with the reason.

use std::time::Duration;

use serde_json::{Value, json};
use sidecar_race_tests::{
    cluster::{
        cluster, container_id, container_status, name, refused_printed, running_pod_matching, uid,
        wait_until,
    },
    cluster_cases::{fresh_namespace, incidents_of, metrics, named_and_resolved, wait_incident},
    stand_in::{LATE_S, dialer, listen, shell},
};

/// The exit code the rules below act on.
const RULE_EXIT: i32 = 42;

/// `restartPolicy: Never` and one rule: exit code 42 → `action`.
fn with_rule(mut c: Value, action: &str) -> Value {
    c["restartPolicy"] = json!("Never");
    c["restartPolicyRules"] =
        json!([{"action": action, "exitCodes": {"operator": "In", "values": [RULE_EXIT]}}]);
    with_scratch(c)
}

fn with_scratch(mut c: Value) -> Value {
    c["volumeMounts"] = json!([{"name": "scratch", "mountPath": "/scratch"}]);
    c
}

/// A bare pod `name` (label `app=<name>`), `restartPolicy: Never`, with `containers`
/// sharing an emptyDir at /scratch.
fn bare_pod(ns: &str, name: &str, containers: Vec<Value>) -> String {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "containers": containers,
            "volumes": [{"name": "scratch", "emptyDir": {}}],
        },
    })
    .to_string()
}

/// The pod once `container` has restarted `n` times and every container runs again
/// with its ID known.
fn restarted(ns: &str, pod: &str, container: &str, n: u64) -> Value {
    cluster().wait_pod(
        ns,
        &format!("app={pod}"),
        &format!("{container} restarted {n} times and running"),
        Duration::from_secs(120),
        |p| {
            let all = p["status"]["containerStatuses"].as_array();
            all.is_some_and(|cs| {
                cs.iter()
                    .all(|c| c["state"]["running"].is_object() && c["containerID"].is_string())
                    && cs
                        .iter()
                        .any(|c| c["name"] == container && c["restartCount"] == n)
            })
        },
    )
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn kep5307_an_app_instance_restarted_by_an_exit_code_rule_that_races_its_sidecar_is_a_startup_race()
{
    let c = cluster();
    let addr = c.agent_addr();
    let ns = &fresh_namespace("rule");
    // The first app instance exits 42 at once; the rule restarts it. The classic
    // sidecar serves only LATE_S s after the second instance has started (it waits
    // for that instance's mark), whatever the kubelet's restart delay.
    let app = with_rule(
        shell(
            "app",
            &format!(
                "if [ ! -e /scratch/first ]; then touch /scratch/first; exit {RULE_EXIT}; fi; \
                 touch /scratch/second; {}",
                dialer(15001)
            ),
        ),
        "Restart",
    );
    let mut proxy = with_scratch(shell(
        "proxy",
        &format!(
            "trap 'exit 0' TERM; until [ -e /scratch/second ]; do sleep 0.1; done; sleep {LATE_S}; {}wait",
            listen(15001)
        ),
    ));
    proxy["ports"] = json!([{"containerPort": 15001, "name": "proxy"}]);
    c.apply(&bare_pod(ns, "reindex", vec![app, proxy]));
    let pod = restarted(ns, "reindex", "app", 1);
    let app_status = container_status(&pod, "app");
    assert_eq!(
        app_status["lastState"]["terminated"]["exitCode"], RULE_EXIT,
        "{pod:#}"
    );
    assert_eq!(
        container_status(&pod, "proxy")["restartCount"],
        0,
        "{pod:#}"
    );
    let refused = refused_printed(ns, &name(&pod), "app");
    assert!(refused >= 5, "{refused}");
    let race = wait_incident(
        &addr,
        &uid(&pod),
        "the restarted instance's incident",
        Duration::from_secs(30),
        named_and_resolved,
    );
    eprintln!("incident: {race:#}");
    assert_eq!(race["kind"], "sidecar_race");
    assert_eq!(race["phase"], "startup", "{race:#}");
    assert_eq!(race["pattern"], "classic");
    assert_eq!(race["container"], "app");
    assert_eq!(race["sidecar"], "proxy");
    // The instance the rule started, not the one that exited.
    assert_eq!(race["container_id"], container_id(&pod, "app").as_str());
    assert_eq!(
        race["refused_count"], refused,
        "the agent's count is the app's own"
    );
    let all = incidents_of(&addr, &uid(&pod));
    assert_eq!(all.len(), 1, "one incident for the pod: {all:#?}");
}

/// The pod's condition `kind`'s status (`True`, `False`), if it has one.
fn condition_status(pod: &Value, kind: &str) -> Option<String> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str())
        .map(str::to_string)
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn kep5532_an_in_place_restart_of_all_containers_is_a_second_pod_start_and_its_race_a_startup_one()
{
    let c = cluster();
    let addr = c.agent_addr();
    let ns = &fresh_namespace("inplace");
    // First start: the app does not dial; 8 s in (the sidecar long serving, the
    // start-up over) it exits 42, and its rule restarts every container of the pod in
    // place. Second start: the sidecar listens LATE_S s late again and the app dials
    // at once: the race of a new pod start, with the same UID.
    let app = with_rule(
        shell(
            "app",
            &format!(
                "if [ ! -e /scratch/first ]; then touch /scratch/first; sleep 8; exit {RULE_EXIT}; fi; {}",
                dialer(15001)
            ),
        ),
        "RestartAllContainers",
    );
    let mut proxy = with_scratch(shell(
        "proxy",
        &format!("trap 'exit 0' TERM; sleep {LATE_S}; {}wait", listen(15001)),
    ));
    proxy["ports"] = json!([{"containerPort": 15001, "name": "proxy"}]);
    c.apply(&bare_pod(ns, "warehouse", vec![app, proxy]));
    let first = running_pod_matching(ns, "app=warehouse");
    let (old_app, old_proxy) = (container_id(&first, "app"), container_id(&first, "proxy"));
    let pod = restarted(ns, "warehouse", "proxy", 1);
    // KEP-5532's signals, as the kubelet gives them: the same pod, new instances of
    // every container, each terminated by the restart.
    assert_eq!(uid(&pod), uid(&first));
    assert_ne!(container_id(&pod, "app"), old_app);
    assert_ne!(container_id(&pod, "proxy"), old_proxy);
    assert_eq!(pod["status"]["podIP"], first["status"]["podIP"], "{pod:#}");
    let proxy_last = &container_status(&pod, "proxy")["lastState"]["terminated"];
    assert_eq!(
        (
            proxy_last["exitCode"].as_i64(),
            proxy_last["reason"].as_str()
        ),
        (Some(137), Some("RestartingAllContainers")),
        "{pod:#}"
    );
    eprintln!(
        "the app's last state: {:#}",
        container_status(&pod, "app")["lastState"]
    );
    let events = c.json(&["-n", ns, "get", "events"])["items"].clone();
    let killing = events
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reason"] == "Killing")
        .count();
    assert!(killing >= 1, "no Killing Event: {events:#}");
    assert_eq!(
        condition_status(&pod, "AllContainersRestarting").as_deref(),
        Some("False"),
        "{pod:#}"
    );
    let refused = refused_printed(ns, &name(&pod), "app");
    assert!(refused >= 5, "{refused}");
    let race = wait_incident(
        &addr,
        &uid(&pod),
        "the second start's incident",
        Duration::from_secs(30),
        |i| named_and_resolved(i) && i["container_id"] == container_id(&pod, "app").as_str(),
    );
    eprintln!("incident: {race:#}");
    assert_eq!(
        race["refused_count"], refused,
        "the agent's count is the app's own"
    );
    assert_eq!(race["phase"], "startup", "{race:#}");
    assert_eq!(race["pod_start"], "restarted_in_place", "{race:#}");
    let all = incidents_of(&addr, &uid(&pod));
    assert_eq!(all.len(), 1, "only the second start raced: {all:#?}");
    // Two starts of one pod.
    let prefix = format!("sidecar_race_pod_starts_total{{namespace=\"{ns}\",");
    let starts = wait_until("the pod's two starts", Duration::from_secs(30), || {
        let body = metrics(&addr);
        let line = body.lines().find(|l| l.starts_with(&prefix))?.to_string();
        line.ends_with(" 2").then_some(line)
    });
    eprintln!("{starts}");
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn kep5307_a_sidecar_restarted_by_an_exit_code_rule_mid_life_is_a_steady_race_never_a_drain() {
    let c = cluster();
    let addr = c.agent_addr();
    let ns = &fresh_namespace("sidecarrule");
    let evidence = format!("/var/lib/sidecar-race-cluster/evidence/{ns}");
    // The classic sidecar, declared first, serves at once and marks it; 8 s in it
    // exits 42 and its rule restarts it; the new instance serves 2 s after its start.
    // The app dials only once the sidecar has served (no startup race), every 200 ms,
    // and writes each failed dial's error to a host file: busybox nc says why.
    let mut proxy = with_rule(
        shell(
            "proxy",
            &format!(
                "trap 'exit 0' TERM; \
                 if [ ! -e /scratch/first ]; then touch /scratch/first; {}sleep 0.5; touch /scratch/serving; sleep 8; exit {RULE_EXIT}; fi; \
                 sleep 2; {}sleep 0.5; touch /scratch/serving-again; wait",
                listen(15001),
                listen(15001)
            ),
        ),
        "Restart",
    );
    proxy["ports"] = json!([{"containerPort": 15001, "name": "proxy"}]);
    let mut app = with_scratch(shell(
        "app",
        "until [ -e /scratch/serving ]; do sleep 0.1; done; f=/evidence/$(hostname); \
         while :; do err=$(nc -w 1 127.0.0.1 15001 </dev/null 2>&1 >/dev/null) || echo \"failed: $err\" >> $f; sleep 0.2; done",
    ));
    app["volumeMounts"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "evidence", "mountPath": "/evidence"}));
    let mut pod: Value = serde_json::from_str(&bare_pod(ns, "ledger", vec![proxy, app])).unwrap();
    pod["spec"]["volumes"].as_array_mut().unwrap().push(
        json!({"name": "evidence", "hostPath": {"path": evidence, "type": "DirectoryOrCreate"}}),
    );
    c.apply(&pod.to_string());
    let pod = restarted(ns, "ledger", "proxy", 1);
    assert_eq!(
        container_status(&pod, "proxy")["lastState"]["terminated"]["exitCode"],
        RULE_EXIT,
        "{pod:#}"
    );
    assert_eq!(container_status(&pod, "app")["restartCount"], 0, "{pod:#}");
    // The new instance serves 2.5 s after its start: 5 s on, the app's file holds
    // every failed dial (a later one would make the counts differ, and the case fail).
    std::thread::sleep(Duration::from_secs(5));
    let file = std::path::Path::new(&evidence).join(name(&pod));
    let lines = std::fs::read_to_string(&file).unwrap_or_default();
    eprintln!("the app's failed dials:\n{lines}");
    let refused = lines.lines().filter(|l| l.contains("refused")).count() as u64;
    let other: Vec<&str> = lines.lines().filter(|l| !l.contains("refused")).collect();
    assert!(other.is_empty(), "dials that failed otherwise: {other:#?}");
    assert!(
        refused >= 5,
        "the sidecar's restart refused the app {refused} times"
    );
    let race = wait_incident(
        &addr,
        &uid(&pod),
        "the sidecar restart's incident, with the app's count",
        Duration::from_secs(30),
        |i| named_and_resolved(i) && i["refused_count"].as_u64() == Some(refused),
    );
    eprintln!("incident: {race:#}");
    assert_eq!(
        race["phase"], "steady",
        "a restart, never a drain: {race:#}"
    );
    assert_eq!(race["container"], "app");
    assert_eq!(race["sidecar"], "proxy");
    let all = incidents_of(&addr, &uid(&pod));
    assert_eq!(all.len(), 1, "one incident for the pod: {all:#?}");
}
