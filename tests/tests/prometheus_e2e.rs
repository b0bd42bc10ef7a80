//! End to end with a real Prometheus (Debian's package, started here on loopback,
//! scraping every second, loading deploy/monitoring/rules.yaml): simulated pods race,
//! and everything a user looks at files the race under the app's namespace and
//! workload.
//!
//! Prometheus scrapes the agent with the configuration the Prometheus Operator
//! generates for the shipped PodMonitor, then (a fresh agent and Prometheus) for the
//! ServiceMonitor alternative (`tests/src/operator.rs`): its `honor_labels`
//! and the target labels the operator adds (`namespace`, `pod`, `container` of the
//! agent's pod, `endpoint`, `job` from `jobLabel`, `node` from the relabeling). With
//! `honor_labels: false` those would replace the app's `namespace` and `container`
//! (renamed `exported_*`); this test fails then. It checks the raw series, the
//! recording rules, the pending SidecarStartupRace alert, the dashboard's variable and
//! panel queries, `promtool check metrics` on the exposition, and
//! `sidecar-race-agent report --prometheus` (the racing workload first, its namespace,
//! its fix).

use std::{
    io::Write,
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use sidecar_race_tests::{
    agent::RunAgent,
    http::get,
    operator::{DiscoveredPod, pod_monitor_scrape_config, service_monitor_scrape_config},
    pod::{SimPod, empty_pods_file},
    prometheus::{Prometheus, encode, report},
    root::{have, is_root_or_skip},
    scenario::{Workload, start_workload_pod},
};

/// A pod of Deployment shop/`name`: `racing` starts app and proxy together with a
/// proxy 1.2 s late; otherwise the proxy serves first.
fn start_pod(
    name: &'static str,
    racing: bool,
    pods_file: &std::path::Path,
    manifests: &mut Vec<Value>,
) -> SimPod {
    let w = Workload {
        namespace: "shop",
        deployment: name,
        racing: 0,
        ordered: 0,
        delay_ms: 1200,
    };
    start_workload_pod(&w, racing, pods_file, manifests)
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn yaml(path: &str) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(repo().join(path)).unwrap())
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The one value of each series of `promql` by `label`.
fn by_label(prom: &Prometheus, promql: &str, label: &str) -> Vec<(String, f64)> {
    prom.query(promql)
        .iter()
        .map(|s| {
            (
                s["metric"][label].as_str().unwrap_or("").to_string(),
                s["value"][1].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

/// The dashboard's queries with its variables set as a user looking at `namespace`
/// / `workload` sets them (Grafana's `$__range` and `$__rate_interval` as 10m / 1m),
/// each with its panel's title and its refId: every panel target, and the annotation
/// queries (under `annotation <name>`).
fn dashboard_queries(namespace: &str, workload: &str) -> Vec<(String, String, String)> {
    let d: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("deploy/monitoring/dashboard.json")).unwrap(),
    )
    .unwrap();
    let set = |expr: &str| {
        expr.replace("$namespace", namespace)
            .replace("$workload", workload)
            .replace("$phase", ".*")
            .replace("$node", ".*")
            .replace("$__range", "10m")
            .replace("$__rate_interval", "1m")
    };
    let mut out = Vec::new();
    for panel in d["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().into_iter().flatten() {
            let Some(expr) = t["expr"].as_str() else {
                continue;
            };
            out.push((
                panel["title"].as_str().unwrap().to_string(),
                t["refId"].as_str().unwrap_or_default().to_string(),
                set(expr),
            ));
        }
    }
    for a in d["annotations"]["list"].as_array().unwrap() {
        if let Some(expr) = a["expr"].as_str() {
            let title = format!("annotation {}", a["name"].as_str().unwrap());
            out.push((title, String::new(), set(expr)));
        }
    }
    out
}

/// The one query of `queries` whose title starts with `title` and whose refId is
/// `ref_id`.
fn query_of<'a>(queries: &'a [(String, String, String)], title: &str, ref_id: &str) -> &'a str {
    &queries
        .iter()
        .find(|(t, r, _)| t.starts_with(title) && r == ref_id)
        .unwrap_or_else(|| panic!("no query {ref_id} of `{title}` in the dashboard"))
        .2
}

