//! The PromQL of a report: the agents' counters and window histogram summed over a
//! range by workload (and by cluster, when the series carry a cluster label), and the
//! checks that make a typo in a range or a label name our one-sentence error rather
//! than a PromQL parse error.

use super::error::ReportError;

const WORKLOAD: &str = "namespace, workload_kind, workload";

/// The labels the queries already group by: a cluster label named like one of them
/// would merge two meanings in one `by (...)`.
const GROUPED: [&str; 11] = [
    "namespace",
    "workload_kind",
    "workload",
    "sidecar",
    "phase",
    "pattern",
    "kind",
    "container",
    "port",
    "le",
    "template",
];

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
    /// With a cluster label: the window quantiles per workload over every cluster's
    /// buckets, for the fleet-wide roll-up (a quantile of the fleet is not a sum of
    /// the clusters' quantiles). Asked only when some series named a cluster.
    pub fleet_window_p50: Option<String>,
    pub fleet_window_p95: Option<String>,
}

impl Queries {
    /// The queries of a Prometheus that knows no cluster: one line per workload.
    pub fn new(range: &str) -> Self {
        Self::with_cluster_label(range, None)
    }

    /// The queries with `cluster_label` kept through every `sum by (...)`, so that
    /// one workload in two clusters stays two lines (a federating or Thanos-style
    /// Prometheus carries each cluster's external label as an ordinary label). Series
    /// without the label group as before, under no cluster.
    pub fn with_cluster_label(range: &str, cluster_label: Option<&str>) -> Self {
        let by = |extra: &str| match cluster_label {
            Some(c) => format!("{c}, {WORKLOAD}{extra}"),
            None => format!("{WORKLOAD}{extra}"),
        };
        let bucket = |q: f64, by: &str| {
            format!(
                "histogram_quantile({q}, {})",
                windowed_sum(
                    "sidecar_race_window_seconds_bucket",
                    &format!("{by}, le"),
                    range
                )
            )
        };
        let per_line = by("");
        Self {
            pod_starts: windowed_sum("sidecar_race_pod_starts_total", &per_line, range),
            affected_pod_starts: windowed_sum(
                "sidecar_race_affected_pod_starts_total",
                &per_line,
                range,
            ),
            incidents: windowed_sum(
                "sidecar_race_incidents_total",
                &by(", sidecar, phase, pattern, kind"),
                range,
            ),
            refused: windowed_sum(
                "sidecar_race_refused_connections_total",
                &by(", container, sidecar, port, phase"),
                range,
            ),
            window_p50: bucket(0.5, &per_line),
            window_p95: bucket(0.95, &per_line),
            stuck_job_pods: format!(
                "max by ({}) (max_over_time(sidecar_race_stuck_job_pods[{range}]))",
                by(", sidecar")
            ),
            // build_info is 1 on every agent from its start, whatever it saw.
            agents_scraped: format!("count(max_over_time(sidecar_race_build_info[{range}]))"),
            fleet_window_p50: cluster_label.map(|_| bucket(0.5, WORKLOAD)),
            fleet_window_p95: cluster_label.map(|_| bucket(0.95, WORKLOAD)),
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
    range_seconds(range).map(|_| ())
}

/// A range in Prometheus' duration syntax, in seconds (a year is 365 days, as
/// Prometheus counts it); an error unless it is a duration longer than zero.
pub fn range_seconds(range: &str) -> Result<f64, ReportError> {
    let bad = || ReportError::BadRange(range.to_string());
    let mut rest = range;
    let mut seconds = 0.0;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let n: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let (unit, scale) = [
            ("ms", 0.001),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
            ("d", 86_400.0),
            ("w", 604_800.0),
            ("y", 31_536_000.0),
        ]
        .into_iter()
        .find(|(u, _)| rest.starts_with(u))
        .ok_or_else(bad)?;
        seconds += n * scale;
        rest = &rest[unit.len()..];
    }
    if seconds > 0.0 {
        Ok(seconds)
    } else {
        Err(bad())
    }
}

/// A cluster label goes into `by (...)` unquoted, so it must be a plain label name
/// (`[a-zA-Z_][a-zA-Z0-9_]*`), not one Prometheus reserves (`__…`), and not one the
/// report already groups by.
pub fn check_cluster_label(label: &str) -> Result<(), ReportError> {
    let bad = |reason: &'static str| ReportError::BadClusterLabel {
        label: label.to_string(),
        reason,
    };
    let mut chars = label.chars();
    let plain = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !plain {
        return Err(bad(
            "a label name is letters, digits and `_`, not starting with a digit",
        ));
    }
    if label.starts_with("__") {
        return Err(bad("names starting with `__` are Prometheus' own"));
    }
    if GROUPED.contains(&label) {
        return Err(bad("the report already groups by that label"));
    }
    Ok(())
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

