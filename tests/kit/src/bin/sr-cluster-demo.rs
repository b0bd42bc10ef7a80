//! `cargo xtask demo --cluster`: a real startup race on the cluster of `cargo xtask
//! cluster up` (a real kubelet, the agent installed from deploy/), and what a person
//! sees of it: the Kubernetes Event the agent posts on the racing pod, the labelled
//! incident metric read through Prometheus (the real one, on the configuration the
//! Prometheus Operator generated for the shipped PodMonitor), `report --agents-via-api`
//! ranking the workload, and the patch `lint --fix` prints for its manifest.
//!
//! Deployment `checkout` in namespace `demo-race` has a classic sidecar: `proxy` in
//! `containers` beside `app`, listening on 15001 `LATE_S` seconds late, while the app
//! dials it every 100 ms from its start. The same Deployment as `lint --fix` rewrites
//! it runs in `demo-fixed`: the proxy a native sidecar (an init container with
//! `restartPolicy: Always` and a startupProbe on its port), so the kubelet starts the
//! app once the proxy listens: no refusal, no Event.
//!
//! Reads the cluster as the cluster tier does (`SIDECAR_RACE_KUBECONFIG`,
//! `SIDECAR_RACE_KUBECTL`, `SIDECAR_RACE_PROMETHEUS_BIN`, or their defaults). The
//! cluster tier runs it too (tests/tests/cluster.rs), and checks what it prints.

use std::{path::Path, process::Command, time::Duration};

use serde_json::{Value, json};
use sidecar_race_agent::sinks::k8s_events::REPORTING_CONTROLLER;
use sidecar_race_kit::{
    agent::agent_binary,
    cluster::{TestNamespace, cluster, name, refused_printed, running_pod, wait_event, wait_until},
    command::run,
    operator_prometheus::{self, POD_MONITOR_JOB, cleanup_scraper_rbac, prometheus_resource},
    stand_in::{LATE_S, deployment, dialer, late_listener, shell},
};

const RACE_NS: &str = "demo-race";
const FIXED_NS: &str = "demo-fixed";
/// Where the Prometheus resource and its ServiceAccount live.
const MONITORING_NS: &str = "demo-monitoring";
const APP: &str = "checkout";
const PORT: u16 = 15001;

