//! The fleet-wide evidence: each workload identity (namespace, kind, name) with its
//! evidence summed over the clusters it ran in, so that the roll-up is ranked and
//! fixed by the same code as each cluster's lines.

use std::collections::BTreeMap;

use super::fleet::{Clusters, Evidence, IncidentCount, RefusalCount, WorkloadKey};
use crate::detect::processes::ranked;

/// Every workload's evidence (pod starts too, where it raced nowhere) summed over
/// its clusters, keyed without a cluster; the quantiles are the fleet-wide ones of
/// `clusters`, which Prometheus computed from all clusters' buckets.
pub(super) fn by_identity(
    workloads: &BTreeMap<WorkloadKey, Evidence>,
    clusters: &Clusters,
) -> BTreeMap<WorkloadKey, Evidence> {
    let mut out: BTreeMap<WorkloadKey, Evidence> = BTreeMap::new();
    for (key, ev) in workloads {
        add(out.entry(identity(key)).or_default(), ev);
    }
    for (key, ev) in &mut out {
        (ev.window_p50, ev.window_p95) = clusters.windows.get(key).copied().unwrap_or_default();
    }
    out
}

/// The workload without its cluster.
fn identity(key: &WorkloadKey) -> WorkloadKey {
    WorkloadKey {
        cluster: String::new(),
        ..key.clone()
    }
}

/// The clusters the evidence names, sorted.
pub(super) fn cluster_names(workloads: &BTreeMap<WorkloadKey, Evidence>) -> Vec<String> {
    let mut names: Vec<String> = workloads
        .keys()
        .filter(|k| !k.cluster.is_empty())
        .map(|k| k.cluster.clone())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Adds one cluster's evidence. Counts of the same incident (kind, sidecar, phase,
/// pattern) or refusal row (container, sidecar, port, phase) are summed into one
/// entry: the fixes join each incident with each refusal row, so a row seen twice
/// would count its refusals twice.
fn add(into: &mut Evidence, ev: &Evidence) {
    if let Some(starts) = ev.pod_starts {
        *into.pod_starts.get_or_insert(0.0) += starts;
    }
    into.affected_pod_starts += ev.affected_pod_starts;
    for i in &ev.incidents {
        match into.incidents.iter_mut().find(|o| same_incident(o, i)) {
            Some(o) => o.count += i.count,
            None => into.incidents.push(i.clone()),
        }
    }
    for r in &ev.refusals {
        match into.refusals.iter_mut().find(|o| same_refusal(o, r)) {
            Some(o) => {
                o.count += r.count;
                o.guarded &= r.guarded;
                let names = o.processes.iter().chain(&r.processes);
                let mut summed: BTreeMap<&str, u64> = BTreeMap::new();
                for p in names {
                    let n = summed.entry(&p.name).or_default();
                    *n = n.saturating_add(p.count);
                }
                o.processes = ranked(summed);
            }
            None => into.refusals.push(r.clone()),
        }
    }
    // The most Job pods stuck at once in each cluster, summed: the fleet's peak if
    // the clusters peaked together, an upper bound otherwise.
    for (sidecar, n) in &ev.stuck_job_pods {
        *into.stuck_job_pods.entry(sidecar.clone()).or_default() += n;
    }
}

fn same_incident(a: &IncidentCount, b: &IncidentCount) -> bool {
    (a.kind, a.phase, &a.sidecar, a.pattern) == (b.kind, b.phase, &b.sidecar, b.pattern)
}

fn same_refusal(a: &RefusalCount, b: &RefusalCount) -> bool {
    (&a.container, &a.sidecar, a.port, a.phase) == (&b.container, &b.sidecar, b.port, b.phase)
}
