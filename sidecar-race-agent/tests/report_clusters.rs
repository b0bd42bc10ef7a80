//! `report --prometheus` against a fake federating Prometheus: series carry each
//! cluster's external label, as `/federate` with `honor_labels: true` or a
//! Thanos-style query layer hands them on. The fake answers like Prometheus would:
//! a query that keeps the cluster label gets one sample per cluster, one that sums it
//! away gets the clusters summed. It records the PromQL it was sent.

use std::{
    collections::HashMap,
    process::{Command, Output},
    sync::{Arc, Mutex},
};

use axum::{
    Json, Router,
    extract::{Query, State},
    routing::get,
};
use serde_json::{Value, json};
use sidecar_race_agent::report::{
    self, Input,
    cluster_label::{CONVENTIONS, ClusterLabel},
    migration_query::templates_query,
    prometheus::Queries,
};

const TS: f64 = 1_767_000_000.5;

#[derive(Clone, Default)]
struct Fake {
    /// The label the fake's series name their cluster by (`None`: one Prometheus).
    label: Option<&'static str>,
    seen: Arc<Mutex<Vec<String>>>,
}

/// checkout raced 3 times in east and once in west; ledger twice in west.
const SERIES: [(&str, &str, f64, f64); 3] = [
    ("east", "checkout", 3.0, 31.0),
    ("west", "checkout", 1.0, 9.0),
    ("west", "ledger", 2.0, 20.0),
];

/// The samples of `q`: per cluster when `q` keeps the fake's label, else summed.
fn vector(fake: &Fake, q: &str) -> Vec<Value> {
    // Whether any agent's series carry a label: one sample where they do.
    if let Some(rest) = q.strip_prefix("count(max_over_time(sidecar_race_build_info{") {
        let carried = fake
            .label
            .is_some_and(|l| rest.starts_with(&format!("{l}!=\"\"}}")));
        return if carried {
            vec![json!({"metric": {}, "value": [TS, "2"]})]
        } else {
            Vec::new()
        };
    }
    let keeps = fake
        .label
        .is_some_and(|l| q.contains(&format!("by ({l}, ")));
    let mut out: Vec<(Value, f64)> = Vec::new();
    for (cluster, workload, affected, refused) in SERIES {
        let mut labels =
            json!({"namespace": "shop", "workload_kind": "Deployment", "workload": workload});
        if keeps {
            labels[fake.label.unwrap()] = json!(cluster);
        }
        let (extra, value) = if q.starts_with("histogram_quantile(") {
            // The fleet-wide p95 differs from every cluster's: it comes from the
            // summed buckets, not from the clusters' quantiles.
            let p = match (keeps, cluster) {
                (false, _) => 1.7,
                (true, "east") => 1.5,
                (true, _) => 1.9,
            };
            (json!({}), p)
        } else if q.contains("sidecar_race_affected_pod_starts_total")
            || q.contains("sidecar_race_pod_starts_total")
        {
            (json!({}), affected)
        } else if q.contains("sidecar_race_incidents_total") {
            (
                json!({"sidecar": "proxy", "phase": "startup", "pattern": "classic", "kind": "sidecar_race"}),
                affected,
            )
        } else if q.contains("sidecar_race_refused_connections_total") {
            (
                json!({"container": "app", "sidecar": "proxy", "port": "15001", "phase": "startup"}),
                refused,
            )
        } else {
            continue;
        };
        for (k, v) in extra.as_object().unwrap() {
            labels[k] = v.clone();
        }
        match out.iter_mut().find(|(l, _)| *l == labels) {
            // A quantile of the summed buckets is one value, not a sum.
            Some((_, v)) if !q.starts_with("histogram_quantile(") => *v += value,
            Some(_) => {}
            None => out.push((labels, value)),
        }
    }
    out.into_iter()
        .map(|(metric, v)| json!({"metric": metric, "value": [TS, v.to_string()]}))
        .collect()
}

async fn query(
    State(f): State<Fake>,
    Query(params): Query<HashMap<String, String>>,
) -> Json<Value> {
    let q = params.get("query").cloned().unwrap_or_default();
    f.seen.lock().unwrap().push(q.clone());
    let result = vector(&f, &q);
    Json(json!({"status": "success", "data": {"resultType": "vector", "result": result}}))
}

