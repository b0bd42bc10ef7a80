//! The cluster tier with real sidecars as users run them (tests/kit/src/real_sidecars.rs),
//! built from their Go modules and packaged as their vendors package them, on the
//! real kubelet: the OpenTelemetry Collector on a Unix socket its app exports to over
//! gRPC, the Cloud SQL Auth Proxy its app queries with psql, and oauth2-proxy in front
//! of an app still warming up.
//!
//! Ignored by a plain `cargo test`: `cargo xtask test` runs them on the cluster of
//! `cargo xtask cluster up`, with the other cluster cases.

use std::time::Duration;

use serde_json::Value;
use sidecar_race_tests::{
    cluster::{
        cluster, condition, container_id, name, refused_printed, running_pod, uid, wait_event,
        wait_until,
    },
    cluster_cases::{
        fresh_namespace, incidents_of, lines_left_by, lint_fixed, metrics, named_and_resolved,
        namespace_series, wait_incident,
    },
    real_sidecars::{
        CLOUD_SQL_PROXY, COLLECTOR, OAUTH2_PROXY, collector_config, gateway, gateway_client,
        inventory, telemetry,
    },
};

/// Seconds between the first refusal and the listen, as the agent measured it.
fn window(i: &Value) -> f64 {
    i["race_window_seconds"]
        .as_f64()
        .unwrap_or_else(|| panic!("no window: {i:#}"))
}

/// A real sidecar's workload: the Deployment `name` (app, then the sidecar in
/// `containers`), what it needs beside it, and the startupProbe `lint --fix` must give
/// the sidecar (port, path) as its vendor documents it.
struct Shape {
    name: &'static str,
    sidecar: &'static str,
    deployment: fn(ns: &str, name: &str, evidence: &str) -> Value,
    beside: fn(ns: &str, name: &str) -> Option<String>,
    probe: (u16, &'static str),
    /// What the startup incident's advice gives it: the probe its image can pass.
    advice: &'static str,
}

/// The shape in a fresh namespace: a startup race of the real binary (no delay added
/// to either side) with the app's own count, its Event and series; at a rollout, the
/// drain its app's last attempt meets; then `lint --fix` applied as printed in
/// another namespace: the pod Ready on the vendor's probe, 0 refusals, no incident.
fn races_drains_and_lints_fix_ends_it(shape: &Shape) {
    let c = cluster();
    let addr = c.agent_addr();
    let ns = &fresh_namespace(shape.name);
    let evidence = format!("/var/lib/sidecar-race-cluster/evidence/{ns}");
    if let Some(beside) = (shape.beside)(ns, shape.name) {
        c.apply(&beside);
    }
    let manifest = (shape.deployment)(ns, shape.name, &evidence);
    c.apply(&manifest.to_string());

    let pod = running_pod(ns, shape.name);
    let refused = refused_printed(ns, &name(&pod), "app");
    assert!(refused >= 1, "the app was never refused at start");
    let incident = wait_incident(
        &addr,
        &uid(&pod),
        &format!("{}'s startup incident", shape.sidecar),
        Duration::from_secs(60),
        |i| named_and_resolved(i) && i["refused_count"] == refused,
    );
    eprintln!(
        "{} startup race: {refused} refusals, window {:.3} s: {incident:#}",
        shape.sidecar,
        window(&incident)
    );
    assert_eq!(incident["phase"], "startup", "{incident:#}");
    assert_eq!(incident["kind"], "sidecar_race", "{incident:#}");
    assert_eq!(incident["pattern"], "classic", "{incident:#}");
    assert_eq!(incident["container"], "app", "{incident:#}");
    assert_eq!(incident["sidecar"], shape.sidecar, "{incident:#}");
    assert_eq!(
        incident["container_id"],
        container_id(&pod, "app").as_str(),
        "{incident:#}"
    );
    let advice = incident["advice"].as_str().unwrap_or_default();
    assert!(advice.contains(shape.advice), "{advice}");
    assert_eq!(incidents_of(&addr, &uid(&pod)).len(), 1);
    wait_event(ns, &name(&pod), "SidecarStartupRace");
    let series = namespace_series(&addr, ns);
    let workload = format!("workload=\"{}\"", shape.name);
    assert!(
        series
            .iter()
            .any(|l| l.contains(&workload) && l.contains("phase=\"startup\"")),
        "labelled series for the workload: {series:#?}"
    );

    // At a rollout the sidecar exits at SIGTERM, and the app's last attempt, at its
    // own SIGTERM, finds nothing (nor does its attempt of the second before, when the
    // sidecar went first): the app's count of both is the drain incident's.
    let deployment = format!("deployment/{}", shape.name);
    c.kubectl(&["-n", ns, "rollout", "restart", &deployment]);
    c.kubectl(&["-n", ns, "rollout", "status", &deployment, "--timeout=90s"]);
    let at_exit = lines_left_by(ns, &pod, &evidence);
    assert!(at_exit >= 1, "the app's last attempt was not refused");
    let drain = wait_incident(
        &addr,
        &uid(&pod),
        &format!("{}'s drain incident", shape.sidecar),
        Duration::from_secs(60),
        |i| i["phase"] == "drain" && i["refused_count"].as_u64() == Some(at_exit),
    );
    eprintln!("{} drain race: {drain:#}", shape.sidecar);
    assert_eq!(drain["container"], "app", "{drain:#}");
    assert_eq!(drain["sidecar"], shape.sidecar, "{drain:#}");
    wait_event(ns, &name(&pod), "SidecarDrainRace");

    // lint --fix of the manifest, applied as printed: the sidecar native, probed on
    // the vendor's endpoint (its image has no shell for an exec probe); the app starts
    // once it serves and is never refused, and the pod becomes Ready.
    let fixed_ns = &fresh_namespace(&format!("{}-fixed", shape.name));
    let mut fixed = lint_fixed(&manifest);
    fixed["metadata"]["namespace"] = fixed_ns.as_str().into();
    let native = &fixed["spec"]["template"]["spec"]["initContainers"][0];
    assert_eq!(native["name"], shape.sidecar, "{fixed:#}");
    assert_eq!(native["restartPolicy"], "Always", "{fixed:#}");
    let (port, path) = shape.probe;
    assert_eq!(native["startupProbe"]["httpGet"]["port"], port, "{fixed:#}");
    assert_eq!(native["startupProbe"]["httpGet"]["path"], path, "{fixed:#}");
    if let Some(beside) = (shape.beside)(fixed_ns, shape.name) {
        c.apply(&beside);
    }
    c.apply(&fixed.to_string());
    let selector = format!("app={}", shape.name);
    let fixed_pod = c.wait_pod(
        fixed_ns,
        &selector,
        "the fixed pod Ready",
        Duration::from_secs(90),
        |p| condition(p, "Ready"),
    );
    assert_eq!(refused_printed(fixed_ns, &name(&fixed_pod), "app"), 0);
    std::thread::sleep(Duration::from_secs(3));
    let after = incidents_of(&addr, &uid(&fixed_pod));
    assert!(after.is_empty(), "no incident once fixed: {after:#?}");
}

/// The OpenTelemetry Collector as the Operator injects it without native sidecars:
/// `otc-container` after the app, its OTLP/gRPC receiver on a Unix socket in an
/// emptyDir (mounted at another path in the app), exported to over gRPC; its
/// health_check endpoint on 13133 is the probe its Helm chart uses.
#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn case16_a_real_collector_on_a_unix_socket_races_its_app_at_start_and_drain_and_lints_fix_ends_it()
{
    races_drains_and_lints_fix_ends_it(&Shape {
        name: "telemetry",
        sidecar: COLLECTOR,
        deployment: telemetry,
        beside: |ns, name| Some(collector_config(ns, name)),
        probe: (13133, "/"),
        advice: "a startupProbe on its readiness endpoint (httpGet / on port 13133",
    });
}

/// The Cloud SQL Auth Proxy v2 on 127.0.0.1:5432 after its app, which queries it with
/// psql; its `/startup` health check (with `--health-check` on 0.0.0.0:9090) is the
/// probe its docs give.
#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn case17_the_real_cloud_sql_proxy_races_its_app_at_start_and_drain_and_lints_fix_ends_it() {
    races_drains_and_lints_fix_ends_it(&Shape {
        name: "inventory",
        sidecar: CLOUD_SQL_PROXY,
        deployment: inventory,
        beside: |_, _| None,
        probe: (9090, "/startup"),
        advice: "a startupProbe on its readiness endpoint (httpGet /startup on its --http-port port",
    });
}

