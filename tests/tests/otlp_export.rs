//! `--otlp-endpoint` against a real OpenTelemetry Collector (its OTLP receiver and file
//! exporter, built from the collector's Go modules by `cargo xtask setup`): simulated
//! pods race, and every family and series `/metrics` serves arrives over OTLP with the
//! same value, named and typed by the OpenTelemetry conventions for Prometheus interop
//! (counters as monotonic cumulative Sums without `_total`, histograms as cumulative
//! Histograms with the same buckets), its labels as attributes named by the semantic
//! conventions (`k8s.namespace.name`, `k8s.deployment.name`, ...) as docs/reference.md's
//! table maps them: the test reads that table and maps the collector's data back
//! through it before it compares, and fails on any `/metrics` label name the table
//! renames.
//!
//! The push is compared with two scrapes, one before and one after it: a series that
//! moves while the agent idles (the node's own kernel events) must lie between them;
//! the workloads' series, settled once the races resolved, must equal both.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use serde_json::Value;
use sidecar_race_tests::{
    otelcol::Collector,
    pod::{Declared, SimPod, write_pod_list},
    root::is_root_or_skip,
    scenario::late_proxy_race,
};

/// A sample: its Prometheus name and sorted labels.
type Key = (String, Vec<(String, String)>);

/// The classic text exposition's samples.
fn scraped(text: &str) -> BTreeMap<Key, f64> {
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').expect("name and value");
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, labels_of(rest.trim_end_matches('}'))),
            None => (series, Vec::new()),
        };
        let value = if value == "+Inf" {
            f64::INFINITY
        } else {
            value.parse().expect("a number")
        };
        out.insert((name.to_string(), labels), value);
    }
    out
}

/// `a="x",b="y"` (the agent's label values hold no quotes or commas).
fn labels_of(s: &str) -> Vec<(String, String)> {
    let mut labels: Vec<(String, String)> = s
        .split("\",")
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once("=\"").expect("k=\"v\"");
            (k.to_string(), v.trim_end_matches('"').to_string())
        })
        .collect();
    labels.sort();
    labels
}

/// A number as OTLP/JSON writes it: 64-bit integers as strings; a field left out
/// (the collector's JSON omits zero values) is 0.
fn number(v: &Value) -> f64 {
    match v {
        Value::Null => 0.0,
        Value::String(s) => s.parse().expect("a number in a string"),
        v => v.as_f64().expect("a number"),
    }
}

/// A number data point's value, `asInt` or `asDouble` (0: neither written).
fn point_value(p: &Value) -> f64 {
    number(p.get("asInt").or(p.get("asDouble")).unwrap_or(&Value::Null))
}

