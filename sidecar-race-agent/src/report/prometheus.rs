//! Evidence from Prometheus: instant queries (`/api/v1/query`) over the agents'
//! counters and window histogram in a range, parsed from the vector responses.

use std::{
    collections::BTreeMap,
    time::{SystemTime, UNIX_EPOCH},
};

use serde::Deserialize;

use super::{
    client::Endpoint,
    error::ReportError,
    fleet::{
        Evidence, Fleet, IncidentCount, RefusalCount, Source, WorkloadKey, parse_kind,
        parse_pattern,
    },
};
use crate::detect::Phase;

const WORKLOAD: &str = "namespace, workload_kind, workload";

/// The PromQL of one report, all evaluated at the same instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Queries {
    pub pod_starts: String,
    pub affected_pod_starts: String,
    pub incidents: String,
    pub refused: String,
    pub window_p50: String,
    pub window_p95: String,
    /// Most Job pods kept running by a sidecar at once, per workload and sidecar.
    pub stuck_job_pods: String,
    /// Asked only when everything else is empty: are the agents scraped at all?
    pub agents_scraped: String,
}

impl Queries {
    pub fn new(range: &str) -> Self {
        let bucket = |q: f64| {
            format!(
                "histogram_quantile({q}, {})",
                windowed_sum(
                    "sidecar_race_window_seconds_bucket",
                    &format!("{WORKLOAD}, le"),
                    range
                )
            )
        };
        Self {
            pod_starts: windowed_sum("sidecar_race_pod_starts_total", WORKLOAD, range),
            affected_pod_starts: windowed_sum(
                "sidecar_race_affected_pod_starts_total",
                WORKLOAD,
                range,
            ),
            incidents: windowed_sum(
                "sidecar_race_incidents_total",
                &format!("{WORKLOAD}, sidecar, phase, pattern, kind"),
                range,
            ),
            refused: windowed_sum(
                "sidecar_race_refused_connections_total",
                &format!("{WORKLOAD}, container, sidecar, port, phase"),
                range,
            ),
            window_p50: bucket(0.5),
            window_p95: bucket(0.95),
            stuck_job_pods: format!(
                "max by ({WORKLOAD}, sidecar) (max_over_time(sidecar_race_stuck_job_pods[{range}]))"
            ),
            // build_info is 1 on every agent from its start, whatever it saw.
            agents_scraped: format!("count(max_over_time(sidecar_race_build_info[{range}]))"),
        }
    }
}

/// What counter `metric` gained within `range`, summed by `by` (the scrape's own
/// labels — instance, node, pod — summed away).
///
/// The agent creates a series when it first counts, already at 1 (and a restarted
/// agent starts new series), so `increase()` alone misses a new series' first steps:
/// it only measures change between samples in the range. Hence `increase()` for the
/// series that existed at the range's start (`and m offset R`), and the whole value
/// (`max_over_time`, a counter's latest value unless it reset) for the series born
/// within the range.
pub fn windowed_sum(metric: &str, by: &str, range: &str) -> String {
    format!(
        "sum by ({by}) ((increase({metric}[{range}]) and ({metric} offset {range})) or max_over_time({metric}[{range}]))"
    )
}

/// Prometheus' duration syntax (`7d`, `12h`, `1h30m`, `500ms`), checked here so a typo
/// is our one-sentence error rather than a PromQL parse error.
pub fn check_range(range: &str) -> Result<(), ReportError> {
    let bad = || ReportError::BadRange(range.to_string());
    let mut rest = range;
    let mut nonzero = false;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        nonzero |= rest[..digits].bytes().any(|b| b != b'0');
        rest = &rest[digits..];
        let unit = ["ms", "s", "m", "h", "d", "w", "y"]
            .into_iter()
            .find(|u| rest.starts_with(u))
            .ok_or_else(bad)?;
        rest = &rest[unit.len()..];
    }
    if nonzero { Ok(()) } else { Err(bad()) }
}

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

    fn workload(&self) -> WorkloadKey {
        WorkloadKey {
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

/// Runs the report's queries against Prometheus at `url` over `range`.
pub async fn collect(url: &str, range: &str) -> Result<Fleet, ReportError> {
    check_range(range)?;
    let ep = Endpoint::new("Prometheus", url)?;
    let q = Queries::new(range);
    // One evaluation instant for all queries, so they describe the same range.
    let at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
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
            .entry(s.workload())
            .or_default()
            .pod_starts
            .get_or_insert(0.0) += finite(s.value);
    }
    for s in &affected {
        workloads
            .entry(s.workload())
            .or_default()
            .affected_pod_starts += finite(s.value);
    }
    for s in &stuck {
        *workloads
            .entry(s.workload())
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
            .entry(s.workload())
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
            .entry(s.workload())
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
            let ev = workloads.entry(s.workload()).or_default();
            *if p95 {
                &mut ev.window_p95
            } else {
                &mut ev.window_p50
            } = Some(s.value);
        }
    }
    Ok(Fleet {
        source: Source::Prometheus {
            url: url.to_string(),
            range: range.to_string(),
        },
        workloads,
    })
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
    fn windowed_sum_counts_new_series_in_full() {
        assert_eq!(
            windowed_sum("m_total", "namespace, workload", "7d"),
            "sum by (namespace, workload) ((increase(m_total[7d]) and (m_total offset 7d)) or max_over_time(m_total[7d]))"
        );
    }

    #[test]
    fn queries_aggregate_by_the_right_labels() {
        let q = Queries::new("24h");
        assert!(q.pod_starts.starts_with(
            "sum by (namespace, workload_kind, workload) ((increase(sidecar_race_pod_starts_total[24h])"
        ));
        assert!(q.incidents.starts_with(
            "sum by (namespace, workload_kind, workload, sidecar, phase, pattern, kind) ("
        ));
        assert!(q.refused.starts_with(
            "sum by (namespace, workload_kind, workload, container, sidecar, port, phase) ("
        ));
        assert!(q.window_p95.starts_with(
            "histogram_quantile(0.95, sum by (namespace, workload_kind, workload, le) ((increase(sidecar_race_window_seconds_bucket[24h])"
        ));
        assert!(q.window_p50.starts_with("histogram_quantile(0.5, "));
        assert!(
            q.affected_pod_starts
                .contains("sidecar_race_affected_pod_starts_total offset 24h")
        );
    }

    #[test]
    fn ranges_follow_prometheus_durations() {
        for ok in ["7d", "12h", "1h30m", "500ms", "2w", "1y", "90s"] {
            assert_eq!(check_range(ok), Ok(()), "{ok}");
        }
        for bad in ["", "7", "d", "7days", "1.5h", "-1d", "0d", "7d ", "1h+1m"] {
            assert!(check_range(bad).is_err(), "{bad}");
        }
    }

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
