//! The detector's incidents and, per pod, which of them are open, resolved by a
//! listener, stuck or awaiting metadata. One owner for both: the log evicts only
//! through `insert`, which drops the victims from the index in the same call, so an
//! index never names an incident the log no longer holds.

use serde::{Deserialize, Serialize};

use crate::detect::{
    fact::Client,
    incident::{Hidden, Incident, Subject},
    incident_log::IncidentLog,
    pairs,
    service::{Service, SocketKey},
};

/// What an incident is open under: its client and the port or socket refused.
pub(super) type Key = (Client, Service);

pub(super) struct Incidents {
    log: IncidentLog,
    pods: foldhash::HashMap<String, PodIndex>,
}

#[derive(Default, Clone, Serialize, Deserialize)]
pub(super) struct PodIndex {
    /// The open incident of each client and port (pod-local refusals).
    #[serde(with = "pairs")]
    open: foldhash::HashMap<Key, u64>,
    /// The open incident of each client and port whose refusals to a non-loopback
    /// address wait for the pod's IPs: kept apart, so loopback refusals never join it.
    #[serde(with = "pairs")]
    open_awaiting_ips: foldhash::HashMap<Key, u64>,
    /// The incident each key's last resolving listener closed, for late refusals.
    #[serde(with = "pairs")]
    resolved_by_listener: foldhash::HashMap<Key, u64>,
    /// The open stuck-Job incident of this pod.
    stuck_job: Option<u64>,
    /// Incidents hidden until the pod source tells more (open or already resolved).
    awaiting: Vec<u64>,
}

impl PodIndex {
    fn forget(&mut self, id: u64) {
        self.open.retain(|_, v| *v != id);
        self.open_awaiting_ips.retain(|_, v| *v != id);
        self.resolved_by_listener.retain(|_, v| *v != id);
        self.awaiting.retain(|v| *v != id);
        if self.stuck_job == Some(id) {
            self.stuck_job = None;
        }
    }
}

impl Incidents {
    pub(super) fn new(capacity: usize, per_pod: usize) -> Self {
        Self {
            log: IncidentLog::new(capacity, per_pod),
            pods: foldhash::HashMap::default(),
        }
    }

    pub(super) fn log(&self) -> &IncidentLog {
        &self.log
    }

    pub(super) fn get(&self, id: u64) -> Option<&Incident> {
        self.log.get(id)
    }

    pub(super) fn get_mut(&mut self, id: u64) -> Option<&mut Incident> {
        self.log.get_mut(id)
    }

    /// Stores a new refusal incident, open under `key` (and awaiting metadata when
    /// hidden for it); returns its id.
    pub(super) fn insert_open(&mut self, incident: Incident, key: Key) -> u64 {
        let hidden = incident.hidden;
        let pod = incident.pod_uid.clone();
        let id = self.insert(incident);
        let index = self.pods.entry(pod).or_default();
        if hidden == Some(Hidden::PodIpUnknown) {
            index.open_awaiting_ips.insert(key, id);
        } else {
            index.open.insert(key, id);
        }
        if hidden.is_some_and(Hidden::awaits_metadata) {
            index.awaiting.push(id);
        }
        id
    }

    /// Stores a new stuck-Job incident, the pod's one; returns its id.
    pub(super) fn insert_stuck_job(&mut self, incident: Incident) -> u64 {
        let pod = incident.pod_uid.clone();
        let id = self.insert(incident);
        self.pods.entry(pod).or_default().stuck_job = Some(id);
        id
    }

    /// Stores `incident`; those the log evicts to make room leave the index too.
    fn insert(&mut self, incident: Incident) -> u64 {
        let (id, evicted) = self.log.insert(incident);
        for old in evicted {
            if let Some(index) = self.pods.get_mut(&old.pod_uid) {
                index.forget(old.id);
            }
        }
        id
    }

    /// The pod's refusal incidents first refused at `at` or later belong to its start
    /// `start` (an in-place restart found after they were opened).
    pub(super) fn mark_start(&mut self, pod: &str, start: u32, at: u64) {
        for id in self.log.ids_of(pod) {
            if let Some(inc) = self.log.get_mut(id)
                && inc.subject == Subject::Refusals
                && inc.first_refused_at >= at
                && inc.pod_start < start
            {
                inc.pod_start = start;
            }
        }
    }

