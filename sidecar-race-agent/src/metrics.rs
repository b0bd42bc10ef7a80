//! Prometheus metrics (`GET /metrics`, OpenMetrics). Names and labels are a public
//! interface, documented in the README.
//!
//! Labels are workload-level so series stay bounded across pod churn (`--metrics-pod-label`
//! adds `pod`). An incident is counted once its phase is final (resolved, or
//! `unresolved`), with the names known by then: the kubelet names a container only some
//! time after it starts, which is exactly when startup races happen.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use prometheus_client::{
    encoding::text::encode,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

use crate::{
    detect::{Change, Incident, Phase, State, render::IncidentView},
    events::Kind,
    kernel::probes::KindCounts,
    pipeline::Pipeline,
};

type Labels = Vec<(&'static str, String)>;

/// Race windows from 10 ms to 2 min.
const WINDOW_BUCKETS: [f64; 14] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
];

/// Pod starts whose workload is still unknown are counted after this, unlabelled.
const POD_START_NAME_WAIT: Duration = Duration::from_secs(10);

pub struct Metrics {
    registry: Registry,
    refused: Family<Labels, Counter>,
    incidents: Family<Labels, Counter>,
    window: Family<Labels, Histogram, fn() -> Histogram>,
    pod_starts: Family<Labels, Counter>,
    affected_starts: Family<Labels, Counter>,
    kernel_events: Family<Labels, Counter>,
    kernel_lost: Counter,
    refusals_other: Counter,
    unattributed: Counter,
    source_errors: Family<Labels, Counter>,
    pod_label: bool,
    /// Refusals already counted, per incident id.
    counted: HashMap<u64, u64>,
    /// Incidents already counted in `incidents`/`window`.
    settled: HashSet<u64>,
    /// Pods whose start is not counted yet (waiting for their workload's name).
    pending_starts: Vec<(String, Instant)>,
    /// Pods already counted as affected.
    affected: HashSet<String>,
    /// Last totals seen of absolute counters (kernel, pipeline), to add deltas.
    last: HashMap<String, u64>,
}

impl Metrics {
    pub fn new(pod_label: bool, version: &str, kernel: &str) -> Self {
        let mut registry = Registry::with_prefix("sidecar_race");
        let refused = Family::<Labels, Counter>::default();
        let incidents = Family::<Labels, Counter>::default();
        let window: Family<Labels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(|| Histogram::new(WINDOW_BUCKETS));
        let pod_starts = Family::<Labels, Counter>::default();
        let affected_starts = Family::<Labels, Counter>::default();
        let kernel_events = Family::<Labels, Counter>::default();
        let kernel_lost = Counter::default();
        let refusals_other = Counter::default();
        let unattributed = Counter::default();
        let source_errors = Family::<Labels, Counter>::default();
        let build_info = Family::<Labels, Gauge<i64, std::sync::atomic::AtomicI64>>::default();
        build_info
            .get_or_create(&vec![
                ("version", version.to_string()),
                ("kernel", kernel.to_string()),
            ])
            .set(1);
        registry.register(
            "refused_connections",
            "Connections refused by a sidecar port of the same pod, by phase",
            refused.clone(),
        );
        registry.register(
            "incidents",
            "Sidecar race incidents, counted once their phase is final",
            incidents.clone(),
        );
        registry.register(
            "window_seconds",
            "Race windows: startup first refusal→listener up, drain listener gone→last refusal, steady gone→back",
            window.clone(),
        );
        registry.register(
            "pod_starts",
            "Pod starts the agent saw (pod cgroup created)",
            pod_starts.clone(),
        );
        registry.register(
            "affected_pod_starts",
            "Pod starts with at least one startup incident",
            affected_starts.clone(),
        );
        registry.register(
            "kernel_events",
            "Kernel events seen, by kind (exact per-CPU counts)",
            kernel_events.clone(),
        );
        registry.register(
            "kernel_events_lost",
            "Kernel events the full ring buffer could not take",
            kernel_lost.clone(),
        );
        registry.register(
            "refusals_other",
            "Refusals that are not pod-local: never incidents",
            refusals_other.clone(),
        );
        registry.register(
            "unattributed_events",
            "Kernel events whose cgroup is unknown or of an unknown layout",
            unattributed.clone(),
        );
        registry.register(
            "pod_source_errors",
            "Failures of the pod metadata source",
            source_errors.clone(),
        );
        registry.register(
            "build_info",
            "Agent version and kernel (always 1)",
            build_info,
        );
        Self {
            registry,
            refused,
            incidents,
            window,
            pod_starts,
            affected_starts,
            kernel_events,
            kernel_lost,
            refusals_other,
            unattributed,
            source_errors,
            pod_label,
            counted: HashMap::new(),
            settled: HashSet::new(),
            pending_starts: Vec::new(),
            affected: HashSet::new(),
            last: HashMap::new(),
        }
    }

    /// The exposition, OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }

    /// The exposition in Prometheus' classic text format (0.0.4), for clients that do
    /// not ask for OpenMetrics (curl, `promtool check metrics`).
    pub fn encode_classic(&self) -> String {
        openmetrics_to_classic(&self.encode())
    }

