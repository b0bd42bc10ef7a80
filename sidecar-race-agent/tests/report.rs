//! `report` against fakes at the HTTP level, through the same client stack as in
//! production: a fake Prometheus answering `/api/v1/query` with real API response
//! shapes (and recording the PromQL it was sent), fake agents serving
//! `/api/v1/incidents`, and the binary itself for exit codes and environment flags.
//!
//! The fleet: a classic sidecar racing at startup (checkout), a native sidecar without
//! startupProbe (ledger), a drain-only race (frontend), a port nobody opens
//! (reporter: unresolved only), and a workload that started pods without incident.

mod common;
#[path = "common/fake_cluster.rs"]
mod fake_cluster;

use std::{
    collections::HashMap,
    process::{Command, Output},
    sync::{Arc, Mutex},
};

use axum::{
    Json, Router,
    extract::{Query, RawQuery, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::get,
};
use fake_cluster::{fake_api_server, incident, serve};
use serde_json::{Value, json};
use sidecar_race_agent::report::{
    self, Input, Report, ReportError,
    cluster_label::ClusterLabel,
    migration_query::templates_query,
    prometheus::Queries,
    render::{Format, render},
};

const TS: f64 = 1_767_000_000.5;

/// How the fake Prometheus answers.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// The fleet above.
    Fleet,
    /// Agents scraped (build_info) but no pod start, incident or refusal in the range.
    Quiet,
    /// Nothing at all: not scraping the agents.
    Empty,
    /// 400 with Prometheus' error body.
    BadData,
}

#[derive(Clone)]
struct Fake {
    mode: Mode,
    /// (decoded `query`, `time`, the raw query string) of each request.
    seen: Arc<Mutex<Vec<(String, String, String)>>>,
}

fn sample(labels: Value, v: &str) -> Value {
    json!({"metric": labels, "value": [TS, v]})
}

fn workload(ns: &str, kind: &str, name: &str) -> Value {
    json!({"namespace": ns, "workload_kind": kind, "workload": name})
}

fn with(mut base: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().unwrap() {
        base[k] = v.clone();
    }
    base
}

/// The fleet's vectors, per query (recognised by the metric it reads).
fn fleet_vector(q: &str) -> Vec<Value> {
    let checkout = workload("shop", "Deployment", "checkout");
    let ledger = workload("data", "StatefulSet", "ledger");
    let frontend = workload("web", "Deployment", "frontend");
    let reporter = workload("batch", "CronJob", "reporter");
    let quiet = workload("shop", "Deployment", "catalog");
    let inc = |w: &Value, sidecar: &str, phase: &str, pattern: &str, v: &str| {
        sample(
            with(
                w.clone(),
                json!({"sidecar": sidecar, "phase": phase, "pattern": pattern}),
            ),
            v,
        )
    };
    let refused = |w: &Value, container: &str, sidecar: &str, port: &str, phase: &str, v: &str| {
        sample(
            with(
                w.clone(),
                json!({"container": container, "sidecar": sidecar, "port": port, "phase": phase}),
            ),
            v,
        )
    };
    if q.starts_with("histogram_quantile(0.5,") {
        vec![
            sample(checkout, "1.2"),
            sample(ledger, "0.4"),
            sample(frontend, "3"),
            // A workload whose buckets did not grow in the range.
            sample(quiet, "NaN"),
        ]
    } else if q.starts_with("histogram_quantile(0.95,") {
        vec![
            sample(checkout, "2.9"),
            sample(ledger, "0.8"),
            sample(frontend, "7.5"),
        ]
    } else if q.contains("sidecar_race_affected_pod_starts_total") {
        // increase() extrapolates: 27.96 is 28 pod starts.
        vec![sample(checkout, "27.96"), sample(ledger.clone(), "6")]
    } else if q.contains("sidecar_race_pod_starts_total") {
        vec![
            sample(checkout, "120"),
            sample(ledger, "40"),
            sample(frontend, "50"),
            sample(quiet, "200"),
        ]
    } else if q.contains("sidecar_race_incidents_total") {
        vec![
            inc(&checkout, "istio-proxy", "startup", "classic", "30"),
            inc(&checkout, "istio-proxy", "drain", "classic", "2"),
            inc(&ledger, "cloud-sql-proxy", "startup", "native", "6"),
            inc(&frontend, "envoy", "drain", "classic", "9"),
            inc(&reporter, "auth-proxy", "unresolved", "classic", "40"),
            // An old series that did not grow in the range: no evidence.
            inc(&quiet, "istio-proxy", "startup", "classic", "0"),
        ]
    } else if q.contains("sidecar_race_refused_connections_total") {
        vec![
            refused(&checkout, "app", "istio-proxy", "15001", "startup", "412"),
            refused(&checkout, "app", "istio-proxy", "15001", "drain", "5"),
            refused(&ledger, "app", "cloud-sql-proxy", "5432", "startup", "18"),
            refused(&frontend, "nginx", "envoy", "15001", "drain", "30"),
            refused(
                &reporter,
                "report",
                "auth-proxy",
                "4180",
                "unresolved",
                "900",
            ),
        ]
    } else if q.contains("sidecar_race_stuck_job_pods") {
        // Ranking with stuck Jobs is unit-tested in report/mod.rs.
        vec![]
    } else if q.contains("sidecar_race_build_info") {
        vec![sample(json!({}), "12")]
    } else if q.contains("sidecar_race_pod_template_created_timestamp_seconds") {
        // Agents older than the template series: no migration to verify.
        vec![]
    } else {
        panic!("unexpected query {q}")
    }
}

