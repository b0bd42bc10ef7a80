//! The incidents the detector holds, by id, bounded in total and per pod.

use std::{
    cmp::Reverse,
    collections::{BTreeMap, BTreeSet, HashMap},
};

use super::incident::Incident;

/// Incidents by id, bounded in total and per pod. Eviction is fair between pods: a
/// pod at its own cap makes room among its own incidents, and beyond the total cap
/// the pod holding the most gives one up (among pods holding as many, the one with the
/// oldest incident). Either way the victim is that pod's oldest final incident, or its
/// oldest open one when it has no final one; so a pod within its fair share (total /
/// pods) never loses anything to a flooding neighbour, and among equals the oldest
/// incidents go first.
pub struct IncidentLog {
    incidents: BTreeMap<u64, Incident>,
    by_pod: HashMap<String, BTreeSet<u64>>,
    /// (incidents held, oldest id reversed, pod uid): the last one pays next.
    holders: BTreeSet<Holder>,
    capacity: usize,
    per_pod: usize,
    next_id: u64,
    evicted: u64,
}

type Holder = (usize, Reverse<u64>, String);

fn holder(pod: &str, ids: &BTreeSet<u64>) -> Option<Holder> {
    let oldest = *ids.first()?;
    Some((ids.len(), Reverse(oldest), pod.to_string()))
}

impl IncidentLog {
    pub fn new(capacity: usize, per_pod: usize) -> Self {
        Self {
            incidents: BTreeMap::new(),
            by_pod: HashMap::new(),
            holders: BTreeSet::new(),
            capacity: capacity.max(1),
            per_pod: per_pod.max(1),
            next_id: 1,
            evicted: 0,
        }
    }

    /// Stores `incident` under the next id, returning the id and the incidents evicted
    /// to make room (at most two: one for the pod's cap, one for the total cap).
    pub fn insert(&mut self, mut incident: Incident) -> (u64, Vec<Incident>) {
        let id = self.next_id;
        self.next_id += 1;
        incident.id = id;
        let pod = incident.pod_uid.clone();
        let mut evicted = Vec::new();
        if self.held_by(&pod) >= self.per_pod {
            evicted.extend(self.evict_from(&pod, None));
        }
        self.change(&pod, |ids| {
            ids.insert(id);
        });
        self.incidents.insert(id, incident);
        if self.incidents.len() > self.capacity {
            // The next holder pays, but never with the incident just stored: its
            // caller is about to count refusals into it.
            let payer = self
                .holders
                .iter()
                .rev()
                .find(|(held, _, p)| *held > 1 || *p != pod)
                .map(|(_, _, p)| p.clone());
            evicted.extend(payer.and_then(|p| self.evict_from(&p, Some(id))));
        }
        self.evicted += evicted.len() as u64;
        (id, evicted)
    }

    /// Incidents `pod_uid` holds.
    pub fn held_by(&self, pod_uid: &str) -> usize {
        self.by_pod.get(pod_uid).map_or(0, BTreeSet::len)
    }

    /// The pod's oldest final incident, else its oldest; never `keep`.
    fn evict_from(&mut self, pod: &str, keep: Option<u64>) -> Option<Incident> {
        let ids = self.by_pod.get(pod)?;
        let mut candidates = ids.iter().copied().filter(|id| Some(*id) != keep);
        let victim = candidates
            .clone()
            .find(|id| self.incidents.get(id).is_some_and(Incident::is_final))
            .or_else(|| candidates.next())?;
        self.change(pod, |ids| {
            ids.remove(&victim);
        });
        self.incidents.remove(&victim)
    }

    /// Changes the ids `pod` holds, keeping its place among the holders.
    fn change(&mut self, pod: &str, f: impl FnOnce(&mut BTreeSet<u64>)) {
        let ids = self.by_pod.entry(pod.to_string()).or_default();
        if let Some(old) = holder(pod, ids) {
            self.holders.remove(&old);
        }
        f(ids);
        match holder(pod, ids) {
            Some(new) => {
                self.holders.insert(new);
            }
            None => {
                self.by_pod.remove(pod);
            }
        }
    }

    pub fn get(&self, id: u64) -> Option<&Incident> {
        self.incidents.get(&id)
    }

    /// The id the next incident gets.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// Stores incidents of a checkpoint under their own ids (oldest first), within
    /// this log's bounds; the next new incident gets an id after `next_id`.
    pub fn restore(&mut self, mut incidents: Vec<Incident>, next_id: u64) {
        incidents.sort_by_key(|i| i.id);
        for incident in incidents {
            self.next_id = self.next_id.max(incident.id);
            self.insert(incident);
        }
        self.next_id = self.next_id.max(next_id);
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut Incident> {
        self.incidents.get_mut(&id)
    }

    /// The ids of the incidents `pod_uid` holds, oldest first.
    pub fn ids_of(&self, pod_uid: &str) -> Vec<u64> {
        self.by_pod
            .get(pod_uid)
            .map_or_else(Vec::new, |ids| ids.iter().copied().collect())
    }

    /// Incidents evicted so far (`sidecar_race_incidents_evicted_total`).
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Newest first.
    pub fn newest_first(&self) -> impl Iterator<Item = &Incident> {
        self.incidents.values().rev()
    }

    pub fn len(&self) -> usize {
        self.incidents.len()
    }

    pub fn is_empty(&self) -> bool {
        self.incidents.is_empty()
    }
}