    /// Every query keeps the cluster label, so one workload name in two clusters is
    /// two lines; the roll-up's quantiles sum the clusters' buckets instead.
    #[test]
    fn the_cluster_label_is_kept_through_every_aggregation() {
        let q = Queries::with_cluster_label("24h", Some("k8s_cluster"));
        assert_eq!(
            q.pod_starts,
            "sum by (k8s_cluster, namespace, workload_kind, workload) ((increase(sidecar_race_pod_starts_total[24h]) and (sidecar_race_pod_starts_total offset 24h)) or max_over_time(sidecar_race_pod_starts_total[24h]))"
        );
        assert!(q.affected_pod_starts.starts_with(
            "sum by (k8s_cluster, namespace, workload_kind, workload) ((increase(sidecar_race_affected_pod_starts_total[24h])"
        ));
        assert!(q.incidents.starts_with(
            "sum by (k8s_cluster, namespace, workload_kind, workload, sidecar, phase, pattern, kind) ("
        ));
        assert!(q.refused.starts_with(
            "sum by (k8s_cluster, namespace, workload_kind, workload, container, sidecar, port, phase) ("
        ));
        for (p, quantile) in [(&q.window_p50, "0.5"), (&q.window_p95, "0.95")] {
            assert!(
                p.starts_with(&format!(
                    "histogram_quantile({quantile}, sum by (k8s_cluster, namespace, workload_kind, workload, le) ((increase(sidecar_race_window_seconds_bucket[24h])"
                )),
                "{p}"
            );
        }
        assert_eq!(
            q.stuck_job_pods,
            "max by (k8s_cluster, namespace, workload_kind, workload, sidecar) (max_over_time(sidecar_race_stuck_job_pods[24h]))"
        );
        let plain = Queries::new("24h");
        assert_eq!(
            (&plain.fleet_window_p50, &plain.fleet_window_p95),
            (&None, &None),
            "no cluster, no roll-up"
        );
        assert_eq!(q.fleet_window_p50, Some(plain.window_p50));
        assert_eq!(q.fleet_window_p95, Some(plain.window_p95));
        assert_eq!(q.agents_scraped, plain.agents_scraped);
    }

    #[test]
    fn cluster_labels_are_plain_label_names_of_their_own() {
        for ok in ["cluster", "k8s_cluster", "_c", "Cluster2"] {
            assert_eq!(check_cluster_label(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "2cluster",
            "clus-ter",
            "cluster)",
            "a b",
            "é",
            "__name__",
            "namespace",
            "workload",
            "le",
        ] {
            assert!(
                matches!(
                    check_cluster_label(bad),
                    Err(ReportError::BadClusterLabel { .. })
                ),
                "{bad}"
            );
        }
        assert_eq!(
            check_cluster_label("cluster)").unwrap_err().to_string(),
            "invalid cluster label `cluster)`: a label name is letters, digits and `_`, not starting with a digit"
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
        assert_eq!(range_seconds("1h30m"), Ok(5400.0));
        assert_eq!(range_seconds("7d"), Ok(604_800.0));
        assert_eq!(range_seconds("1500ms"), Ok(1.5));
        assert_eq!(range_seconds("1y2w"), Ok(31_536_000.0 + 1_209_600.0));
    }
}