/// The value of the one series of `promql`'s result labelled `workload`.
fn value_of_workload(prom: &Prometheus, promql: &str, workload: &str) -> f64 {
    let rows = prom.query(promql);
    let row = rows
        .iter()
        .find(|r| r["metric"]["workload"] == workload)
        .unwrap_or_else(|| panic!("no series of {workload} in {rows:?}: {promql}"));
    row["value"][1].as_str().unwrap().parse().unwrap()
}

/// How the operator is told to scrape the agents.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Monitor {
    /// deploy/monitoring/podmonitor.yaml
    Pod,
    /// deploy/monitoring-servicemonitor/servicemonitor.yaml, on deploy/base/service.yaml
    Service,
}

#[test]
fn prometheus_sees_the_race_and_the_report_ranks_it_first() {
    if !is_root_or_skip("prometheus_sees_the_race_and_the_report_ranks_it_first") {
        return;
    }
    assert!(
        have("prometheus") && have("promtool"),
        "prometheus/promtool missing: `cargo xtask setup` installs them"
    );
    // One after the other: each agent sees every pod on the kernel, so two at once
    // would each see the other's pods.
    for monitor in [Monitor::Pod, Monitor::Service] {
        eprintln!("scraping as the operator does for the {monitor:?}Monitor");
        scrape_and_check(monitor);
    }
}

