//! The pipeline's state as a checkpoint carries it from one agent to the next: what
//! was derived from the records already taken from the ring and is not rebuilt by a
//! new agent (the detector's state, the facts in the reorder window, what the sinks
//! were told, the kernel's suppressed counts already read), and the pods its incidents
//! name: one deleted while no agent ran is not listed again, and its incidents would
//! lose their names. The rest of the inventory is not carried (the cgroup tree is
//! scanned again, pods come again from the pod source), nor the counters (metrics
//! restart with the agent).

use std::collections::{BTreeSet, HashSet};

use serde::{Deserialize, Serialize};

use super::{
    accounts::Accounts, outcome::Outcome, reorder::ReorderSnapshot, suppressed::SuppressedSnapshot,
};
use crate::{
    detect::{Detector, detector::DetectorSnapshot},
    inventory::store::PodStore,
    pods::pod_info::PodInfo,
};

/// Each stage's part, taken and given back by the pipeline (`Pipeline::snapshot`,
/// `Pipeline::restore`).
#[derive(Serialize, Deserialize)]
pub struct PipelineSnapshot {
    pub(super) detector: DetectorSnapshot,
    pub(super) reorder: ReorderSnapshot,
    pub(super) accounts: Accounts,
    pub(super) suppressed: SuppressedSnapshot,
    /// Boot ns when the last fact arrived.
    pub(super) last_arrival: u64,
    /// The pods the incidents and tracked pods belong to, as the pod source last
    /// described them (absent from checkpoints of older agents).
    #[serde(default)]
    pub(super) pods: Vec<PodInfo>,
}

/// What a snapshot holds, for the log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotSummary {
    pub pods: usize,
    pub incidents: usize,
    pub open_incidents: usize,
    /// Unix facts held for their pod's metadata.
    pub held_facts: usize,
    /// Facts in the reorder window, not yet seen by the detector.
    pub reorder_facts: usize,
}

/// What a restore took in and what it left out.
#[derive(Debug, Default)]
pub struct Restored {
    pub summary: SnapshotSummary,
    /// Pods whose cgroups are gone from the node: their open incidents ended as if their
    /// removal had been seen now, and their state was dropped.
    pub dead_pods: usize,
    /// Facts of those pods still in the reorder window, dropped.
    pub dead_facts: usize,
    /// What ending those incidents means to the sinks.
    pub outcomes: Vec<Outcome>,
}

impl PipelineSnapshot {
    pub fn summary(&self) -> SnapshotSummary {
        let incidents = self.detector.incidents();
        SnapshotSummary {
            pods: self.detector.pods(),
            incidents: incidents.len(),
            open_incidents: incidents.iter().filter(|i| !i.is_final()).count(),
            held_facts: self.detector.held_facts(),
            reorder_facts: self.reorder.facts.len(),
        }
    }

    /// Leaves out the oldest incidents whose final accounting the sinks already had,
    /// until about `bytes` of their JSON are gone; returns how many were left out.
    pub fn drop_oldest_published(&mut self, bytes: usize) -> usize {
        let mut freed = 0;
        let mut ids = HashSet::new();
        for inc in self.detector.incidents() {
            if freed >= bytes {
                break;
            }
            if inc.is_final() && self.accounts.is_settled(inc.id) {
                // A comma besides the incident's own bytes.
                freed += serde_json::to_vec(inc).map_or(0, |v| v.len() + 1);
                ids.insert(inc.id);
            }
        }
        self.detector.drop_incidents(&ids);
        self.accounts.settled.retain(|id, _| !ids.contains(id));
        ids.len()
    }

    /// The pods whose detector state the snapshot holds and `live` (pods whose cgroups
    /// the node has now) does not: they went away while no agent ran.
    pub(super) fn dead_pods(&self, live: &HashSet<String>) -> Vec<String> {
        self.detector
            .pod_uids()
            .filter(|uid| !live.contains(*uid))
            .map(str::to_string)
            .collect()
    }
}

/// The pod metadata in `pods` of every pod `detector` tracks or has an incident of.
pub(super) fn named_pods(detector: &Detector, pods: &PodStore) -> Vec<PodInfo> {
    let uids: BTreeSet<&str> = detector
        .tracked_pod_uids()
        .chain(
            detector
                .incidents()
                .newest_first()
                .map(|i| i.pod_uid.as_str()),
        )
        .collect();
    uids.into_iter()
        .filter_map(|uid| pods.pod(uid))
        .map(|p| PodInfo::clone(p))
        .collect()
}
