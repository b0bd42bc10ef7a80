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
    detect::{
        Change, Incident, Phase,
        incident::Subject,
        render::{IncidentView, Kind as IncidentKind},
    },
    events::Kind,
    inventory::pod_info::PodInfo,
    kernel::probes::KindCounts,
    pipeline::{Pipeline, PipelineCounts, Step},
    suppressed::Owner,
};

/// The label value of a name the agent does not know (never empty).
const UNKNOWN: &str = "unknown";
/// The `port` label of a port no container declares and nothing was seen listening on.
const OTHER_PORT: &str = "other";

use crate::metrics_cap::{Labels, SeriesCap};

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
    self_refusals: Counter,
    app_not_ready: Family<Labels, Counter>,
    stuck_jobs: Family<Labels, Gauge>,
    unattributed: Counter,
    source_errors: Family<Labels, Counter>,
    events_not_posted: Family<Labels, Counter>,
    refusals_suppressed: Family<Labels, Counter>,
    kernel_dropped: Counter,
    kernel_undecodable: Counter,
    pod_label: bool,
    /// Refusals already counted, per settled incident id.
    counted: HashMap<u64, u64>,
    /// Open stuck-Job incidents and the labels their gauge was raised under.
    stuck: HashMap<u64, Labels>,
    /// Pod starts by pod uid: waiting for the workload's name, or counted.
    starts: HashMap<String, Start>,
    /// Last totals seen of absolute counters (kernel, pipeline), to add deltas.
    last: HashMap<String, u64>,
    /// The incident log's eviction count when `counted` was last pruned.
    evicted_seen: u64,
    bounds: BoundsCounters,
    series: SeriesCap,
}

/// What the agent's bounds dropped or reordered (see SECURITY.md, agent bounds).
#[derive(Clone, Default)]
struct BoundsCounters {
    incidents_evicted: Counter,
    facts_out_of_order: Counter,
    listeners_dropped: Counter,
    log_lines_suppressed: Counter,
}