async fn query(
    State(f): State<Fake>,
    Query(params): Query<HashMap<String, String>>,
    RawQuery(raw): RawQuery,
) -> Response {
    let q = params.get("query").cloned().unwrap_or_default();
    let time = params.get("time").cloned().unwrap_or_default();
    f.seen
        .lock()
        .unwrap()
        .push((q.clone(), time, raw.unwrap_or_default()));
    let result = match f.mode {
        Mode::BadData => {
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({
                    "status": "error",
                    "errorType": "bad_data",
                    "error": "invalid parameter \"query\": 1:27: parse error: unexpected character"
                })),
            )
                .into_response();
        }
        Mode::Empty => vec![],
        Mode::Quiet if q.contains("sidecar_race_build_info") => vec![sample(json!({}), "3")],
        Mode::Quiet => vec![],
        Mode::Fleet => fleet_vector(&q),
    };
    Json(json!({"status": "success", "data": {"resultType": "vector", "result": result}}))
        .into_response()
}

/// A fake Prometheus served below `/prom` (as behind a path-routing proxy).
async fn fake_prometheus(mode: Mode) -> (String, Fake) {
    let fake = Fake {
        mode,
        seen: Arc::default(),
    };
    let router = Router::new()
        .route("/prom/api/v1/query", get(query))
        .with_state(fake.clone());
    let addr = serve(router).await;
    (format!("http://{addr}/prom"), fake)
}

async fn fake_agent(incidents: Vec<Value>) -> String {
    fake_agent_answering(json!({ "incidents": incidents })).await
}

/// An agent whose `/api/v1/incidents` answers `body`.
async fn fake_agent_answering(body: Value) -> String {
    let router = Router::new().route(
        "/api/v1/incidents",
        get(move || {
            let body = body.clone();
            async move { Json(body) }
        }),
    );
    format!("http://{}", serve(router).await)
}

/// Two agents (nodes) with the same fleet as the fake Prometheus, in incidents.
async fn fake_agents() -> Vec<String> {
    let classic = ("app", "istio-proxy", "classic", 15001);
    let native = ("app", "cloud-sql-proxy", "native", 5432);
    let envoy = ("nginx", "envoy", "classic", 15001);
    let auth = ("report", "auth-proxy", "classic", 4180);
    let a = fake_agent(vec![
        incident(
            3,
            "checkout-2",
            "shop",
            "Deployment",
            "checkout",
            classic,
            ("startup", 20, Some(2.9)),
        ),
        incident(
            2,
            "checkout-1",
            "shop",
            "Deployment",
            "checkout",
            classic,
            ("drain", 2, Some(0.3)),
        ),
        incident(
            1,
            "checkout-1",
            "shop",
            "Deployment",
            "checkout",
            classic,
            ("startup", 12, Some(1.2)),
        ),
    ])
    .await;
    let b = fake_agent(vec![
        incident(
            4,
            "reporter-x",
            "batch",
            "CronJob",
            "reporter",
            auth,
            ("unresolved", 900, None),
        ),
        incident(
            3,
            "frontend-1",
            "web",
            "Deployment",
            "frontend",
            envoy,
            ("drain", 30, Some(7.5)),
        ),
        incident(
            2,
            "ledger-1",
            "data",
            "StatefulSet",
            "ledger",
            native,
            ("startup", 10, Some(0.8)),
        ),
        incident(
            1,
            "ledger-0",
            "data",
            "StatefulSet",
            "ledger",
            native,
            ("startup", 8, Some(0.4)),
        ),
    ])
    .await;
    vec![a, b]
}

fn names(r: &Report) -> Vec<&str> {
    r.workloads
        .iter()
        .map(|w| w.workload.as_deref().unwrap())
        .collect()
}

const RANKED: [&str; 4] = ["checkout", "ledger", "frontend", "reporter"];

