//! The ranked report: one line per workload with evidence, best evidence first.
//!
//! **Ranking.** Workloads with at least one incident, refusal or stuck Job pod,
//! ordered by affected pod starts (descending; an init container deadlocked on a
//! classic sidecar counts as an affected start), then Job pods kept running by a
//! sidecar, then startup incidents, then refused connections, then the worst
//! (largest) race-window p95; ties by namespace, kind and name. Workloads whose
//! refusals all come from `guarded` incidents (a wait tool such as `nc` or
//! `linkerd-await` was refused: the pod already works around the start order) rank
//! below every unguarded one, and within a workload guarded fixes come last; only
//! agents know the refused processes, so from Prometheus nothing is guarded.
//! Workloads whose only incidents are `unresolved` sidecar races come last whatever
//! their counts: nothing ever listened on the port, a misconfiguration, not a race, so
//! migrating the sidecar would not help them. `app_not_ready` findings (a sidecar
//! dialing an app that was not listening yet) are never evidence here.
//!
//! **Clusters.** Read through a federating or Thanos-style Prometheus, a workload is
//! one line per cluster (its `cluster`), ranked as above; ties keep one workload's
//! clusters together. The fleet-wide roll-up ([`FleetReport`]) ranks each workload
//! identity (namespace, kind, name) the same way on its evidence summed over every
//! cluster ([`super::rollup`]), with the same fixes, and names the clusters it raced in.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::{
    cluster_label::LabelFrom,
    fixes::{Fix, fixes, stuck_job_fix},
    fleet::{
        Clusters, Evidence, Fleet, IncidentCount, RefusalCount, Source, WorkloadKey, known, whole,
    },
    migration::{DEFAULT_MIN_STARTS, Migration, verify},
    rollup,
};
use crate::{
    detect::{Kind, Phase},
    pods::pod_info::Pattern,
};

/// The report, as `--format json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub source: Source,
    /// Workloads with evidence, before `--top`.
    pub workloads_total: usize,
    /// Workloads that started pods in the range without any incident (`null` from agents).
    pub workloads_without_incidents: Option<usize>,
    pub workloads: Vec<WorkloadReport>,
    /// Each workload over every cluster, when the series named clusters (absent
    /// otherwise, so a report of one cluster reads as it always did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetReport>,
}

/// The fleet-wide roll-up: the report's ranking of each workload identity on its
/// evidence summed over the clusters.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetReport {
    /// The label that names a series' cluster.
    pub cluster_label: String,
    /// `flag` when `--cluster-label` named it, `series` when the report found it: the
    /// first of `cluster`, `k8s_cluster_name` the series carry.
    pub cluster_label_from: LabelFrom,
    /// Every cluster the evidence names (raced or only started pods), sorted.
    pub clusters: Vec<String>,
    /// Workloads with evidence in any cluster, before `--top`.
    pub workloads_total: usize,
    /// Workloads that started pods in the range and raced in no cluster.
    pub workloads_without_incidents: usize,
    pub workloads: Vec<FleetWorkload>,
}

