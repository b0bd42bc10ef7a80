//! Evidence from Prometheus: instant queries (`/api/v1/query`) over the agents'
//! counters and window histogram in a range, parsed from the vector responses.

use std::{
    collections::BTreeMap,
    time::{SystemTime, UNIX_EPOCH},
};

use serde::Deserialize;

pub use super::promql::{Queries, check_range, windowed_sum};
use super::{
    client::Endpoint,
    cluster_label::{CONVENTIONS, ClusterLabel, LabelFrom},
    error::ReportError,
    fleet::{
        Clusters, Evidence, Fleet, IncidentCount, RefusalCount, Source, WorkloadKey, parse_kind,
        parse_pattern,
    },
    promql::check_cluster_label,
};
use crate::detect::Phase;

/// One element of an instant vector.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub metric: BTreeMap<String, String>,
    pub value: f64,
}

impl Sample {
    fn label(&self, name: &str) -> &str {
        self.metric.get(name).map(String::as_str).unwrap_or("")
    }

    /// Its workload, in its cluster when `cluster_label` names one.
    fn workload(&self, cluster_label: Option<&str>) -> WorkloadKey {
        WorkloadKey {
            cluster: cluster_label.map(|c| self.label(c)).unwrap_or("").into(),
            namespace: self.label("namespace").into(),
            kind: self.label("workload_kind").into(),
            name: self.label("workload").into(),
        }
    }
}