    /// The open incident of `key` in the pod.
    pub(super) fn open(&mut self, pod: &str, key: &Key) -> Option<(u64, &mut Incident)> {
        let id = *self.pods.get(pod)?.open.get(key)?;
        Some((id, self.log.get_mut(id)?))
    }

    /// The open incident of `key` whose refusals wait for the pod's IPs.
    pub(super) fn open_awaiting_ips(
        &mut self,
        pod: &str,
        key: &Key,
    ) -> Option<(u64, &mut Incident)> {
        let id = *self.pods.get(pod)?.open_awaiting_ips.get(key)?;
        Some((id, self.log.get_mut(id)?))
    }

    /// The incident the last listener of `key` resolved, in the pod.
    pub(super) fn resolved_by_listener(
        &mut self,
        pod: &str,
        key: &Key,
    ) -> Option<(u64, &mut Incident)> {
        let id = *self.pods.get(pod)?.resolved_by_listener.get(key)?;
        Some((id, self.log.get_mut(id)?))
    }

    /// The pod's open incidents with their keys.
    pub(super) fn open_in(&self, pod: &str) -> impl Iterator<Item = (&Key, &Incident)> {
        self.pods
            .get(pod)
            .into_iter()
            .flat_map(|index| index.open.iter().chain(&index.open_awaiting_ips))
            .filter_map(|(key, id)| Some((key, self.log.get(*id)?)))
    }

    /// Ids of the pod's open incidents.
    pub(super) fn open_ids_in(&self, pod: &str) -> Vec<u64> {
        self.open_in(pod).map(|(_, inc)| inc.id).collect()
    }

    /// The pod's open incidents and those its listeners resolved, with their keys.
    pub(super) fn open_or_resolved_in(&self, pod: &str) -> impl Iterator<Item = (&Key, &Incident)> {
        self.pods
            .get(pod)
            .into_iter()
            .flat_map(|index| index.open.iter().chain(&index.resolved_by_listener))
            .filter_map(|(key, id)| Some((key, self.log.get(*id)?)))
    }

    /// The pod's incidents to look at as time passes: the open ones, then those
    /// awaiting metadata.
    pub(super) fn pending_in(&self, pod: &str) -> Vec<u64> {
        let Some(index) = self.pods.get(pod) else {
            return Vec::new();
        };
        let mut ids: Vec<u64> = index
            .open
            .values()
            .chain(index.open_awaiting_ips.values())
            .copied()
            .collect();
        let waiting: Vec<u64> = index
            .awaiting
            .iter()
            .copied()
            .filter(|id| !ids.contains(id))
            .collect();
        ids.extend(waiting);
        ids
    }

    /// Open incident `id`, which waited for the pod's IPs, refused the pod's own IP:
    /// it is open under `key` from now on, unless another incident is (returned, to
    /// merge it into).
    pub(super) fn confirm_pod_local(&mut self, pod: &str, id: u64, key: Key) -> Option<u64> {
        let index = self.pods.get_mut(pod)?;
        index.open_awaiting_ips.retain(|_, v| *v != id);
        match index.open.get(&key) {
            Some(other) if *other != id => Some(*other),
            _ => {
                index.open.insert(key, id);
                None
            }
        }
    }

    /// Open incident `id` continues under `key` (a new instance of a crash-looping
    /// client container).
    pub(super) fn reopen_under(&mut self, pod: &str, id: u64, key: Key) -> Option<&mut Incident> {
        let index = self.pods.get_mut(pod)?;
        index.open.retain(|_, v| *v != id);
        index.resolved_by_listener.retain(|_, v| *v != id);
        index.open.insert(key, id);
        self.log.get_mut(id)
    }

    /// The keys of the pod's open and listener-resolved incidents on a socket path
    /// as dialed (decided before the client's mounts were known), with their ids.
    pub(super) fn on_socket_paths(&self, pod: &str) -> Vec<(Key, u64)> {
        let Some(index) = self.pods.get(pod) else {
            return Vec::new();
        };
        index
            .open
            .iter()
            .chain(&index.resolved_by_listener)
            .filter(|((_, s), _)| matches!(s, Service::Socket(SocketKey::Path(_))))
            .map(|(k, id)| (k.clone(), *id))
            .collect()
    }