    /// Takes what the detector changed into the counters.
    pub fn record(&mut self, changes: &[Change], p: &Pipeline, now: Instant) {
        for c in changes {
            match c {
                Change::Resolved(id) | Change::Refused(id) | Change::Rephased { id, .. } => {
                    if let Some(inc) = p.incident(*id) {
                        self.settle(inc, p);
                    }
                }
                Change::PodStarted { pod_uid } => self.pending_starts.push((pod_uid.clone(), now)),
                Change::Opened(_) | Change::Other | Change::Discarded { .. } => {}
            }
        }
        self.count_pod_starts(p, now);
        if let Some(oldest) = p.detector.incidents().newest_first().last().map(|i| i.id) {
            self.counted.retain(|id, _| *id >= oldest);
            self.settled.retain(|id| *id >= oldest);
        }
    }

    fn settle(&mut self, inc: &Incident, p: &Pipeline) {
        let final_phase = inc.state == State::Resolved || inc.phase == Phase::Unresolved;
        if !final_phase || inc.awaiting_attribution {
            return;
        }
        let v = p.view(inc);
        let counted = self.counted.entry(inc.id).or_default();
        let delta = inc.refused_count.saturating_sub(*counted);
        *counted = inc.refused_count;
        if delta > 0 {
            self.refused
                .get_or_create(&self.refused_labels(&v))
                .inc_by(delta);
        }
        if self.settled.insert(inc.id) {
            self.incidents
                .get_or_create(&self.incident_labels(&v, true))
                .inc();
            if let Some(w) = v.race_window_seconds {
                self.window
                    .get_or_create(&self.incident_labels(&v, false))
                    .observe(w);
            }
            if inc.phase == Phase::Startup && self.affected.insert(inc.pod_uid.clone()) {
                self.affected_starts
                    .get_or_create(&self.workload_labels(&v))
                    .inc();
            }
        }
    }

    /// Counts pod starts once their workload is known, or unlabelled after a while.
    fn count_pod_starts(&mut self, p: &Pipeline, now: Instant) {
        let pending = std::mem::take(&mut self.pending_starts);
        for (uid, seen) in pending {
            let pod = p.inventory.pods.pod(&uid);
            let may_learn =
                p.inventory.has_pod_source && now.duration_since(seen) < POD_START_NAME_WAIT;
            if pod.is_none() && may_learn {
                self.pending_starts.push((uid, seen));
                continue;
            }
            let mut labels = vec![
                (
                    "namespace",
                    pod.map(|p| p.namespace.clone()).unwrap_or_default(),
                ),
                (
                    "workload_kind",
                    pod.map(|p| p.workload.kind.clone()).unwrap_or_default(),
                ),
                (
                    "workload",
                    pod.map(|p| p.workload.name.clone()).unwrap_or_default(),
                ),
            ];
            if self.pod_label {
                labels.push(("pod", pod.map(|p| p.name.clone()).unwrap_or_default()));
            }
            self.pod_starts.get_or_create(&labels).inc();
        }
    }

    /// Adds what absolute counters gained since the last call (they only grow).
    pub fn update_totals(
        &mut self,
        kernel: &std::collections::BTreeMap<Kind, KindCounts>,
        refusals_other: u64,
        unattributed: u64,
        source: &str,
        source_errors: u64,
    ) {
        for (kind, counts) in kernel {
            let d = self.delta(&format!("kernel/{}", kind.name()), counts.seen);
            self.kernel_events
                .get_or_create(&vec![("kind", kind.name().to_string())])
                .inc_by(d);
        }
        let lost: u64 = kernel.values().map(|c| c.lost).sum();
        let d = self.delta("lost", lost);
        self.kernel_lost.inc_by(d);
        let d = self.delta("other", refusals_other);
        self.refusals_other.inc_by(d);
        let d = self.delta("unattributed", unattributed);
        self.unattributed.inc_by(d);
        let d = self.delta("source", source_errors);
        self.source_errors
            .get_or_create(&vec![("source", source.to_string())])
            .inc_by(d);
    }

    fn delta(&mut self, key: &str, total: u64) -> u64 {
        let last = self.last.entry(key.to_string()).or_default();
        let d = total.saturating_sub(*last);
        *last = (*last).max(total);
        d
    }

    fn workload_labels(&self, v: &IncidentView) -> Labels {
        let mut l = vec![
            ("namespace", v.namespace.clone().unwrap_or_default()),
            (
                "workload_kind",
                v.workload
                    .as_ref()
                    .map(|w| w.kind.clone())
                    .unwrap_or_default(),
            ),
            (
                "workload",
                v.workload
                    .as_ref()
                    .map(|w| w.name.clone())
                    .unwrap_or_default(),
            ),
        ];
        if self.pod_label {
            l.push(("pod", v.pod.clone().unwrap_or_default()));
        }
        l
    }

    fn refused_labels(&self, v: &IncidentView) -> Labels {
        let mut l = self.workload_labels(v);
        l.extend([
            ("container", v.container.clone().unwrap_or_default()),
            ("sidecar", v.sidecar.clone().unwrap_or_default()),
            ("port", v.port.to_string()),
            ("phase", v.phase.as_str().to_string()),
        ]);
        l
    }

    fn incident_labels(&self, v: &IncidentView, with_pattern: bool) -> Labels {
        let mut l = self.workload_labels(v);
        l.extend([
            ("sidecar", v.sidecar.clone().unwrap_or_default()),
            ("phase", v.phase.as_str().to_string()),
        ]);
        if with_pattern {
            l.push(("pattern", v.pattern.as_str().to_string()));
        }
        l
    }
}

/// OpenMetrics names a counter family without `_total` in HELP/TYPE; the classic format
/// names it as its samples are named, and has no `# EOF` or `# UNIT`.
pub fn openmetrics_to_classic(om: &str) -> String {
    let counters: HashSet<&str> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(om.len());
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}