async fn prometheus_report(range: &str) -> (Report, Fake) {
    let (url, fake) = fake_prometheus(Mode::Fleet).await;
    let fleet = report::collect(&Input::Prometheus {
        url,
        range: range.into(),
        cluster_label: ClusterLabel::Off,
    })
    .await
    .unwrap();
    (report::build(fleet, None), fake)
}

#[tokio::test]
async fn prometheus_fleet_is_ranked_with_the_queries_it_needs() {
    let (r, fake) = prometheus_report("24h").await;
    assert_eq!(names(&r), RANKED);
    assert_eq!(r.workloads_total, 4);
    assert_eq!(r.workloads_without_incidents, Some(1), "catalog");

    let checkout = &r.workloads[0];
    assert_eq!(checkout.pod_starts, Some(120));
    assert_eq!(checkout.affected_pod_starts, 28);
    assert!((checkout.affected_share.unwrap() - 28.0 / 120.0).abs() < 1e-9);
    assert_eq!((checkout.incidents, checkout.startup_incidents), (32, 30));
    assert_eq!(checkout.refusals, 417);
    assert_eq!(checkout.race_window_p50_seconds, Some(1.2));
    assert_eq!(checkout.race_window_p95_seconds, Some(2.9));
    assert_eq!(r.workloads[3].phases.len(), 1);
    assert!(r.workloads[3].misconfiguration);
    assert!(!r.workloads[2].misconfiguration);

    // Eight queries, one instant, each exactly what the builder makes for the range:
    // the last dates the templates, and none dated means no split.
    let seen = fake.seen.lock().unwrap().clone();
    let q = Queries::new("24h");
    let mut expected = vec![
        q.pod_starts,
        q.affected_pod_starts,
        q.incidents,
        q.refused,
        q.window_p50,
        q.window_p95,
        q.stuck_job_pods,
        templates_query("24h", None),
    ];
    let mut got: Vec<String> = seen.iter().map(|s| s.0.clone()).collect();
    expected.sort();
    got.sort();
    assert_eq!(got, expected, "no build_info check when there is data");
    let times: std::collections::BTreeSet<&str> = seen.iter().map(|s| s.1.as_str()).collect();
    assert_eq!(times.len(), 1, "one evaluation instant: {times:?}");
    assert!(times.iter().next().unwrap().parse::<f64>().unwrap() > 1.7e9);
    for (query, _, raw) in &seen {
        if query.contains("sidecar_race_pod_template_created_timestamp_seconds") {
            continue;
        }
        if query.contains("sidecar_race_stuck_job_pods") {
            // A gauge: the most pods stuck at once within the range.
            assert!(
                query.starts_with("max by (") && query.contains("[24h]"),
                "{query}"
            );
            continue;
        }
        assert!(
            query.contains("[24h]") && query.contains("offset 24h"),
            "{query}"
        );
        assert!(
            query.starts_with("sum by (namespace, workload_kind, workload")
                || query.starts_with("histogram_quantile("),
            "{query}"
        );
        // Form-encoded (spaces as `+`, a PromQL `+` as `%2B`): decoded as sent.
        assert!(
            !raw.contains(' ') && !raw.contains('"') && raw.contains('+'),
            "{raw}"
        );
    }
    let by = |metric: &str| {
        seen.iter()
            .map(|s| s.0.as_str())
            .find(|q| q.contains(metric))
            .unwrap()
            .to_string()
    };
    assert!(by("sidecar_race_incidents_total").starts_with(
        "sum by (namespace, workload_kind, workload, sidecar, phase, pattern, kind) ("
    ));
    assert!(by("sidecar_race_refused_connections_total").starts_with(
        "sum by (namespace, workload_kind, workload, container, sidecar, port, phase) ("
    ));
    assert!(by("sidecar_race_window_seconds_bucket").contains(
        "sum by (namespace, workload_kind, workload, le) ((increase(sidecar_race_window_seconds_bucket[24h]) and (sidecar_race_window_seconds_bucket offset 24h)) or max_over_time(sidecar_race_window_seconds_bucket[24h]))"
    ));
}

