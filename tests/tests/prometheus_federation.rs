//! Cross-cluster ranking through Prometheus federation (issue #37), with real
//! Prometheus 3.10 servers (the build `cargo xtask setup` caches). Two "clusters",
//! east and west, each a Prometheus with its own `cluster` external label scraping its
//! own agent as the Prometheus Operator scrapes the shipped PodMonitor; the agents saw
//! different races on simulated pods. A third, global Prometheus federates both
//! (`/federate` with `match[]`, `honor_labels: true`), so each cluster's external label
//! arrives on its series as an ordinary label. `report --prometheus <global>` must rank
//! every workload of each cluster with its exact counts and name its cluster, and roll
//! each workload up over the clusters it raced in: a cluster label summed away in the
//! pod starts', affected starts', incidents', refusals' or either window quantile's
//! query takes its evidence off each cluster's lines and fails this test, and so does
//! the fleet's quantile grouped by cluster. (No Job runs here: the stuck Job pods'
//! query is held to the label by the unit tests' fake federating Prometheus.)
//!
//! The agents run one after the other: each sees every pod on the kernel, so two at
//! once would each see the other's pods. East's agent stops before west's starts; its
//! series go stale, and the range the report reads still holds them, as it holds the
//! evidence of an agent whose node was drained since. West's Prometheus scrapes a port
//! chosen up front, so that the global one federates both from the start.

use std::{collections::BTreeMap, path::PathBuf, process::Command, time::Duration};

use serde_json::{Value, json};
use sidecar_race_tests::{
    agent::RunAgent,
    http::free_port,
    operator::{DiscoveredPod, pod_monitor_scrape_config},
    operator_prometheus,
    pod::empty_pods_file,
    prometheus::{Prometheus, report},
    root::is_root_or_skip,
    scenario::{Counted, Workload, race_workloads},
};

const EAST: [Workload; 2] = [
    Workload {
        namespace: "shop",
        deployment: "checkout",
        racing: 3,
        ordered: 0,
        delay_ms: 1200,
    },
    Workload {
        namespace: "shop",
        deployment: "catalog",
        racing: 0,
        ordered: 1,
        delay_ms: 0,
    },
];
/// The same checkout in west, racing once and shorter; and a workload east does not
/// run.
const WEST: [Workload; 2] = [
    Workload {
        namespace: "payments",
        deployment: "ledger",
        racing: 2,
        ordered: 0,
        delay_ms: 1000,
    },
    Workload {
        namespace: "shop",
        deployment: "checkout",
        racing: 1,
        ordered: 0,
        delay_ms: 700,
    },
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn yaml(path: &str) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(repo().join(path)).unwrap())
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Prometheus 3.10 on `config` (JSON is YAML).
fn prometheus(tag: &str, config: &Value) -> Prometheus {
    let dir = Prometheus::fresh_dir(&format!("-federation-{tag}"));
    std::fs::write(dir.join("prometheus.yml"), config.to_string()).unwrap();
    Prometheus::launch(dir, Command::new(operator_prometheus::binary()))
}

/// A cluster's Prometheus: its external label, and its agent at `agent_addr` scraped
/// as the operator scrapes the shipped PodMonitor.
fn cluster_prometheus(cluster: &str, agent_addr: &str) -> Prometheus {
    let pod_name = format!("sidecar-race-agent-{cluster}");
    let node_name = format!("{cluster}-node-1");
    let scrape = pod_monitor_scrape_config(
        &yaml("deploy/monitoring/podmonitor.yaml"),
        &yaml("deploy/base/daemonset.yaml"),
        &DiscoveredPod {
            address: agent_addr,
            pod_name: &pod_name,
            node_name: &node_name,
        },
        0,
        "1s",
    );
    prometheus(
        cluster,
        &json!({
            "global": {
                "scrape_interval": "1s",
                "evaluation_interval": "1s",
                "external_labels": {"cluster": cluster},
            },
            "scrape_configs": [scrape],
        }),
    )
}

/// The global Prometheus: every agent series of both clusters, through `/federate`,
/// keeping their own labels (`honor_labels`), as a federation's global tier does.
fn global_prometheus(clusters: &[&Prometheus]) -> Prometheus {
    let targets: Vec<&str> = clusters.iter().map(|p| p.addr.as_str()).collect();
    prometheus(
        "global",
        &json!({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{
                "job_name": "federate",
                "honor_labels": true,
                "metrics_path": "/federate",
                "params": {"match[]": ["{__name__=~\"sidecar_race_.*\"}"]},
                "static_configs": [{"targets": targets}],
            }],
        }),
    )
}

