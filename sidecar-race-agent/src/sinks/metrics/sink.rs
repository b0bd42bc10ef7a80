//! The pipeline's outcomes counted into the families: incidents at their final
//! accounting, with the names known by then (the kubelet names a container only some
//! time after it starts, which is exactly when startup races happen), refusals that
//! come later, pod starts, refusals the kernel suppressed, and the stuck-Job gauge.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use super::{
    cap::{Labels, SeriesCap},
    families::Families,
};
use crate::{
    detect::{Kind, Phase, render::IncidentView},
    inventory::Attribution,
    pipeline::outcome::{Accounting, Outcome, StuckJob},
    pods::pod_info::{PodTemplate, Workload},
};

/// The label value of a name the agent does not know (never empty).
const UNKNOWN: &str = "unknown";
/// The `port` (or `socket`) label of a port no container declares and nothing was
/// seen listening on (of a socket on no pod volume that nothing was seen serving).
const OTHER_PORT: &str = "other";

/// One start of one pod: its uid and which start.
type StartKey = (String, u32);

/// Counted starts are forgotten after this (startup incidents settle within minutes).
const START_MEMORY: Duration = Duration::from_secs(3600);

/// A counted pod start, under the labels its workload had then, so a pod counted as
/// affected always falls under the same labels as its start.
struct Start {
    seen: Instant,
    labels: Labels,
    /// It had a startup incident (counted once).
    affected: bool,
}

pub(super) struct Sink {
    pub families: Families,
    pub series: SeriesCap,
    pod_label: bool,
    /// Open stuck-Job incidents and the labels their gauge was raised under.
    stuck: HashMap<u64, Labels>,
    /// Pod starts counted, by pod uid and start (0 as created, `n` the n-th in-place
    /// restart of all containers).
    starts: HashMap<StartKey, Start>,
    /// Pod starts with a startup incident settled before the start was counted.
    affected_early: HashMap<StartKey, Instant>,
}

impl Sink {
    pub(super) fn new(families: Families, series: SeriesCap, pod_label: bool) -> Self {
        Self {
            families,
            series,
            pod_label,
            stuck: HashMap::new(),
            starts: HashMap::new(),
            affected_early: HashMap::new(),
        }
    }

    pub(super) fn consume(&mut self, outcome: &Outcome, now: Instant) {
        match outcome {
            Outcome::Settled(a) => self.settle(a, now),
            Outcome::LateRefusals(a) => self.count_refusals(a, now),
            Outcome::PodStarted {
                pod_uid,
                start,
                who,
                template,
            } => {
                self.pod_started((pod_uid, *start), who, now);
                if let Some(t) = template {
                    self.template_seen(who, t, now);
                }
            }
            Outcome::Suppressed { who, refusals } => self.count_suppressed(who, *refusals, now),
            Outcome::StuckJob(StuckJob::Found(v)) if !self.stuck.contains_key(&v.id) => {
                let mut labels = self.workload_labels(v);
                labels.push(("sidecar", name(&v.sidecar)));
                let labels = self.series.labels("stuck_job_pods", labels, now);
                self.families.stuck_jobs.get_or_create(&labels).inc();
                self.stuck.insert(v.id, labels);
            }
            Outcome::StuckJob(StuckJob::Ended(id)) => {
                if let Some(labels) = self.stuck.remove(id) {
                    self.families.stuck_jobs.get_or_create(&labels).dec();
                }
            }
            Outcome::StuckJob(StuckJob::Found(_)) | Outcome::Opened(_) | Outcome::Rephased(_) => {}
        }
    }

    /// Forgets counted starts after a while, and drops the series not written for
    /// `--series-ttl` (an open stuck Job's gauge still holds its value: it stays).
    pub(super) fn prune(&mut self, now: Instant) {
        let recent = |seen: &Instant| now.duration_since(*seen) < START_MEMORY;
        self.starts.retain(|_, s| recent(&s.seen));
        self.affected_early.retain(|_, seen| recent(seen));
        for labels in self.stuck.values() {
            self.series.touch("stuck_job_pods", labels, now);
        }
        for (metric, labels) in self.series.expire(now) {
            self.families.remove(metric, &labels);
        }
    }

    /// Adds the refusals an incident gained since it was last counted.
    fn count_refusals(&mut self, a: &Accounting, now: Instant) {
        if a.new_refusals == 0 {
            return;
        }
        let v = &a.view;
        // A Unix socket incident is counted under `socket`, a port's under `port`.
        let target = match &v.socket {
            Some(_) => (
                "socket",
                a.socket.clone().unwrap_or_else(|| OTHER_PORT.into()),
            ),
            None => (
                "port",
                a.port
                    .map_or_else(|| OTHER_PORT.to_string(), |p| p.to_string()),
            ),
        };
        match v.kind {
            Kind::AppNotReady => {
                let mut l = self.workload_labels(v);
                l.extend([
                    ("container", name(&v.container)),
                    ("app", name(&v.sidecar)),
                    target,
                    protocol(v),
                ]);
                let l = self.series.labels("app_not_ready_refusals", l, now);
                self.families
                    .app_not_ready
                    .get_or_create(&l)
                    .inc_by(a.new_refusals);
            }
            Kind::StuckJob => {}
            Kind::SidecarRace | Kind::InitDeadlock => {
                let mut l = self.workload_labels(v);
                l.extend([
                    ("container", name(&v.container)),
                    ("sidecar", name(&v.sidecar)),
                    target,
                    ("phase", v.phase.as_str().to_string()),
                    protocol(v),
                ]);
                let l = self.series.labels("refused_connections", l, now);
                self.families
                    .refused
                    .get_or_create(&l)
                    .inc_by(a.new_refusals);
            }
        }
    }