#[tokio::test]
async fn fixes_name_the_container_to_move_and_the_port_to_probe() {
    let (r, _) = prometheus_report("7d").await;
    let fix = |w: usize, i: usize| &r.workloads[w].fixes[i];

    // checkout: classic startup racer; its drain fix comes after.
    let f = fix(0, 0);
    assert_eq!(f.move_to_init_containers.as_deref(), Some("istio-proxy"));
    assert_eq!(f.startup_probe_port, Some(15001));
    assert_eq!(f.refusals, 412);
    assert_eq!(
        f.advice,
        "Move istio-proxy from containers to initContainers with restartPolicy: Always and give it a startupProbe that tests port 15001, so app starts only once istio-proxy serves."
    );
    assert_eq!(fix(0, 1).phase.as_str(), "drain");

    // ledger: native without probe: add the probe, nothing to move.
    let f = fix(1, 0);
    assert_eq!(f.move_to_init_containers, None);
    assert_eq!(f.startup_probe_port, Some(5432));
    assert!(
        f.advice
            .starts_with("Give native sidecar cloud-sql-proxy a startupProbe that tests port 5432")
    );

    // frontend: drain only: ordering, or a delay in the sidecar's own shutdown (an
    // app's preStop does not delay the sidecar's SIGTERM).
    let f = fix(2, 0);
    assert_eq!(f.move_to_init_containers.as_deref(), Some("envoy"));
    assert_eq!(f.startup_probe_port, None);
    assert!(f.advice.contains(
        "initContainers with restartPolicy: Always: the kubelet stops a native sidecar only after the app containers have exited"
    ));
    assert!(
        f.advice
            .contains("delay envoy's own shutdown until nginx is done")
    );
    assert!(
        f.advice
            .contains("a preStop hook on nginx does not delay envoy's SIGTERM")
    );

    // reporter: not a race.
    let f = fix(3, 0);
    assert_eq!(
        (f.move_to_init_containers.as_ref(), f.startup_probe_port),
        (None, None)
    );
    assert!(f.advice.contains("port 4180") && f.advice.ends_with("misconfiguration, not a race."));
}

#[tokio::test]
async fn table_markdown_and_json() {
    let (r, _) = prometheus_report("7d").await;

    let table = render(&r, Format::Table);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("Sidecar races in the last 7d, from Prometheus at http://"),
        "{table}"
    );
    let header: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "#",
            "WORKLOAD",
            "SIDECARS",
            "STARTS",
            "AFFECTED",
            "SHARE",
            "INCIDENTS",
            "REFUSALS",
            "P50",
            "P95",
            "PHASES"
        ]
    );
    let row: Vec<&str> = lines[3]
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        row,
        [
            "1",
            "Deployment shop/checkout",
            "istio-proxy (classic)",
            "120",
            "28",
            "23.3%",
            "32",
            "417",
            "1.20s",
            "2.90s",
            "startup, drain"
        ],
        "{table}"
    );
    // The columns line up: every row's STARTS column ends where the header's does.
    let end = lines[2].find("STARTS").unwrap() + "STARTS".len();
    for row in &lines[3..7] {
        assert_ne!(row.as_bytes()[end - 1], b' ', "{table}");
        assert_eq!(row.as_bytes()[end], b' ', "{table}");
    }
    assert!(lines[6].starts_with("4  CronJob batch/reporter"), "{table}");
    assert!(
        lines[6].ends_with("unresolved: misconfiguration, not a race"),
        "{table}"
    );
    assert!(table.contains("\nFixes:\n1. Deployment shop/checkout\n   - startup: app → istio-proxy:15001 (classic, 412 refusals): Move istio-proxy from containers to initContainers"), "{table}");
    assert!(
        table.ends_with("1 other workload started pods without any incident.\n"),
        "{table}"
    );

    let md = render(&r, Format::Markdown);
    let rows: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
    assert_eq!(rows.len(), 2 + 4, "{md}");
    assert_eq!(
        rows[0],
        "| # | Workload | Sidecars | Pod starts | Affected starts | Share affected | Incidents | Refusals | Window p50 | Window p95 | Phases |"
    );
    assert_eq!(
        rows[1],
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|"
    );
    assert_eq!(
        rows[2],
        "| 1 | Deployment shop/checkout | `istio-proxy` (classic) | 120 | 28 | 23.3% | 32 | 417 | 1.20s | 2.90s | startup, drain |"
    );
    for row in rows.iter().skip(2) {
        assert_eq!(row.matches(" | ").count(), 10, "eleven cells: {row}");
    }
    assert!(md.contains("### Fixes\n\n1. **Deployment shop/checkout**\n   - **startup**: `app` → `istio-proxy:15001` (classic, 412 refusals): Move istio-proxy"), "{md}");

    let v: Value = serde_json::from_str(&render(&r, Format::Json)).unwrap();
    assert_eq!(v["source"]["kind"], "prometheus");
    assert_eq!(v["source"]["range"], "7d");
    assert_eq!(v["workloads_total"], 4);
    assert_eq!(v["workloads_without_incidents"], 1);
    let w = &v["workloads"][0];
    let mut keys: Vec<&str> = w.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "affected_pod_starts",
            "affected_share",
            "fixes",
            "guarded",
            "incidents",
            "migration",
            "misconfiguration",
            "namespace",
            "phases",
            "pod_starts",
            "race_window_p50_seconds",
            "race_window_p95_seconds",
            "rank",
            "refusals",
            "sidecars",
            "startup_incidents",
            "stuck_job_pods",
            "workload",
            "workload_kind"
        ]
    );
    // No template dated in the series: no migration to verify, and no VERDICT column.
    assert_eq!(w["migration"], Value::Null);
    assert_eq!(w["rank"], 1);
    assert_eq!(w["namespace"], "shop");
    assert_eq!(w["workload_kind"], "Deployment");
    assert_eq!(w["pod_starts"], 120);
    assert_eq!(w["phases"], json!(["startup", "drain"]));
    assert_eq!(
        w["sidecars"],
        json!([{"name": "istio-proxy", "pattern": "classic", "phases": ["startup", "drain"], "incidents": 32}])
    );
    assert_eq!(
        w["fixes"][0],
        json!({
            "kind": "sidecar_race",
            "phase": "startup",
            "sidecar": "istio-proxy",
            "pattern": "classic",
            "container": "app",
            "port": 15001,
            "refusals": 412,
            "processes": [],
            "guarded": false,
            "move_to_init_containers": "istio-proxy",
            "startup_probe_port": 15001,
            "advice": "Move istio-proxy from containers to initContainers with restartPolicy: Always and give it a startupProbe that tests port 15001, so app starts only once istio-proxy serves."
        })
    );
    assert_eq!(v["workloads"][1]["sidecars"][0]["pattern"], "native");
    assert_eq!(v["workloads"][3]["misconfiguration"], true);
    assert_eq!(v["workloads"][3]["race_window_p95_seconds"], Value::Null);
}

