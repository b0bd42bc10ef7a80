//! The `cluster` tier: real pods run by a real kubelet (Kubernetes 1.34 built from
//! source, containerd 1.6, the CNI bridge), the agent installed from deploy/ as the
//! README says, through `cargo xtask cluster up` (see tests/kit/src/cluster.rs). Its
//! core cases (xtask's `CORE_CASES`) run again on CRI-O (`cluster up --runtime
//! cri-o`), where every container ID they check is a `cri-o://` one, and on Kubernetes
//! 1.36 with containerd 2 (`cluster up --kubernetes 1.36`), where the node's versions
//! are checked against that variant's.
//!
//! Ignored by a plain `cargo test`: `cargo xtask test` runs them after starting the
//! cluster (one for all cases, `--test-threads=1`) and takes it down after. Without a
//! cluster each case fails with the reason; it never passes.
//!

use std::time::Duration;

use serde_json::{Value, json};
use sidecar_race_tests::{
    agent::{agent_binary, incidents_at_as},
    bpf::{bpf_ids_of, links_of_programs},
    cluster::{
        AGENT_NAMESPACE, AGENT_SELECTOR, TestNamespace, check_runtime_version, cluster, condition,
        container_id, container_pids, container_status, kubernetes_version, name, refused_printed,
        running_pod, running_pod_matching, uid, wait_event, wait_until,
    },
    cluster_cases::{
        check_timeline, fresh_namespace, incidents_of, lines_left_by, lint_fixed, metrics,
        named_and_resolved, namespace_series, timeline_entry, timeline_index, wait_incident,
    },
    glibc_fleet,
    http::{get, get_as},
    operator_prometheus::{
        self, POD_MONITOR_JOB, SERVICE_MONITOR_JOB, cleanup_scraper_rbac, generated_config,
        prometheus_resource, scraper_rbac,
    },
    stand_in::{
        LATE_S, deployment, dialer, late_listener, late_listener_after, listen, listener, shell,
    },
};

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn case1_classic_sidecar_late_listener_in_a_deployment() {
    let c = cluster();
    let addr = c.agent_addr();
    let ns = &fresh_namespace("classic");
    let pod = racing_checkout(ns, LATE_S);
    let (pod_name, pod_uid) = (name(&pod), uid(&pod));
    let refused = refused_printed(ns, &pod_name, "app");
    assert!(
        refused >= 5,
        "a listener {LATE_S} s late, dialed every 100 ms: {refused} refusals"
    );

    let incident = wait_incident(
        &addr,
        &pod_uid,
        "the startup incident",
        Duration::from_secs(30),
        named_and_resolved,
    );
    eprintln!("incident: {incident:#}");
    let all = incidents_of(&addr, &pod_uid);
    assert_eq!(all.len(), 1, "one incident for the pod: {all:#?}");
    assert_eq!(incident["kind"], "sidecar_race");
    assert_eq!(incident["phase"], "startup");
    assert_eq!(incident["pattern"], "classic");
    assert_eq!(incident["namespace"], ns.as_str());
    assert_eq!(incident["pod"], pod_name.as_str());
    assert_eq!(
        incident["workload"],
        json!({"kind": "Deployment", "name": "checkout"})
    );
    assert_eq!(incident["container"], "app");
    assert_eq!(incident["sidecar"], "proxy");
    assert_eq!(incident["container_id"], container_id(&pod, "app").as_str());
    assert_eq!(
        incident["sidecar_container_id"],
        container_id(&pod, "proxy").as_str()
    );
    assert_eq!(incident["port"], 15001);
    assert_eq!(
        incident["refused_count"], refused,
        "the agent's count is the app's own"
    );
    // Its timeline (#51): both containers' starts, the app's first refusal, the
    // proxy's listen, in that order, counting the app's own refusals.
    check_timeline(&incident, refused);
    let app_started = timeline_entry(&incident, "container_started", "app");
    let proxy_started = timeline_entry(&incident, "container_started", "proxy");
    let first = timeline_index(&incident, "the first refusal", |e| {
        e["kind"] == "first_refusal" && e["container"] == "app"
    });
    let listening = timeline_entry(&incident, "listening", "proxy");
    assert!(
        app_started < first && first < listening && proxy_started < listening,
        "starts, first refusal, listen: {:#}",
        incident["timeline"]
    );
    // The same timeline in a terminal (#51 item 5): `timeline POD` finds the pod's
    // node, reads its agent through the API server's pod proxy and prints the
    // incident's header (the app's count) and an entry per line, in order.
    let text = cli_text(&["timeline", &pod_name, "-n", ns]);
    let header = line_with(&text, &["startup", "app → proxy", "port 15001 (tcp)"]);
    let header_line = text.lines().nth(header).unwrap_or_default();
    assert!(
        header_line.ends_with(&format!("  {refused} refusals"))
            || header_line.ends_with(&format!("  {refused} refusal")),
        "the app's own count on the header: {text}"
    );
    let first = line_with(&text, &["+", "first refusal", " app "]);
    let listening = line_with(&text, &["+", "listening", " proxy"]);
    assert!(
        header < first && first < listening,
        "header, first refusal, the proxy's listen: {text}"
    );

    // The Event on the pod, as `kubectl get events` shows it.
    let event = wait_event(ns, &pod_name, "SidecarStartupRace");
    assert_eq!(event["type"], "Warning", "{event:#}");
    assert_eq!(event["involvedObject"]["kind"], "Pod", "{event:#}");
    assert_eq!(
        event["involvedObject"]["uid"],
        pod_uid.as_str(),
        "{event:#}"
    );
    let note = event["message"].as_str().unwrap_or_default();
    assert!(note.contains("proxy") && note.contains("15001"), "{note}");
    assert!(
        note.contains(" Timeline: ")
            && note.contains("first refusal +")
            && note.contains("proxy listening +"),
        "the timeline in short form: {note}"
    );
    let listed = c.kubectl(&["-n", ns, "get", "events"]);
    assert!(listed.contains("SidecarStartupRace"), "{listed}");

    // Labelled metrics, scraped from the agent pod.
    let body = metrics(&addr);
    let incidents = format!(
        "sidecar_race_incidents_total{{namespace=\"{ns}\",workload_kind=\"Deployment\",workload=\"checkout\",sidecar=\"proxy\",phase=\"startup\",pattern=\"classic\",kind=\"sidecar_race\",protocol=\"tcp\"}} 1"
    );
    assert!(
        body.lines().any(|l| l == incidents),
        "no `{incidents}` in:\n{body}"
    );
    let refusals = format!(
        "sidecar_race_refused_connections_total{{namespace=\"{ns}\",workload_kind=\"Deployment\",workload=\"checkout\",container=\"app\",sidecar=\"proxy\",port=\"15001\",phase=\"startup\",protocol=\"tcp\"}} {refused}"
    );
    assert!(
        body.lines().any(|l| l == refusals),
        "no `{refusals}` in:\n{body}"
    );
}