    /// Incident `id` is known under `to` instead of `from` (its socket named through
    /// the client's mounts). When another incident is open under `to` already, nothing
    /// moves and that one is returned, to merge into.
    pub(super) fn rekey(&mut self, pod: &str, id: u64, from: &Key, to: Key) -> Option<u64> {
        let index = self.pods.get_mut(pod)?;
        if index.open.get(from) == Some(&id) {
            if let Some(other) = index.open.get(&to).filter(|o| **o != id) {
                return Some(*other);
            }
            index.open.remove(from);
            index.open.insert(to, id);
        } else if index.resolved_by_listener.get(from) == Some(&id) {
            index.resolved_by_listener.remove(from);
            index.resolved_by_listener.entry(to).or_insert(id);
        }
        None
    }

    /// Incident `id` is no longer open: its listener resolved it, and later refusals
    /// of its key within the late-refusal window count into it.
    pub(super) fn resolved_by(&mut self, pod: &str, id: u64, key: Key) {
        if let Some(index) = self.pods.get_mut(pod) {
            index.open_awaiting_ips.retain(|_, v| *v != id);
            if index.open.get(&key) == Some(&id) {
                index.open.remove(&key);
                index.resolved_by_listener.insert(key, id);
            }
        }
    }

    /// Incident `id` is no longer open.
    pub(super) fn close(&mut self, pod: &str, id: u64) {
        if let Some(index) = self.pods.get_mut(pod) {
            index.open.retain(|_, v| *v != id);
            index.open_awaiting_ips.retain(|_, v| *v != id);
        }
    }

    /// Incident `id` waits for metadata (hidden for it after it was stored).
    pub(super) fn start_awaiting(&mut self, pod: &str, id: u64) {
        let index = self.pods.entry(pod.to_string()).or_default();
        if !index.awaiting.contains(&id) {
            index.awaiting.push(id);
        }
    }

    /// Incident `id` no longer waits for metadata.
    pub(super) fn stop_awaiting(&mut self, pod: &str, id: u64) {
        if let Some(index) = self.pods.get_mut(pod) {
            index.awaiting.retain(|i| *i != id);
        }
    }

    /// The pod's incidents that end when it goes (or, with `client`, when that client
    /// container goes): open ones, and for the pod its stuck Job; and those awaiting
    /// metadata that are not among them.
    pub(super) fn ending_with(&self, pod: &str, client: Option<&Client>) -> (Vec<u64>, Vec<u64>) {
        let Some(index) = self.pods.get(pod) else {
            return (Vec::new(), Vec::new());
        };
        let mut ids: Vec<u64> = index
            .open
            .iter()
            .chain(&index.open_awaiting_ips)
            .filter(|((c, _), _)| client.is_none_or(|gone| gone == c))
            .map(|(_, id)| *id)
            .collect();
        let mut unconfirmed = Vec::new();
        if client.is_none() {
            ids.extend(index.stuck_job);
            // Resolved while waiting for metadata.
            unconfirmed.extend(index.awaiting.iter().filter(|id| !ids.contains(id)));
        }
        (ids, unconfirmed)
    }

    pub(super) fn has_stuck_job(&self, pod: &str) -> bool {
        self.pods.get(pod).is_some_and(|i| i.stuck_job.is_some())
    }

    /// The pod's stuck Job ended: its incident, to resolve.
    pub(super) fn take_stuck_job(&mut self, pod: &str) -> Option<&mut Incident> {
        let id = self.pods.get_mut(pod)?.stuck_job.take()?;
        self.log.get_mut(id)
    }

    /// The log's incidents and the per-pod index, for a checkpoint.
    pub(super) fn parts(&self) -> (&IncidentLog, &foldhash::HashMap<String, PodIndex>) {
        (&self.log, &self.pods)
    }

    /// Takes a checkpoint's incidents and index into this (empty) store; index entries
    /// of incidents the log did not keep (its bounds) are dropped.
    pub(super) fn restore(
        &mut self,
        incidents: Vec<Incident>,
        next_id: u64,
        index: foldhash::HashMap<String, PodIndex>,
    ) {
        self.log.restore(incidents, next_id);
        self.pods = index;
        let log = &self.log;
        for index in self.pods.values_mut() {
            let gone = |id: &u64| log.get(*id).is_none();
            index.open.retain(|_, id| !gone(id));
            index.open_awaiting_ips.retain(|_, id| !gone(id));
            index.resolved_by_listener.retain(|_, id| !gone(id));
            index.awaiting.retain(|id| !gone(id));
            index.stuck_job = index.stuck_job.filter(|id| !gone(id));
        }
    }

    /// The pod is gone: its index goes (its incidents stay in the log).
    pub(super) fn forget_pod(&mut self, pod: &str) {
        self.pods.remove(pod);
    }
}