async fn fake_prometheus(label: Option<&'static str>) -> (String, Fake) {
    let fake = Fake {
        label,
        ..Fake::default()
    };
    let router = Router::new()
        .route("/api/v1/query", get(query))
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (format!("http://{addr}"), fake)
}

/// The report of the fake at `url` over 24h, grouped by `label`.
async fn ranked(url: String, label: ClusterLabel) -> report::Report {
    let fleet = report::collect(&Input::Prometheus {
        url,
        range: "24h".into(),
        cluster_label: label,
    })
    .await
    .unwrap();
    report::build(fleet, None)
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test]
async fn federated_series_rank_per_cluster_and_fleet_wide() {
    let (url, fake) = fake_prometheus(Some("cluster")).await;
    let r = ranked(url, ClusterLabel::Given("cluster".into())).await;
    let lines: Vec<(&str, &str, u64, u64)> = r
        .workloads
        .iter()
        .map(|w| {
            (
                w.cluster.as_deref().unwrap(),
                w.workload.as_deref().unwrap(),
                w.affected_pod_starts,
                w.refusals,
            )
        })
        .collect();
    assert_eq!(
        lines,
        [
            ("east", "checkout", 3, 31),
            ("west", "ledger", 2, 20),
            ("west", "checkout", 1, 9)
        ]
    );
    assert_eq!(r.workloads[2].race_window_p95_seconds, Some(1.9));
    let f = r.fleet.as_ref().unwrap();
    assert_eq!(f.clusters, ["east", "west"]);
    let checkout = &f.workloads[0];
    assert_eq!(checkout.clusters, ["east", "west"]);
    assert_eq!(
        (checkout.line.affected_pod_starts, checkout.line.refusals),
        (4, 40)
    );
    assert_eq!(checkout.line.race_window_p95_seconds, Some(1.7));
    assert_eq!(checkout.line.fixes[0].refusals, 40);

    // The eight queries keep the label; the two fleet-wide quantiles sum it away.
    let q = Queries::with_cluster_label("24h", Some("cluster"));
    let expected = vec![
        q.pod_starts,
        q.affected_pod_starts,
        q.incidents,
        q.refused,
        q.window_p50,
        q.window_p95,
        q.stuck_job_pods,
        templates_query("24h", Some("cluster")),
        q.fleet_window_p50.unwrap(),
        q.fleet_window_p95.unwrap(),
    ];
    let seen = fake.seen.lock().unwrap().clone();
    assert_eq!(sorted(seen.clone()), sorted(expected));
    let keeping = seen
        .iter()
        .filter(|q| q.contains("by (cluster, namespace, workload_kind, workload"))
        .count();
    assert_eq!(keeping, 8, "{seen:#?}");
}

/// One Prometheus per cluster has no cluster label on its series: the report is
/// the one it always was, with no extra query for clusters.
#[tokio::test]
async fn series_without_the_label_read_as_one_cluster() {
    let (url, fake) = fake_prometheus(None).await;
    let r = ranked(url, ClusterLabel::Given("cluster".into())).await;
    assert_eq!(r.fleet, None);
    assert!(r.workloads.iter().all(|w| w.cluster.is_none()));
    assert_eq!(r.workloads[0].affected_pod_starts, 4, "checkout, summed");
    // Seven, and the one that dates templates (none here: no split).
    assert_eq!(fake.seen.lock().unwrap().len(), 8);
    let json: Value = serde_json::to_value(&r).unwrap();
    assert!(json.get("fleet").is_none());
    assert!(json["workloads"][0].get("cluster").is_none());
}