#[tokio::test]
async fn agents_give_the_same_ranking_without_pod_starts() {
    let urls = fake_agents().await;
    let fleet = report::collect(&Input::Agents {
        urls: urls.clone(),
        token: None,
    })
    .await
    .unwrap();
    let r = report::build(fleet, Some(3));
    assert_eq!(names(&r), &RANKED[..3], "--top 3");
    assert_eq!(r.workloads_total, 4);
    assert_eq!(r.workloads_without_incidents, None);
    let checkout = &r.workloads[0];
    assert_eq!(checkout.pod_starts, None);
    assert_eq!(checkout.affected_share, None);
    assert_eq!(
        checkout.affected_pod_starts, 2,
        "two pods with startup incidents"
    );
    assert_eq!((checkout.incidents, checkout.startup_incidents), (3, 2));
    assert_eq!(checkout.refusals, 34);
    assert_eq!(checkout.race_window_p50_seconds, Some(1.2));
    assert_eq!(checkout.race_window_p95_seconds, Some(2.9));
    assert_eq!(checkout.fixes[0].startup_probe_port, Some(15001));
    assert_eq!(checkout.fixes[0].refusals, 32);

    let v: Value = serde_json::from_str(&render(&r, Format::Json)).unwrap();
    assert_eq!(v["source"], json!({"kind": "agents", "urls": urls}));
    assert_eq!(v["workloads"][0]["pod_starts"], Value::Null);
    assert_eq!(v["workloads"][0]["affected_share"], Value::Null);
    assert_eq!(v["workloads_without_incidents"], Value::Null);

    let table = render(&r, Format::Table);
    let row: Vec<&str> = table
        .lines()
        .nth(3)
        .unwrap()
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        row,
        [
            "1",
            "Deployment shop/checkout",
            "istio-proxy (classic)",
            "-",
            "2",
            "-",
            "3",
            "34",
            "1.20s",
            "2.90s",
            "startup, drain"
        ],
        "{table}"
    );
    assert!(
        table
            .lines()
            .next()
            .unwrap()
            .contains("4 workloads, top 3 shown"),
        "{table}"
    );
}

fn dead_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", l.local_addr().unwrap())
}

#[tokio::test]
async fn prometheus_unreachable_is_one_clear_sentence() {
    let url = dead_url();
    let err = report::collect(&Input::Prometheus {
        url: url.clone(),
        range: "7d".into(),
        cluster_label: ClusterLabel::Off,
    })
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            ReportError::Unreachable {
                what: "Prometheus",
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("cannot reach Prometheus at {url}: ")),
        "{msg}"
    );
    assert!(msg.to_lowercase().contains("connection refused"), "{msg}");
    assert!(!msg.contains('\n'), "{msg}");
}

#[tokio::test]
async fn prometheus_without_data_asks_whether_it_scrapes_the_agents() {
    let (url, fake) = fake_prometheus(Mode::Empty).await;
    let err = report::collect(&Input::Prometheus {
        url: url.clone(),
        range: "7d".into(),
        cluster_label: ClusterLabel::Off,
    })
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Prometheus at {url} has no sidecar_race metrics in the last 7d: is it scraping the agents?"
        )
    );
    let seen = fake.seen.lock().unwrap();
    assert_eq!(seen.len(), 8);
    assert!(
        seen.iter()
            .any(|s| s.0 == "count(max_over_time(sidecar_race_build_info[7d]))")
    );
}