/// oauth2-proxy in front of an app that warms up for 3 s: requests a client pod sends
/// meanwhile are forwarded and refused by the app. The proxy's refused dials are
/// `app_not_ready`, each one of the client's 502s; no sidecar race is counted.
#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn case18_real_oauth2_proxy_forwarding_to_an_app_still_warming_up_is_app_not_ready_not_a_race() {
    let c = cluster();
    let addr = c.agent_addr();
    let ns = &fresh_namespace("gateway");
    c.apply(&gateway(ns, "gateway").to_string());
    let pod = running_pod(ns, "gateway");
    let ip = pod["status"]["podIP"]
        .as_str()
        .expect("a pod IP")
        .to_string();
    c.apply(&gateway_client(ns, &ip));
    running_pod(ns, "client");
    let bad_gateway: u64 = wait_until(
        "the client's count of 502s",
        Duration::from_secs(60),
        || {
            c.logs(ns, "client", "client")
                .lines()
                .find_map(|l| l.strip_prefix("bad gateway ")?.trim().parse().ok())
        },
    );
    assert!(bad_gateway >= 1, "no request met the app warming up");
    let i = wait_incident(
        &addr,
        &uid(&pod),
        "the app_not_ready incident",
        Duration::from_secs(60),
        |i| named_and_resolved(i) && i["refused_count"] == bad_gateway,
    );
    eprintln!("oauth2-proxy: {bad_gateway} 502s: {i:#}");
    assert_eq!(i["kind"], "app_not_ready", "{i:#}");
    assert_eq!(
        (i["container"].as_str(), i["sidecar"].as_str()),
        (Some(OAUTH2_PROXY), Some("app")),
        "{i:#}"
    );
    assert_eq!(i["container_id"], container_id(&pod, OAUTH2_PROXY).as_str());
    // The app binds loopback only: a probe of it must go through the proxy.
    let advice = i["advice"].as_str().unwrap_or_default();
    assert!(
        advice.starts_with("Not a sidecar race") && advice.contains("probe through oauth2-proxy"),
        "{advice}"
    );
    assert_eq!(incidents_of(&addr, &uid(&pod)).len(), 1);
    let body = metrics(&addr);
    let line = format!(
        "sidecar_race_app_not_ready_refusals_total{{namespace=\"{ns}\",workload_kind=\"Deployment\",workload=\"gateway\",container=\"{OAUTH2_PROXY}\",app=\"app\",port=\"8080\",protocol=\"tcp\"}} {bad_gateway}"
    );
    assert!(body.lines().any(|l| l == line), "no `{line}` in:\n{body}");
    assert!(
        namespace_series(&addr, ns).is_empty(),
        "counted as a race: {:#?}",
        namespace_series(&addr, ns)
    );
}
