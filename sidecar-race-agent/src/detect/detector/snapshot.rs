//! The detector's state as a checkpoint carries it to the next agent: per-pod state
//! (starts, removals, listeners, Unix facts held for metadata), the incidents with
//! their ids and the index of which are open. The counters and the last-socket cache
//! are not carried: the counters are metrics (they restart with the agent), the cache
//! is rebuilt by the next refusal.

use std::{collections::HashSet, sync::Arc};

use serde::{Deserialize, Serialize};

use super::{incidents::PodIndex, state::Detector, state::PodState};
use crate::detect::incident::Incident;

#[derive(Serialize, Deserialize)]
pub struct DetectorSnapshot {
    pods: foldhash::HashMap<Arc<str>, PodState>,
    /// Oldest first.
    incidents: Vec<Incident>,
    next_id: u64,
    index: foldhash::HashMap<String, PodIndex>,
}

impl DetectorSnapshot {
    /// Oldest first.
    pub fn incidents(&self) -> &[Incident] {
        &self.incidents
    }

    /// Leaves these incidents out (the size cap); the index forgets them on restore.
    pub fn drop_incidents(&mut self, ids: &HashSet<u64>) {
        self.incidents.retain(|i| !ids.contains(&i.id));
    }

    /// Pods with state.
    pub fn pods(&self) -> usize {
        self.pods.len()
    }

    /// Unix-socket facts held for their pod's metadata (a run of refusals is one).
    pub fn held_facts(&self) -> usize {
        self.pods.values().map(|p| p.held.len()).sum()
    }

    /// Uids of the pods with state.
    pub fn pod_uids(&self) -> impl Iterator<Item = &str> {
        self.pods.keys().map(|uid| &**uid)
    }
}

impl Detector {
    /// A copy of the state the next agent needs to go on where this one stopped.
    pub fn snapshot(&self) -> DetectorSnapshot {
        let (log, index) = self.incidents.parts();
        let mut incidents: Vec<Incident> = log.newest_first().cloned().collect();
        incidents.reverse();
        DetectorSnapshot {
            pods: self.pods.clone(),
            incidents,
            next_id: log.next_id(),
            index: index.clone(),
        }
    }

    /// Takes `snap` in; for a detector that has seen nothing yet.
    pub fn restore(&mut self, snap: DetectorSnapshot) {
        self.pods = snap.pods;
        self.incidents
            .restore(snap.incidents, snap.next_id, snap.index);
        self.last_socket = None;
    }
}