    /// Final accounting of an incident (once: the pipeline says when).
    fn settle(&mut self, a: &Accounting, now: Instant) {
        self.count_refusals(a, now);
        let v = &a.view;
        if !matches!(v.kind, Kind::SidecarRace | Kind::InitDeadlock) {
            return;
        }
        let l = self
            .series
            .labels("incidents", self.incident_labels(v, true), now);
        self.families.incidents.get_or_create(&l).inc();
        if let Some(w) = v.race_window_seconds {
            let l = self
                .series
                .labels("window_seconds", self.incident_labels(v, false), now);
            self.families.window.get_or_create(&l).observe(w);
        }
        if v.kind != Kind::InitDeadlock && v.phase != Phase::Startup {
            return;
        }
        let key = (v.pod_uid.clone(), v.pod_start_number);
        match self.starts.get_mut(&key) {
            Some(start) if !start.affected => {
                start.affected = true;
                let l = self
                    .series
                    .labels("affected_pod_starts", start.labels.clone(), now);
                self.families.affected_starts.get_or_create(&l).inc();
            }
            Some(_) => {}
            None => {
                self.affected_early.insert(key, now);
            }
        }
    }

    /// Counts a pod start (once), and as affected when a startup incident of the pod
    /// was settled before.
    fn pod_started(&mut self, (pod_uid, start): (&str, u32), who: &Attribution, now: Instant) {
        let key = (pod_uid.to_string(), start);
        if self.starts.contains_key(&key) {
            return;
        }
        let labels = self.owner_labels(&who.namespace, who.workload.as_ref(), &who.pod);
        let l = self.series.labels("pod_starts", labels.clone(), now);
        self.families.pod_starts.get_or_create(&l).inc();
        let affected = self.affected_early.remove(&key).is_some();
        if affected {
            let l = self
                .series
                .labels("affected_pod_starts", labels.clone(), now);
            self.families.affected_starts.get_or_create(&l).inc();
        }
        self.starts.insert(
            key,
            Start {
                seen: now,
                labels,
                affected,
            },
        );
    }

    /// Dates the pod's template by its earliest pod: the series holds the least
    /// creation time seen (a pod the API server gave no creation time is dated now).
    /// One series per workload and template, never per pod (`--metrics-pod-label`
    /// does not apply): an old template's series ages out with `--series-ttl`.
    fn template_seen(&mut self, who: &Attribution, t: &PodTemplate, now: Instant) {
        let mut l = vec![
            ("namespace", name(&who.namespace)),
            (
                "workload_kind",
                name(&who.workload.as_ref().map(|w| w.kind.clone())),
            ),
            (
                "workload",
                name(&who.workload.as_ref().map(|w| w.name.clone())),
            ),
        ];
        l.push(("template", t.hash.clone()));
        let l = self
            .series
            .labels("pod_template_created_timestamp_seconds", l, now);
        let created = t.created.map_or_else(
            || {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_secs_f64()
            },
            |c| c.as_millisecond() as f64 / 1000.0,
        );
        let gauge = self.families.template_created.get_or_create(&l);
        // 0 is a series just made: nothing seen yet.
        if gauge.get() == 0.0 || created < gauge.get() {
            gauge.set(created);
        }
    }

    /// Adds refusals the kernel counted instead of sending (a delta).
    fn count_suppressed(&mut self, who: &Attribution, refusals: u64, now: Instant) {
        let mut l = self.owner_labels(&who.namespace, who.workload.as_ref(), &who.pod);
        l.push(("container", name(&who.container)));
        let l = self.series.labels("refusals_suppressed", l, now);
        self.families
            .refusals_suppressed
            .get_or_create(&l)
            .inc_by(refusals);
    }

    fn workload_labels(&self, v: &IncidentView) -> Labels {
        self.owner_labels(&v.namespace, v.workload.as_ref(), &v.pod)
    }

    /// `namespace`, `workload_kind`, `workload`, and `pod` with `--metrics-pod-label`.
    fn owner_labels(
        &self,
        namespace: &Option<String>,
        workload: Option<&Workload>,
        pod: &Option<String>,
    ) -> Labels {
        let mut l = vec![
            ("namespace", name(namespace)),
            ("workload_kind", name(&workload.map(|w| w.kind.clone()))),
            ("workload", name(&workload.map(|w| w.name.clone()))),
        ];
        if self.pod_label {
            l.push(("pod", name(pod)));
        }
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
        l.push(protocol(v));
        l
    }
}

/// The `protocol` label: `tcp`, `udp`, `unix` or `unixgram` (bounded).
fn protocol(v: &IncidentView) -> (&'static str, String) {
    (
        "protocol",
        v.protocol.unwrap_or_default().as_str().to_string(),
    )
}

/// A label value for a name that may be unknown.
fn name(n: &Option<String>) -> String {
    n.clone().unwrap_or_else(|| UNKNOWN.to_string())
}