#[tokio::test]
async fn scraped_agents_that_saw_no_pod_start_make_an_empty_report() {
    let (url, _) = fake_prometheus(Mode::Quiet).await;
    let fleet = report::collect(&Input::Prometheus {
        url: url.clone(),
        range: "7d".into(),
        cluster_label: ClusterLabel::Off,
    })
    .await
    .unwrap();
    let r = report::build(fleet, None);
    assert!(r.workloads.is_empty());
    assert_eq!(
        render(&r, Format::Table),
        format!("Sidecar races in the last 7d, from Prometheus at {url}: none.\n")
    );
}

#[tokio::test]
async fn prometheus_error_response_is_reported() {
    let (url, _) = fake_prometheus(Mode::BadData).await;
    let err = report::collect(&Input::Prometheus {
        url: url.clone(),
        range: "7d".into(),
        cluster_label: ClusterLabel::Off,
    })
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Prometheus at {url} rejected the query (bad_data): invalid parameter \"query\": 1:27: parse error: unexpected character"
        )
    );
    // A bad range never reaches Prometheus.
    let err = report::collect(&Input::Prometheus {
        url,
        range: "7 days".into(),
        cluster_label: ClusterLabel::Off,
    })
    .await
    .unwrap_err();
    assert_eq!(err, ReportError::BadRange("7 days".into()));
}

#[tokio::test]
async fn an_unreachable_agent_is_named() {
    let mut urls = fake_agents().await;
    let dead = dead_url();
    urls.push(dead.clone());
    let err = report::collect(&Input::Agents { urls, token: None })
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("cannot reach agent at {dead}: ")),
        "{err}"
    );
    // Something that is not an agent.
    let (prom, _) = fake_prometheus(Mode::Fleet).await;
    let err = report::collect(&Input::Agents {
        urls: vec![prom.clone()],
        token: None,
    })
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("agent at {prom} answered HTTP 404 to /api/v1/incidents?limit=10000: (empty body)")
    );
}

/// Runs the binary off the runtime's threads (the fakes keep serving meanwhile).
async fn binary(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sidecar-race-agent"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.env_remove("SIDECAR_RACE_PROMETHEUS");
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_command_needs_no_root_and_takes_flags_from_the_environment() {
    let urls = fake_agents().await;
    let out = binary(
        &["report"],
        &[
            ("SIDECAR_RACE_AGENT", &urls.join(",")),
            ("SIDECAR_RACE_FORMAT", "json"),
            ("SIDECAR_RACE_TOP", "2"),
        ],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["source"]["urls"].as_array().unwrap().len(), 2);
    assert_eq!(v["workloads"].as_array().unwrap().len(), 2);

    let (prom, fake) = fake_prometheus(Mode::Fleet).await;
    let out = binary(
        &["report", "--prometheus", &prom, "--format", "markdown"],
        &[],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .starts_with("## Sidecar race report\n\nSidecar races in the last 7d")
    );
    assert!(
        fake.seen
            .lock()
            .unwrap()
            .iter()
            .all(|s| s.0.contains("[7d]")),
        "default range"
    );

    let dead = dead_url();
    let out = binary(&["report", "--prometheus", &dead], &[]).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("cannot reach Prometheus at {dead}: ")),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());

    // One source, and only one.
    let out = binary(&["report"], &[]).await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Prometheus and agents together only for the html page, whose incidents the
    // agents give.
    let out = binary(&["report", "--prometheus", &prom, "--agent", &urls[0]], &[]).await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "a usage error, as before the page"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--agent and --agents-via-api go with --prometheus only for --format html"),
        "{stderr}"
    );
    let out = binary(
        &[
            "report",
            "--prometheus",
            &prom,
            "--agent",
            &urls[0],
            "--format",
            "html",
        ],
        &[],
    )
    .await;
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    assert!(
        page.contains("from Prometheus at"),
        "Prometheus ranks: {page}"
    );
    assert!(
        page.contains("<figure class=\"incident\""),
        "the agents' incidents are drawn: {page}"
    );
    let out = binary(&["report", "--agent", &urls[0], "--agents-via-api"], &[]).await;
    assert_eq!(out.status.code(), Some(2), "one agents' source");
}