fn attributes(point: &Value) -> Vec<(String, String)> {
    let mut labels: Vec<(String, String)> = point["attributes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            (
                a["key"].as_str().unwrap().to_string(),
                a["value"]["stringValue"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    labels.sort();
    labels
}

/// One OTLP request's metrics as the Prometheus samples they stand for: a Sum `x` is
/// `x_total`, a Histogram `x` is `x_bucket{le}` (cumulative again), `x_count`, `x_sum`.
/// Also checks what the conventions require of each metric's type.
fn pushed(request: &Value, rows: &[Row]) -> BTreeMap<Key, f64> {
    let attributes = |p: &Value| as_metrics_labels(&attributes(p), rows);
    let mut out = BTreeMap::new();
    for scope in request["resourceMetrics"][0]["scopeMetrics"]
        .as_array()
        .unwrap()
    {
        for m in scope["metrics"].as_array().unwrap() {
            let name = m["name"].as_str().unwrap();
            assert!(!name.ends_with("_total"), "{name}: no _total in OTLP names");
            if let Some(sum) = m.get("sum") {
                assert_eq!(sum["isMonotonic"], true, "{name}");
                assert_eq!(
                    sum["aggregationTemporality"], 2,
                    "{name}: cumulative (AGGREGATION_TEMPORALITY_CUMULATIVE)"
                );
                for p in sum["dataPoints"].as_array().unwrap() {
                    out.insert((format!("{name}_total"), attributes(p)), point_value(p));
                }
            } else if let Some(gauge) = m.get("gauge") {
                for p in gauge["dataPoints"].as_array().unwrap() {
                    out.insert((name.to_string(), attributes(p)), point_value(p));
                }
            } else if let Some(h) = m.get("histogram") {
                assert_eq!(h["aggregationTemporality"], 2, "{name}: cumulative");
                assert_eq!(m["unit"], "s", "{name}: seconds in UCUM");
                for p in h["dataPoints"].as_array().unwrap() {
                    let labels = attributes(p);
                    let bounds: Vec<f64> = p["explicitBounds"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(number)
                        .collect();
                    let counts: Vec<f64> = p["bucketCounts"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(number)
                        .collect();
                    assert_eq!(counts.len(), bounds.len() + 1, "{name}");
                    let mut cumulative = 0.0;
                    for (i, c) in counts.iter().enumerate() {
                        cumulative += c;
                        let le = bounds
                            .get(i)
                            .map(|b| prometheus_float(*b))
                            .unwrap_or_else(|| "+Inf".to_string());
                        let mut l = labels.clone();
                        l.push(("le".to_string(), le));
                        l.sort();
                        out.insert((format!("{name}_bucket"), l), cumulative);
                    }
                    out.insert(
                        (format!("{name}_count"), labels.clone()),
                        number(&p["count"]),
                    );
                    out.insert(
                        (format!("{name}_sum"), labels.clone()),
                        p.get("sum").map(number).unwrap_or_default(),
                    );
                }
            } else {
                panic!("{name}: neither a sum, a gauge nor a histogram: {m}");
            }
        }
    }
    out
}

/// A bound as the exposition writes it (`1.0`, `0.25`).
fn prometheus_float(b: f64) -> String {
    if b.fract() == 0.0 {
        format!("{b:.1}")
    } else {
        format!("{b}")
    }
}

/// A `/metrics` label of the documented mapping: one that takes the attribute's value
/// (`workload`), or a fixed one (`workload_kind="Deployment"`).
#[derive(Debug, Clone)]
enum Label {
    Takes(String),
    Fixed(String, String),
}

/// One row of docs/reference.md's table: these OTLP attributes are these labels.
type Row = (Vec<String>, Vec<Label>);

/// The backticked words of a table cell, before any parenthesis (which explains).
fn ticked(cell: &str) -> Vec<String> {
    let cell = cell.split(" (").next().unwrap_or_default();
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The table "OTLP attribute | `/metrics` label | ..." of docs/reference.md, without
/// the row of the labels kept as they are.
fn documented_mapping() -> Vec<Row> {
    let docs =
        std::fs::read_to_string(sidecar_race_tests::tools::workspace().join("docs/reference.md"))
            .expect("docs/reference.md");
    let table: Vec<&str> = docs
        .lines()
        .skip_while(|l| !l.starts_with("| OTLP attribute | `/metrics` label |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert!(table.len() >= 5, "the attribute table in docs/reference.md");
    let rows: Vec<Row> = table
        .iter()
        .filter(|l| !l.starts_with("| every other label"))
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            let attributes = ticked(cells[0]);
            let labels = ticked(cells[1])
                .into_iter()
                .filter(|t| !t.starts_with('-'))
                .map(|t| match t.split_once("=\"") {
                    Some((k, v)) => {
                        Label::Fixed(k.to_string(), v.trim_end_matches('"').to_string())
                    }
                    None => Label::Takes(t),
                })
                .collect::<Vec<_>>();
            let takes = labels
                .iter()
                .filter(|l| matches!(l, Label::Takes(_)))
                .count();
            assert_eq!(takes, attributes.len(), "one label per attribute: {l}");
            (attributes, labels)
        })
        .collect();
    rows
}

/// The `/metrics` labels the table renames (none of which may be pushed).
fn renamed_labels(rows: &[Row]) -> BTreeSet<String> {
    rows.iter()
        .flat_map(|(_, labels)| labels)
        .map(|l| match l {
            Label::Takes(k) | Label::Fixed(k, _) => k.clone(),
        })
        .collect()
}

/// A data point's attributes as the `/metrics` labels the table says they are.
fn as_metrics_labels(attributes: &[(String, String)], rows: &[Row]) -> Vec<(String, String)> {
    let mut out = attributes.to_vec();
    for (names, labels) in rows {
        let values: Option<Vec<String>> = names
            .iter()
            .map(|n| out.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()))
            .collect();
        let Some(values) = values else { continue };
        out.retain(|(k, _)| !names.contains(k));
        let mut values = values.into_iter();
        for label in labels {
            match label {
                Label::Takes(k) => out.push((k.clone(), values.next().unwrap())),
                Label::Fixed(k, v) => out.push((k.clone(), v.clone())),
            }
        }
    }
    out.sort();
    out
}

/// Every data point of the request: its metric's name and its attributes as pushed.
fn raw_points(request: &Value) -> Vec<(String, Vec<(String, String)>)> {
    let mut out = Vec::new();
    for scope in request["resourceMetrics"][0]["scopeMetrics"]
        .as_array()
        .unwrap()
    {
        for m in scope["metrics"].as_array().unwrap() {
            let name = m["name"].as_str().unwrap();
            for data in ["sum", "gauge", "histogram"]
                .iter()
                .filter_map(|k| m.get(*k))
            {
                for p in data["dataPoints"].as_array().into_iter().flatten() {
                    out.push((name.to_string(), attributes(p)));
                }
            }
        }
    }
    out
}

fn unix_nano() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[test]
fn otlp_push_carries_every_family_of_the_exposition_to_a_real_collector() {
    if !is_root_or_skip("otlp_push_carries_every_family_of_the_exposition_to_a_real_collector") {
        return;
    }
    let collector = Collector::start();
    let (agent, pods_file) = collector.agent("otlp", &[]);
    // Two racing starts of Deployment shop/checkout: refusals, incidents and race
    // windows with the app's labels.
    let mut manifests = Vec::new();
    let mut pods = Vec::new();
    for _ in 0..2 {
        let mut pod = SimPod::new("checkout").unwrap();
        let p = pod.container("proxy").unwrap();
        let a = pod.container("app").unwrap();
        manifests.push(pod.app_and_proxy_manifest("shop", "checkout", &a, &p, Declared::App));
        write_pod_list(&pods_file, &manifests);
        late_proxy_race(&mut pod, &p, &a, 600);
        pods.push(pod);
    }
    for pod in &pods {
        agent.wait_incidents(&pod.uid, Duration::from_secs(10), |i| {
            i.iter().any(|i| i["state"] == "resolved")
        });
    }
    let before = scraped(&agent.metrics());
    let asked = unix_nano();
    let deadline = Instant::now() + Duration::from_secs(30);
    let request = loop {
        let newer = collector.received().into_iter().rev().find(|r| {
            r["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|m| {
                    ["sum", "gauge", "histogram"]
                        .iter()
                        .filter_map(move |k| m.get(*k))
                })
                .flat_map(|d| d["dataPoints"].as_array().cloned().unwrap_or_default())
                .any(|p| number(&p["timeUnixNano"]) as u128 > asked)
        });
        if let Some(r) = newer {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "no push after the scrape within 30 s; the collector's log:\n{}",
            collector.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let after = scraped(&agent.metrics());
    let rows = documented_mapping();
    let pushed = pushed(&request, &rows);
    eprintln!(
        "{} series pushed, {} and {} scraped",
        pushed.len(),
        before.len(),
        after.len()
    );

    // The resource says who pushed, by the semantic conventions.
    let resource: Vec<(String, String)> = attributes(&request["resourceMetrics"][0]["resource"]);
    for kv in [
        ("service.name", "sidecar-race-agent"),
        ("service.instance.id", "fleet-a/node-7"),
        ("k8s.node.name", "node-7"),
        ("k8s.cluster.name", "fleet-a"),
    ] {
        assert!(
            resource.contains(&(kv.0.into(), kv.1.into())),
            "{kv:?} in {resource:?}"
        );
    }
    assert!(
        resource
            .iter()
            .any(|(k, v)| k == "service.version" && !v.is_empty()),
        "{resource:?}"
    );

    // No data point carries a `/metrics` label the table renames, and the race's
    // refusals carry the conventions' names of its namespace, workload and container.
    let renamed = renamed_labels(&rows);
    let points = raw_points(&request);
    for (name, attrs) in &points {
        let old: Vec<_> = attrs.iter().filter(|(k, _)| renamed.contains(k)).collect();
        assert!(
            old.is_empty(),
            "{name} pushed with /metrics' label names {old:?}"
        );
    }
    let refused = points
        .iter()
        .find(|(n, _)| n == "sidecar_race_refused_connections")
        .expect("the refusals were pushed");
    for kv in [
        ("k8s.namespace.name", "shop"),
        ("k8s.deployment.name", "checkout"),
        ("k8s.container.name", "app"),
        ("sidecar", "proxy"),
    ] {
        assert!(
            refused.1.contains(&(kv.0.into(), kv.1.into())),
            "{kv:?} in {refused:?}"
        );
    }

    // Every series scraped before was pushed, and every series pushed is scraped after
    // (the agent drops no series within the test: --series-ttl is an hour), with a
    // value between the two scrapes' (0 before a series existed).
    for key in before.keys() {
        assert!(pushed.contains_key(key), "{key:?} was scraped, not pushed");
    }
    for (key, value) in &pushed {
        let first = before.get(key).copied().unwrap_or(0.0);
        let last = *after
            .get(key)
            .unwrap_or_else(|| panic!("{key:?} was pushed, not scraped"));
        let (low, high) = (first.min(last), first.max(last));
        // serde_json parses a float to within an ulp or so of it (without its
        // float_roundtrip feature): sums of windows are compared that closely.
        let ulps = 4.0 * f64::EPSILON * high.abs().max(1.0);
        assert!(
            low - ulps <= *value && *value <= high + ulps,
            "{key:?}: pushed {value}, scraped {first} then {last}"
        );
    }
    // The races' own series, settled, are exact.
    let refused: Vec<(&Key, &f64)> = pushed
        .iter()
        .filter(|(k, _)| k.0 == "sidecar_race_refused_connections_total")
        .collect();
    assert!(!refused.is_empty(), "{pushed:?}");
    for (key, value) in &refused {
        assert_eq!(**value, before[*key], "{key:?}");
        assert!(
            key.1.contains(&("namespace".into(), "shop".into())),
            "{key:?}"
        );
    }
    let windows = pushed
        .keys()
        .filter(|k| k.0 == "sidecar_race_window_seconds_count")
        .count();
    assert!(windows > 0, "the race window histogram was pushed");
    // The agent stops and pushes once more.
    drop(agent);
}
