//! The evidence every source fills in ([`Fleet`]), before ranking, and how the
//! sources' label values and counts are read.

use std::collections::BTreeMap;

use serde::Serialize;

use super::cluster_label::LabelFrom;
use crate::{
    detect::{Kind, Phase, processes::ProcessCount},
    pods::pod_info::Pattern,
};

/// Where a report's evidence came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    Prometheus { url: String, range: String },
    Agents { urls: Vec<String> },
}

/// A workload as the metrics label it; "" is unknown (no pod metadata). Its cluster
/// is the value of the cluster label on a federating or Thanos-style Prometheus, ""
/// where the series carry none (one Prometheus per cluster, or the agents).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkloadKey {
    pub cluster: String,
    pub namespace: String,
    pub kind: String,
    pub name: String,
}

/// Incidents of one sidecar, phase and pattern. Counts are f64: Prometheus'
/// `increase()` extrapolates.
#[derive(Debug, Clone, PartialEq)]
pub struct IncidentCount {
    /// `sidecar_race` or `init_deadlock` (never `app_not_ready`).
    pub kind: Kind,
    pub sidecar: String,
    pub phase: Phase,
    pub pattern: Pattern,
    pub count: f64,
}

/// Refused connections of one client container to one sidecar port, in one phase.
#[derive(Debug, Clone, PartialEq)]
pub struct RefusalCount {
    pub container: String,
    pub sidecar: String,
    pub port: u16,
    pub phase: Phase,
    pub count: f64,
    /// The refused processes, as incidents show them (none from Prometheus).
    pub processes: Vec<ProcessCount>,
    /// Every incident behind these refusals was `guarded`.
    pub guarded: bool,
}

/// What a source knows about one workload.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evidence {
    /// `None` when the source cannot know (agents keep no pod-start history).
    pub pod_starts: Option<f64>,
    pub affected_pod_starts: f64,
    pub incidents: Vec<IncidentCount>,
    pub refusals: Vec<RefusalCount>,
    pub window_p50: Option<f64>,
    pub window_p95: Option<f64>,
    /// Job pods kept running by a classic sidecar, by sidecar name.
    pub stuck_job_pods: BTreeMap<String, f64>,
    /// Its pod template's last change in the range's series, and the evidence on
    /// each side of it (from Prometheus only; never summed across clusters).
    pub template_change: Option<TemplateChange>,
}

/// When a workload's pod template last changed, and the evidence on each side.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TemplateChange {
    /// The newest template's hash (`pod-template-hash`, `controller-revision-hash`).
    pub template: String,
    /// The creation time of its first pod, Unix seconds.
    pub changed_at: f64,
    /// Templates the series show within the range (1: no change within it).
    pub templates: usize,
    pub before: SplitEvidence,
    pub after: SplitEvidence,
}

/// One side of a template change: what the counters gained in it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SplitEvidence {
    pub pod_starts: f64,
    pub affected_pod_starts: f64,
    pub incidents: Vec<IncidentCount>,
    pub refusals: Vec<RefusalCount>,
    /// Race windows measured (the window histogram's count).
    pub race_windows: f64,
    pub window_p95: Option<f64>,
}

/// What the fleet-wide roll-up needs beyond each cluster's evidence.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Clusters {
    /// The label that names a series' cluster.
    pub label: String,
    /// Whether `--cluster-label` named it or the series carried it.
    pub label_from: LabelFrom,
    /// The race window p50 and p95 of each workload over every cluster's buckets
    /// (keys without a cluster): quantiles do not add up across clusters.
    pub windows: BTreeMap<WorkloadKey, (Option<f64>, Option<f64>)>,
}

/// Everything a source collected, before ranking.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    pub source: Source,
    pub workloads: BTreeMap<WorkloadKey, Evidence>,
    /// Set when some series named a cluster: the report adds a fleet-wide roll-up.
    pub clusters: Option<Clusters>,
}
/// Counts are whole in reality; `increase()`'s extrapolation is not evidence.
pub(super) fn whole(x: f64) -> u64 {
    x.max(0.0).round() as u64
}

/// A label value, `None` when the agent did not know it ("" from older agents).
pub(super) fn known(s: &str) -> Option<String> {
    (!s.is_empty() && s != "unknown").then(|| s.to_string())
}
/// An incident kind label; older agents had none (sidecar races only).
pub fn parse_kind(s: &str) -> Option<Kind> {
    match s {
        "" => Some(Kind::SidecarRace),
        other => Kind::parse(other),
    }
}

pub fn parse_pattern(s: &str) -> Pattern {
    match s {
        "classic" => Pattern::Classic,
        "native" => Pattern::Native,
        "native_probed" => Pattern::NativeProbed,
        _ => Pattern::Unknown,
    }
}
