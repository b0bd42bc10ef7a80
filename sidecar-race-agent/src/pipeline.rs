//! From kernel events to incidents: attribution, facts, the reorder window, the
//! detector. Owned by the daemon's loop and read by the HTTP API under one lock.

use crate::{
    clock,
    detect::{
        Change, Client, Detector, DetectorConfig, Fact, Incident,
        render::{Filter, IncidentView, view},
        reorder::Reorder,
    },
    events::{KernelEvent, SocketFact},
    inventory::{
        Inventory,
        cgroup_path::{self, PathInfo},
        sources::PodUpdate,
    },
};

/// Counts of what did not become an incident, for logs and metrics.
#[derive(Debug, Default, Clone, Copy)]
pub struct PipelineCounts {
    /// Refusals that are not pod-local (or not tied to their hostNetwork pod).
    pub refusals_other: u64,
    /// Kernel events with no pod to attribute them to.
    pub events_without_pod: u64,
}

pub struct Pipeline {
    pub inventory: Inventory,
    pub detector: Detector,
    reorder: Reorder,
    pub counts: PipelineCounts,
}

impl Pipeline {
    pub fn new(inventory: Inventory, config: DetectorConfig, reorder_window_ns: u64) -> Self {
        Self {
            inventory,
            detector: Detector::new(config),
            reorder: Reorder::new(reorder_window_ns),
            counts: PipelineCounts::default(),
        }
    }

    /// Takes a kernel event in; it reaches the detector once the reorder window passed.
    pub fn kernel_event(&mut self, ev: &KernelEvent) {
        self.inventory.observe(ev);
        if let Some(fact) = self.fact(ev) {
            self.reorder.push(fact);
        }
    }

    pub fn pod_update(&mut self, update: PodUpdate) {
        self.inventory.apply(update);
    }

    /// Feeds facts older than the reorder window to the detector, then lets time pass.
    pub fn tick(&mut self, now_boot_ns: u64) -> Vec<Change> {
        let facts = self.reorder.release(now_boot_ns);
        self.detect(facts, now_boot_ns)
    }

    /// Everything still held, at shutdown.
    pub fn flush(&mut self, now_boot_ns: u64) -> Vec<Change> {
        let facts = self.reorder.drain();
        self.detect(facts, now_boot_ns)
    }

    fn detect(&mut self, facts: Vec<Fact>, now: u64) -> Vec<Change> {
        let mut changes = Vec::new();
        for fact in facts {
            changes.extend(self.detector.observe(fact, &self.inventory.pods));
        }
        changes.extend(self.detector.advance(now, &self.inventory.pods));
        for c in &changes {
            match c {
                Change::Other => self.counts.refusals_other += 1,
                Change::Discarded { refused } => self.counts.refusals_other += refused,
                _ => {}
            }
        }
        changes
    }

    fn fact(&mut self, ev: &KernelEvent) -> Option<Fact> {
        match ev {
            KernelEvent::Refused(s) => {
                let (pod_uid, client) = self.pod_client(s)?;
                Some(Fact::Refused {
                    ts: s.ts_boot_ns,
                    pod_uid,
                    client,
                    dst: s.dst?,
                    local_dst: s.local_dst,
                })
            }
            KernelEvent::Listen(s) | KernelEvent::ListenClosed(s) => {
                let (pod_uid, client) = self.pod_client(s)?;
                let container_id = match client {
                    Client::Container(id) => Some(id),
                    Client::Cgroup(_) => None,
                };
                let (ts, addr) = (s.ts_boot_ns, s.src);
                Some(if matches!(ev, KernelEvent::Listen(_)) {
                    Fact::ListenerUp {
                        ts,
                        pod_uid,
                        container_id,
                        addr,
                    }
                } else {
                    Fact::ListenerDown {
                        ts,
                        pod_uid,
                        container_id,
                        addr,
                    }
                })
            }
            KernelEvent::CgroupCreated(c) => match cgroup_path::parse(&c.path) {
                PathInfo::Pod { pod_uid } => Some(Fact::PodStarted {
                    ts: c.ts_boot_ns,
                    pod_uid,
                }),
                _ => None,
            },
            KernelEvent::CgroupRemoved(c) => match cgroup_path::parse(&c.path) {
                PathInfo::Pod { pod_uid } => Some(Fact::PodRemoved {
                    ts: c.ts_boot_ns,
                    pod_uid,
                }),
                PathInfo::PodContainer {
                    pod_uid,
                    container_id,
                    ..
                } => Some(Fact::ContainerRemoved {
                    ts: c.ts_boot_ns,
                    pod_uid,
                    container_id,
                }),
                _ => None,
            },
        }
    }

    /// The pod and client of a socket event; counted when there is no pod.
    fn pod_client(&mut self, s: &SocketFact) -> Option<(String, Client)> {
        let a = self.inventory.attribute(s.owner.cgroup_id);
        let Some(pod_uid) = a.pod_uid else {
            self.counts.events_without_pod += 1;
            return None;
        };
        let client = match a.container_id {
            Some(id) => Client::Container(id),
            None => Client::Cgroup(s.owner.cgroup_id),
        };
        Some((pod_uid, client))
    }

    /// Incidents as the API shows them, newest first.
    pub fn incidents(&self, filter: &Filter) -> Vec<IncidentView> {
        self.detector
            .incidents()
            .newest_first()
            .filter(|i| !i.awaiting_attribution)
            .map(|i| self.view(i))
            .filter(|v| filter.matches(v))
            .collect()
    }

    pub fn view(&self, incident: &Incident) -> IncidentView {
        view(incident, &self.inventory.pods, &wall)
    }

    pub fn incident(&self, id: u64) -> Option<&Incident> {
        self.detector.incidents().get(id)
    }
}

/// Kernel boot-clock ns → RFC 3339 wall-clock time.
pub fn wall(boot_ns: u64) -> String {
    clock::rfc3339_nanos(clock::boot_to_unix_ns(boot_ns))
}