#[derive(Deserialize)]
struct ApiResponse {
    status: String,
    #[serde(default)]
    data: Option<ApiData>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct ApiData {
    #[serde(rename = "resultType")]
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct VectorElement {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    /// `[<unix time>, "<value>"]`
    value: (serde_json::Value, String),
}

/// Why a response was not a vector: Prometheus said why, or it was something else.
#[derive(Debug, PartialEq)]
pub enum ParseError {
    Api { error_type: String, error: String },
    Unexpected(String),
}

/// Parses an `/api/v1/query` response body that should hold an instant vector.
pub fn parse_vector(body: &str) -> Result<Vec<Sample>, ParseError> {
    let r: ApiResponse = serde_json::from_str(body)
        .map_err(|e| ParseError::Unexpected(format!("not a Prometheus API response ({e})")))?;
    if r.status != "success" {
        return Err(ParseError::Api {
            error_type: r.error_type.unwrap_or_else(|| "unknown".into()),
            error: r.error.unwrap_or_else(|| format!("status {}", r.status)),
        });
    }
    let data = r
        .data
        .ok_or_else(|| ParseError::Unexpected("a success without data".into()))?;
    if data.result_type != "vector" {
        return Err(ParseError::Unexpected(format!(
            "a {} where an instant vector was expected",
            data.result_type
        )));
    }
    let elements: Vec<VectorElement> = serde_json::from_value(data.result)
        .map_err(|e| ParseError::Unexpected(format!("a malformed vector ({e})")))?;
    elements
        .into_iter()
        .map(|e| {
            Ok(Sample {
                value: parse_value(&e.value.1).ok_or_else(|| {
                    ParseError::Unexpected(format!("a sample value `{}`", e.value.1))
                })?,
                metric: e.metric,
            })
        })
        .collect()
}

/// Sample values are strings: numbers, `NaN`, `+Inf`, `-Inf`.
fn parse_value(v: &str) -> Option<f64> {
    match v {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => v.parse().ok(),
    }
}

/// Runs the report's queries against Prometheus at `url` over `range`; with a cluster
/// label (given, or the first convention the series carry), one line per workload
/// and cluster, and the fleet-wide quantiles when some series named a cluster.
pub async fn collect(
    url: &str,
    range: &str,
    cluster_label: &ClusterLabel,
) -> Result<Fleet, ReportError> {
    check_range(range)?;
    if let ClusterLabel::Given(label) = cluster_label {
        check_cluster_label(label)?;
    }
    let ep = Endpoint::new("Prometheus", url)?;
    // One evaluation instant for all queries, so they describe the same range.
    let at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    let (cluster_label, label_from) = match cluster_label {
        ClusterLabel::Off => (None, LabelFrom::Flag),
        ClusterLabel::Given(label) => (Some(label.as_str()), LabelFrom::Flag),
        ClusterLabel::Conventional => {
            (carried_convention(&ep, range, at).await?, LabelFrom::Series)
        }
    };
    let q = Queries::with_cluster_label(range, cluster_label);
    let (starts, affected, incidents, refused, p50, p95, stuck) = tokio::try_join!(
        query(&ep, &q.pod_starts, at),
        query(&ep, &q.affected_pod_starts, at),
        query(&ep, &q.incidents, at),
        query(&ep, &q.refused, at),
        query(&ep, &q.window_p50, at),
        query(&ep, &q.window_p95, at),
        query(&ep, &q.stuck_job_pods, at),
    )?;
    let nothing = [&starts, &affected, &incidents, &refused, &stuck]
        .iter()
        .all(|v| v.is_empty());
    // No pod start in the range is possible (agents installed after every pod
    // started); no agent at all means Prometheus does not scrape them.
    if nothing && query(&ep, &q.agents_scraped, at).await?.is_empty() {
        return Err(ReportError::NoData {
            url: url.to_string(),
            range: range.to_string(),
        });
    }
    let mut workloads: BTreeMap<WorkloadKey, Evidence> = BTreeMap::new();
    for s in &starts {
        *workloads
            .entry(s.workload(cluster_label))
            .or_default()
            .pod_starts
            .get_or_insert(0.0) += finite(s.value);
    }
    for s in &affected {
        workloads
            .entry(s.workload(cluster_label))
            .or_default()
            .affected_pod_starts += finite(s.value);
    }
    for s in &stuck {
        *workloads
            .entry(s.workload(cluster_label))
            .or_default()
            .stuck_job_pods
            .entry(s.label("sidecar").into())
            .or_default() += finite(s.value);
    }
    for s in &incidents {
        let (Some(phase), Some(kind)) =
            (Phase::parse(s.label("phase")), parse_kind(s.label("kind")))
        else {
            continue; // a phase or kind of a newer agent: no advice for it here
        };
        if !kind.is_migration_evidence() {
            continue;
        }
        workloads
            .entry(s.workload(cluster_label))
            .or_default()
            .incidents
            .push(IncidentCount {
                kind,
                sidecar: s.label("sidecar").into(),
                phase,
                pattern: parse_pattern(s.label("pattern")),
                count: finite(s.value),
            });
    }
    for s in &refused {
        let (Some(phase), Ok(port)) = (Phase::parse(s.label("phase")), s.label("port").parse())
        else {
            continue;
        };
        workloads
            .entry(s.workload(cluster_label))
            .or_default()
            .refusals
            .push(RefusalCount {
                container: s.label("container").into(),
                sidecar: s.label("sidecar").into(),
                port,
                phase,
                count: finite(s.value),
                // The metrics carry no process names (unbounded label values).
                processes: Vec::new(),
                guarded: false,
            });
    }
    for (samples, p95) in [(&p50, false), (&p95, true)] {
        for s in samples.iter().filter(|s| s.value.is_finite()) {
            let ev = workloads.entry(s.workload(cluster_label)).or_default();
            *if p95 {
                &mut ev.window_p95
            } else {
                &mut ev.window_p50
            } = Some(s.value);
        }
    }
    // The roll-up's quantiles, asked only of a Prometheus whose series name clusters
    // (a federation or a Thanos-style query layer): one Prometheus per cluster pays
    // no extra query.
    let named = workloads.keys().any(|k| !k.cluster.is_empty());
    let clusters = match (cluster_label, &q.fleet_window_p50, &q.fleet_window_p95) {
        (Some(label), Some(p50), Some(p95)) if named => {
            let (p50, p95) = tokio::try_join!(query(&ep, p50, at), query(&ep, p95, at))?;
            let mut windows: BTreeMap<WorkloadKey, (Option<f64>, Option<f64>)> = BTreeMap::new();
            for (samples, is_p95) in [(&p50, false), (&p95, true)] {
                for s in samples.iter().filter(|s| s.value.is_finite()) {
                    let w = windows.entry(s.workload(None)).or_default();
                    *if is_p95 { &mut w.1 } else { &mut w.0 } = Some(s.value);
                }
            }
            Some(Clusters {
                label: label.to_string(),
                label_from,
                windows,
            })
        }
        _ => None,
    };
    Ok(Fleet {
        source: Source::Prometheus {
            url: url.to_string(),
            range: range.to_string(),
        },
        workloads,
        clusters,
    })
}

/// The first of [`CONVENTIONS`] that some agent's `build_info` series carries within
/// `range` (every agent serves it from its start, so a cluster whose agents saw no
/// race is found too); `None` when neither does (one Prometheus per cluster).
async fn carried_convention(
    ep: &Endpoint,
    range: &str,
    at: f64,
) -> Result<Option<&'static str>, ReportError> {
    for label in CONVENTIONS {
        let carried =
            format!("count(max_over_time(sidecar_race_build_info{{{label}!=\"\"}}[{range}]))");
        if !query(ep, &carried, at).await?.is_empty() {
            return Ok(Some(label));
        }
    }
    Ok(None)
}

/// Counts: NaN/Inf (never expected from counters) count as nothing.
fn finite(v: f64) -> f64 {
    if v.is_finite() { v } else { 0.0 }
}

/// `query=…&time=…` of an instant query at `at` (Unix seconds).
fn query_string(promql: &str, at: f64) -> String {
    form_urlencoded::Serializer::new(String::new())
        .append_pair("query", promql)
        .append_pair("time", &format!("{at:.3}"))
        .finish()
}

async fn query(ep: &Endpoint, promql: &str, at: f64) -> Result<Vec<Sample>, ReportError> {
    let path = format!("/api/v1/query?{}", query_string(promql, at));
    let answer = ep.get(&path).await?;
    let success = (200..300).contains(&answer.status);
    match parse_vector(&answer.body) {
        Err(ParseError::Api { error_type, error }) => Err(ReportError::Prometheus {
            url: ep.url.clone(),
            error_type,
            error,
        }),
        _ if !success => Err(ep.http_error("/api/v1/query", &answer)),
        Ok(v) => Ok(v),
        Err(ParseError::Unexpected(reason)) => Err(ReportError::Malformed {
            what: ep.what,
            url: ep.url.clone(),
            path: "/api/v1/query".into(),
            reason,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promql_travels_intact_in_the_query_string() {
        let promql = r#"sum by (a) (m{x="y"}[7d]) + 1 é&=?#%/"#;
        let qs = query_string(promql, 1_767_000_000.5);
        assert!(
            qs.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.*%+=&".contains(&b)),
            "{qs}"
        );
        let pairs: Vec<(String, String)> =
            form_urlencoded::parse(qs.as_bytes()).into_owned().collect();
        assert_eq!(
            pairs,
            [
                ("query".to_string(), promql.to_string()),
                ("time".to_string(), "1767000000.500".to_string())
            ]
        );
    }

    /// A federating Prometheus carries each cluster's external label on its series:
    /// the same workload in two clusters is two keys, one where the label is absent.
    #[test]
    fn samples_name_their_cluster_by_the_label_given() {
        let v = parse_vector(
            r#"{"status":"success","data":{"resultType":"vector","result":[
                {"metric":{"k8s":"east","namespace":"shop","workload_kind":"Deployment","workload":"checkout"},"value":[1,"3"]},
                {"metric":{"k8s":"west","namespace":"shop","workload_kind":"Deployment","workload":"checkout"},"value":[1,"1"]},
                {"metric":{"namespace":"shop","workload_kind":"Deployment","workload":"checkout"},"value":[1,"2"]}]}}"#,
        )
        .unwrap();
        let keys: Vec<WorkloadKey> = v.iter().map(|s| s.workload(Some("k8s"))).collect();
        let clusters: Vec<&str> = keys.iter().map(|k| k.cluster.as_str()).collect();
        assert_eq!(clusters, ["east", "west", ""]);
        assert!(
            keys.iter()
                .all(|k| k.name == "checkout" && k.namespace == "shop")
        );
        assert!(v.iter().all(|s| s.workload(None).cluster.is_empty()));
    }

    #[test]
    fn parses_vectors_and_errors() {
        let v = parse_vector(
            r#"{"status":"success","data":{"resultType":"vector","result":[
                {"metric":{"namespace":"shop"},"value":[1712345678.123,"3"]},
                {"metric":{},"value":[1712345678.123,"NaN"]},
                {"metric":{},"value":[1712345678,"+Inf"]}]},"warnings":["w"]}"#,
        )
        .unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].value, 3.0);
        assert_eq!(v[0].label("namespace"), "shop");
        assert_eq!(v[0].label("workload"), "");
        assert!(v[1].value.is_nan());
        assert_eq!(v[2].value, f64::INFINITY);
        assert_eq!(
            parse_vector(r#"{"status":"error","errorType":"bad_data","error":"parse error"}"#),
            Err(ParseError::Api {
                error_type: "bad_data".into(),
                error: "parse error".into()
            })
        );
        assert!(matches!(
            parse_vector(r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#),
            Err(ParseError::Unexpected(_))
        ));
        assert!(matches!(
            parse_vector("<html>"),
            Err(ParseError::Unexpected(_))
        ));
    }
}