fn scrape_and_check(monitor: Monitor) {
    let (pods_file, source) = empty_pods_file("e2e");
    let agent = RunAgent::start(&["--pods-from", &source, "--pods-poll-seconds", "0.1"]);
    // Scraped as the Prometheus Operator scrapes the shipped PodMonitor (or
    // ServiceMonitor): its honor_labels, and the agent pod's namespace, pod, container,
    // endpoint, job and node (and service) as target labels.
    let daemonset = yaml("deploy/base/daemonset.yaml");
    let agent_pod = "sidecar-race-agent-x7k2p";
    let discovered = DiscoveredPod {
        address: &agent.addr,
        pod_name: agent_pod,
        node_name: "sim-node",
    };
    let scrape = match monitor {
        Monitor::Pod => pod_monitor_scrape_config(
            &yaml("deploy/monitoring/podmonitor.yaml"),
            &daemonset,
            &discovered,
            0,
            "1s",
        ),
        Monitor::Service => service_monitor_scrape_config(
            &yaml("deploy/monitoring-servicemonitor/servicemonitor.yaml"),
            &yaml("deploy/base/service.yaml"),
            &daemonset,
            &discovered,
            0,
            "1s",
        ),
    };
    eprintln!("scrape config as the operator generates it: {scrape:#}");
    let prom = Prometheus::start(&scrape);

    // Three racing starts of Deployment shop/checkout (three startup incidents: the
    // SidecarStartupRace threshold), one well-ordered start of shop/catalog.
    let mut manifests = Vec::new();
    let mut racing = Vec::new();
    for _ in 0..3 {
        racing.push(start_pod("checkout", true, &pods_file, &mut manifests));
    }
    let _ordered = start_pod("catalog", false, &pods_file, &mut manifests);
    for pod in &racing {
        agent.wait_incidents(&pod.uid, Duration::from_secs(10), |i| {
            i.iter().any(|i| i["state"] == "resolved")
        });
    }

    let t = Duration::from_secs(30);
    assert_eq!(prom.value(r#"up{job="sidecar-race-agent"}"#, t), 1.0);
    // The target labels the operator adds are there, for the agent's own series.
    let up = prom.query(r#"up{job="sidecar-race-agent"}"#);
    let target = &up[0]["metric"];
    assert_eq!(target["namespace"], "sidecar-race", "{target}");
    assert_eq!(target["pod"], agent_pod, "{target}");
    assert_eq!(target["container"], "agent", "{target}");
    assert_eq!(target["endpoint"], "http-metrics", "{target}");
    assert_eq!(target["node"], "sim-node", "{target}");
    if monitor == Monitor::Service {
        assert_eq!(target["service"], "sidecar-race-agent", "{target}");
    }

    // The workload series keep the app's namespace and container: nothing renamed to
    // exported_*, nothing filed under the agent's namespace.
    let wait_for_series = prom.value(
        r#"sum(sidecar_race_refused_connections_total{job="sidecar-race-agent"})"#,
        t,
    );
    assert!(wait_for_series > 0.0);
    let renamed = prom.query(r#"{job="sidecar-race-agent", exported_namespace!=""}"#);
    let renamed2 = prom.query(r#"{job="sidecar-race-agent", exported_container!=""}"#);
    assert!(
        renamed.is_empty() && renamed2.is_empty(),
        "the scrape renamed the workload's labels (honorLabels?): {:#}",
        Value::Array([renamed, renamed2].concat())
    );
    // Everything the agent counted has been scraped: three incidents and four starts.
    prom.wait_value(
        r#"sum(sidecar_race_incidents_total{job="sidecar-race-agent",namespace="shop"})"#,
        3.0,
        t,
    );
    prom.wait_value(
        r#"sum(sidecar_race_pod_starts_total{job="sidecar-race-agent",namespace="shop"})"#,
        4.0,
        t,
    );
    // The refusals Prometheus has under the workload's labels are the ones the agent
    // reported in its three incidents.
    let reported: u64 = racing
        .iter()
        .flat_map(|p| agent.incidents_of(&p.uid))
        .filter(|i| i["phase"] == "startup")
        .map(|i| i["refused_count"].as_u64().unwrap())
        .sum();
    assert!(reported >= 3 * 3, "{reported} refusals in the incidents");
    let refused = prom.value(
        r#"sum(sidecar_race_refused_connections_total{job="sidecar-race-agent",namespace="shop",workload_kind="Deployment",workload="checkout",container="app",sidecar="proxy",port="15001",phase="startup"})"#,
        t,
    );
    assert_eq!(
        refused, reported as f64,
        "refusals under the workload's labels"
    );
    assert_eq!(
        prom.value(
            r#"sum(sidecar_race_incidents_total{namespace="shop",workload="checkout",sidecar="proxy",phase="startup",pattern="classic"})"#,
            t,
        ),
        3.0
    );
    assert_eq!(
        prom.value(
            r#"sum(sidecar_race_pod_starts_total{namespace="shop",workload="checkout"})"#,
            t
        ),
        3.0
    );
    assert_eq!(
        prom.value(
            r#"sum(sidecar_race_affected_pod_starts_total{namespace="shop",workload="checkout"})"#,
            t
        ),
        3.0
    );
    assert_eq!(
        prom.value(
            r#"sum(sidecar_race_pod_starts_total{namespace="shop",workload="catalog"})"#,
            t
        ),
        1.0
    );
    assert!(
        prom.query(r#"sidecar_race_affected_pod_starts_total{workload="catalog"}"#)
            .is_empty()
    );
    let window = prom.value(
        r#"sum(sidecar_race_window_seconds_sum{namespace="shop",workload="checkout",phase="startup"})"#,
        t,
    );
    assert!((window - 3.0 * 1.2).abs() < 0.75, "window {window}");

    // The recording rules group by the app's namespace ...
    assert_eq!(
        prom.value(
            r#"workload:sidecar_race_affected_pod_starts:ratio1h{namespace="shop",workload_kind="Deployment",workload="checkout"} == 1"#,
            t
        ),
        1.0
    );
    assert_eq!(
        prom.value(
            r#"workload:sidecar_race_affected_pod_starts:ratio1h{namespace="shop",workload="catalog"}"#,
            t
        ),
        0.0
    );
    assert_eq!(
        prom.value(
            r#"workload_sidecar:sidecar_race_incidents:increase1h{namespace="shop",workload="checkout",sidecar="proxy",phase="startup",pattern="classic"} == 3"#,
            t
        ),
        3.0
    );
    let p95 = prom.value(
        r#"workload_sidecar:sidecar_race_window_seconds:p95_1h{namespace="shop",workload="checkout",sidecar="proxy",phase="startup"}"#,
        t,
    );
    assert!(p95 > 0.5 && p95 <= 2.5, "p95 {p95}");
    let namespaces = by_label(
        &prom,
        "workload:sidecar_race_pod_starts:increase1h",
        "namespace",
    );
    // (Other pods on this kernel, e.g. of concurrent test runs, have no metadata and
    // count under namespace "": only the agent's namespace is wrong here.)
    assert!(
        namespaces.iter().any(|(ns, _)| ns == "shop")
            && namespaces.iter().all(|(ns, _)| ns != "sidecar-race"),
        "recording rule series under the agent's namespace: {namespaces:?}"
    );
    // ... and so does the alert (pending: it fires after `for: 5m`).
    let deadline = Instant::now() + t;
    let alert = loop {
        let a = prom.query(r#"ALERTS{alertname="SidecarStartupRace"}"#);
        if !a.is_empty() {
            break a[0]["metric"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "SidecarStartupRace is not pending"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(alert["namespace"], "shop", "{alert}");
    assert_eq!(alert["workload"], "checkout", "{alert}");
    assert_eq!(alert["sidecar"], "proxy", "{alert}");

    // The dashboard: its namespace variable offers the app's namespace (not the
    // agent's), and the workload panels show checkout under it.
    let (status, body) = get(
        &prom.addr,
        &format!(
            "/api/v1/label/namespace/values?match[]={}",
            encode("sidecar_race_pod_starts_total")
        ),
    )
    .unwrap();
    assert_eq!(status, 200);
    let values: Value = serde_json::from_str(&body).unwrap();
    let offered = values["data"].as_array().unwrap();
    assert!(
        offered.contains(&json!("shop")) && !offered.contains(&json!("sidecar-race")),
        "namespace variable: {body}"
    );
    let queries = dashboard_queries("shop", "checkout");
    for (title, _, expr) in &queries {
        if !expr.contains("namespace=~\"shop\"") {
            continue;
        }
        let result = prom.query(expr);
        // rate() needs two samples of a series; the races here are seconds old.
        assert!(
            !result.is_empty() || expr.contains("rate("),
            "dashboard panel `{title}` is empty for shop/checkout: {expr}"
        );
        for s in &result {
            let ns = &s["metric"]["namespace"];
            assert!(
                ns.is_null() || ns == "shop",
                "panel `{title}` shows namespace {ns}: {expr}"
            );
        }
    }
    let who = query_of(&queries, "Refused connections in the selected range", "A");
    let rows = prom.query(who);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["metric"]["namespace"], "shop");
    assert_eq!(rows[0]["metric"]["container"], "app");
    assert_eq!(rows[0]["metric"]["workload"], "checkout");

    // The views #51 added: per workload, its races in the range and their mean window
    // (three races of ~1.2 s), its affected-start share (3 of 3 starts), and the
    // annotation marking the incidents with their labels.
    let windows = "Race windows by workload in the selected range";
    assert_eq!(
        value_of_workload(&prom, query_of(&queries, windows, "A"), "checkout"),
        3.0
    );
    let mean = value_of_workload(&prom, query_of(&queries, windows, "B"), "checkout");
    assert!((mean - 1.2).abs() < 0.25, "mean window {mean}");
    let share = "Affected-start share by workload in the selected range";
    for (ref_id, want) in [("A", 3.0), ("B", 3.0), ("C", 1.0)] {
        assert_eq!(
            value_of_workload(&prom, query_of(&queries, share, ref_id), "checkout"),
            want,
            "{share} {ref_id}"
        );
    }
    let marks = prom.query(query_of(&queries, "annotation Sidecar race incidents", ""));
    assert_eq!(marks.len(), 1, "one incident series marked: {marks:?}");
    let mark = &marks[0]["metric"];
    for (label, value) in [
        ("namespace", "shop"),
        ("workload", "checkout"),
        ("phase", "startup"),
        ("pattern", "classic"),
        ("sidecar", "proxy"),
    ] {
        assert_eq!(mark[label], value, "annotation labels: {mark}");
    }

    // The exposition passes promtool's checks.
    let (status, body) = get(&agent.addr, "/metrics").unwrap();
    assert_eq!(status, 200);
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The migration report ranks the racing workload first, with its fix.
    let prom_url = format!("http://{}", prom.addr);
    let stdout = report(&prom_url, &["--format", "json"]);
    let ranked: Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("report JSON ({e}): {stdout}"));
    let workloads = ranked["workloads"]
        .as_array()
        .unwrap_or_else(|| panic!("{ranked:#}"));
    assert_eq!(workloads[0]["workload"], "checkout", "{ranked:#}");
    assert_eq!(workloads[0]["namespace"], "shop", "{ranked:#}");
    assert_eq!(workloads[0]["startup_incidents"], 3, "{ranked:#}");
    assert!(
        workloads.iter().all(|w| w["namespace"] != "sidecar-race"),
        "{ranked:#}"
    );
    let text = report(&prom_url, &[]);
    assert!(text.contains("Deployment shop/checkout"), "{text}");
    assert!(
        text.contains("Move proxy from containers to initContainers"),
        "{text}"
    );

    // With the manifests, the plan: the racing workload above a risky one that has
    // not raced, each with its patch.
    let dir = std::env::temp_dir().join(format!("sr-e2e-manifests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("checkout.yaml"), CHECKOUT_MANIFEST).unwrap();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../sidecar-race-agent/tests/fixtures/lint/cloud-sql-proxy-job.yaml"
        ),
        dir.join("job.yaml"),
    )
    .unwrap();
    let stdout = report(
        &prom_url,
        &[
            "--format",
            "json",
            "--with-patches",
            "--manifests",
            dir.to_str().unwrap(),
        ],
    );
    let plan: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(plan["workloads"][0]["workload"], "checkout", "{plan:#}");
    assert_eq!(plan["workloads"][0]["rank"], 1);
    assert_eq!(
        plan["not_raced"][0]["workload"], "migrate-orders",
        "{plan:#}"
    );
    assert!(plan["not_raced"][0]["rank"].as_u64().unwrap() > 1);
    let patches = plan["patches"].as_array().unwrap();
    assert_eq!(patches[0]["rank"], 1, "{plan:#}");
    let patch = patches[0]["patch"].as_str().unwrap();
    assert!(
        patch.contains("restartPolicy: Always")
            && patch.contains("tcpSocket:\n            port: 15001"),
        "the patch makes proxy native with a startupProbe on the port the app was refused on:\n{patch}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::remove_file(pods_file).unwrap();
}

/// The racing Deployment as its manifest says it: proxy a classic sidecar on 15001.
const CHECKOUT_MANIFEST: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: checkout
  namespace: shop
spec:
  selector:
    matchLabels:
      app: checkout
  template:
    metadata:
      labels:
        app: checkout
    spec:
      containers:
      - name: app
        image: example.com/app:1
        ports:
        - containerPort: 8080
      - name: proxy
        image: example.com/proxy:1
        ports:
        - containerPort: 15001
"#;