fn main() {
    let c = cluster();
    let agent = c.agent_pod();
    println!(
        "== the agent: pod {}/{} on node {}, Ready (installed from deploy/ by `cluster up`)",
        agent["metadata"]["namespace"].as_str().unwrap_or_default(),
        name(&agent),
        agent["spec"]["nodeName"].as_str().unwrap_or_default()
    );
    let race_ns = TestNamespace::create(RACE_NS.into());
    let fixed_ns = TestNamespace::create(FIXED_NS.into());
    let monitoring_ns = TestNamespace::create(MONITORING_NS.into());

    // Prometheus first: the PodMonitor scrapes every 30 s, so it is scraping by the
    // time the race is over.
    let version = operator_prometheus::version();
    println!(
        "== Prometheus {version}, on the configuration the Prometheus Operator generated for the shipped PodMonitor"
    );
    operator_prometheus::scraper_rbac(&monitoring_ns);
    c.apply(&prometheus_resource(
        &monitoring_ns,
        "demo",
        &version,
        &["podMonitor"],
    ));
    let config = operator_prometheus::generated_config(&monitoring_ns, "demo", POD_MONITOR_JOB);
    let prometheus = operator_prometheus::start(&monitoring_ns, "demo", "prometheus", &config);
    println!("   serving http://{}", prometheus.addr);

    // The racing Deployment, and the same as `lint --fix` rewrites it.
    let manifest_file = std::env::temp_dir().join(format!("{APP}-{}.yaml", std::process::id()));
    std::fs::write(&manifest_file, racing_manifest()).expect("a temporary file");
    let fixed = lint(&manifest_file, "--fix");
    println!(
        "\n== {RACE_NS}: Deployment {APP} with a classic sidecar: `proxy` in `containers` beside `app`, listening on {PORT} {LATE_S} s late; the app dials it every 100 ms from its start"
    );
    c.kubectl_in(&["-n", RACE_NS, "apply", "-f", "-"], &racing_manifest());
    println!(
        "== {FIXED_NS}: the same Deployment as `sidecar-race-agent lint --fix` rewrites it: `proxy` a native sidecar (initContainers, restartPolicy: Always, a startupProbe on {PORT})"
    );
    c.kubectl_in(&["-n", FIXED_NS, "apply", "-f", "-"], &fixed);

    let racing = running_pod(RACE_NS, APP);
    let fixed_pod = running_pod(FIXED_NS, APP);
    println!(
        "\n== the apps' own counts: {RACE_NS}'s app was refused {} times, {FIXED_NS}'s {} times",
        refused_printed(RACE_NS, &name(&racing), "app"),
        refused_printed(FIXED_NS, &name(&fixed_pod), "app")
    );

    let event = wait_event(RACE_NS, &name(&racing), "SidecarStartupRace");
    println!(
        "\n== the Event the agent posted on the racing pod (kubectl -n {RACE_NS} get events):"
    );
    println!(
        "   {} {} pod/{}: {}",
        event["type"].as_str().unwrap_or_default(),
        event["reason"].as_str().unwrap_or_default(),
        name(&racing),
        event["message"].as_str().unwrap_or_default()
    );
    let on_fixed = agent_events(FIXED_NS);
    if on_fixed.is_empty() {
        println!(
            "== on the fixed pod {FIXED_NS}/{}: no Event",
            name(&fixed_pod)
        );
    } else {
        println!(
            "== on the fixed pod: {} Events, none expected:",
            on_fixed.len()
        );
        for e in &on_fixed {
            println!("   {} {}", e["reason"], e["message"]);
        }
    }

    let query = format!("sidecar_race_incidents_total{{namespace=\"{RACE_NS}\"}}");
    println!(
        "\n== the incident metric in Prometheus (GET /api/v1/query?query={query}; the next 30 s scrape):"
    );
    let found = operator_prometheus::series(&prometheus, &query, 1, Duration::from_secs(90));
    for s in &found {
        println!(
            "   {} {}",
            series_text(&s["metric"]),
            s["value"][1].as_str().unwrap_or_default()
        );
    }
    drop(prometheus);
    cleanup_scraper_rbac(&monitoring_ns);

    println!(
        "\n== sidecar-race-agent report --agents-via-api (every agent, through the API server)"
    );
    // The kubelet pod source may name the app's container up to 5 s after the race.
    let report = wait_until(
        "the racing workload in the report",
        Duration::from_secs(30),
        || {
            let out = run(
                Command::new(agent_binary())
                    .args(["report", "--agents-via-api"])
                    .env("KUBECONFIG", &c.kubeconfig),
                None,
            );
            out.contains(RACE_NS).then_some(out)
        },
    );
    print!("{}", indent(&report));

    println!(
        "\n== sidecar-race-agent lint --fix=patch {APP}.yaml (the racing Deployment's manifest)"
    );
    print!("{}", indent(&lint(&manifest_file, "--fix=patch")));
    let _ = std::fs::remove_file(&manifest_file);
    println!(
        "\n== done: {RACE_NS} raced and was reported; {FIXED_NS}, as lint --fix made it, did not"
    );
    drop((race_ns, fixed_ns, monitoring_ns));
}

/// Deployment `APP` (no namespace: applied to one with `-n`) with a classic sidecar
/// listening late, as the cluster tier's case 1 runs it.
fn racing_manifest() -> String {
    let mut proxy = shell("proxy", &late_listener(PORT));
    proxy["ports"] = json!([{"containerPort": PORT, "name": "proxy"}]);
    let mut d: Value = serde_json::from_str(&deployment(
        "",
        APP,
        json!({"containers": [shell("app", &dialer(PORT)), proxy]}),
    ))
    .expect("a Deployment");
    d["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("namespace");
    serde_json::to_string_pretty(&d).expect("serializes")
}

/// `sidecar-race-agent lint <fix> FILE` for the cluster's Kubernetes minor.
fn lint(file: &Path, fix: &str) -> String {
    run(
        Command::new(agent_binary())
            .args(["lint", "--kube-version", "1.34", fix])
            .arg(file),
        None,
    )
}

/// The Events the agent posted in `ns`.
fn agent_events(ns: &str) -> Vec<Value> {
    cluster().json(&["-n", ns, "get", "events"])["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reportingComponent"] == REPORTING_CONTROLLER)
        .cloned()
        .collect()
}

/// A series' labels as PromQL writes them: `name{label="value",...}`.
fn series_text(metric: &Value) -> String {
    let labels = metric.as_object().into_iter().flatten();
    let name = metric["__name__"].as_str().unwrap_or_default();
    let inner: Vec<String> = labels
        .filter(|(k, _)| *k != "__name__")
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    format!("{name}{{{}}}", inner.join(","))
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("   {l}\n")).collect()
}