/// The ranked workloads' names in a JSON report.
fn json_names(v: &Value) -> Vec<&str> {
    v["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["workload"].as_str().unwrap())
        .collect()
}

/// `--manifests`: the workloads that raced first (by observed cost), then those of the
/// manifests that have not raced, by lint's risk; `--with-patches` gives each its
/// kustomize patch, with the startupProbe on the port the evidence shows.
#[tokio::test(flavor = "multi_thread")]
async fn manifests_join_the_evidence_into_a_migration_plan() {
    let urls = fake_agents().await;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/report-plan");
    let args = |format: &'static str| {
        vec![
            "report".to_string(),
            "--agent".into(),
            urls[0].clone(),
            "--agent".into(),
            urls[1].clone(),
            "--manifests".into(),
            dir.into(),
            "--with-patches".into(),
            "--format".into(),
            format.into(),
        ]
    };
    let run = |format: &'static str| {
        let a = args(format);
        async move { binary(&a.iter().map(String::as_str).collect::<Vec<_>>(), &[]).await }
    };
    let out = run("json").await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let raced = json_names(&v);
    assert_eq!(raced[0], "checkout", "{v:#}");
    assert_eq!(v["manifest_workloads"], 5);
    assert_eq!(v["raced_in_manifests"], 2, "checkout and ledger");
    let not_raced: Vec<(u64, &str, &str)> = v["not_raced"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["rank"].as_u64().unwrap(),
                r["workload"].as_str().unwrap(),
                r["worst_severity"].as_str().unwrap(),
            )
        })
        .collect();
    let n = raced.len() as u64;
    assert_eq!(
        not_raced,
        [
            (n + 1, "migrate-orders", "error"),
            (n + 2, "reports", "warning")
        ],
        "ranked after every raced workload, the riskier first; the clean catalog is not listed"
    );
    assert_eq!(v["not_raced"][0]["sidecars"], json!(["cloud-sql-proxy"]));
    let patches = v["patches"].as_array().unwrap();
    let patch_of = |name: &str| {
        patches
            .iter()
            .find(|p| p["workload"].as_str().unwrap().ends_with(name))
            .unwrap_or_else(|| panic!("no patch for {name}: {patches:#?}"))
    };
    assert_eq!(patch_of("/checkout")["rank"], 1);
    assert!(
        patch_of("/checkout")["patch"]
            .as_str()
            .unwrap()
            .contains("path: /healthz/ready"),
        "Istio's readiness endpoint"
    );
    // ledger's proxy: clients were refused on 5432, where it listens on loopback; its
    // --http-port=9801 serves /startup once --health-check turns it on.
    let ledger = patch_of("/ledger")["patch"].as_str().unwrap();
    assert!(
        ledger.contains("path: /startup\n            port: 9801")
            && ledger.contains("- --health-check\n"),
        "{ledger}"
    );
    assert!(
        patch_of("/migrate-orders")["patch"]
            .as_str()
            .unwrap()
            .contains("restartPolicy: Always")
    );

    let out = run("table").await;
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("Not raced yet, ranked by static risk"),
        "{text}"
    );
    assert!(text.contains("Job orders/migrate-orders"), "{text}");
    assert!(
        text.contains("# 1. Deployment shop/checkout\npatches:"),
        "{text}"
    );
    let md = String::from_utf8(run("markdown").await.stdout).unwrap();
    assert!(
        md.contains("### Not raced yet, ranked by static risk (lint)"),
        "{md}"
    );
    assert!(
        md.contains("| Job orders/migrate-orders | cloud-sql-proxy | error | SR001,SR002 |"),
        "{md}"
    );
    assert!(md.contains("```yaml\npatches:"), "{md}");
}

/// From a laptop: the agents through the API server's pod proxy (over HTTPS to the
/// agent whose probes say it serves TLS), the workloads from the cluster, all with the
/// kubeconfig; only GETs and one TokenRequest.
#[tokio::test(flavor = "multi_thread")]
async fn agents_via_api_and_cluster_from_a_laptop() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let addr = fake_api_server(seen.clone()).await;
    let config = common::kubeconfig_for(addr, "report");
    let out = binary(
        &[
            "report",
            "--agents-via-api",
            "--cluster",
            "--with-patches",
            "--format",
            "json",
        ],
        &[("KUBECONFIG", config.to_str().unwrap())],
    )
    .await;
    let _ = std::fs::remove_file(&config);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["source"]["urls"],
        json!([
            "pods/proxy sidecar-race/agent-a",
            "pods/proxy sidecar-race/agent-b"
        ]),
        "the pending agent is not asked"
    );
    let raced = json_names(&v);
    assert_eq!(raced, ["checkout", "ledger"]);
    assert_eq!(v["raced_in_manifests"], 2);
    assert_eq!(v["not_raced"][0]["workload"], "migrate-orders");
    assert_eq!(v["patches"].as_array().unwrap().len(), 4);
    let seen = seen.lock().unwrap().clone();
    // Only GETs, apart from the one TokenRequest for the scraper's short-lived token,
    // which every proxied request carries (the pod proxy drops `Authorization`).
    let posts: Vec<&str> = seen
        .iter()
        .filter(|(m, _)| m != "GET")
        .map(|(_, p)| p.as_str())
        .collect();
    assert_eq!(
        posts,
        ["/api/v1/namespaces/sidecar-race/serviceaccounts/sidecar-race-scraper/token?"],
        "{seen:?}"
    );
    let proxied: Vec<&str> = seen
        .iter()
        .filter(|(_, p)| p.contains("/proxy/"))
        .map(|(_, p)| p.as_str())
        .collect();
    assert_eq!(proxied.len(), 2, "{seen:?}");
    assert!(
        proxied.iter().all(|p| p.ends_with(" token=scraper-token")),
        "{proxied:?}"
    );
    assert!(
        seen.iter().any(|(_, p)| p.contains("labelSelector=app.kubernetes.io%2Fname%3Dsidecar-race-agent")),
        "{seen:?}"
    );
}