/// A native sidecar (an init container with restartPolicy Always) listening late.
fn native_pod(probe: bool) -> Value {
    let mut proxy = shell("proxy", &late_listener(15001));
    proxy["restartPolicy"] = json!("Always");
    proxy["ports"] = json!([{"containerPort": 15001, "name": "proxy"}]);
    if probe {
        proxy["startupProbe"] =
            json!({"tcpSocket": {"port": 15001}, "periodSeconds": 1, "failureThreshold": 30});
    }
    json!({"initContainers": [proxy], "containers": [shell("app", &dialer(15001))]})
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn case2_native_sidecar_with_a_startup_probe_has_no_race_and_without_one_gets_the_native_advice() {
    let c = cluster();
    let addr = c.agent_addr();
    let ns = &fresh_namespace("native");
    c.apply(&deployment(ns, "probed", native_pod(true)));
    let probed = running_pod(ns, "probed");
    // The kubelet held the app until the probe passed: it never saw a refusal.
    assert_eq!(refused_printed(ns, &name(&probed), "app"), 0);
    // Started only now, so every event of its race follows the probed app's first
    // dial: once the agent has reported that race, it has taken in all of the probed
    // pod's start-up (it takes events in time order, seconds apart here), with no
    // sleep to guess.
    c.apply(&deployment(ns, "unprobed", native_pod(false)));
    let unprobed = running_pod(ns, "unprobed");
    let refused = refused_printed(ns, &name(&unprobed), "app");
    assert!(refused >= 5, "{refused}");

    let race = wait_incident(
        &addr,
        &uid(&unprobed),
        "the unprobed pod's incident",
        Duration::from_secs(30),
        named_and_resolved,
    );
    eprintln!("incident: {race:#}");
    assert_eq!(race["kind"], "sidecar_race");
    assert_eq!(race["phase"], "startup");
    assert_eq!(race["pattern"], "native");
    assert_eq!(race["sidecar"], "proxy");
    assert_eq!(race["sidecar_role"], "native_sidecar");
    assert_eq!(race["container"], "app");
    assert_eq!(race["refused_count"], refused);
    // The app is an `nc` loop: a known wait tool, so the race is `guarded` and the
    // advice ends with the workaround sentence.
    assert_eq!(race["guarded"], true, "{race:#}");
    assert_eq!(
        race["processes"],
        json!([{"name": "nc", "count": refused}]),
        "{race:#}"
    );
    let advice = race["advice"].as_str().unwrap_or_default();
    assert!(
        advice.starts_with(
            "Give native sidecar proxy a startupProbe that tests port 15001: without one, \"started\" does not mean \"serving\" and app starts too early. The pod works around the start order: nc waits"
        ),
        "{advice}"
    );
    let none = incidents_of(&addr, &uid(&probed));
    assert!(
        none.is_empty(),
        "the probed native sidecar got incidents: {none:#?}"
    );
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn case6_a_proxy_dialing_the_app_before_it_listens_is_app_not_ready_and_no_incident_is_counted() {
    let c = cluster();
    let addr = c.agent_addr();
    let ns = &fresh_namespace("mesh");
    let mut app = shell("app", &late_listener(8080));
    app["ports"] = json!([{"containerPort": 8080, "name": "http"}]);
    let mut proxy = shell("istio-proxy", &format!("{}{}", listen(15001), dialer(8080)));
    proxy["ports"] = json!([{"containerPort": 15001, "name": "proxy"}]);
    c.apply(&deployment(
        ns,
        "checkout",
        json!({"containers": [app, proxy]}),
    ));
    let pod = running_pod(ns, "checkout");
    let refused = refused_printed(ns, &name(&pod), "istio-proxy");
    let i = wait_incident(
        &addr,
        &uid(&pod),
        "the app_not_ready incident",
        Duration::from_secs(30),
        named_and_resolved,
    );
    eprintln!("incident: {i:#}");
    assert_eq!(i["kind"], "app_not_ready");
    assert_eq!(
        (i["container"].as_str(), i["sidecar"].as_str()),
        (Some("istio-proxy"), Some("app"))
    );
    assert_eq!(
        i["container_id"],
        container_id(&pod, "istio-proxy").as_str()
    );
    assert_eq!(i["refused_count"], refused);
    assert!(
        i["advice"]
            .as_str()
            .unwrap()
            .starts_with("Not a sidecar race"),
        "{i:#}"
    );
    let body = metrics(&addr);
    let line = format!(
        "sidecar_race_app_not_ready_refusals_total{{namespace=\"{ns}\",workload_kind=\"Deployment\",workload=\"checkout\",container=\"istio-proxy\",app=\"app\",port=\"8080\",protocol=\"tcp\"}} {refused}"
    );
    assert!(body.lines().any(|l| l == line), "no `{line}` in:\n{body}");
    assert!(
        !body
            .lines()
            .any(|l| l.starts_with("sidecar_race_incidents_total")
                && l.contains(&format!("namespace=\"{ns}\""))),
        "counted as a race:\n{body}"
    );
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn the_agent_runs_as_the_daemonset_says_on_the_pinned_kubernetes() {
    let c = cluster();
    let version = c.json(&["version"]);
    // The Kubernetes of this variant of the tier: its API server, kubectl and kubelet.
    let pinned = kubernetes_version();
    assert_eq!(
        version["serverVersion"]["gitVersion"], pinned,
        "{version:#}"
    );
    assert_eq!(
        version["clientVersion"]["gitVersion"], pinned,
        "{version:#}"
    );
    let node = c.json(&["get", "node", "sr-node"]);
    assert_eq!(
        node["status"]["nodeInfo"]["kubeletVersion"], pinned,
        "{node:#}"
    );
    // The runtime of this variant of the tier runs the node, at the version built for it.
    let runtime_version = node["status"]["nodeInfo"]["containerRuntimeVersion"]
        .as_str()
        .unwrap_or_default();
    if let Err(why) = check_runtime_version(runtime_version) {
        panic!("{why}");
    }
    assert!(
        node["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["type"] == "Ready" && x["status"] == "True"),
        "{node:#}"
    );
    let pod = c.agent_pod();
    assert!(condition(&pod, "Ready"));
    // The overlay's image knob took effect (the status may name either tag of the
    // imported image: both point to the same image ID).
    assert_eq!(
        pod["spec"]["containers"][0]["image"],
        format!(
            "sr-test.local/sidecar-race-agent:{}",
            env!("CARGO_PKG_VERSION")
        )
    );
    assert!(container_status(&pod, "agent")["ready"] == true, "{pod:#}");
    let (status, body) = get(&c.agent_addr(), "/readyz").expect("the agent answers on its pod IP");
    assert_eq!(status, 200, "{body}");
}

/// `--auth kubernetes`, as the DaemonSet runs the agent: the scraper ServiceAccount's
/// token (from the Secret the PodMonitor hands to Prometheus, bound to the scraper
/// ClusterRole in the agent's namespace) gets `/metrics` and `/api/v1/incidents`; no
/// token gets 401, the `default` ServiceAccount of an unrelated namespace 403 on both;
/// the kubelet's probes need none.
#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn only_callers_the_api_server_allows_read_the_agent() {
    let c = cluster();
    let addr = c.agent_addr();
    let token = c.scraper_token();
    for path in ["/metrics", "/api/v1/incidents"] {
        let (status, body) = get(&addr, path).expect("the agent answers");
        assert_eq!((status, body.as_str()), (401, "Unauthorized\n"), "{path}");
        let (status, body) = get_as(&addr, path, Some(token)).expect("the agent answers");
        assert_eq!(status, 200, "{path}: {body}");
    }
    assert!(metrics(&addr).contains("sidecar_race_build_info"));
    let ns = &fresh_namespace("auth");
    // The namespace's `default` ServiceAccount: created by the controller manager.
    let stranger = wait_until("a token of ns/default", Duration::from_secs(30), || {
        let out = c
            .cmd()
            .args(["-n", ns, "create", "token", "default"])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    });
    // Both paths: /api/v1/incidents too, which the default `system:discovery` role
    // lets every authenticated user `get` as a URL; the agent reviews it as the
    // resource `sidecar-race.io` incidents, which no default role grants.
    for path in ["/metrics", "/api/v1/incidents"] {
        let (status, body) = get_as(&addr, path, Some(stranger.trim())).expect("the agent answers");
        assert_eq!(
            (status, body.as_str()),
            (403, "Forbidden\n"),
            "{path}: a valid token without the grant"
        );
    }
    for open in ["/healthz", "/readyz"] {
        assert_eq!(
            get(&addr, open).expect("the agent answers").0,
            200,
            "{open}"
        );
    }
    // Scrapes within a second share one rendered body: wait for a fresh one.
    for result in ["allowed", "unauthenticated", "forbidden"] {
        let prefix = format!("sidecar_race_http_auth_requests_total{{result=\"{result}\"}} ");
        wait_until(&format!("{prefix}>= 1"), Duration::from_secs(10), || {
            let exposition = metrics(&addr);
            let n: u64 = exposition
                .lines()
                .find_map(|l| l.strip_prefix(&prefix))?
                .parse()
                .ok()?;
            (n >= 1).then_some(n)
        });
    }
}

/// The line of `metric` (name and labels) in the agent's /metrics, once it is there.
fn wait_metric(addr: &str, series: &str) -> String {
    wait_until(
        &format!("{series} in /metrics"),
        Duration::from_secs(30),
        || {
            metrics(addr)
                .lines()
                .find(|l| l.rsplit_once(' ').is_some_and(|(s, _)| s == series))
                .map(str::to_string)
        },
    )
}

/// Deployment `checkout` in `ns`: an app dialing 127.0.0.1:15001 every 100 ms and a
/// classic sidecar listening there `late_s` seconds late; its running pod.
fn racing_checkout(ns: &str, late_s: u32) -> Value {
    let mut proxy = shell("proxy", &late_listener_after(15001, late_s));
    proxy["ports"] = json!([{"containerPort": 15001, "name": "proxy"}]);
    cluster().apply(&deployment(
        ns,
        "checkout",
        json!({"containers": [shell("app", &dialer(15001)), proxy]}),
    ));
    running_pod(ns, "checkout")
}

/// A classic late-listener Deployment `checkout` in a fresh namespace and its startup
/// incident as the agent at `addr` reports it.
fn classic_race(base: &str) -> (TestNamespace, Value, Value) {
    let c = cluster();
    let ns = fresh_namespace(base);
    let pod = racing_checkout(&ns, LATE_S);
    let refused = refused_printed(&ns, &name(&pod), "app");
    let addr = c.agent_addr();
    let incident = wait_incident(
        &addr,
        &uid(&pod),
        "the startup incident",
        Duration::from_secs(30),
        named_and_resolved,
    );
    assert_eq!(incident["refused_count"], refused, "{incident:#}");
    (ns, pod, incident)
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn case4_a_job_kept_alive_by_its_classic_sidecar_is_stuck_until_deleted() {
    let c = cluster();
    let addr = c.agent_addr();
    let ns = &fresh_namespace("batch");
    let mut proxy = shell("cloud-sql-proxy", &listener(5432));
    proxy["ports"] = json!([{"containerPort": 5432, "name": "sql"}]);
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "reindex", "namespace": ns.as_str()},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
            "containers": [shell("app", "sleep 1; echo done"), proxy],
        }}},
    });
    c.apply(&job.to_string());
    let pod = c.wait_pod(
        ns,
        "job-name=reindex",
        "the Job's app to finish",
        Duration::from_secs(60),
        |p| {
            p["status"]["containerStatuses"]
                .as_array()
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|s| s["name"] == "app" && s["state"]["terminated"]["exitCode"] == 0)
                })
        },
    );
    // The agent's default: stuck 60 s after the last app container finished.
    let stuck = wait_incident(
        &addr,
        &uid(&pod),
        "the stuck-Job incident",
        Duration::from_secs(120),
        |i| i["kind"] == "stuck_job",
    );
    eprintln!("incident: {stuck:#}");
    assert_eq!(stuck["state"], "open");
    assert_eq!(stuck["sidecar"], "cloud-sql-proxy");
    assert_eq!(stuck["workload"], json!({"kind": "Job", "name": "reindex"}));
    assert_eq!(
        stuck["sidecar_container_id"],
        container_id(&pod, "cloud-sql-proxy").as_str()
    );
    let gauge = format!(
        "sidecar_race_stuck_job_pods{{namespace=\"{ns}\",workload_kind=\"Job\",workload=\"reindex\",sidecar=\"cloud-sql-proxy\"}}"
    );
    assert_eq!(wait_metric(&addr, &gauge), format!("{gauge} 1"));
    let pod_name = name(&pod);
    let event = wait_event(ns, &pod_name, "JobKeptAliveBySidecar");
    assert_eq!(event["type"], "Warning", "{event:#}");

    // Deleting the Job deletes its pod: the finding goes, the gauge drops.
    c.kubectl(&[
        "-n",
        ns,
        "delete",
        "job",
        "reindex",
        "--cascade=foreground",
        "--wait=true",
        "--timeout=60s",
    ]);
    wait_until("the gauge to drop", Duration::from_secs(30), || {
        let body = metrics(&addr);
        let line = body.lines().find(|l| l.starts_with(&gauge));
        line.is_none_or(|l| l.ends_with(" 0")).then_some(())
    });
    let open: Vec<Value> = incidents_of(&addr, &uid(&pod))
        .into_iter()
        .filter(|i| i["state"] == "open")
        .collect();
    assert!(
        open.is_empty(),
        "still open after the Job was deleted: {open:#?}"
    );
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn case9_a_deleted_agent_pod_is_recreated_adopts_its_pinned_programs_and_reports_again() {
    let c = cluster();
    let old = c.agent_pod();
    let old_uid = uid(&old);
    let pids = container_pids(&container_id(&old, "agent"));
    assert_eq!(
        pids.len(),
        1,
        "the agent container runs one process: {pids:?}"
    );
    // The programs the agent reads (it loaded them, or adopted their pins), and the
    // links that attach them.
    let (progs, _) = bpf_ids_of(pids[0]);
    let links = links_of_programs(&progs);
    assert!(
        progs.len() >= 2 && !links.is_empty(),
        "the agent's programs are attached: {progs:?} {links:?}"
    );

    c.kubectl(&[
        "-n",
        AGENT_NAMESPACE,
        "delete",
        "pod",
        &name(&old),
        "--wait=true",
        "--timeout=60s",
    ]);
    let new = c.wait_pod(
        AGENT_NAMESPACE,
        AGENT_SELECTOR,
        "the DaemonSet's new agent pod",
        Duration::from_secs(120),
        |p| {
            uid(p) != old_uid
                && p["metadata"]["deletionTimestamp"].is_null()
                && condition(p, "Ready")
        },
    );
    // Pinned (#33): the same links stay attached, and the new agent adopts them and
    // their programs; it loads no second set.
    assert_eq!(
        links_of_programs(&progs),
        links,
        "the deleted agent's links are pinned, still attached"
    );
    let log = c.kubectl(&["-n", AGENT_NAMESPACE, "logs", &name(&new)]);
    assert!(
        log.contains("adopted the programs and maps"),
        "the new agent adopted the pins: {log}"
    );
    let new_pids = container_pids(&container_id(&new, "agent"));
    let (new_progs, _) = bpf_ids_of(new_pids[0]);
    assert!(
        !new_progs.is_empty() && new_progs.iter().all(|p| progs.contains(p)),
        "the new agent holds the old one's programs {progs:?}, no new ones: {new_progs:?}"
    );
    let (_ns, pod, incident) = classic_race("after-restart");
    assert_eq!(incident["pod"], name(&pod).as_str());
    assert_eq!(incident["container_id"], container_id(&pod, "app").as_str());
    eprintln!("new agent pod {} reported {}", name(&new), incident["id"]);
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn case15_a_rollout_restart_of_the_agents_mid_race_loses_no_refusal() {
    let c = cluster();
    let ns = &fresh_namespace("agent-rollout");
    // Late enough for the agents' whole rollout to happen inside the race.
    let pod = racing_checkout(ns, 30);
    let (pod_name, pod_uid) = (name(&pod), uid(&pod));
    let old = c.agent_pod();
    let open = wait_incident(
        &c.agent_addr(),
        &pod_uid,
        "the open incident",
        Duration::from_secs(30),
        |i| i["state"] == "open" && i["refused_count"].as_u64() > Some(0),
    );
    eprintln!("before the rollout: {} refusals", open["refused_count"]);
    c.kubectl(&[
        "-n",
        AGENT_NAMESPACE,
        "rollout",
        "restart",
        "ds/sidecar-race-agent",
    ]);
    c.kubectl(&[
        "-n",
        AGENT_NAMESPACE,
        "rollout",
        "status",
        "ds/sidecar-race-agent",
        "--timeout=120s",
    ]);
    let new = c.agent_pod();
    assert_ne!(uid(&new), uid(&old), "the rollout replaced the agent pod");
    let log = c.kubectl(&["-n", AGENT_NAMESPACE, "logs", &name(&new)]);
    assert!(
        log.contains("adopted the programs and maps") && log.contains("checkpoint"),
        "the new agent adopted the pins and the checkpoint: {log}"
    );
    let still = incidents_of(&c.agent_addr(), &pod_uid);
    assert!(
        still.iter().any(|i| i["state"] == "open"),
        "the listener is still {} s away, and the new agent holds the race open: {still:#?}",
        30
    );
    let refused = refused_printed(ns, &pod_name, "app");
    let addr = c.agent_addr();
    let incident = wait_incident(
        &addr,
        &pod_uid,
        "the startup incident",
        Duration::from_secs(60),
        named_and_resolved,
    );
    let all = incidents_of(&addr, &pod_uid);
    assert_eq!(all.len(), 1, "one incident across the rollout: {all:#?}");
    assert_eq!(incident["phase"], "startup", "{incident:#}");
    assert_eq!(
        incident["refused_count"], refused,
        "the app's own count, across the agents' rollout: {incident:#}"
    );
    let event = wait_event(ns, &pod_name, "SidecarStartupRace");
    let note = event["message"].as_str().unwrap_or_default();
    assert!(
        note.contains(&format!("was refused {refused} times")),
        "the Event carries the app's count ({refused}): {note}"
    );
    assert_eq!(
        event["count"].as_u64().unwrap_or(1),
        1,
        "one Event: {event:#}"
    );
}

/// deploy/kubelet-source with the image set the same way as `cargo xtask cluster up`'s
/// overlay, in a kustomization of the test's own; `kubectl apply -k` of it.
fn apply_overlay(base: &str) {
    // kustomize takes only relative paths to other kustomizations.
    let dir = sidecar_race_tests::tools::workspace()
        .join(format!("target/sr-cluster-overlay-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- ../../{base}\n\
             images:\n- name: ghcr.io/sidecar-race/sidecar-race-agent\n  newName: sr-test.local/sidecar-race-agent\n  newTag: {}\n",
            env!("CARGO_PKG_VERSION")
        ),
    )
    .unwrap();
    cluster().kubectl(&["apply", "-k", dir.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn case8_the_kubelet_pod_source_reads_the_real_kubelet_with_its_token_and_the_documented_rbac() {
    let c = cluster();
    apply_overlay("deploy/kubelet-source");
    cluster().agent_rolled_out();
    let result = std::panic::catch_unwind(|| {
        let pod = c.agent_pod();
        let args = pod["spec"]["containers"][0]["args"].clone();
        assert_eq!(
            args,
            json!([
                "run",
                "--listen",
                "0.0.0.0:9965",
                "--pods-from",
                "kubelet",
                "--auth",
                "kubernetes"
            ])
        );
        let (_ns, app_pod, incident) = classic_race("kubelet-source");
        // Named from the kubelet's /pods: pod, workload, containers.
        assert_eq!(incident["pod"], name(&app_pod).as_str());
        assert_eq!(
            incident["workload"],
            json!({"kind": "Deployment", "name": "checkout"})
        );
        assert_eq!(incident["sidecar"], "proxy");
        let body = metrics(&c.agent_addr());
        assert!(
            body.lines()
                .any(|l| l == "sidecar_race_pod_source_errors_total{source=\"kubelet\"} 0"),
            "the kubelet source had errors:\n{body}"
        );
        let log = c.kubectl(&["-n", AGENT_NAMESPACE, "logs", &name(&pod)]);
        assert!(
            !log.contains("kubelet-insecure"),
            "the kubelet's certificate was verified:\n{log}"
        );
    });
    // Back to the default install for the other cases.
    let overlay = sidecar_race_tests::tools::workspace().join("deploy/overlays/local-cluster");
    c.kubectl(&["apply", "-k", overlay.to_str().unwrap()]);
    c.kubectl(&[
        "delete",
        "clusterrolebinding,clusterrole",
        "sidecar-race-agent-kubelet-source",
        "--ignore-not-found",
    ]);
    cluster().agent_rolled_out();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn case3_rollout_restart_drains_a_classic_sidecar_before_its_app() {
    let c = cluster();
    let addr = c.agent_addr();
    let ns = &fresh_namespace("drain");
    // The app starts dialing once the proxy serves (no startup race) and keeps
    // sending for 3 s after SIGTERM; the proxy exits at SIGTERM. Each refused dial
    // (one connect) is a line in a file named after the pod on a hostPath, so the
    // count survives the pod.
    let evidence = format!("/var/lib/sidecar-race-cluster/evidence/{ns}");
    let app = "trap 'stop=1' TERM; sleep 3; n=0; f=/evidence/$(hostname); \
               while :; do nc -w 1 127.0.0.1 15001 </dev/null >/dev/null 2>&1 || echo refused >> $f; sleep 0.2; \
               if [ -n \"$stop\" ]; then n=$((n+1)); [ \"$n\" -ge 15 ] && exit 0; fi; done";
    let mut app = shell("app", app);
    app["volumeMounts"] = json!([{"name": "evidence", "mountPath": "/evidence"}]);
    let mut proxy = shell("proxy", &listener(15001));
    proxy["ports"] = json!([{"containerPort": 15001, "name": "proxy"}]);
    let mut spec = json!({
        "containers": [app, proxy],
        "volumes": [{"name": "evidence", "hostPath": {"path": evidence, "type": "DirectoryOrCreate"}}],
    });
    spec["terminationGracePeriodSeconds"] = json!(10);
    c.apply(&deployment(ns, "checkout", spec));
    let old = running_pod(ns, "checkout");
    std::thread::sleep(Duration::from_secs(4));
    c.kubectl(&["-n", ns, "rollout", "restart", "deployment/checkout"]);
    c.kubectl(&[
        "-n",
        ns,
        "rollout",
        "status",
        "deployment/checkout",
        "--timeout=90s",
    ]);
    let drain = wait_incident(
        &addr,
        &uid(&old),
        "the old pod's drain incident",
        Duration::from_secs(60),
        |i| i["phase"] == "drain" && i["container"].is_string(),
    );
    eprintln!("drain incident: {drain:#}");
    assert_eq!(drain["kind"], "sidecar_race");
    assert_eq!(drain["pattern"], "classic");
    assert_eq!(drain["container"], "app");
    assert_eq!(drain["sidecar"], "proxy");
    assert_eq!(drain["container_id"], container_id(&old, "app").as_str());
    assert_eq!(
        drain["workload"],
        json!({"kind": "Deployment", "name": "checkout"})
    );
    // The app's own count, once its container has exited (its file is complete), and
    // the agent's count once it has taken in the last refusals.
    let app_count = lines_left_by(ns, &old, &evidence);
    assert!(app_count >= 1, "the app was never refused after SIGTERM");
    let drain = wait_incident(
        &addr,
        &uid(&old),
        "the drain incident's final count",
        Duration::from_secs(30),
        |i| i["phase"] == "drain" && i["refused_count"].as_u64() == Some(app_count),
    );
    assert_eq!(drain["refused_count"], app_count, "{drain:#}");
    // Its timeline (#51): the containers' starts, the deletion with the pod's 10 s
    // grace period, the proxy's close, then the app's first refusal, counting the
    // app's own refusals.
    check_timeline(&drain, app_count);
    let app_started = timeline_entry(&drain, "container_started", "app");
    let proxy_started = timeline_entry(&drain, "container_started", "proxy");
    let deleted = timeline_index(&drain, "the deletion", |e| e["kind"] == "pod_deleted");
    let closed = timeline_entry(&drain, "listener_closed", "proxy");
    let first = timeline_index(&drain, "the first refusal", |e| {
        e["kind"] == "first_refusal" && e["container"] == "app"
    });
    assert!(
        app_started.max(proxy_started) < deleted && deleted < closed && closed < first,
        "starts, deletion, close, first refusal: {:#}",
        drain["timeline"]
    );
    assert_eq!(drain["timeline"][deleted]["grace_seconds"], 10, "{drain:#}");
    let all = incidents_of(&addr, &uid(&old));
    assert_eq!(all.len(), 1, "only the drain: {all:#?}");
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn case3_a_forced_deletion_of_a_running_pod_drains_and_gives_no_unresolved_incident() {
    let c = cluster();
    let addr = c.agent_addr();
    let ns = &fresh_namespace("force");
    // The app dials the proxy every 0.2 s and goes on after SIGTERM; the proxy exits
    // at SIGTERM. `--grace-period=0 --force` removes the pod from the API at once
    // while the kubelet still tears its containers down.
    let app = "trap '' TERM; while :; do nc -w 1 127.0.0.1 15001 </dev/null >/dev/null 2>&1; sleep 0.2; done";
    let mut proxy = shell("proxy", &listener(15001));
    proxy["ports"] = json!([{"containerPort": 15001, "name": "proxy"}]);
    c.apply(&deployment(
        ns,
        "checkout",
        json!({"containers": [shell("app", app), proxy]}),
    ));
    let old = running_pod(ns, "checkout");
    std::thread::sleep(Duration::from_secs(4));
    c.kubectl(&[
        "-n",
        ns,
        "delete",
        "pod",
        &name(&old),
        "--grace-period=0",
        "--force",
    ]);
    // Its incidents once the node has torn it down (no container of it runs).
    // Its incidents once the drain is resolved (the startup race of its first seconds
    // is resolved long before the deletion).
    let incidents = wait_until(
        "the force-deleted pod's drain, resolved",
        Duration::from_secs(90),
        || {
            let all = incidents_of(&addr, &uid(&old));
            let done = all
                .iter()
                .any(|i| i["phase"] == "drain" && i["state"] == "resolved");
            done.then_some(all)
        },
    );
    eprintln!("incidents: {incidents:#?}");
    assert!(
        incidents.iter().all(|i| i["phase"] != "unresolved"),
        "{incidents:#?}"
    );
    let drain: Vec<&Value> = incidents.iter().filter(|i| i["phase"] == "drain").collect();
    assert_eq!(drain.len(), 1, "one drain: {incidents:#?}");
    assert_eq!(drain[0]["container"], "app", "{:#}", drain[0]);
    // Its timeline (#51): the proxy's close before the app's first refusal, the
    // counts its own (this app keeps no count of its own).
    check_timeline(drain[0], drain[0]["refused_count"].as_u64().unwrap());
    let closed = timeline_entry(drain[0], "listener_closed", "proxy");
    let first = timeline_index(drain[0], "the first refusal", |e| {
        e["kind"] == "first_refusal"
    });
    assert!(
        closed < first,
        "close, first refusal: {:#}",
        drain[0]["timeline"]
    );
    c.kubectl(&["delete", "namespace", ns, "--wait=false"]);
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn case5_an_init_container_declared_before_the_native_sidecar_it_polls_is_an_init_deadlock() {
    let c = cluster();
    let addr = c.agent_addr();
    let ns = &fresh_namespace("deadlock");
    // initContainers: [wait-for-proxy, proxy (restartPolicy: Always)]: the kubelet
    // starts init containers in order, so the proxy never starts.
    let wait = shell(
        "wait-for-proxy",
        "until nc -w 1 127.0.0.1 15001 </dev/null >/dev/null 2>&1; do sleep 0.2; done",
    );
    let mut proxy = shell("proxy", &listener(15001));
    proxy["restartPolicy"] = json!("Always");
    proxy["ports"] = json!([{"containerPort": 15001, "name": "proxy"}]);
    c.apply(&deployment(
        ns,
        "ledger",
        json!({"initContainers": [wait, proxy], "containers": [shell("app", "sleep 3600")]}),
    ));
    let pod = c.wait_pod(
        ns,
        "app=ledger",
        "the pod's first init container running",
        Duration::from_secs(90),
        |p| p["status"]["initContainerStatuses"][0]["containerID"].is_string(),
    );
    let incident = wait_incident(
        &addr,
        &uid(&pod),
        "the init_deadlock incident",
        Duration::from_secs(30),
        |i| i["container"] == "wait-for-proxy",
    );
    eprintln!("incident: {incident:#}");
    assert_eq!(incident["kind"], "init_deadlock", "{incident:#}");
    assert_eq!(incident["sidecar"], "proxy");
    assert_eq!(incident["sidecar_role"], "native_sidecar");
    let advice = incident["advice"].as_str().unwrap_or_default();
    assert!(
        advice.contains("Move proxy above wait-for-proxy in initContainers"),
        "{advice}"
    );
    c.kubectl(&["delete", "namespace", ns, "--wait=false"]);
}

/// The agent binary as a user's CLI, with the cluster's kubeconfig.
fn cli(args: &[&str]) -> Value {
    let out = cli_text(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}):\n{out}"))
}

/// What the agent binary prints with `args`, run with the cluster's kubeconfig as a
/// user runs it from a laptop.
fn cli_text(args: &[&str]) -> String {
    sidecar_race_tests::tools::run(
        std::process::Command::new(agent_binary())
            .args(args)
            .env("KUBECONFIG", &cluster().kubeconfig),
        None,
    )
}

/// The line of `text` holding all of `words`, by index.
fn line_with(text: &str, words: &[&str]) -> usize {
    text.lines()
        .position(|l| words.iter().all(|w| l.contains(w)))
        .unwrap_or_else(|| panic!("no line with {words:?} in:\n{text}"))
}

/// The lint finding of `rule` on Deployment `checkout` in `ns`.
fn finding<'a>(lint: &'a Value, ns: &str, rule: &str) -> &'a Value {
    lint["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["namespace"] == ns && f["name"] == "checkout" && f["rule"] == rule)
        .unwrap_or_else(|| panic!("no {rule} finding for {ns}/checkout: {lint:#}"))
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn case7_report_via_the_api_servers_pod_proxy_lint_cluster_and_the_kubectl_plugin() {
    let c = cluster();
    let (ns, racing, incident) = classic_race("commands");
    let agent = c.agent_pod();

    let report = cli(&[
        "report",
        "--agents-via-api",
        "--cluster",
        "--format",
        "json",
    ]);
    assert_eq!(
        report["source"]["urls"],
        json!([format!("pods/proxy {AGENT_NAMESPACE}/{}", name(&agent))]),
        "{report:#}"
    );
    let w = report["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["namespace"] == ns.as_str())
        .unwrap_or_else(|| panic!("no workload of {ns} in the report: {report:#}"));
    assert_eq!(
        (w["workload_kind"].as_str(), w["workload"].as_str()),
        (Some("Deployment"), Some("checkout")),
        "{w:#}"
    );
    assert_eq!(w["incidents"], 1, "{w:#}");
    assert_eq!(w["startup_incidents"], 1, "{w:#}");
    assert_eq!(w["refusals"], incident["refused_count"], "{w:#}");
    assert_eq!(w["sidecars"][0]["name"], "proxy", "{w:#}");

    let lint = cli(&[
        "lint",
        "--cluster",
        "-n",
        &ns,
        "--format",
        "json",
        "--fail-on",
        "none",
    ]);
    let f = finding(&lint, &ns, "classic-sidecar-serves-port");
    assert_eq!(f["kind"], "Deployment", "{f:#}");
    assert_eq!(f["severity"], "error", "{f:#}");
    assert_eq!(f["containers"], json!(["proxy", "app"]), "{f:#}");

    // The same binary as a kubectl plugin, found on PATH by the real kubectl.
    let bin = std::env::temp_dir().join(format!("sr-plugin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&bin);
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(agent_binary(), bin.join("kubectl-sidecar_race")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let plugin = |args: &[&str]| {
        sidecar_race_tests::tools::run(
            std::process::Command::new(&c.kubectl)
                .args(args)
                .env("PATH", &path)
                .env("KUBECONFIG", &c.kubeconfig),
            None,
        )
    };
    assert!(plugin(&["plugin", "list"]).contains("kubectl-sidecar_race"));
    let via_kubectl: Value = serde_json::from_str(&plugin(&[
        "sidecar-race",
        "lint",
        "--cluster",
        "-n",
        &ns,
        "--format",
        "json",
        "--fail-on",
        "none",
    ]))
    .unwrap();
    assert_eq!(
        via_kubectl, lint,
        "kubectl sidecar-race lint is the binary's lint"
    );
    let report_via_kubectl: Value = serde_json::from_str(&plugin(&[
        "sidecar-race",
        "report",
        "--agents-via-api",
        "--cluster",
        "--format",
        "json",
    ]))
    .unwrap();
    assert!(
        report_via_kubectl["workloads"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["namespace"] == ns.as_str()),
        "{report_via_kubectl:#}"
    );
    // `kubectl sidecar-race timeline POD`: the race's pod, through the plugin.
    let timeline = plugin(&["sidecar-race", "timeline", &name(&racing), "-n", &ns]);
    assert!(
        line_with(&timeline, &["first refusal", " app "])
            < line_with(&timeline, &["listening", " proxy"]),
        "{timeline}"
    );
    let _ = std::fs::remove_dir_all(&bin);
}

/// `curl` of the agent's /metrics without a token: its HTTP status.
fn unauthenticated_curl_status(addr: &str) -> String {
    sidecar_race_tests::tools::run(
        std::process::Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .arg(format!("http://{addr}/metrics")),
        None,
    )
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn case10_the_real_operator_turns_the_podmonitor_and_servicemonitor_into_scrape_configs_prometheus_runs()
 {
    // The operator generates for the version the resource names: the built one's.
    let version = operator_prometheus::version();
    let c = cluster();
    let (ns, pod, incident) = classic_race("operator");
    scraper_rbac(&ns);
    let servicemonitor =
        sidecar_race_tests::tools::workspace().join("deploy/monitoring-servicemonitor");
    let result = std::panic::catch_unwind(|| {
        c.apply(&prometheus_resource(
            &ns,
            "podmonitor",
            &version,
            &["podMonitor"],
        ));
        // The ServiceMonitor variant as its README says, beside the PodMonitor.
        c.kubectl(&["apply", "-k", servicemonitor.to_str().unwrap()]);
        c.apply(&prometheus_resource(
            &ns,
            "servicemonitor",
            &version,
            &["serviceMonitor"],
        ));
        let pod_config = generated_config(&ns, "podmonitor", POD_MONITOR_JOB);
        let service_config = generated_config(&ns, "servicemonitor", SERVICE_MONITOR_JOB);
        assert!(!pod_config.contains(SERVICE_MONITOR_JOB), "{pod_config}");
        assert!(
            !service_config.contains(POD_MONITOR_JOB),
            "{service_config}"
        );
        for (config, role) in [
            (&pod_config, "role: pod"),
            (&service_config, "role: endpoint"),
        ] {
            for want in [
                "kubernetes_sd_configs:",
                role,
                "honor_labels: true",
                "target_label: node",
                "type: Bearer",
            ] {
                assert!(config.contains(want), "no `{want}` in:\n{config}");
            }
        }
        // The agent answers no one without a token (--auth kubernetes)...
        assert_eq!(unauthenticated_curl_status(&c.agent_addr()), "401");
        // ...and each configuration, run as generated, scrapes it with the scraper
        // ServiceAccount's token (which the operator took from the Secret the monitor
        // names): the app's refusals keep the app's namespace, container and
        // workload (honor_labels), the job is the monitor's jobLabel and node the
        // relabeled node name, as the rules and the dashboard group by them.
        let scrapers: Vec<_> = [
            ("podmonitor", &pod_config),
            ("servicemonitor", &service_config),
        ]
        .into_iter()
        .map(|(name, config)| operator_prometheus::start(&ns, name, "prometheus", config))
        .collect();
        let refusals = format!("sidecar_race_refused_connections_total{{namespace=\"{ns}\"}}");
        let node = pod["spec"]["nodeName"].as_str().expect("the pod's node");
        for prom in &scrapers {
            let found = operator_prometheus::series(prom, &refusals, 1, Duration::from_secs(90));
            let labels = &found[0]["metric"];
            let got = [
                "namespace",
                "workload_kind",
                "workload",
                "container",
                "sidecar",
                "job",
                "node",
            ]
            .map(|l| labels[l].as_str().unwrap_or_default().to_string());
            assert_eq!(
                got,
                [
                    ns.as_str(),
                    "Deployment",
                    "checkout",
                    "app",
                    "proxy",
                    "sidecar-race-agent",
                    node
                ]
                .map(String::from),
                "{found:#?}\n{}",
                prom.log()
            );
            assert_eq!(
                found[0]["value"][1].as_str(),
                Some(incident["refused_count"].to_string().as_str()),
                "the app's own count, as the agent reported it"
            );
        }
    });
    // Back to deploy/monitoring as `up` installs it.
    let _ = c
        .cmd()
        .args([
            "-n",
            AGENT_NAMESPACE,
            "delete",
            "servicemonitor",
            "sidecar-race-agent",
            "--ignore-not-found",
        ])
        .output();
    cleanup_scraper_rbac(&ns);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// lint's corpus example `name` with busybox stand-ins of the same spec shape: in
/// namespace `ns`, one replica (a Deployment's), each container's image replaced and
/// its command set from `scripts` (container name -> script); its args, ports, env
/// and probes kept. What a stand-in cannot run as (a non-root user, a 2 GiB request)
/// is dropped.
fn corpus_stand_in(name: &str, ns: &str, scripts: &[(&str, String)]) -> Value {
    let path = sidecar_race_tests::tools::workspace()
        .join("sidecar-race-agent/tests/fixtures/lint-corpus")
        .join(name);
    let mut w: Value = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    w["metadata"]["namespace"] = json!(ns);
    if w["kind"] == "Deployment" {
        w["spec"]["replicas"] = json!(1);
    }
    let spec = &mut w["spec"]["template"]["spec"];
    spec["terminationGracePeriodSeconds"] = json!(5);
    if let Some(m) = spec.as_object_mut() {
        m.remove("serviceAccountName");
    }
    for list in ["initContainers", "containers"] {
        for c in spec[list].as_array_mut().into_iter().flatten() {
            let script = scripts
                .iter()
                .find(|(n, _)| c["name"] == *n)
                .map(|(_, s)| s.clone())
                .unwrap_or_else(|| panic!("no stand-in script for {}", c["name"]));
            let shell = shell("-", &script);
            for key in ["image", "imagePullPolicy", "command"] {
                c[key] = shell[key].clone();
            }
            if let Some(m) = c.as_object_mut() {
                m.remove("securityContext");
                m.remove("resources");
            }
        }
    }
    w
}

/// The label selector of workload `w`'s pods (a Deployment's matchLabels, a Job's
/// `job-name`).
fn pod_selector(w: &Value) -> String {
    if w["kind"] == "Job" {
        return format!("job-name={}", w["metadata"]["name"].as_str().unwrap());
    }
    w["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels")
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
        .collect::<Vec<_>>()
        .join(",")
}

/// A stand-in proxy: `LATE_S` seconds late, it listens on `port` (when given) and
/// serves `path` over HTTP on `http_port` (its readiness endpoint); exits at once on
/// SIGTERM.
fn late_proxy(port: Option<u16>, http_port: u16, path: &str) -> String {
    let listening = port.map_or(String::new(), listen);
    format!(
        "trap 'exit 0' TERM; sleep {LATE_S}; mkdir -p \"$(dirname /tmp/www{path})\"; echo ok > /tmp/www{path}; \
         httpd -f -p {http_port} -h /tmp/www & {listening}wait"
    )
}

/// A corpus example the real kubelet can run with busybox stand-ins: its app
/// container, its sidecar, the port the app dials (none: nothing in the pod dials
/// the sidecar) and each container's script.
struct CorpusShape {
    file: &'static str,
    app: &'static str,
    sidecar: &'static str,
    dialed: Option<u16>,
    scripts: Vec<(&'static str, String)>,
}

/// The examples with a sidecar declared in the template. The injected ones (Istio,
/// Linkerd, Dapr, Vault and Consul by annotation) cannot run here: no injector adds
/// their sidecar, and their fix is an annotation for that injector (docs/lint.md).
fn corpus_shapes() -> Vec<CorpusShape> {
    let csql = late_proxy(Some(5432), 9090, "/startup");
    vec![
        // Cloud SQL Auth Proxy as its GKE example runs it (--port=5432,
        // --health-check, --http-address=0.0.0.0, its own httpGet /startup probe on
        // 9090); the app names only DB_HOST=127.0.0.1 and dials 5432.
        CorpusShape {
            file: "cloud-sql-proxy-deployment.yaml",
            app: "orders-api",
            sidecar: "cloud-sql-proxy",
            dialed: Some(5432),
            scripts: vec![
                ("orders-api", dialer(5432)),
                ("cloud-sql-proxy", csql.clone()),
            ],
        },
        // Its Job example: a native sidecar without a startupProbe.
        CorpusShape {
            file: "cloud-sql-proxy-job.yaml",
            app: "migrate",
            sidecar: "cloud-sql-proxy",
            dialed: Some(5432),
            scripts: vec![("migrate", dialer(5432)), ("cloud-sql-proxy", csql.clone())],
        },
        // AlloyDB's: the default port 5432, no health check until --fix adds it.
        CorpusShape {
            file: "alloydb.yaml",
            app: "ledger",
            sidecar: "alloydb-proxy",
            dialed: Some(5432),
            scripts: vec![("ledger", dialer(5432)), ("alloydb-proxy", csql)],
        },
        // daprd declared: the app calls its HTTP API on 3500.
        CorpusShape {
            file: "dapr-declared.yaml",
            app: "orders",
            sidecar: "daprd",
            dialed: Some(3500),
            scripts: vec![
                ("orders", dialer(3500)),
                (
                    "daprd",
                    late_proxy(Some(3500), 3501, "/v1.0/healthz/outbound"),
                ),
            ],
        },
        // oauth2-proxy: its clients come through the Service, nothing in the pod
        // dials it; the fixed pod must still start (its /ping startupProbe).
        CorpusShape {
            file: "oauth2-proxy.yaml",
            app: "dashboard",
            sidecar: "oauth2-proxy",
            dialed: None,
            scripts: vec![
                (
                    "dashboard",
                    "mkdir -p /tmp/d; exec httpd -f -p 8080 -h /tmp/d".into(),
                ),
                ("oauth2-proxy", late_proxy(None, 4180, "/ping")),
            ],
        },
    ]
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn case11_lints_fix_of_the_corpus_examples_runs_without_the_races_the_originals_have() {
    let c = cluster();
    let addr = c.agent_addr();
    let shapes = corpus_shapes();
    // The originals, all at once in one namespace.
    let original_ns = &fresh_namespace("corpus-original");
    let originals: Vec<Value> = shapes
        .iter()
        .map(|s| corpus_stand_in(s.file, original_ns, &s.scripts))
        .collect();
    for (shape, original) in shapes.iter().zip(&originals) {
        if shape.dialed.is_some() {
            c.apply(&original.to_string());
        }
    }
    for (shape, original) in shapes.iter().zip(&originals) {
        let Some(port) = shape.dialed else { continue };
        let pod = running_pod_matching(original_ns, &pod_selector(original));
        let refused = refused_printed(original_ns, &name(&pod), shape.app);
        assert!(
            refused >= 5,
            "{}: the original races: {refused} refusals",
            shape.file
        );
        let race = wait_incident(
            &addr,
            &uid(&pod),
            &format!("{}: the original's startup incident", shape.file),
            Duration::from_secs(30),
            named_and_resolved,
        );
        assert_eq!(
            (
                race["phase"].as_str(),
                race["sidecar"].as_str(),
                race["port"].as_u64(),
                race["refused_count"].as_u64()
            ),
            (
                Some("startup"),
                Some(shape.sidecar),
                Some(u64::from(port)),
                Some(refused)
            ),
            "{}: {race:#}",
            shape.file
        );
    }

    // lint --fix of the same manifests, run as it prints them, all at once.
    let fixed_ns = &fresh_namespace("corpus-fixed");
    let mut fixed_pods = Vec::new();
    for (shape, original) in shapes.iter().zip(&originals) {
        let mut fixed = lint_fixed(original);
        fixed["metadata"]["namespace"] = json!(fixed_ns.as_str());
        let native = fixed["spec"]["template"]["spec"]["initContainers"]
            .as_array()
            .and_then(|inits| inits.iter().find(|i| i["name"] == shape.sidecar))
            .unwrap_or_else(|| panic!("{}: no native {} in {fixed:#}", shape.file, shape.sidecar));
        assert_eq!(native["restartPolicy"], "Always", "{}", shape.file);
        assert!(
            native["startupProbe"].is_object(),
            "{}: {native:#}",
            shape.file
        );
        c.apply(&fixed.to_string());
        fixed_pods.push(pod_selector(&fixed));
    }
    for (shape, selector) in shapes.iter().zip(&fixed_pods) {
        let pod = running_pod_matching(fixed_ns, selector);
        if shape.dialed.is_some() {
            assert_eq!(
                refused_printed(fixed_ns, &name(&pod), shape.app),
                0,
                "{}: the kubelet held the app until the sidecar's startupProbe passed",
                shape.file
            );
        }
        // The agent reports a startup race within a second of the app's first
        // refusal; the app had none, and it has since dialed the sidecar.
        let none = incidents_of(&addr, &uid(&pod));
        assert!(
            none.is_empty(),
            "{}: the fixed pod got incidents: {none:#?}",
            shape.file
        );
    }
}

/// `cargo xtask demo --cluster`'s program, run against the tier's cluster as the demo
/// runs it: what it prints names the Event, the metric read through Prometheus, the
/// report's ranking of the racing workload and lint's patch (so the demo cannot rot).
#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn case12_the_cluster_demo_shows_the_event_the_metric_the_report_and_the_patch() {
    cluster();
    let out = sidecar_race_tests::tools::run(
        &mut std::process::Command::new(sidecar_race_tests::pod::require_binary(
            &sidecar_race_tests::pod::sibling_binary("sr-cluster-demo"),
        )),
        None,
    );
    eprintln!("{out}");
    let has = |want: &str| assert!(out.contains(want), "no `{want}` in:\n{out}");
    has("Warning SidecarStartupRace pod/checkout-");
    has("== on the fixed pod demo-fixed/checkout-");
    has(": no Event");
    has("demo-fixed's 0 times");
    let metric = out
        .lines()
        .find(|l| l.trim_start().starts_with("sidecar_race_incidents_total{"))
        .unwrap_or_else(|| panic!("no incident series in:\n{out}"));
    for label in [
        "namespace=\"demo-race\"",
        "workload_kind=\"Deployment\"",
        "workload=\"checkout\"",
        "sidecar=\"proxy\"",
        "phase=\"startup\"",
        "job=\"sidecar-race-agent\"",
    ] {
        assert!(metric.contains(label), "no {label} in `{metric}`");
    }
    assert!(metric.ends_with("} 1"), "one incident: `{metric}`");
    let report = out
        .split("== sidecar-race-agent report --agents-via-api")
        .nth(1)
        .and_then(|r| r.split("\n== ").next())
        .unwrap_or_else(|| panic!("no report in:\n{out}"));
    assert!(
        report
            .lines()
            .any(|l| l.contains("demo-race") && l.contains("checkout")),
        "the report does not rank demo-race/checkout:\n{report}"
    );
    let patch = out
        .split("lint --fix=patch")
        .nth(1)
        .unwrap_or_else(|| panic!("no patch in:\n{out}"));
    for want in ["initContainers", "restartPolicy: Always", "startupProbe"] {
        assert!(patch.contains(want), "no `{want}` in the patch:\n{patch}");
    }
}

/// The Events the agent posted in `ns` (its reporting controller, as the events API
/// records it, or one of its reasons).
fn agent_events(ns: &str) -> Vec<Value> {
    const REASONS: [&str; 5] = [
        "SidecarStartupRace",
        "SidecarDrainRace",
        "SidecarRestartRace",
        "JobKeptAliveBySidecar",
        "InitWaitsForClassicSidecar",
    ];
    cluster().json(&["-n", ns, "get", "events"])["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e["reportingComponent"] == "sidecar-race.io/agent"
                || REASONS.iter().any(|r| e["reason"] == *r)
        })
        .cloned()
        .collect()
}

/// The UIDs of the pods in `ns` now.
fn pod_uids(ns: &str) -> Vec<String> {
    cluster().json(&["-n", ns, "get", "pods"])["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(uid)
        .collect()
}

#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn case13_a_quiet_fleet_of_ordinary_pods_gives_no_incident_and_the_racing_shapes_one_each() {
    let c = cluster();
    let addr = c.agent_addr();
    let ns = &fresh_namespace("quiet");
    let started = std::time::Instant::now();
    for (_, manifest) in glibc_fleet::quiet_fleet(ns) {
        c.apply(&manifest);
    }
    let mut uids: Vec<String> = Vec::new();
    for app in ["lookups", "syslog", "probed", "meshed", "ctl"] {
        uids.push(uid(&running_pod(ns, app)));
    }
    c.wait_pod(
        ns,
        "app=probed",
        "the probed web server Ready",
        Duration::from_secs(60),
        |p| condition(p, "Ready"),
    );
    c.kubectl(&[
        "-n",
        ns,
        "wait",
        "--for=condition=complete",
        "job/report",
        "--timeout=120s",
    ]);
    // The native sidecar's app has dialed it for a while: restart the Deployment (the
    // old pod drains, app first; the new one starts behind the startupProbe).
    std::thread::sleep(Duration::from_secs(15));
    uids.extend(pod_uids(ns));
    c.kubectl(&["-n", ns, "rollout", "restart", "deployment/meshed"]);
    c.kubectl(&[
        "-n",
        ns,
        "rollout",
        "status",
        "deployment/meshed",
        "--timeout=120s",
    ]);
    // About two and a half minutes of ordinary life.
    let quiet_for = Duration::from_secs(150);
    if let Some(left) = quiet_for.checked_sub(started.elapsed()) {
        std::thread::sleep(left);
    }
    uids.extend(pod_uids(ns));

    // The fleet did what it does: lookups, syslog, probes passing, a crash loop, the
    // sidecar's app never refused, the control socket served after its polls.
    let log_of = |app: &str, container: &str| c.logs(ns, &name(&running_pod(ns, app)), container);
    let lookups = log_of("lookups", "resolver");
    assert!(
        lookups.lines().filter(|l| l.starts_with("lookup ")).count() >= 10
            && lookups.lines().filter(|l| l.starts_with("curl ")).count() >= 10,
        "{lookups}"
    );
    let syslog = log_of("syslog", "logger");
    assert!(
        syslog.lines().filter(|l| l.starts_with("logged ")).count() >= 10,
        "{syslog}"
    );
    let probed = running_pod(ns, "probed");
    assert!(condition(&probed, "Ready"), "{probed:#}");
    assert_eq!(
        container_status(&probed, "web")["restartCount"],
        0,
        "{probed:#}"
    );
    let crasher = c.pods(ns, "app=crasher");
    let restarts = crasher
        .first()
        .map(|p| {
            container_status(p, "app")["restartCount"]
                .as_u64()
                .unwrap_or(0)
        })
        .unwrap_or(0);
    assert!(restarts >= 2, "the crash loop restarted {restarts} times");
    let meshed = log_of("meshed", "app");
    let last = meshed.lines().last().unwrap_or_default();
    assert!(
        last.ends_with(" failed 0"),
        "the native sidecar's app: {last}"
    );
    let ctl = log_of("ctl", "app");
    assert!(
        ctl.contains("polled 20 times, listening on /tmp/ctl.sock"),
        "{ctl}"
    );
    let early_series = namespace_series(&addr, ns);

    // The racing shapes, in the same namespace and image: each one startup incident
    // with the client's own count. Reported after all of the quiet fleet's events, so
    // the agent has taken those in by then.
    c.apply(&glibc_fleet::late_tcp(ns));
    c.apply(&glibc_fleet::late_uds(ns));
    let mut racing = Vec::new();
    for app in ["late-tcp", "late-uds"] {
        let pod = running_pod(ns, app);
        let refused = refused_printed(ns, &name(&pod), "app");
        let incident = wait_incident(
            &addr,
            &uid(&pod),
            &format!("{app}'s startup incident"),
            Duration::from_secs(60),
            |i| named_and_resolved(i) && i["refused_count"] == refused,
        );
        racing.push((app, pod, refused, incident));
    }
    let racing_uids: Vec<String> = racing.iter().map(|(_, p, _, _)| uid(p)).collect();
    let false_incidents: Vec<Value> = incidents_at_as(&addr, "", Some(c.scraper_token()))
        .into_iter()
        .filter(|i| {
            let pod_uid = i["pod_uid"].as_str().unwrap_or_default();
            (i["namespace"] == ns.as_str() || uids.iter().any(|u| u == pod_uid))
                && !racing_uids.iter().any(|u| u == pod_uid)
        })
        .collect();
    let counts: Vec<String> = racing
        .iter()
        .map(|(app, _, refused, i)| {
            format!("{app}: client {refused}, agent {}", i["refused_count"])
        })
        .collect();
    eprintln!(
        "quiet fleet: {} false incidents in {} s; {}",
        false_incidents.len(),
        started.elapsed().as_secs(),
        counts.join("; ")
    );
    assert!(
        false_incidents.is_empty(),
        "{} false incidents (0 expected) for the quiet fleet: {false_incidents:#?}",
        false_incidents.len()
    );
    assert!(
        early_series.is_empty(),
        "{} series for the quiet fleet's namespace (0 expected): {early_series:#?}",
        early_series.len()
    );
    for (app, pod, refused, incident) in &racing {
        eprintln!("{app} incident: {incident:#}");
        let all = incidents_of(&addr, &uid(pod));
        assert_eq!(
            all.len(),
            1,
            "one incident for {app} ({} false incidents): {all:#?}",
            false_incidents.len()
        );
        assert!(*refused >= 5, "{app}'s client was refused {refused} times");
        assert_eq!(incident["phase"], "startup", "{incident:#}");
        assert_eq!(incident["kind"], "sidecar_race", "{incident:#}");
        assert_eq!(incident["container"], "app", "{incident:#}");
        assert_eq!(incident["sidecar"], "proxy", "{incident:#}");
        assert_eq!(
            incident["refused_count"], *refused,
            "the agent's count is {app}'s own"
        );
        wait_event(ns, &name(pod), "SidecarStartupRace");
    }
    let racing_names: Vec<String> = racing.iter().map(|(_, p, _, _)| name(p)).collect();
    let false_events: Vec<Value> = agent_events(ns)
        .into_iter()
        .filter(|e| {
            !racing_names
                .iter()
                .any(|n| e["involvedObject"]["name"] == n.as_str())
        })
        .collect();
    assert!(
        false_events.is_empty(),
        "{} agent Events on the quiet fleet (0 expected): {false_events:#?}",
        false_events.len()
    );
    let series = namespace_series(&addr, ns);
    let quiet_series: Vec<&String> = series
        .iter()
        .filter(|l| !l.contains("workload=\"late-tcp\"") && !l.contains("workload=\"late-uds\""))
        .collect();
    assert!(
        quiet_series.is_empty(),
        "{} series for the quiet fleet (0 expected): {quiet_series:#?}",
        quiet_series.len()
    );
    for app in ["late-tcp", "late-uds"] {
        assert!(
            series
                .iter()
                .any(|l| l.starts_with("sidecar_race_incidents_total{")
                    && l.contains(&format!("workload=\"{app}\""))
                    && l.ends_with(" 1")),
            "no incident series of {app} at 1: {series:#?}"
        );
    }
}

/// A network namespace of this case's own behind a veth, holding a documentation
/// address (TEST-NET-2: this VM's own eth0 is on TEST-NET-1) that the host routes to
/// it: the pods' "outside". Held by a process of its own, not named in /run/netns:
/// `ip netns add` would bind-mount /run/netns over containerd's, and the sandboxes made
/// before it could no longer remove their namespaces. Gone with the process.
struct OffBridge {
    holder: std::process::Child,
}

const OFF_BRIDGE_HOST: &str = "198.51.100.1";
const OFF_BRIDGE_ADDR: &str = "198.51.100.2";

impl OffBridge {
    fn create() -> Self {
        let holder = std::process::Command::new("unshare")
            .args(["--net", "sleep", "600"])
            .spawn()
            .expect("unshare --net");
        let me = Self { holder };
        let pid = me.holder.id();
        // unshare has made the namespace once /proc/<pid>/ns/net differs from ours.
        wait_until("the namespace's holder", Duration::from_secs(10), || {
            let theirs = std::fs::read_link(format!("/proc/{pid}/ns/net")).ok()?;
            (theirs != std::fs::read_link("/proc/self/ns/net").ok()?).then_some(())
        });
        let out = std::process::Command::new("sh")
            .args([
                "-ec",
                &format!(
                    // No IPv6 on the link: its own neighbour discovery would count as arrivals.
                    "ip link add sregh0 type veth peer name sregn0
                 ip link set sregn0 netns {pid}
                 sysctl -qw net.ipv6.conf.sregh0.disable_ipv6=1
                 nsenter -t {pid} -n sysctl -qw net.ipv6.conf.sregn0.disable_ipv6=1
                 ip addr add {OFF_BRIDGE_HOST}/30 dev sregh0
                 ip link set sregh0 up
                 nsenter -t {pid} -n ip addr add {OFF_BRIDGE_ADDR}/30 dev sregn0
                 nsenter -t {pid} -n ip link set sregn0 up"
                ),
            ])
            .output()
            .expect("sh");
        assert!(
            out.status.success(),
            "the off-bridge namespace: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        me
    }

    /// Packets that reached the namespace's end of the veth (its /proc/net/dev).
    fn arrived(&self) -> u64 {
        let out = std::process::Command::new("nsenter")
            .args([
                "-t",
                &self.holder.id().to_string(),
                "-n",
                "cat",
                "/proc/net/dev",
            ])
            .output()
            .expect("nsenter");
        let dev = String::from_utf8_lossy(&out.stdout);
        dev.lines()
            .find_map(|l| l.trim().strip_prefix("sregn0:"))
            .and_then(|counts| counts.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or_else(|| panic!("no sregn0 in the namespace's /proc/net/dev:\n{dev}"))
    }
}

impl Drop for OffBridge {
    fn drop(&mut self) {
        // The namespace, and the veth with it, go with their holder.
        let _ = self.holder.kill();
        let _ = self.holder.wait();
        let _ = std::process::Command::new("ip")
            .args(["link", "del", "sregh0"])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Packets the test cluster's egress chain dropped so far (its DROP rule's counter).
fn egress_dropped() -> u64 {
    let out = std::process::Command::new("iptables")
        .args(["-w", "-L", "SR-CLUSTER-EGRESS", "-v", "-x", "-n"])
        .output()
        .expect("iptables");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| l.split_whitespace().nth(2) == Some("DROP"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no DROP rule in SR-CLUSTER-EGRESS:\n{text}"))
}

/// `cargo xtask cluster up` keeps pod traffic on the machine: a pod dialing an address
/// the host routes elsewhere (here the case's own namespace, never a real outside
/// address) is dropped on the node, counted by our chain, and nothing arrives there.
#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn case14_a_pod_dialing_off_the_bridge_is_dropped_on_the_node() {
    let c = cluster();
    let off = OffBridge::create();
    let ns = &fresh_namespace("egress");
    let (dropped, arrived) = (egress_dropped(), off.arrived());
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "dialer", "namespace": ns.as_str(), "labels": {"app": "dialer"}},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "containers": [shell("dialer", &format!(
                "for i in 1 2 3; do nc -w 1 {OFF_BRIDGE_ADDR} 80 </dev/null; done; echo dialed"
            ))]},
    });
    c.apply(&pod.to_string());
    c.wait_pod(
        ns,
        "app=dialer",
        "the dialer to finish",
        Duration::from_secs(60),
        |p| matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")),
    );
    let (dropped, arrived) = (egress_dropped() - dropped, off.arrived() - arrived);
    assert!(
        dropped >= 3,
        "the node dropped {dropped} of the pod's packets (3 dials)"
    );
    assert_eq!(
        arrived, 0,
        "{arrived} packets left the node for {OFF_BRIDGE_ADDR}"
    );
}