/// One workload over the fleet: a report line with no `cluster` of its own.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetWorkload {
    #[serde(flatten)]
    pub line: WorkloadReport,
    /// The clusters it raced in, in the order of its lines in the per-cluster ranking.
    pub clusters: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkloadReport {
    pub rank: usize,
    /// The series' cluster label; absent when they carry none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    pub namespace: Option<String>,
    pub workload_kind: Option<String>,
    pub workload: Option<String>,
    pub sidecars: Vec<SidecarReport>,
    pub pod_starts: Option<u64>,
    pub affected_pod_starts: u64,
    /// affected / starts, 0..1; `null` when starts are unknown or zero.
    pub affected_share: Option<f64>,
    pub incidents: u64,
    pub startup_incidents: u64,
    /// Job pods whose app containers finished while a classic sidecar kept them running.
    pub stuck_job_pods: u64,
    pub refusals: u64,
    pub race_window_p50_seconds: Option<f64>,
    pub race_window_p95_seconds: Option<f64>,
    pub phases: Vec<Phase>,
    /// Only `unresolved` incidents: a misconfiguration, not a race.
    pub misconfiguration: bool,
    /// Every refusal came from a `guarded` incident: the pod works around the order.
    pub guarded: bool,
    pub fixes: Vec<Fix>,
    /// Its pod template's last change and the verdict on the starts since
    /// ([`super::migration`]); `null` when the series date no template (agents as the
    /// source, Jobs, bare pods, agents older than the template series, the roll-up).
    pub migration: Option<Migration>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SidecarReport {
    pub name: Option<String>,
    pub pattern: Pattern,
    pub phases: Vec<Phase>,
    pub incidents: u64,
}
/// Ranks the workloads with evidence (see the module doc) and keeps the first `top`;
/// migrations are `fixed` after [`DEFAULT_MIN_STARTS`] clean starts.
pub fn build(fleet: Fleet, top: Option<usize>) -> Report {
    build_verified(fleet, top, DEFAULT_MIN_STARTS)
}

/// [`build`], with migrations `fixed` after `min_starts` clean starts since their
/// template changed (`--min-starts-since-change`).
pub fn build_verified(fleet: Fleet, top: Option<usize>, min_starts: u64) -> Report {
    let (lines, without) = lines(&fleet.workloads, min_starts);
    let fleet_wide =
        (fleet.clusters.as_ref()).map(|clusters| roll_up(&fleet.workloads, clusters, &lines, top));
    let (total, workloads) = first(lines, top);
    let knows_starts = matches!(fleet.source, Source::Prometheus { .. });
    Report {
        source: fleet.source,
        workloads_total: total,
        workloads_without_incidents: knows_starts.then_some(without),
        workloads,
        fleet: fleet_wide,
    }
}

/// Every workload's line, ranked; and how many workloads started pods without one.
fn lines(
    workloads: &BTreeMap<WorkloadKey, Evidence>,
    min_starts: u64,
) -> (Vec<WorkloadReport>, usize) {
    let mut without = 0;
    let mut lines: Vec<WorkloadReport> = Vec::new();
    for (key, ev) in workloads {
        match workload(key, ev, min_starts) {
            Some(w) => lines.push(w),
            None if ev.pod_starts.is_some_and(|s| s > 0.0) => without += 1,
            None => {}
        }
    }
    lines.sort_by(|a, b| {
        a.misconfiguration
            .cmp(&b.misconfiguration)
            .then(a.guarded.cmp(&b.guarded))
            .then(b.affected_pod_starts.cmp(&a.affected_pod_starts))
            .then(b.stuck_job_pods.cmp(&a.stuck_job_pods))
            .then(b.startup_incidents.cmp(&a.startup_incidents))
            .then(b.refusals.cmp(&a.refusals))
            .then(p95(b).total_cmp(&p95(a)))
            .then_with(|| name_order(a).cmp(&name_order(b)))
            .then_with(|| a.cluster.cmp(&b.cluster))
    });
    (lines, without)
}

/// The first `top` of ranked `lines`, numbered; and how many there were.
fn first(mut lines: Vec<WorkloadReport>, top: Option<usize>) -> (usize, Vec<WorkloadReport>) {
    let total = lines.len();
    lines.truncate(top.unwrap_or(usize::MAX));
    for (i, w) in lines.iter_mut().enumerate() {
        w.rank = i + 1;
    }
    (total, lines)
}

/// The fleet-wide ranking; each workload names the clusters of its lines in
/// `per_cluster` (all of them, ranked, before `--top`).
fn roll_up(
    workloads: &BTreeMap<WorkloadKey, Evidence>,
    clusters: &Clusters,
    per_cluster: &[WorkloadReport],
    top: Option<usize>,
) -> FleetReport {
    // The roll-up's evidence has no template change: each cluster rolls out alone.
    let (lines, without) = lines(&rollup::by_identity(workloads, clusters), 0);
    let (total, lines) = first(lines, top);
    FleetReport {
        cluster_label: clusters.label.clone(),
        cluster_label_from: clusters.label_from,
        clusters: rollup::cluster_names(workloads),
        workloads_total: total,
        workloads_without_incidents: without,
        workloads: lines
            .into_iter()
            .map(|line| FleetWorkload {
                clusters: per_cluster
                    .iter()
                    .filter(|l| name_order(l) == name_order(&line))
                    .filter_map(|l| l.cluster.clone())
                    .collect(),
                line,
            })
            .collect(),
    }
}

fn p95(w: &WorkloadReport) -> f64 {
    w.race_window_p95_seconds.unwrap_or(-1.0)
}

fn name_order(w: &WorkloadReport) -> (&Option<String>, &Option<String>, &Option<String>) {
    (&w.namespace, &w.workload_kind, &w.workload)
}
/// One workload's line, or `None` without any incident or refusal in the range.
pub(super) fn workload(
    key: &WorkloadKey,
    ev: &Evidence,
    min_starts: u64,
) -> Option<WorkloadReport> {
    let incidents: Vec<&IncidentCount> = ev.incidents.iter().filter(|i| i.count > 0.0).collect();
    let refusals: Vec<&RefusalCount> = ev.refusals.iter().filter(|r| r.count > 0.0).collect();
    let stuck: Vec<(&String, u64)> = ev
        .stuck_job_pods
        .iter()
        .map(|(sidecar, n)| (sidecar, whole(*n)))
        .filter(|(_, n)| *n > 0)
        .collect();
    if incidents.is_empty() && refusals.is_empty() && stuck.is_empty() {
        return None;
    }
    let phases: BTreeSet<Phase> = incidents
        .iter()
        .map(|i| i.phase)
        .chain(refusals.iter().map(|r| r.phase))
        .collect();
    let sum = |phase: Option<Phase>| {
        incidents
            .iter()
            .filter(|i| phase.is_none_or(|p| i.phase == p))
            .map(|i| i.count)
            .sum::<f64>()
    };
    let affected = whole(ev.affected_pod_starts);
    let starts = ev.pod_starts.map(whole);
    Some(WorkloadReport {
        rank: 0,
        cluster: (!key.cluster.is_empty()).then(|| key.cluster.clone()),
        namespace: known(&key.namespace),
        workload_kind: known(&key.kind),
        workload: known(&key.name),
        sidecars: sidecars(&incidents),
        pod_starts: starts,
        affected_pod_starts: affected,
        affected_share: starts
            .filter(|s| *s > 0)
            .map(|s| (affected as f64 / s as f64).min(1.0)),
        incidents: whole(sum(None)),
        startup_incidents: whole(sum(Some(Phase::Startup))),
        // Counts from a source are not trusted to be small: sums saturate.
        stuck_job_pods: stuck.iter().fold(0, |sum, (_, n)| sum.saturating_add(*n)),
        refusals: whole(refusals.iter().map(|r| r.count).sum()),
        race_window_p50_seconds: ev.window_p50,
        race_window_p95_seconds: ev.window_p95,
        misconfiguration: stuck.is_empty()
            && incidents.iter().all(|i| i.kind == Kind::SidecarRace)
            && phases.iter().all(|p| *p == Phase::Unresolved),
        phases: phases.into_iter().collect(),
        guarded: stuck.is_empty() && !refusals.is_empty() && refusals.iter().all(|r| r.guarded),
        fixes: fixes(&incidents, &refusals)
            .into_iter()
            .chain(stuck.iter().map(|(sidecar, _)| stuck_job_fix(sidecar)))
            .collect(),
        migration: ev.template_change.as_ref().map(|c| verify(c, min_starts)),
    })
}

/// The sidecars by (name, pattern): a sidecar migrated within the range shows twice.
fn sidecars(incidents: &[&IncidentCount]) -> Vec<SidecarReport> {
    let mut by: BTreeMap<(&str, &'static str), (Pattern, BTreeSet<Phase>, f64)> = BTreeMap::new();
    for i in incidents {
        let e =
            by.entry((&i.sidecar, i.pattern.as_str()))
                .or_insert((i.pattern, BTreeSet::new(), 0.0));
        e.1.insert(i.phase);
        e.2 += i.count;
    }
    let mut out: Vec<SidecarReport> = by
        .into_iter()
        .map(|((name, _), (pattern, phases, count))| SidecarReport {
            name: known(name),
            pattern,
            phases: phases.into_iter().collect(),
            incidents: whole(count),
        })
        .collect();
    out.sort_by_key(|s| std::cmp::Reverse(s.incidents));
    out
}