async fn binary(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sidecar-race-agent"));
    cmd.args(args)
        .env_remove("SIDECAR_RACE_PROMETHEUS")
        .env_remove("SIDECAR_RACE_CLUSTER_LABEL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// `report --prometheus URL --format json` with `env`, which must succeed: its JSON.
async fn json_report(url: &str, env: &[(&str, &str)]) -> Value {
    let out = binary(&["report", "--prometheus", url, "--format", "json"], env).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cluster_label_is_a_flag_and_an_environment_variable() {
    // From the environment: the fake's series name clusters by `k8s_cluster`.
    let (url, fake) = fake_prometheus(Some("k8s_cluster")).await;
    let v = json_report(&url, &[("SIDECAR_RACE_CLUSTER_LABEL", "k8s_cluster")]).await;
    assert_eq!(v["workloads"][0]["cluster"], "east", "{v:#}");
    assert_eq!(v["fleet"]["cluster_label"], "k8s_cluster", "{v:#}");
    assert_eq!(
        v["fleet"]["workloads"][0]["clusters"],
        json!(["east", "west"])
    );
    assert_eq!(v["fleet"]["workloads"][0]["affected_pod_starts"], 4);
    assert!(
        fake.seen.lock().unwrap()[..7]
            .iter()
            .all(|q| q.contains("by (k8s_cluster, ")),
        "{:#?}",
        fake.seen.lock().unwrap()
    );

    // `--cluster-label ''`: the queries of a Prometheus that knows no cluster.
    let (url, fake) = fake_prometheus(Some("cluster")).await;
    let out = binary(
        &["report", "--prometheus", &url, "--cluster-label", ""],
        &[],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let q = Queries::new("7d");
    assert_eq!(
        sorted(fake.seen.lock().unwrap().clone()),
        sorted(vec![
            q.pod_starts,
            q.affected_pod_starts,
            q.incidents,
            q.refused,
            q.window_p50,
            q.window_p95,
            q.stuck_job_pods,
            templates_query("7d", None),
        ])
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("CLUSTER"));

    // A label that is not a label name is one sentence, before any query.
    let (url, fake) = fake_prometheus(None).await;
    let out = binary(
        &[
            "report",
            "--prometheus",
            &url,
            "--cluster-label",
            "k8s-cluster",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "invalid cluster label `k8s-cluster`: a label name is letters, digits and `_`, not starting with a digit"
        ),
        "{stderr}"
    );
    assert!(fake.seen.lock().unwrap().is_empty());
}

/// The two ways fleets name a series' cluster, with no flag: `cluster` (Prometheus'
/// external labels) is looked for first, then `k8s_cluster_name` (OpenTelemetry's
/// `k8s.cluster.name` through Prometheus' OTLP receiver); the report groups by the
/// first the agents' series carry and says which it used. Series with neither read
/// as one cluster, after the two looks.
#[tokio::test(flavor = "multi_thread")]
async fn with_no_flag_the_report_finds_either_convention_and_says_which() {
    let (url, fake) = fake_prometheus(Some("k8s_cluster_name")).await;
    let v = json_report(&url, &[]).await;
    assert_eq!(v["workloads"][0]["cluster"], "east", "{v:#}");
    assert_eq!(v["fleet"]["cluster_label"], "k8s_cluster_name", "{v:#}");
    assert_eq!(v["fleet"]["cluster_label_from"], "series", "{v:#}");
    assert_eq!(v["fleet"]["workloads"][0]["affected_pod_starts"], 4);
    let seen = fake.seen.lock().unwrap().clone();
    assert_eq!(
        seen[..2],
        [
            "count(max_over_time(sidecar_race_build_info{cluster!=\"\"}[7d]))",
            "count(max_over_time(sidecar_race_build_info{k8s_cluster_name!=\"\"}[7d]))"
        ],
        "the conventions looked for in order: {seen:#?}"
    );
    assert!(
        seen[2..9]
            .iter()
            .all(|q| q.contains("by (k8s_cluster_name, ")),
        "{seen:#?}"
    );

    let out = binary(&["report", "--prometheus", &url], &[]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "Across clusters (label `k8s_cluster_name`, the first of `{}` the series carry)",
            CONVENTIONS.join("`, `")
        )),
        "{text}"
    );

    // `cluster` wins where the series carry it: one look, and the label a flag would give.
    let (url, fake) = fake_prometheus(Some("cluster")).await;
    let r = ranked(url, ClusterLabel::Conventional).await;
    let f = r.fleet.as_ref().expect("a roll-up");
    assert_eq!(f.cluster_label, "cluster");
    assert_eq!(r.workloads[0].cluster.as_deref(), Some("east"));
    let seen = fake.seen.lock().unwrap().clone();
    assert_eq!(
        seen.iter().filter(|q| q.contains("build_info{")).count(),
        1,
        "{seen:#?}"
    );

    // Neither carried: one line per workload, as a Prometheus per cluster always gave.
    let (url, fake) = fake_prometheus(None).await;
    let r = ranked(url, ClusterLabel::Conventional).await;
    assert_eq!(r.fleet, None);
    assert_eq!(r.workloads[0].affected_pod_starts, 4, "checkout, summed");
    assert_eq!(fake.seen.lock().unwrap().len(), 2 + 8);
}