/// Totals of what the bounds dropped, read from the pipeline and the log limiter.
#[derive(Debug, Default, Clone, Copy)]
pub struct BoundsTotals {
    pub incidents_evicted: u64,
    pub facts_out_of_order: u64,
    pub listeners_dropped: u64,
    pub log_lines_suppressed: u64,
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
        let self_refusals = Counter::default();
        let app_not_ready = Family::<Labels, Counter>::default();
        let stuck_jobs = Family::<Labels, Gauge>::default();
        let unattributed = Counter::default();
        let source_errors = Family::<Labels, Counter>::default();
        let events_not_posted = Family::<Labels, Counter>::default();
        let refusals_suppressed = Family::<Labels, Counter>::default();
        let kernel_dropped = Counter::default();
        let kernel_undecodable = Counter::default();
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
            "self_refusals",
            "Refusals of a container on a port it serves itself (its own probes): never incidents",
            self_refusals.clone(),
        );
        registry.register(
            "app_not_ready_refusals",
            "Connections a sidecar made to an app container's port before the app listened (inbound forwarding, rewritten probes): not sidecar races",
            app_not_ready.clone(),
        );
        registry.register(
            "stuck_job_pods",
            "Job pods whose app containers finished while a classic sidecar keeps them running",
            stuck_jobs.clone(),
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
            "k8s_events_not_posted",
            "Kubernetes Events not posted: dropped (queue full or rate limit) or failed (the API server answered an error after retries)",
            events_not_posted.clone(),
        );
        registry.register(
            "refusals_suppressed",
            "Refusals over their container's budget: counted in the kernel, not sent one by one",
            refusals_suppressed.clone(),
        );
        registry.register(
            "kernel_events_dropped",
            "Kernel records decoded but dropped because the agent's pipeline was full",
            kernel_dropped.clone(),
        );
        registry.register(
            "kernel_records_undecodable",
            "Kernel records the agent could not decode",
            kernel_undecodable.clone(),
        );
        registry.register(
            "build_info",
            "Agent version and kernel (always 1)",
            build_info,
        );
        let bounds = BoundsCounters::default();
        registry.register(
            "incidents_evicted",
            "Incidents dropped from the history to stay within --incident-history (per pod, fairly)",
            bounds.incidents_evicted.clone(),
        );
        registry.register(
            "facts_out_of_order",
            "Kernel facts that arrived behind the reorder watermark and reached the detector out of order",
            bounds.facts_out_of_order.clone(),
        );
        registry.register(
            "listeners_dropped",
            "Listeners not tracked because their pod already had the maximum of open listeners",
            bounds.listeners_dropped.clone(),
        );
        registry.register(
            "log_lines_suppressed",
            "Incident log lines suppressed by the per-pod and global log budget",
            bounds.log_lines_suppressed.clone(),
        );
        let series = SeriesCap::new(crate::metrics_cap::DEFAULT_MAX_SERIES);
        registry.register(
            "series_overflow",
            "Samples folded into a family's `overflow` series because it reached --max-series-per-metric",
            series.overflow_family(),
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
            self_refusals,
            app_not_ready,
            stuck_jobs,
            unattributed,
            source_errors,
            events_not_posted,
            refusals_suppressed,
            kernel_dropped,
            kernel_undecodable,
            pod_label,
            counted: HashMap::new(),
            stuck: HashMap::new(),
            starts: HashMap::new(),
            last: HashMap::new(),
            evicted_seen: 0,
            bounds,
            series,
        }
    }

    /// At most `max` series per family with user-chosen labels (`--max-series-per-metric`).
    pub fn with_max_series(mut self, max: usize) -> Self {
        self.series.set_max(max);
        self
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

    /// Takes what the pipeline changed into the counters: incidents when their final
    /// accounting is due (settled), refusals that arrive for settled ones later, pod
    /// starts, and the stuck-Job gauge.
    pub fn record(&mut self, step: &Step, p: &Pipeline, now: Instant) {
        for c in &step.changes {
            match c {
                Change::Refused(id) if p.is_settled(*id) => {
                    if let Some(inc) = p.incident(*id) {
                        self.count_refusals(inc, &p.view(inc), p);
                    }
                }
                Change::Opened(id) | Change::Resolved(id) => self.stuck_job(*id, p),
                Change::PodStarted { pod_uid } => {
                    self.starts.entry(pod_uid.clone()).or_insert(Start {
                        seen: now,
                        labels: None,
                        affected: false,
                    });
                }
                _ => {}
            }
        }
        for id in &step.settled {
            if let Some(inc) = p.incident(*id) {
                self.settle(inc, p);
            }
        }
        self.count_pod_starts(p, now);
        // Forget incidents the log has evicted.
        let log = p.detector.incidents();
        if self.counted.len() > log.len() || log.evicted() != self.evicted_seen {
            self.evicted_seen = log.evicted();
            self.counted.retain(|id, _| log.get(*id).is_some());
        }
    }

    /// Raises the gauge for an open stuck Job, lowers it when it ends.
    fn stuck_job(&mut self, id: u64, p: &Pipeline) {
        let Some(inc) = p.incident(id) else { return };
        if !matches!(inc.subject, Subject::StuckJob { .. }) {
            return;
        }
        if inc.is_final() {
            if let Some(labels) = self.stuck.remove(&id) {
                self.stuck_jobs.get_or_create(&labels).dec();
            }
        } else if !self.stuck.contains_key(&id) {
            let v = p.view(inc);
            let mut labels = self.workload_labels(&v);
            labels.push(("sidecar", name(&v.sidecar)));
            let labels = self.series.labels("stuck_job_pods", labels);
            self.stuck_jobs.get_or_create(&labels).inc();
            self.stuck.insert(id, labels);
        }
    }

    /// Adds the refusals an incident gained since it was last counted.
    fn count_refusals(&mut self, inc: &Incident, v: &IncidentView, p: &Pipeline) {
        let port = &port_label(inc, p);
        let counted = self.counted.entry(inc.id).or_default();
        let delta = inc.refused_count.saturating_sub(*counted);
        *counted = inc.refused_count;
        if delta == 0 {
            return;
        }
        match v.kind {
            IncidentKind::AppNotReady => {
                let mut l = self.workload_labels(v);
                l.extend([
                    ("container", name(&v.container)),
                    ("app", name(&v.sidecar)),
                    ("port", port.to_string()),
                ]);
                let l = self.series.labels("app_not_ready_refusals", l);
                self.app_not_ready.get_or_create(&l).inc_by(delta);
            }
            IncidentKind::StuckJob => {}
            IncidentKind::SidecarRace | IncidentKind::InitDeadlock => {
                let l = self.refused_labels(v, port);
                let l = self.series.labels("refused_connections", l);
                self.refused.get_or_create(&l).inc_by(delta);
            }
        }
    }

    /// Final accounting of an incident, once (the pipeline says when).
    fn settle(&mut self, inc: &Incident, p: &Pipeline) {
        let v = p.view(inc);
        self.count_refusals(inc, &v, p);
        if !matches!(
            v.kind,
            IncidentKind::SidecarRace | IncidentKind::InitDeadlock
        ) {
            return;
        }
        let l = self
            .series
            .labels("incidents", self.incident_labels(&v, true));
        self.incidents.get_or_create(&l).inc();
        if let Some(w) = v.race_window_seconds {
            let l = self
                .series
                .labels("window_seconds", self.incident_labels(&v, false));
            self.window.get_or_create(&l).observe(w);
        }
        let affected = v.kind == IncidentKind::InitDeadlock || inc.phase == Phase::Startup;
        if affected
            && let Some(start) = self.starts.get_mut(&inc.pod_uid)
            && !start.affected
        {
            start.affected = true;
            if let Some(labels) = start.labels.clone() {
                let l = self.series.labels("affected_pod_starts", labels);
                self.affected_starts.get_or_create(&l).inc();
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
            let known = |f: fn(&PodInfo) -> &String| {
                pod.map_or_else(|| UNKNOWN.to_string(), |p| f(p).clone())
            };
            let mut labels = vec![
                ("namespace", known(|p| &p.namespace)),
                ("workload_kind", known(|p| &p.workload.kind)),
                ("workload", known(|p| &p.workload.name)),
            ];
            if self.pod_label {
                labels.push(("pod", known(|p| &p.name)));
            }
            let l = self.series.labels("pod_starts", labels.clone());
            self.pod_starts.get_or_create(&l).inc();
            if start.affected {
                let l = self.series.labels("affected_pod_starts", labels.clone());
                self.affected_starts.get_or_create(&l).inc();
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
        counts: &PipelineCounts,
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
        let d = self.delta("other", counts.refusals_other);
        self.refusals_other.inc_by(d);
        let d = self.delta("self", counts.self_refusals);
        self.self_refusals.inc_by(d);
        let d = self.delta("unattributed", unattributed);
        self.unattributed.inc_by(d);
        let d = self.delta("source", source_errors);
        self.source_errors
            .get_or_create(&vec![("source", source.to_string())])
            .inc_by(d);
    }

    /// Adds what the bounds dropped since the last call.
    pub fn update_bounds(&mut self, t: BoundsTotals) {
        let b = self.bounds.clone();
        b.incidents_evicted
            .inc_by(self.delta("bounds/evicted", t.incidents_evicted));
        b.facts_out_of_order
            .inc_by(self.delta("bounds/out_of_order", t.facts_out_of_order));
        b.listeners_dropped
            .inc_by(self.delta("bounds/listeners", t.listeners_dropped));
        b.log_lines_suppressed
            .inc_by(self.delta("bounds/log", t.log_lines_suppressed));
    }

    /// Adds what the Event publisher's totals of notices not posted gained; both
    /// series exist (at 0) from the first call, so an alert can rate() them.
    pub fn update_events_not_posted(&mut self, dropped: u64, failed: u64) {
        for (reason, total) in [("dropped", dropped), ("failed", failed)] {
            let d = self.delta(&format!("events/{reason}"), total);
            self.events_not_posted
                .get_or_create(&vec![("reason", reason.to_string())])
                .inc_by(d);
        }
    }

    /// Adds the agent's own losses: records dropped on a full pipeline, and records
    /// that could not be decoded (both totals since start).
    pub fn update_stream(&mut self, dropped: u64, undecodable: u64) {
        let d = self.delta("dropped", dropped);
        self.kernel_dropped.inc_by(d);
        let d = self.delta("undecodable", undecodable);
        self.kernel_undecodable.inc_by(d);
    }

    /// Adds suppressed refusals, per owner (already deltas).
    pub fn add_suppressed(&mut self, deltas: &[(Owner, u64)]) {
        for (o, n) in deltas {
            let mut l = vec![
                ("namespace", name(&o.namespace)),
                ("workload_kind", name(&o.workload_kind)),
                ("workload", name(&o.workload)),
            ];
            if self.pod_label {
                l.push(("pod", name(&o.pod)));
            }
            l.push(("container", name(&o.container)));
            let l = self.series.labels("refusals_suppressed", l);
            self.refusals_suppressed.get_or_create(&l).inc_by(*n);
        }
    }

    fn delta(&mut self, key: &str, total: u64) -> u64 {
        let last = self.last.entry(key.to_string()).or_default();
        let d = total.saturating_sub(*last);
        *last = (*last).max(total);
        d
    }

    fn workload_labels(&self, v: &IncidentView) -> Labels {
        let workload = v.workload.as_ref();
        let mut l = vec![
            ("namespace", name(&v.namespace)),
            ("workload_kind", name(&workload.map(|w| w.kind.clone()))),
            ("workload", name(&workload.map(|w| w.name.clone()))),
        ];
        if self.pod_label {
            l.push(("pod", name(&v.pod)));
        }
        l
    }

    fn refused_labels(&self, v: &IncidentView, port: &str) -> Labels {
        let mut l = self.workload_labels(v);
        l.extend([
            ("container", name(&v.container)),
            ("sidecar", name(&v.sidecar)),
            ("port", port.to_string()),
            ("phase", v.phase.as_str().to_string()),
        ]);
        l
    }

    fn incident_labels(&self, v: &IncidentView, with_pattern: bool) -> Labels {
        let mut l = self.workload_labels(v);
        l.extend([
            ("sidecar", name(&v.sidecar)),
            ("phase", v.phase.as_str().to_string()),
        ]);
        if with_pattern {
            l.push(("pattern", v.pattern.as_str().to_string()));
            l.push(("kind", v.kind.as_str().to_string()));
        }
        l
    }
}

/// A label value for a name that may be unknown.
fn name(n: &Option<String>) -> String {
    n.clone().unwrap_or_else(|| UNKNOWN.to_string())
}

/// The `port` label: the port when a container of the pod declares it or a listener
/// was seen on it, else `other` (a client can dial any of 65,535 ports).
fn port_label(inc: &Incident, p: &Pipeline) -> String {
    let declared = p
        .inventory
        .pods
        .pod(&inc.pod_uid)
        .is_some_and(|pod| pod.containers.iter().any(|c| c.ports.contains(&inc.port)));
    let listened = inc.listener_ready_at.is_some()
        || inc.listener_closed_at.is_some()
        || p.detector.listened_on(&inc.pod_uid, inc.port);
    if declared || listened {
        inc.port.to_string()
    } else {
        OTHER_PORT.to_string()
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
    use std::path::PathBuf;

    use super::*;
    use crate::{
        detect::DetectorConfig,
        events::KernelEvent,
        inventory::sources::PodUpdate,
        test_facts::{
            CHECKOUT as UID, MS, OTHER_POD as UID2, checkout_pod, container_path, created,
            pipeline, pod_path, socket, temp_dir,
        },
    };

    /// Two pods race at start; one has metadata (a Deployment), one has none. Returns
    /// the pipeline after its first step (3 s): the pod without metadata still waits
    /// for names.
    fn scenario() -> (Pipeline, Step) {
        let dir = temp_dir("metrics");
        let mut p = pipeline(&dir, Some(checkout_pod()), DetectorConfig::default());
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        let events = vec![
            created(0, 100, pod_path(UID)),
            created(MS, 101, container_path(UID, &a)),
            created(MS, 102, container_path(UID, &b)),
            created(0, 200, pod_path(UID2)),
            created(MS, 201, container_path(UID2, &"c".repeat(64))),
            created(MS, 202, container_path(UID2, &"d".repeat(64))),
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
            // A container refused on its own port before it listens (its own probe).
            KernelEvent::Refused(socket(
                320 * MS,
                201,
                "127.0.0.1:40004",
                Some("127.0.0.1:9100"),
            )),
            KernelEvent::Listen(socket(1500 * MS, 102, "0.0.0.0:15001", None)),
            KernelEvent::Listen(socket(2000 * MS, 202, "127.0.0.1:9000", None)),
            KernelEvent::Listen(socket(2100 * MS, 201, "127.0.0.1:9100", None)),
        ];
        for ev in &events {
            p.kernel_event(ev);
        }
        let step = p.tick(3000 * MS);
        (p, step)
    }

    #[test]
    fn golden_exposition() {
        let (mut p, step) = scenario();
        let mut m = Metrics::new(false, "0.1.0", "6.18.0-test");
        let now = Instant::now();
        m.record(&step, &p, now);
        assert!(
            !m.encode().contains(r#"port="9000""#),
            "the race of the pod without names waits for them"
        );
        // The pod without metadata is counted under `unknown` once names had their
        // chance; its refusal to a non-loopback address never became pod-local.
        let step = p.tick(14_000 * MS);
        m.record(
            &step,
            &p,
            now + POD_START_NAME_WAIT + Duration::from_secs(1),
        );
        let kernel = [
            (
                Kind::Refused,
                KindCounts {
                    seen: 4,
                    lost: 1,
                    suppressed: 0,
                },
            ),
            (
                Kind::Listen,
                KindCounts {
                    seen: 2,
                    lost: 0,
                    suppressed: 0,
                },
            ),
        ]
        .into_iter()
        .collect();
        assert_eq!(p.counts.refusals_other, 1);
        m.update_totals(&kernel, &p.counts, 3, "api", 2);
        // Totals only ever grow: a smaller total later adds nothing.
        m.update_totals(&kernel, &PipelineCounts::default(), 1, "api", 1);
        m.update_stream(5, 1);
        m.update_stream(4, 1);
        let app = crate::suppressed::Owner {
            namespace: Some("shop".into()),
            workload_kind: Some("Deployment".into()),
            workload: Some("checkout".into()),
            pod: Some("checkout-7d4b9c8f5-x2k8q".into()),
            container: Some("app".into()),
        };
        m.add_suppressed(&[(app.clone(), 300), (Default::default(), 2), (app, 20)]);
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

    #[test]
    fn events_not_posted_are_counted_by_reason() {
        let mut m = Metrics::new(false, "0.1.0", "6.18.0-test");
        assert!(!m.encode().contains("k8s_events_not_posted_total{"));
        m.update_events_not_posted(0, 0);
        let classic = m.encode_classic();
        assert!(
            classic.contains(r#"sidecar_race_k8s_events_not_posted_total{reason="dropped"} 0"#),
            "{classic}"
        );
        assert!(
            classic.contains(r#"sidecar_race_k8s_events_not_posted_total{reason="failed"} 0"#),
            "{classic}"
        );
        m.update_events_not_posted(5, 2);
        m.update_events_not_posted(7, 2);
        let classic = m.encode_classic();
        assert!(
            classic.contains(r#"sidecar_race_k8s_events_not_posted_total{reason="dropped"} 7"#),
            "{classic}"
        );
        assert!(
            classic.contains(r#"sidecar_race_k8s_events_not_posted_total{reason="failed"} 2"#),
            "{classic}"
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

    /// The second pod's metadata as the pod source reports it late: its containers
    /// `c…` (the client) and `d…` (serving 9000, a declared port of `log-proxy`).
    fn late_pod() -> PodInfo {
        let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/pods/classic-deployment.json");
        let text = std::fs::read_to_string(fixture)
            .unwrap()
            .replace("6f2c1a6e-8b0f-4d8e-9a53-3c1d2e4f5a6b", UID2)
            .replace(&"a".repeat(64), &"c".repeat(64))
            .replace(&"b".repeat(64), &"d".repeat(64))
            .replace("checkout", "billing");
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["spec"]["containers"][1]["name"] = "log-proxy".into();
        v["spec"]["containers"][1]["ports"] = serde_json::json!([{"containerPort": 9000}]);
        v["status"]["containerStatuses"][1]["name"] = "log-proxy".into();
        PodInfo::from_json(v).unwrap()
    }

    #[test]
    fn metadata_that_arrives_after_the_race_labels_its_series() {
        let (mut p, step) = scenario();
        let mut m = Metrics::new(false, "0.1.0", "k");
        let now = Instant::now();
        m.record(&step, &p, now);
        // The pod source names the pod 5 s later, within the wait.
        p.pod_update(PodUpdate::Apply(Box::new(late_pod())));
        let step = p.tick(8_000 * MS);
        m.record(&step, &p, now + Duration::from_secs(5));
        let om = m.encode();
        assert!(
            om.contains(r#"sidecar_race_incidents_total{namespace="shop",workload_kind="Deployment",workload="billing",sidecar="log-proxy",phase="startup",pattern="classic",kind="sidecar_race"} 1"#),
            "{om}"
        );
        assert!(
            om.contains(r#"sidecar_race_refused_connections_total{namespace="shop",workload_kind="Deployment",workload="billing",container="app",sidecar="log-proxy",port="9000",phase="startup"} 1"#),
            "{om}"
        );
        assert!(
            !om.contains(r#""unknown""#) && !om.contains(r#"="""#),
            "{om}"
        );
    }

    #[test]
    fn pod_label_and_classic_format() {
        let (p, step) = scenario();
        let mut m = Metrics::new(true, "0.1.0", "k");
        m.record(&step, &p, Instant::now());
        let om = m.encode();
        assert!(om.contains(r#"sidecar_race_affected_pod_starts_total{namespace="shop",workload_kind="Deployment",workload="checkout",pod="checkout-7d4b9c8f5-x2k8q"} 1"#), "{om}");
        let classic = m.encode_classic();
        assert!(classic.contains("# TYPE sidecar_race_incidents_total counter\n"));
        assert!(classic.contains("# HELP sidecar_race_refused_connections_total "));
        assert!(!classic.contains("# EOF"));
        assert!(classic.contains("# TYPE sidecar_race_window_seconds histogram\n"));
    }
}
