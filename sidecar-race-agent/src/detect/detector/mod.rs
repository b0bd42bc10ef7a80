//! The detector: pure logic over timestamped facts and pod metadata. No I/O, no clock
//! of its own: time advances only with the facts and `advance(now)`.
//!
//! It decides *when* refusals happened relative to the serving listener (the phase) and
//! keeps one incident per client container and port. *Who* serves whom (roles, and so
//! the incident's kind) is read from the pod metadata when the incident is shown, so
//! names and roles that arrive late still count.

mod hidden;
mod incidents;
mod instances;
mod lifecycle;
mod listener;
mod refusal;
mod unix;

use std::{
    collections::{HashMap, VecDeque},
    sync::Arc,
};

use self::incidents::Incidents;
use super::{
    fact::{Client, Fact},
    incident::{IncidentLog, Phase},
    listener_table::ListenerTable,
    service::Service,
    unix_listeners::UnixListeners,
};
use crate::inventory::pod_meta::PodMeta;

const SECOND: u64 = 1_000_000_000;

/// Removed container ids remembered per pod, to merge a crash loop's instances.
const REMOVED_PER_POD: usize = 64;

#[derive(Debug, Clone, Copy)]
pub struct DetectorConfig {
    /// No listener within this long after the first refusal: `unresolved`.
    pub unresolved_after_ns: u64,
    /// A refusal this soon after the listener came up belongs to the incident that
    /// listener resolved (the SYN was refused just before, the reset landed after).
    pub late_refusal_ns: u64,
    /// Without metadata, the pod's containers torn down within this long after the
    /// listener went away make it a drain (Kubernetes' default grace period).
    pub drain_grace_ns: u64,
    /// Refusals before a listener are a startup race only when the client container
    /// (and the serving one, when known) started at most this long before.
    pub startup_bound_ns: u64,
    /// Refusals wait this long for what the pod source has not told yet: the pod's
    /// IPs, the pod itself, a new client instance's name (0: no pod source, never wait).
    pub metadata_wait_ns: u64,
    /// A Job pod whose app containers finished this long ago while a classic sidecar
    /// still runs is stuck.
    pub stuck_job_after_ns: u64,
    pub history: usize,
    /// Incidents one pod may hold in the history (its oldest final ones go first).
    pub history_per_pod: usize,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        Self {
            unresolved_after_ns: 120 * SECOND,
            late_refusal_ns: SECOND / 10,
            drain_grace_ns: 30 * SECOND,
            startup_bound_ns: 120 * SECOND,
            metadata_wait_ns: 10 * SECOND,
            stuck_job_after_ns: 60 * SECOND,
            history: 10_000,
            history_per_pod: 1_000,
        }
    }
}

/// Why a refusal was not counted in any incident.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotARace {
    /// Not pod-local (another pod, another node, a node port).
    Other,
    /// A container refused on a port it serves itself (e.g. its own exec probe).
    SelfRefusal,
}

/// What a fact or the passing of time changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Opened(u64),
    /// Another refusal counted in an incident.
    Refused(u64),
    /// An open incident's phase is now known better.
    Rephased {
        id: u64,
        from: Phase,
    },
    Resolved(u64),
    /// Refusals that are not a race (at once, or an incident that turned out not to be).
    NotARace {
        why: NotARace,
        refused: u64,
    },
    /// The agent saw a pod start (its cgroup created).
    PodStarted {
        pod_uid: String,
    },
}

impl Change {
    /// The incident this change is about.
    pub fn incident(&self) -> Option<u64> {
        match self {
            Change::Opened(id)
            | Change::Refused(id)
            | Change::Rephased { id, .. }
            | Change::Resolved(id) => Some(*id),
            Change::NotARace { .. } | Change::PodStarted { .. } => None,
        }
    }
}

type Key = (Client, Service);

#[derive(Default)]
struct PodState {
    /// The pod's cgroup was created while the agent watched.
    started_at: Option<u64>,
    /// Container cgroups created while the agent watched, by container id.
    containers_started: HashMap<String, u64>,
    /// Containers torn down and when, newest last (bounded).
    removed: VecDeque<(String, u64)>,
    /// When the pod source stopped reporting the pod while its cgroups lived (a force
    /// delete, a missed relist): its deletion began no later than this.
    source_gone_at: Option<u64>,
    listeners: ListenerTable,
    unix_listeners: UnixListeners,
}

pub struct Detector {
    cfg: DetectorConfig,
    /// Keyed by the facts' shared pod uids (a refusal's lookup copies nothing).
    pods: foldhash::HashMap<Arc<str>, PodState>,
    incidents: Incidents,
    /// Listeners not tracked: their pod had the maximum of open listeners.
    listeners_dropped: u64,
    /// The socket the last Unix refusal resolved to.
    last_socket: Option<unix::ResolvedSocket>,
}

impl PodState {
    /// When container `id` was torn down, if it was while the agent watched.
    fn removed_at(&self, id: &str) -> Option<u64> {
        self.removed
            .iter()
            .rev()
            .find(|(r, _)| r == id)
            .map(|(_, t)| *t)
    }
}

impl Detector {
    pub fn new(cfg: DetectorConfig) -> Self {
        Self {
            cfg,
            pods: foldhash::HashMap::default(),
            incidents: Incidents::new(cfg.history, cfg.history_per_pod),
            listeners_dropped: 0,
            last_socket: None,
        }
    }

    pub fn incidents(&self) -> &IncidentLog {
        self.incidents.log()
    }

    /// The pod's state, made when first needed (only then is the uid copied).
    fn pod_state(&mut self, uid: &str) -> &mut PodState {
        if !self.pods.contains_key(uid) {
            self.pods.insert(uid.into(), PodState::default());
        }
        self.pods.get_mut(uid).expect("just inserted")
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
            } => self.refused(ts, pod_uid, client, (dst, local_dst), process, meta),
            Fact::ListenerUp {
                ts,
                pod_uid,
                container_id,
                addr,
            } => self.listener_up(ts, &pod_uid, container_id, addr, meta),
            Fact::ListenerDown {
                ts,
                pod_uid,
                container_id,
                addr,
            } => {
                self.listener_down(ts, &pod_uid, container_id, addr);
                Vec::new()
            }
            Fact::UnixRefused {
                ts,
                pod_uid,
                client,
                name,
                process,
            } => self.unix_refused(ts, pod_uid, client, &name, process, meta),
            Fact::UnixListenerUp {
                ts,
                pod_uid,
                container_id,
                name,
            } => self.unix_listener_up(ts, &pod_uid, container_id, &name, meta),
            Fact::UnixListenerDown {
                ts,
                pod_uid,
                container_id,
                name,
            } => {
                self.unix_listener_down(ts, &pod_uid, container_id, &name, meta);
                Vec::new()
            }
            Fact::PodStarted { ts, pod_uid } => {
                let ps = self.pod_state(&pod_uid);
                if ps.started_at.is_some() {
                    return Vec::new();
                }
                ps.started_at = Some(ts);
                vec![Change::PodStarted {
                    pod_uid: pod_uid.to_string(),
                }]
            }
            Fact::ContainerStarted {
                ts,
                pod_uid,
                container_id,
            } => {
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
}
