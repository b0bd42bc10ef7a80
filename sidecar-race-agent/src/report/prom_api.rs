//! Prometheus' HTTP API as the report reads it: instant queries (`/api/v1/query`) at
//! one evaluation instant, their vector responses parsed into samples.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{
    client::Endpoint,
    error::ReportError,
    fleet::{IncidentCount, RefusalCount, WorkloadKey, parse_kind, parse_pattern},
};
use crate::detect::Phase;

/// One element of an instant vector.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub metric: BTreeMap<String, String>,
    pub value: f64,
}

impl Sample {
    pub(super) fn label(&self, name: &str) -> &str {
        self.metric.get(name).map(String::as_str).unwrap_or("")
    }

    /// Its workload, in its cluster when `cluster_label` names one.
    pub(super) fn workload(&self, cluster_label: Option<&str>) -> WorkloadKey {
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

/// `query=…&time=…` of an instant query at `at` (Unix seconds).
fn query_string(promql: &str, at: f64) -> String {
    form_urlencoded::Serializer::new(String::new())
        .append_pair("query", promql)
        .append_pair("time", &format!("{at:.3}"))
        .finish()
}

pub(super) async fn query(
    ep: &Endpoint,
    promql: &str,
    at: f64,
) -> Result<Vec<Sample>, ReportError> {
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

/// Counts: NaN/Inf (never expected from counters) count as nothing.
pub(super) fn finite(v: f64) -> f64 {
    if v.is_finite() { v } else { 0.0 }
}

/// An incident counter's sample as evidence; `None` for a phase or kind of a newer
/// agent (no advice for it here) and for kinds that are no migration evidence.
pub(super) fn incident_count(s: &Sample) -> Option<IncidentCount> {
    let (Some(phase), Some(kind)) = (Phase::parse(s.label("phase")), parse_kind(s.label("kind")))
    else {
        return None;
    };
    kind.is_migration_evidence().then(|| IncidentCount {
        kind,
        sidecar: s.label("sidecar").into(),
        phase,
        pattern: parse_pattern(s.label("pattern")),
        count: finite(s.value),
    })
}

/// A refused-connections counter's sample as evidence; `None` without a phase or port.
pub(super) fn refusal_count(s: &Sample) -> Option<RefusalCount> {
    let (Some(phase), Ok(port)) = (Phase::parse(s.label("phase")), s.label("port").parse()) else {
        return None;
    };
    Some(RefusalCount {
        container: s.label("container").into(),
        sidecar: s.label("sidecar").into(),
        port,
        phase,
        count: finite(s.value),
        // The metrics carry no process names (unbounded label values).
        processes: Vec::new(),
        guarded: false,
    })
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
