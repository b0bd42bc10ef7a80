//! Evidence from Prometheus: instant queries (`/api/v1/query`) over the agents'
//! counters and window histogram in a range, parsed from the vector responses.

use std::{
    collections::BTreeMap,
    time::{SystemTime, UNIX_EPOCH},
};

pub use super::prom_api::{ParseError, Sample, parse_vector};
pub use super::promql::{Queries, check_range, windowed_sum};
use super::{
    client::Endpoint,
    cluster_label::{CONVENTIONS, ClusterLabel, LabelFrom},
    error::ReportError,
    fleet::{Clusters, Evidence, Fleet, Source, WorkloadKey},
    migration_query::{newest_templates, split_all, templates_query},
    prom_api::{finite, incident_count, query, refusal_count},
    promql::{check_cluster_label, range_seconds},
};

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
        if let Some(i) = incident_count(s) {
            let ev = workloads.entry(s.workload(cluster_label)).or_default();
            ev.incidents.push(i);
        }
    }
    for s in &refused {
        if let Some(r) = refusal_count(s) {
            let ev = workloads.entry(s.workload(cluster_label)).or_default();
            ev.refusals.push(r);
        }
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
    // Migration verification: each ranked workload's evidence split at its newest
    // template's first pod.
    let templates = query(&ep, &templates_query(range, cluster_label), at).await?;
    split_all(
        &ep,
        &mut workloads,
        newest_templates(&templates, cluster_label),
        cluster_label,
        at,
        range_seconds(range)?,
    )
    .await?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