/// Runs `pods` under a fresh agent listening on `addr`, waits until the global
/// Prometheus holds everything it counted under `cluster`, and stops it. What it
/// counted, by (namespace, workload).
fn race_in(
    cluster: &str,
    addr: &str,
    pods: &[Workload],
    global: &Prometheus,
) -> BTreeMap<(String, String), Counted> {
    let (pods_file, source) = empty_pods_file(&format!("federation-{cluster}"));
    let agent = RunAgent::start_at(
        addr,
        &["--pods-from", &source, "--pods-poll-seconds", "0.1"],
    );
    let (counted, running) = race_workloads(&agent, pods, &pods_file);
    let t = Duration::from_secs(30);
    // The original job survives federation (honor_labels): the agents' series, not
    // the federation scrape's.
    global.wait_value(
        &format!(
            r#"count(sidecar_race_build_info{{cluster="{cluster}",job="sidecar-race-agent"}})"#
        ),
        1.0,
        t,
    );
    for ((ns, workload), c) in &counted {
        let series = format!(r#"cluster="{cluster}",namespace="{ns}",workload="{workload}""#);
        global.wait_value(
            &format!("sum(sidecar_race_pod_starts_total{{{series}}})"),
            c.starts as f64,
            t,
        );
        if c.racing > 0 {
            global.wait_value(
                &format!(r#"sum(sidecar_race_incidents_total{{{series},phase="startup"}})"#),
                c.racing as f64,
                t,
            );
            global.wait_value(
                &format!(
                    r#"sum(sidecar_race_refused_connections_total{{{series},phase="startup"}})"#
                ),
                c.refusals as f64,
                t,
            );
        }
    }
    agent.stop();
    drop(running);
    std::fs::remove_file(pods_file).unwrap();
    counted
}

/// The lines of our workloads (other tests' pods on this kernel have no metadata).
fn ours(lines: &Value) -> Vec<&Value> {
    lines
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["namespace"] == "shop" || w["namespace"] == "payments")
        .collect()
}

#[test]
fn a_global_prometheus_ranks_each_clusters_workloads_and_the_fleet() {
    if !is_root_or_skip("a_global_prometheus_ranks_each_clusters_workloads_and_the_fleet") {
        return;
    }
    eprintln!(
        "Prometheus {} for each cluster and the global view",
        operator_prometheus::version()
    );
    let east_agent = format!("127.0.0.1:{}", free_port());
    let west_agent = format!("127.0.0.1:{}", free_port());
    let east = cluster_prometheus("east", &east_agent);
    let west = cluster_prometheus("west", &west_agent);
    let global = global_prometheus(&[&east, &west]);

    let mut counted = BTreeMap::new();
    for (cluster, addr, pods) in [("east", &east_agent, &EAST), ("west", &west_agent, &WEST)] {
        for (workload, c) in race_in(cluster, addr, pods, &global) {
            counted.insert((cluster, workload.0, workload.1), c);
        }
    }
    eprintln!("the agents counted: {counted:#?}");
    let of = |cluster: &str, ns: &str, workload: &str| {
        counted[&(cluster, ns.to_string(), workload.to_string())].clone()
    };

    let global_url = format!("http://{}", global.addr);
    let stdout = report(&global_url, &["--format", "json"]);
    let v: Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("report JSON ({e}): {stdout}"));
    eprintln!("report: {v:#}");

    // Each cluster's lines, ranked on that cluster's evidence alone.
    // (A line a query's lost cluster label split off lacks some of these: `None`, or
    // no race window quantiles: `false`.)
    let line = |w: &Value| {
        (
            w["cluster"].as_str().unwrap_or("(none)").to_string(),
            w["namespace"].as_str().unwrap_or("?").to_string(),
            w["workload"].as_str().unwrap_or("?").to_string(),
            w["pod_starts"].as_u64(),
            w["affected_pod_starts"].as_u64(),
            w["startup_incidents"].as_u64(),
            w["refusals"].as_u64(),
            w["race_window_p50_seconds"].is_f64() && w["race_window_p95_seconds"].is_f64(),
        )
    };
    let expected = |cluster: &str, ns: &str, workload: &str| {
        let c = of(cluster, ns, workload);
        (
            cluster.to_string(),
            ns.to_string(),
            workload.to_string(),
            Some(c.starts),
            Some(c.racing),
            Some(c.racing),
            Some(c.refusals),
            true,
        )
    };
    let lines: Vec<_> = ours(&v["workloads"]).into_iter().map(line).collect();
    assert_eq!(
        lines,
        [
            expected("east", "shop", "checkout"),
            expected("west", "payments", "ledger"),
            expected("west", "shop", "checkout"),
        ],
        "each cluster's lines (cluster, namespace, workload, pod starts, affected pod \
         starts, startup incidents, refusals, window quantiles present), left as the report \
         above ranks them, right as the agents counted"
    );
    for w in ours(&v["workloads"]) {
        let fix = &w["fixes"][0];
        assert_eq!(fix["move_to_init_containers"], "proxy", "{w:#}");
        assert_eq!(fix["startup_probe_port"], 15001, "{w:#}");
        assert_eq!(fix["refusals"], w["refusals"], "{w:#}");
    }

    // The fleet: each workload over its clusters, the clusters it raced in worst first.
    let fleet = &v["fleet"];
    assert_eq!(fleet["cluster_label"], "cluster", "{fleet:#}");
    // No --cluster-label: the report looked for the conventions on the real series.
    assert_eq!(fleet["cluster_label_from"], "series", "{fleet:#}");
    assert_eq!(fleet["clusters"], json!(["east", "west"]), "{fleet:#}");
    let rolled: Vec<_> = ours(&fleet["workloads"])
        .into_iter()
        .map(|w| (line(w), w["clusters"].clone()))
        .collect();
    let (east_checkout, west_checkout, ledger) = (
        of("east", "shop", "checkout"),
        of("west", "shop", "checkout"),
        of("west", "payments", "ledger"),
    );
    assert_eq!(
        rolled,
        [
            (
                (
                    "(none)".to_string(),
                    "shop".to_string(),
                    "checkout".to_string(),
                    Some(east_checkout.starts + west_checkout.starts),
                    Some(east_checkout.racing + west_checkout.racing),
                    Some(east_checkout.racing + west_checkout.racing),
                    Some(east_checkout.refusals + west_checkout.refusals),
                    true,
                ),
                json!(["east", "west"])
            ),
            (
                (
                    "(none)".to_string(),
                    "payments".to_string(),
                    "ledger".to_string(),
                    Some(ledger.starts),
                    Some(ledger.racing),
                    Some(ledger.racing),
                    Some(ledger.refusals),
                    true,
                ),
                json!(["west"])
            ),
        ],
        "the fleet's lines and their clusters, left as the report above rolls them up, \
         right as the agents counted"
    );
    let checkout = ours(&fleet["workloads"])[0];
    assert_eq!(
        checkout["fixes"][0]["refusals"],
        east_checkout.refusals + west_checkout.refusals,
        "one fix holding both clusters' refusals: {checkout:#}"
    );
    // The race windows' quantiles: each cluster's line from its own buckets, the fleet's
    // from both clusters' buckets together. Checkout's windows were about 1.2 s in east
    // and 0.7 s in west, either side of the histogram's 1 s bucket bound, so west's p95
    // stays at or under 1 s and east's p50 over it; west's shorter window pulls the
    // fleet's p50 under east's alone.
    assert!(
        east_checkout.windows.iter().all(|w| *w > 1.0)
            && west_checkout.windows.iter().all(|w| *w < 1.0),
        "the windows the agents measured: east {:?}, west {:?}",
        east_checkout.windows,
        west_checkout.windows
    );
    let quantile = |w: &Value, q: &str| w[format!("race_window_{q}_seconds")].as_f64().unwrap();
    let checkout_in = |cluster: &str| {
        *ours(&v["workloads"])
            .iter()
            .find(|w| w["cluster"] == cluster && w["workload"] == "checkout")
            .unwrap()
    };
    let (east_p50, west_p95, fleet_p50) = (
        quantile(checkout_in("east"), "p50"),
        quantile(checkout_in("west"), "p95"),
        quantile(checkout, "p50"),
    );
    assert!(
        west_p95 <= 1.0 && 1.0 < fleet_p50 && fleet_p50 < east_p50,
        "checkout's p50 east {east_p50}, p95 west {west_p95}, p50 fleet {fleet_p50}"
    );
    assert!(
        fleet["workloads_without_incidents"].as_u64().unwrap() >= 1,
        "catalog"
    );

    // The table says the same for a person.
    let text = report(&global_url, &[]);
    assert!(
        text.contains(
            "Across clusters (label `cluster`, the first of `cluster`, `k8s_cluster_name` the series carry)"
        ) && text.contains("#  CLUSTER  WORKLOAD"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("Deployment shop/checkout") && l.contains("east, west")),
        "{text}"
    );
    assert!(
        text.contains("Deployment shop/checkout in cluster west\n   - startup: app → proxy:15001"),
        "{text}"
    );
}
