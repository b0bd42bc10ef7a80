//! The Prometheus side of migration verification: when each workload's pod template
//! last changed (the newest template's first pod, from
//! `sidecar_race_pod_template_created_timestamp_seconds`), and the evidence counted
//! before and after that instant.
//!
//! The split is the report's own queries narrowed to one workload and evaluated twice:
//! at the change over the range before it (before), and at the report's instant over
//! the whole range (all); after is all less before. Counting after as its own short
//! window instead would let `increase()`'s extrapolation to the window's edges
//! inflate it (3 starts in a 10 s window read as 4), while both long windows count a
//! series born within the range exactly. Only the race window p95 since the change is
//! a query of its own (a quantile does not subtract). A range has one length per
//! query, so each workload with a template change costs thirteen queries; only the
//! workloads the report ranks (those with evidence) are split.

use std::collections::BTreeMap;

use super::{
    client::Endpoint,
    error::ReportError,
    fleet::{Evidence, IncidentCount, RefusalCount, SplitEvidence, TemplateChange, WorkloadKey},
    prom_api::{Sample, finite, incident_count, query, refusal_count},
    promql::windowed_sum,
};

/// The gauge that dates each workload's templates.
pub const TEMPLATE_SERIES: &str = "sidecar_race_pod_template_created_timestamp_seconds";

/// Each template's first pod in `range`, by workload (and cluster) and template.
pub fn templates_query(range: &str, cluster_label: Option<&str>) -> String {
    let by = match cluster_label {
        Some(c) => format!("{c}, namespace, workload_kind, workload, template"),
        None => "namespace, workload_kind, workload, template".into(),
    };
    format!("min by ({by}) (min_over_time({TEMPLATE_SERIES}[{range}]))")
}

/// Per workload: its newest template (the one whose first pod came last), the
/// creation time of that pod, and how many templates the range holds.
pub fn newest_templates(
    samples: &[Sample],
    cluster_label: Option<&str>,
) -> BTreeMap<WorkloadKey, (String, f64, usize)> {
    let mut out: BTreeMap<WorkloadKey, (String, f64, usize)> = BTreeMap::new();
    for s in samples
        .iter()
        .filter(|s| s.value.is_finite() && s.value > 0.0)
    {
        let template = s.label("template").to_string();
        let e = out
            .entry(s.workload(cluster_label))
            .or_insert_with(|| (template.clone(), s.value, 0));
        e.2 += 1;
        if s.value > e.1 {
            (e.0, e.1) = (template, s.value);
        }
    }
    out
}