/// An endpoint answering without end (a misconfigured proxy, a hostile server) costs
/// the report at most its cap in memory and ends in one clear sentence.
#[tokio::test]
async fn answers_larger_than_the_cap_are_refused() {
    use sidecar_race_agent::report::client::MAX_BODY_BYTES;
    let chunk = axum::body::Bytes::from(vec![b' '; 1 << 20]);
    let pieces = (MAX_BODY_BYTES >> 20) + 8;
    let endless = move || {
        let chunk = chunk.clone();
        async move {
            let stream = futures::stream::iter(
                (0..pieces).map(move |_| Ok::<_, std::convert::Infallible>(chunk.clone())),
            );
            axum::body::Body::from_stream(stream)
        }
    };
    let router = Router::new()
        .route("/prom/api/v1/query", get(endless.clone()))
        .route("/api/v1/incidents", get(endless));
    let base = format!("http://{}", serve(router).await);

    let err = report::collect(&Input::Agents {
        urls: vec![base.clone()],
        token: None,
    })
    .await
    .unwrap_err();
    assert!(matches!(err, ReportError::TooLarge { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "agent at {base} answered /api/v1/incidents?limit=10000 with more than 64 MiB, more than the report reads from one answer"
        )
    );
    let err = report::collect(&Input::Prometheus {
        url: format!("{base}/prom"),
        range: "7d".into(),
        cluster_label: ClusterLabel::Off,
    })
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            ReportError::TooLarge {
                what: "Prometheus",
                ..
            }
        ),
        "{err:?}"
    );
}

/// An agent that holds more incidents than one answer carries says so (`truncated`);
/// the report still ranks what it got and warns that it saw only the newest.
#[tokio::test(flavor = "multi_thread")]
async fn a_truncated_agent_answer_is_reported_as_a_warning() {
    let body = json!({
        "incidents": [incident(
            1,
            "checkout-1",
            "shop",
            "Deployment",
            "checkout",
            ("app", "istio-proxy", "classic", 15001),
            ("startup", 12, Some(1.2)),
        )],
        "truncated": true,
    });
    let url = fake_agent_answering(body).await;
    let out = binary(&["report", "--agent", &url, "--format", "json"], &[]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "warning: agent {url} holds more incidents than one answer carries; the report uses its newest 1"
        )),
        "{stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json_names(&v), ["checkout"], "{v:#}");
}

/// An agent run with `--auth kubernetes` answers only a bearer token: `report --agent`
/// sends the one of `--agent-token-file` (as `kubectl create token` writes it), and
/// without one says the agent answered 401.
#[tokio::test(flavor = "multi_thread")]
async fn agents_are_read_with_the_token_of_agent_token_file() {
    let router = Router::new().route(
        "/api/v1/incidents",
        get(|headers: axum::http::HeaderMap| async move {
            match headers.get("authorization").and_then(|v| v.to_str().ok()) {
                Some("Bearer scraper-token") => Json(json!({"incidents": []})).into_response(),
                _ => (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response(),
            }
        }),
    );
    let url = format!("http://{}", serve(router).await);
    let file = std::env::temp_dir().join(format!("sr-report-token-{}", std::process::id()));
    std::fs::write(&file, "scraper-token\n").unwrap();
    let with = binary(
        &["report", "--agent", &url, "--format", "json"],
        &[("SIDECAR_RACE_AGENT_TOKEN_FILE", file.to_str().unwrap())],
    )
    .await;
    assert!(
        with.status.success(),
        "{}",
        String::from_utf8_lossy(&with.stderr)
    );
    let without = binary(&["report", "--agent", &url], &[]).await;
    assert!(!without.status.success());
    let stderr = String::from_utf8_lossy(&without.stderr);
    assert!(stderr.contains("401"), "{stderr}");
    std::fs::remove_file(file).unwrap();
}
