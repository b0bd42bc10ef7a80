//! `--otlp-logs` against a real OpenTelemetry Collector (its OTLP receiver and file
//! exporter): a simulated pod races, and each state change of its incident (opened,
//! resolved) arrives as one log record, named by the OpenTelemetry semantic conventions
//! (`k8s.*`, `container.id`, `service.*`) with the incident's own fields as
//! `sidecar_race.*`, counted as `/api/v1/incidents` counts. Its own binary: the metrics
//! test (otlp_export.rs) compares a push with the scrapes around it, and this test's
//! pods, going away, would move the node's cgroup series in between.

use std::time::{Duration, Instant};

use serde_json::Value;
use sidecar_race_tests::{
    otelcol::Collector,
    pod::{Declared, SimPod, write_pod_list},
    root::is_root_or_skip,
    scenario::late_proxy_race,
};

/// `(key, string value)` of a resource's attributes.
fn attributes(resource: &Value) -> Vec<(String, String)> {
    resource["attributes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| {
            Some((
                a["key"].as_str()?.to_string(),
                a["value"]["stringValue"].as_str()?.to_string(),
            ))
        })
        .collect()
}

/// A record's attribute value as OTLP/JSON writes it (`{"stringValue": ...}`,
/// `{"intValue": "40"}`), as text.
fn attribute(record: &Value, key: &str) -> Option<String> {
    let value = record["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)?
        .get("value")?
        .clone();
    let (_, v) = value.as_object()?.iter().next()?;
    Some(match v {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    })
}

#[test]
fn incidents_arrive_as_otlp_log_records_named_by_the_semantic_conventions() {
    if !is_root_or_skip("incidents_arrive_as_otlp_log_records_named_by_the_semantic_conventions") {
        return;
    }
    let collector = Collector::start();
    let (agent, pods_file) = collector.agent("otlp-logs", &["--otlp-logs"]);
    let mut pod = SimPod::new("checkout").unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    write_pod_list(
        &pods_file,
        &[pod.app_and_proxy_manifest("shop", "checkout", &a, &p, Declared::App)],
    );
    late_proxy_race(&mut pod, &p, &a, 600);
    let incidents = agent.wait_incidents(&pod.uid, Duration::from_secs(10), |i| {
        i.iter().any(|i| i["state"] == "resolved")
    });
    let incident = incidents
        .iter()
        .find(|i| i["state"] == "resolved")
        .unwrap()
        .clone();
    let id = incident["id"].to_string();

    // One record per state change of the incident: opened, then resolved.
    let deadline = Instant::now() + Duration::from_secs(15);
    let records = loop {
        let records: Vec<(Value, Value)> = collector
            .received_logs()
            .into_iter()
            .filter(|(_, r)| attribute(r, "sidecar_race.incident.id").as_deref() == Some(&id))
            .collect();
        if records.iter().any(|(_, r)| {
            attribute(r, "sidecar_race.change").as_deref() == Some("incident resolved")
        }) {
            break records;
        }
        assert!(
            Instant::now() < deadline,
            "no record of the resolved incident within 15 s: {records:?}\n{}",
            collector.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let changes: Vec<String> = records
        .iter()
        .map(|(_, r)| attribute(r, "sidecar_race.change").unwrap())
        .collect();
    assert_eq!(
        changes,
        ["incident opened", "incident resolved"],
        "{records:?}"
    );

    let (resource, resolved) = records.last().unwrap();
    let text = |key: &str| attribute(resolved, key);
    let of_incident = |field: &str| incident[field].as_str().map(str::to_string);
    // The semantic conventions' names, with the incident's own values.
    assert_eq!(text("k8s.pod.uid").as_deref(), Some(pod.uid.as_str()));
    assert_eq!(text("k8s.namespace.name").as_deref(), Some("shop"));
    assert_eq!(text("k8s.pod.name"), of_incident("pod"));
    assert_eq!(text("k8s.container.name").as_deref(), Some("app"));
    assert_eq!(text("k8s.deployment.name").as_deref(), Some("checkout"));
    // The conventions' names only: none of `/metrics`' label names for the same things.
    for label in ["namespace", "pod", "container", "workload", "workload_kind"] {
        assert_eq!(text(label), None, "{label} in {resolved}");
    }
    let container_id = of_incident("container_id").unwrap();
    let bare = container_id
        .split_once("://")
        .map_or(container_id.as_str(), |(_, id)| id);
    assert_eq!(text("container.id").as_deref(), Some(bare));
    // The incident's fields, counted as the API counts them.
    assert_eq!(text("sidecar_race.phase").as_deref(), Some("startup"));
    assert_eq!(text("sidecar_race.sidecar").as_deref(), Some("proxy"));
    assert_eq!(
        text("sidecar_race.refused_count"),
        Some(incident["refused_count"].to_string())
    );
    assert_eq!(resolved["severityText"], "WARN");
    assert_eq!(resolved["severityNumber"], 13);
    let body = resolved["body"]["stringValue"].as_str().unwrap();
    assert!(
        body.contains(&format!(
            "refused {} times by proxy",
            incident["refused_count"]
        )),
        "{body}"
    );
    // Who sent it: the agent, on its node, in its cluster.
    let origin = attributes(resource);
    for kv in [
        ("service.name", "sidecar-race-agent"),
        ("service.version", env!("CARGO_PKG_VERSION")),
        ("service.instance.id", "fleet-a/node-7"),
        ("k8s.node.name", "node-7"),
        ("k8s.cluster.name", "fleet-a"),
    ] {
        assert!(
            origin.contains(&(kv.0.into(), kv.1.into())),
            "{kv:?} in {origin:?}"
        );
    }
    // The metrics carry the same resource.
    let metrics = collector.wait_received(1, Duration::from_secs(10));
    let pushed_by = attributes(&metrics[0]["resourceMetrics"][0]["resource"]);
    assert!(
        pushed_by.contains(&("k8s.cluster.name".into(), "fleet-a".into())),
        "{pushed_by:?}"
    );
}
