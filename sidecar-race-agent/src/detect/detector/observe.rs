//! The detector's entry points: a fact observed, time advanced, a pod forgotten.

use std::sync::Arc;

use super::{
    change::Change,
    config::DetectorConfig,
    incidents::Incidents,
    state::{Detector, REMOVED_PER_POD},
};
use crate::{
    detect::{
        fact::{Client, Fact},
        incident_log::IncidentLog,
        service::Protocol,
    },
    pods::pod_meta::PodMeta,
};

impl Detector {
    pub fn new(cfg: DetectorConfig) -> Self {
        Self {
            cfg,
            pods: foldhash::HashMap::default(),
            incidents: Incidents::new(cfg.history, cfg.history_per_pod),
            listeners_dropped: 0,
            held_dropped: 0,
            last_socket: None,
        }
    }

    pub fn incidents(&self) -> &IncidentLog {
        self.incidents.log()
    }

    pub fn observe(&mut self, fact: Fact, meta: &dyn PodMeta) -> Vec<Change> {
        match fact {
            Fact::Refused {
                ts,
                pod_uid,
                client,
                dst,
                local_dst,
                process,
            } => self.refused(
                ts,
                pod_uid,
                client,
                (Protocol::Tcp, dst, local_dst),
                process,
                meta,
            ),
            Fact::UdpRefused {
                ts,
                pod_uid,
                client,
                dst,
                process,
            } => self.refused(
                ts,
                pod_uid,
                client,
                (Protocol::Udp, dst, None),
                process,
                meta,
            ),
            Fact::UdpBound {
                ts,
                pod_uid,
                container_id,
                addr,
            } => self.listener_up(ts, &pod_uid, container_id, (Protocol::Udp, addr), meta),
            Fact::ListenerUp {
                ts,
                pod_uid,
                container_id,
                addr,
            } => self.listener_up(ts, &pod_uid, container_id, (Protocol::Tcp, addr), meta),
            Fact::ListenerDown {
                ts,
                pod_uid,
                container_id,
                addr,
            } => {
                self.listener_down(ts, &pod_uid, container_id, addr);
                Vec::new()
            }
            Fact::UnixRefused { .. }
            | Fact::UnixListenerUp { .. }
            | Fact::UnixListenerDown { .. } => self.unix_fact(fact, meta),
            Fact::PodStarted { ts, pod_uid } => {
                let ps = self.pod_state(&pod_uid);
                if ps.started_at.is_some() {
                    return Vec::new();
                }
                ps.started_at = Some(ts);
                vec![Change::PodStarted {
                    pod_uid: pod_uid.to_string(),
                    start: 0,
                }]
            }
            Fact::ContainerStarted {
                ts,
                pod_uid,
                container_id,
            } => {
                self.container_started_in_timelines(&pod_uid, &container_id, ts, meta);
                let ps = self.pod_state(&pod_uid);
                ps.containers_started.insert(container_id, ts);
                Vec::new()
            }
            Fact::PodRemoved { ts, pod_uid } => self.pod_gone(ts, &pod_uid, None, meta),
            Fact::ContainerRemoved {
                ts,
                pod_uid,
                container_id,
            } => {
                if let Some(ps) = self.pods.get_mut(&*pod_uid) {
                    ps.containers_started.remove(&container_id);
                    ps.removed.push_back((container_id.clone(), ts));
                    if ps.removed.len() > REMOVED_PER_POD {
                        ps.removed.pop_front();
                    }
                }
                self.pod_gone(
                    ts,
                    &pod_uid,
                    Some(&Client::Container(container_id.into())),
                    meta,
                )
            }
        }
    }

    /// Time passes: open incidents without a listener become `unresolved`, what the
    /// metadata now says (terminating, deleted, the pod's IPs, names) is taken into account,
    /// and Job pods kept alive by a sidecar are found.
    pub fn advance(&mut self, now: u64, meta: &dyn PodMeta) -> Vec<Change> {
        let mut changes = Vec::new();
        let uids: Vec<Arc<str>> = self.pods.keys().cloned().collect();
        for uid in uids {
            // Gone from the pod source, not from the node: its state stays until its
            // cgroup goes (or the pipeline finds it gone from both).
            if meta.is_deleted(&uid)
                && let Some(ps) = self.pods.get_mut(&uid)
            {
                ps.source_gone_at.get_or_insert(now);
            }
            changes.extend(self.in_place_restarts(&uid, meta));
            self.probe_results(&uid, now, meta);
            changes.extend(self.release_held(&uid, now, meta, false));
            changes.extend(self.rekey_sockets(&uid, meta));
            for id in self.incidents.pending_in(&uid) {
                changes.extend(self.advance_incident(now, &uid, id, meta));
            }
        }
        changes.extend(self.stuck_jobs(now, meta));
        changes
    }

    /// Pods the detector holds state for.
    pub fn tracked_pod_uids(&self) -> impl Iterator<Item = &str> {
        self.pods.keys().map(|uid| &**uid)
    }

    /// The pod is gone from the pod source and the node though its removal was never
    /// seen: its open incidents end as if its cgroup had been removed at `now`, and its
    /// state is dropped.
    pub fn forget_pod(&mut self, now: u64, pod_uid: &str, meta: &dyn PodMeta) -> Vec<Change> {
        self.pod_gone(now, pod_uid, None, meta)
    }

    /// Whether a listener on `port` of the pod was seen (and is still on record).
    pub fn listened_on(&self, pod_uid: &str, port: u16) -> bool {
        self.pods
            .get(pod_uid)
            .is_some_and(|p| !p.listeners.on_port(port).is_empty())
    }

    /// Pods with state (for tests and stats).
    pub fn tracked_pods(&self) -> usize {
        self.pods.len()
    }

    /// Listener records kept for a pod (for tests).
    pub fn listeners_of(&self, pod_uid: &str) -> usize {
        self.pods
            .get(pod_uid)
            .map_or(0, |p| p.listeners.len() + p.unix_listeners.len())
    }

    /// Listeners not tracked because their pod had the maximum of open listeners
    /// (`sidecar_race_listeners_dropped_total`).
    pub fn listeners_dropped(&self) -> u64 {
        self.listeners_dropped
    }

    /// Unix-socket facts dropped while their pod waited for its metadata, because it
    /// held its maximum (`sidecar_race_unix_facts_dropped_total`).
    pub fn held_dropped(&self) -> u64 {
        self.held_dropped
    }
}