/// A PromQL string literal (label values are users' names).
fn quoted(v: &str) -> String {
    format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The series selector of one workload (in its cluster; `label=""` also matches
/// series without the label, as its key's empty cluster means).
pub fn selector(key: &WorkloadKey, cluster_label: Option<&str>) -> String {
    let mut m = Vec::new();
    if let Some(c) = cluster_label {
        m.push(format!("{c}={}", quoted(&key.cluster)));
    }
    m.push(format!("namespace={}", quoted(&key.namespace)));
    m.push(format!("workload_kind={}", quoted(&key.kind)));
    m.push(format!("workload={}", quoted(&key.name)));
    format!("{{{}}}", m.join(","))
}

/// The six queries of one side: what the workload's counters gained in `range`
/// (milliseconds) up to the instant they are evaluated at.
pub fn side_queries(sel: &str, range: &str) -> [String; 6] {
    let sum = |metric: &str, by: &str| windowed_sum(&format!("{metric}{sel}"), by, range);
    [
        sum("sidecar_race_pod_starts_total", "workload"),
        sum("sidecar_race_affected_pod_starts_total", "workload"),
        sum(
            "sidecar_race_incidents_total",
            "sidecar, phase, pattern, kind",
        ),
        sum(
            "sidecar_race_refused_connections_total",
            "container, sidecar, port, phase",
        ),
        sum("sidecar_race_window_seconds_count", "workload"),
        format!(
            "histogram_quantile(0.95, {})",
            sum("sidecar_race_window_seconds_bucket", "le")
        ),
    ]
}

/// Splits each workload of `workloads` that has evidence and a dated template (from
/// `templates`) at its change; `at` is the report's instant, `range_s` its range.
pub(super) async fn split_all(
    ep: &Endpoint,
    workloads: &mut BTreeMap<WorkloadKey, Evidence>,
    templates: BTreeMap<WorkloadKey, (String, f64, usize)>,
    cluster_label: Option<&str>,
    at: f64,
    range_s: f64,
) -> Result<(), ReportError> {
    for (key, (template, changed_at, count)) in templates {
        let Some(ev) = workloads.get_mut(&key) else {
            continue;
        };
        if ev.incidents.is_empty() && ev.refusals.is_empty() && ev.stuck_job_pods.is_empty() {
            continue; // not a line of the report
        }
        let sel = selector(&key, cluster_label);
        // The change may be older than the range: then all of it is after.
        let since = (at - changed_at).clamp(0.0, range_s);
        let (before, all, p95_since) = tokio::try_join!(
            side(ep, &sel, changed_at, range_s - since),
            side(ep, &sel, at, range_s),
            p95(ep, &sel, at, since),
        )?;
        let after = SplitEvidence {
            window_p95: p95_since,
            ..less(&all, &before)
        };
        ev.template_change = Some(TemplateChange {
            template,
            changed_at,
            templates: count,
            before,
            after,
        });
    }
    Ok(())
}

/// What `all` counted beyond `before` (counts never below 0); no p95.
pub fn less(all: &SplitEvidence, before: &SplitEvidence) -> SplitEvidence {
    let minus = |a: f64, b: f64| (a - b).max(0.0);
    SplitEvidence {
        pod_starts: minus(all.pod_starts, before.pod_starts),
        affected_pod_starts: minus(all.affected_pod_starts, before.affected_pod_starts),
        incidents: all
            .incidents
            .iter()
            .map(|i| {
                let b = before
                    .incidents
                    .iter()
                    .filter(|b| {
                        (b.kind, &b.sidecar, b.phase, b.pattern)
                            == (i.kind, &i.sidecar, i.phase, i.pattern)
                    })
                    .map(|b| b.count)
                    .sum();
                IncidentCount {
                    count: minus(i.count, b),
                    ..i.clone()
                }
            })
            .collect(),
        refusals: all
            .refusals
            .iter()
            .map(|r| {
                let b = before
                    .refusals
                    .iter()
                    .filter(|b| {
                        (&b.container, &b.sidecar, b.port, b.phase)
                            == (&r.container, &r.sidecar, r.port, r.phase)
                    })
                    .map(|b| b.count)
                    .sum();
                RefusalCount {
                    count: minus(r.count, b),
                    ..r.clone()
                }
            })
            .collect(),
        race_windows: minus(all.race_windows, before.race_windows),
        window_p95: None,
    }
}

/// `range_s` seconds as a PromQL range in milliseconds; `None` below 1 ms.
fn millis(range_s: f64) -> Option<String> {
    let ms = (range_s * 1000.0).floor();
    (ms >= 1.0).then(|| format!("{ms}ms"))
}

/// The race window p95 of the `range_s` seconds up to `at`.
async fn p95(ep: &Endpoint, sel: &str, at: f64, range_s: f64) -> Result<Option<f64>, ReportError> {
    let Some(range) = millis(range_s) else {
        return Ok(None);
    };
    let [.., p95] = side_queries(sel, &range);
    let v = query(ep, &p95, at).await?;
    Ok(v.iter().map(|s| s.value).find(|v| v.is_finite()))
}

/// What the counters gained in the `range_s` seconds up to `at`; nothing for an
/// empty span (a change at the range's start, or at the report's instant).
async fn side(
    ep: &Endpoint,
    sel: &str,
    at: f64,
    range_s: f64,
) -> Result<SplitEvidence, ReportError> {
    let Some(range) = millis(range_s) else {
        return Ok(SplitEvidence::default());
    };
    let [starts, affected, incidents, refused, windows, p95] = side_queries(sel, &range);
    let (starts, affected, incidents, refused, windows, p95) = tokio::try_join!(
        query(ep, &starts, at),
        query(ep, &affected, at),
        query(ep, &incidents, at),
        query(ep, &refused, at),
        query(ep, &windows, at),
        query(ep, &p95, at),
    )?;
    let total = |v: &[Sample]| v.iter().map(|s| finite(s.value)).sum::<f64>();
    Ok(SplitEvidence {
        pod_starts: total(&starts),
        affected_pod_starts: total(&affected),
        incidents: incidents.iter().filter_map(incident_count).collect(),
        refusals: refused.iter().filter_map(refusal_count).collect(),
        race_windows: total(&windows),
        window_p95: p95.iter().map(|s| s.value).find(|v| v.is_finite()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::prom_api::parse_vector;

    /// Two templates of checkout (the newer one's first pod came later), one of a
    /// DaemonSet; the newest one dates the change, and a range of one template says so.
    #[test]
    fn the_newest_template_dates_the_change() {
        let v = parse_vector(
            r#"{"status":"success","data":{"resultType":"vector","result":[
                {"metric":{"namespace":"shop","workload_kind":"Deployment","workload":"checkout","template":"6c4d9f8b7"},"value":[1,"1796203800.25"]},
                {"metric":{"namespace":"shop","workload_kind":"Deployment","workload":"checkout","template":"5f7b8c9d6"},"value":[1,"1796119200"]},
                {"metric":{"namespace":"mesh","workload_kind":"DaemonSet","workload":"agent","template":"6d9f8b7c5"},"value":[1,"1796000000"]}]}}"#,
        )
        .unwrap();
        let t = newest_templates(&v, None);
        let checkout = WorkloadKey {
            cluster: String::new(),
            namespace: "shop".into(),
            kind: "Deployment".into(),
            name: "checkout".into(),
        };
        assert_eq!(t[&checkout], ("6c4d9f8b7".to_string(), 1_796_203_800.25, 2));
        let agent = t.keys().find(|k| k.name == "agent").unwrap();
        assert_eq!(t[agent].2, 1);
    }

    /// After is all less before, per incident and refusal row, never below 0.
    #[test]
    fn after_is_all_less_before() {
        use crate::{
            detect::{Kind, Phase},
            pods::pod_info::Pattern,
        };
        let inc = |pattern, count| IncidentCount {
            kind: Kind::SidecarRace,
            sidecar: "proxy".into(),
            phase: Phase::Startup,
            pattern,
            count,
        };
        let before = SplitEvidence {
            pod_starts: 2.0,
            affected_pod_starts: 2.0,
            incidents: vec![inc(Pattern::Classic, 2.0)],
            race_windows: 2.0,
            window_p95: Some(0.9),
            ..SplitEvidence::default()
        };
        let all = SplitEvidence {
            pod_starts: 4.0,
            affected_pod_starts: 2.0,
            incidents: vec![inc(Pattern::Classic, 2.0), inc(Pattern::Native, 2.0)],
            race_windows: 1.5,
            ..SplitEvidence::default()
        };
        let after = less(&all, &before);
        assert_eq!((after.pod_starts, after.affected_pod_starts), (2.0, 0.0));
        assert_eq!(
            after.incidents,
            [inc(Pattern::Classic, 0.0), inc(Pattern::Native, 2.0)]
        );
        assert_eq!((after.race_windows, after.window_p95), (0.0, None));
    }

    #[test]
    fn queries_narrow_to_one_workload_in_its_cluster() {
        assert_eq!(
            templates_query("7d", Some("cluster")),
            "min by (cluster, namespace, workload_kind, workload, template) (min_over_time(sidecar_race_pod_template_created_timestamp_seconds[7d]))"
        );
        let key = WorkloadKey {
            cluster: "east".into(),
            namespace: "shop".into(),
            kind: "Deployment".into(),
            name: "check\"out\\".into(),
        };
        let sel = selector(&key, Some("cluster"));
        assert_eq!(
            sel,
            r#"{cluster="east",namespace="shop",workload_kind="Deployment",workload="check\"out\\"}"#
        );
        assert_eq!(
            selector(&key, None),
            r#"{namespace="shop",workload_kind="Deployment",workload="check\"out\\"}"#
        );
        let q = side_queries(&sel, "90000ms");
        assert_eq!(
            q[0],
            format!(
                "sum by (workload) ((increase(sidecar_race_pod_starts_total{sel}[90000ms]) and (sidecar_race_pod_starts_total{sel} offset 90000ms)) or max_over_time(sidecar_race_pod_starts_total{sel}[90000ms]))"
            )
        );
        assert!(q[2].starts_with("sum by (sidecar, phase, pattern, kind) ("));
        assert!(q[5].starts_with(&format!(
            "histogram_quantile(0.95, sum by (le) ((increase(sidecar_race_window_seconds_bucket{sel}[90000ms])"
        )));
    }
}
