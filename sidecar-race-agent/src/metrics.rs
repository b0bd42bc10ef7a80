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

/// A pod start, counted under the labels its workload had when it was counted, so a
/// pod counted as affected always falls under the same labels as its start.
struct Start {
    seen: Instant,
    /// None while waiting for the workload's name.
    labels: Option<Labels>,
    /// It had a startup incident (counted once).
    affected: bool,
}

/// Counted starts are forgotten after this (startup incidents settle within minutes).
const START_MEMORY: Duration = Duration::from_secs(3600);

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
    /// Pod starts by pod uid: waiting for the workload's name, or counted.
    starts: HashMap<String, Start>,
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
            starts: HashMap::new(),
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
                Change::PodStarted { pod_uid } => {
                    self.starts.entry(pod_uid.clone()).or_insert(Start {
                        seen: now,
                        labels: None,
                        affected: false,
                    });
                }
                Change::Opened(_) | Change::Other | Change::Discarded { .. } => {}
            }
        }
        self.count_pod_starts(p, now);
        // Forget incidents the log has evicted.
        if let Some(oldest) = p.detector.incidents().oldest_id() {
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
            if inc.phase == Phase::Startup
                && let Some(start) = self.starts.get_mut(&inc.pod_uid)
                && !start.affected
            {
                start.affected = true;
                if let Some(labels) = &start.labels {
                    self.affected_starts.get_or_create(labels).inc();
                }
            }
        }
    }

    /// Counts pod starts once their workload is known, or unlabelled after a while
    /// (or at once without a pod source); affected ones under the same labels.
    fn count_pod_starts(&mut self, p: &Pipeline, now: Instant) {
        for (uid, start) in self.starts.iter_mut() {
            if start.labels.is_some() {
                continue;
            }
            let pod = p.inventory.pods.pod(uid);
            let may_learn =
                p.inventory.has_pod_source && now.duration_since(start.seen) < POD_START_NAME_WAIT;
            if pod.is_none() && may_learn {
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
            if start.affected {
                self.affected_starts.get_or_create(&labels).inc();
            }
            start.labels = Some(labels);
        }
        self.starts
            .retain(|_, s| s.labels.is_none() || now.duration_since(s.seen) < START_MEMORY);
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

#[cfg(test)]
mod tests {
    use std::{net::SocketAddr, path::PathBuf};

    use super::*;
    use crate::{
        cgroups::CgroupIndex,
        detect::DetectorConfig,
        events::{CgroupFact, KernelEvent, Owner, SocketFact},
        inventory::{Inventory, pod_info::PodInfo, store::PodStore},
    };

    const MS: u64 = 1_000_000;
    const UID: &str = "6f2c1a6e-8b0f-4d8e-9a53-3c1d2e4f5a6b";
    /// A second pod, with no metadata.
    const UID2: &str = "0b7e4c1d-2f3a-4b5c-8d9e-1a2b3c4d5e6f";

    fn pod_path(uid: &str) -> String {
        format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
            uid.replace('-', "_")
        )
    }

    fn container_path(uid: &str, id: &str) -> String {
        format!("{}/cri-containerd-{id}.scope", pod_path(uid))
    }

    fn created(ts: u64, id: u64, path: String) -> KernelEvent {
        KernelEvent::CgroupCreated(CgroupFact {
            ts_boot_ns: ts,
            cgroup_id: id,
            level: 4,
            path,
            truncated: false,
        })
    }

    fn socket(ts: u64, cgroup: u64, src: &str, dst: Option<&str>) -> SocketFact {
        SocketFact {
            ts_boot_ns: ts,
            owner: Owner {
                cgroup_id: cgroup,
                pid: 7,
                tgid: 7,
                comm: "x".into(),
            },
            ipv6: false,
            src: src.parse::<SocketAddr>().unwrap(),
            dst: dst.map(|d| d.parse().unwrap()),
            local_dst: None,
            start_boot_ns: 0,
        }
    }

    /// Two pods race at start; one has metadata (a Deployment), one has none.
    fn scenario() -> (Pipeline, Vec<Change>) {
        let dir = std::env::temp_dir().join(format!("sr-metrics-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut pods = PodStore::new(Duration::from_secs(600));
        let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/pods/classic-deployment.json");
        let pod = PodInfo::from_json(
            serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap(),
        )
        .unwrap();
        pods.apply(pod);
        let inventory = Inventory::new(CgroupIndex::new(&dir, u64::MAX), pods, true);
        let mut p = Pipeline::new(inventory, DetectorConfig::default(), 0);
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        let events = vec![
            created(0, 100, pod_path(UID)),
            created(MS, 101, container_path(UID, &a)),
            created(MS, 102, container_path(UID, &b)),
            created(0, 200, pod_path(UID2)),
            created(MS, 201, container_path(UID2, &"c".repeat(64))),
            KernelEvent::Refused(socket(
                100 * MS,
                101,
                "127.0.0.1:40000",
                Some("127.0.0.1:15001"),
            )),
            KernelEvent::Refused(socket(
                200 * MS,
                101,
                "127.0.0.1:40001",
                Some("127.0.0.1:15001"),
            )),
            KernelEvent::Refused(socket(
                300 * MS,
                201,
                "127.0.0.1:40002",
                Some("127.0.0.1:9000"),
            )),
            KernelEvent::Refused(socket(
                310 * MS,
                201,
                "10.0.0.1:40003",
                Some("10.96.0.1:443"),
            )),
            KernelEvent::Listen(socket(1500 * MS, 102, "0.0.0.0:15001", None)),
            KernelEvent::Listen(socket(2000 * MS, 201, "127.0.0.1:9000", None)),
        ];
        let mut changes = Vec::new();
        for ev in &events {
            p.kernel_event(ev);
        }
        changes.extend(p.tick(3000 * MS));
        (p, changes)
    }

    #[test]
    fn golden_exposition() {
        let (p, changes) = scenario();
        let mut m = Metrics::new(false, "0.1.0", "6.18.0-test");
        let now = Instant::now();
        m.record(&changes, &p, now);
        // The pod without metadata is counted, unlabelled, once names had their chance.
        m.record(&[], &p, now + POD_START_NAME_WAIT + Duration::from_secs(1));
        let kernel = [
            (Kind::Refused, KindCounts { seen: 4, lost: 1 }),
            (Kind::Listen, KindCounts { seen: 2, lost: 0 }),
        ]
        .into_iter()
        .collect();
        m.update_totals(&kernel, p.counts.refusals_other, 3, "api", 2);
        // Totals only ever grow: a smaller total later adds nothing.
        m.update_totals(&kernel, 0, 1, "api", 1);
        let got = m.encode();
        let golden = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/metrics/golden.openmetrics");
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&golden, &got).unwrap();
        }
        assert_eq!(
            normalized(&got),
            normalized(&std::fs::read_to_string(&golden).unwrap()),
            "run with UPDATE_GOLDEN=1 after a deliberate change"
        );
    }

    /// Series of a family come out in hash order: compare each family's lines sorted.
    fn normalized(exposition: &str) -> Vec<Vec<String>> {
        let mut families: Vec<Vec<String>> = Vec::new();
        for line in exposition.lines() {
            if line.starts_with("# HELP ") || families.is_empty() {
                families.push(Vec::new());
            }
            families.last_mut().unwrap().push(line.to_string());
        }
        for f in &mut families {
            f.sort();
        }
        families
    }

    #[test]
    fn pod_label_and_classic_format() {
        let (p, changes) = scenario();
        let mut m = Metrics::new(true, "0.1.0", "k");
        m.record(&changes, &p, Instant::now());
        let om = m.encode();
        assert!(om.contains(r#"sidecar_race_affected_pod_starts_total{namespace="shop",workload_kind="Deployment",workload="checkout",pod="checkout-7d4b9c8f5-x2k8q"} 1"#), "{om}");
        let classic = m.encode_classic();
        assert!(classic.contains("# TYPE sidecar_race_incidents_total counter\n"));
        assert!(classic.contains("# HELP sidecar_race_refused_connections_total "));
        assert!(!classic.contains("# EOF"));
        assert!(classic.contains("# TYPE sidecar_race_window_seconds histogram\n"));
    }
}
