//! The pipeline's state as a checkpoint carries it from one agent to the next: what
//! was derived from the records already taken from the ring and is not rebuilt by a
//! new agent (the detector's state, the facts in the reorder window, what the sinks
//! were told, the kernel's suppressed counts already read), and the pods its incidents
//! name: one deleted while no agent ran is not listed again, and its incidents would
//! lose their names. The rest of the inventory is not carried (the cgroup tree is
//! scanned again, pods come again from the pod source), nor the counters (metrics
//! restart with the agent).

use std::{
    collections::{BTreeSet, HashSet},
    time::Instant,
};

use serde::{Deserialize, Serialize};

use super::{
    accounts::Accounts, outcome::Outcome, reorder::ReorderSnapshot, state::Pipeline,
    suppressed::SuppressedSnapshot,
};
use crate::{
    detect::{Change, detector::DetectorSnapshot},
    ingest::events::{KernelEvent, SocketFact, UnixFact},
    inventory::{PodOwner, cgroup_path},
    pods::pod_info::PodInfo,
};

#[derive(Serialize, Deserialize)]
pub struct PipelineSnapshot {
    detector: DetectorSnapshot,
    reorder: ReorderSnapshot,
    accounts: Accounts,
    suppressed: SuppressedSnapshot,
    /// Boot ns when the last fact arrived.
    last_arrival: u64,
    /// The pods the incidents and tracked pods belong to, as the pod source last
    /// described them (absent from checkpoints of older agents).
    #[serde(default)]
    pods: Vec<PodInfo>,
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
}

impl Pipeline {
    /// A copy of what the next agent needs to go on where this one stopped.
    pub fn snapshot(&self) -> PipelineSnapshot {
        PipelineSnapshot {
            detector: self.detector.snapshot(),
            reorder: self.reorder.snapshot(),
            accounts: self.accounts.clone(),
            suppressed: self.suppressed.snapshot(),
            last_arrival: self.last_arrival,
            pods: self.named_pods(),
        }
    }

    /// The pod metadata of every pod the detector tracks or has an incident of.
    fn named_pods(&self) -> Vec<PodInfo> {
        let uids: BTreeSet<&str> = self
            .detector
            .tracked_pod_uids()
            .chain(
                self.detector
                    .incidents()
                    .newest_first()
                    .map(|i| i.pod_uid.as_str()),
            )
            .collect();
        uids.into_iter()
            .filter_map(|uid| self.inventory.pods.pod(uid))
            .map(|p| PodInfo::clone(p))
            .collect()
    }

    /// Takes a checkpoint in, before any kernel event: pods whose cgroups the inventory
    /// no longer has (scanned afresh) end as a lost removal ends them, at `now_boot_ns`.
    pub fn restore(&mut self, snap: PipelineSnapshot, now_boot_ns: u64) -> Restored {
        let summary = snap.summary();
        let live = self.inventory.pods_with_cgroups();
        let dead: Vec<String> = snap
            .detector
            .pod_uids()
            .filter(|uid| !live.contains(*uid))
            .map(str::to_string)
            .collect();
        let dead_set: HashSet<&str> = dead.iter().map(String::as_str).collect();
        self.detector.restore(snap.detector);
        let dead_facts = self
            .reorder
            .restore(snap.reorder, |f| !dead_set.contains(f.pod_uid()));
        self.accounts = snap.accounts;
        self.suppressed.restore(snap.suppressed, Instant::now());
        self.last_arrival = snap.last_arrival;
        for pod in snap.pods {
            self.inventory.pods.remember_gone(pod, Instant::now());
        }
        let mut changes = Vec::new();
        for uid in &dead {
            changes.extend(
                self.detector
                    .forget_pod(now_boot_ns, uid, &self.inventory.pods),
            );
        }
        let outcomes = self.outcomes(&changes, now_boot_ns, false);
        self.publish();
        Restored {
            summary,
            dead_pods: dead.len(),
            dead_facts,
            outcomes,
        }
    }
}

impl Pipeline {
    /// Takes in a listener the kernel's tables show at a restore from a periodic
    /// checkpoint, for an open incident, as a listen record at its `ts`. The agent
    /// before read its record (it would be in the ring otherwise), resolved what it
    /// covers and told the sinks: the incidents it resolves now are settled as they
    /// are, never counted again (were that agent killed within the wait for names,
    /// they are not counted at all).
    pub fn listening_at_restore(&mut self, listen: &SocketFact) {
        let ev = KernelEvent::Listen(listen.clone());
        self.kernel_event(&ev);
        if let Some(owner) = self
            .inventory
            .cgroups
            .path(listen.owner.cgroup_id)
            .and_then(|p| PodOwner::of(&cgroup_path::parse(p)))
        {
            self.listening_at_restore.push((
                owner.pod_uid.to_string(),
                listen.src.port(),
                listen.ts_boot_ns,
            ));
        }
    }

    /// As [`Self::listening_at_restore`], for a Unix listener the kernel's table shows
    /// for an open Unix socket incident (whose port is 0).
    pub fn unix_listening_at_restore(&mut self, listen: &UnixFact) {
        let ev = KernelEvent::UnixListen(listen.clone());
        self.kernel_event(&ev);
        if let Some(owner) = self
            .inventory
            .cgroups
            .path(listen.owner.cgroup_id)
            .and_then(|p| PodOwner::of(&cgroup_path::parse(p)))
        {
            self.listening_at_restore
                .push((owner.pod_uid.to_string(), 0, listen.ts_boot_ns));
        }
    }

    /// `now`, or earlier while a listener of [`Self::listening_at_restore`] waits in
    /// the reorder window (at most a second past it): the incidents it resolves do
    /// not time out before it is taken in.
    pub(super) fn advance_bound(&self, now: u64) -> u64 {
        let released = self.reorder.released();
        let most = self.reorder_window_ns.saturating_add(1_000_000_000);
        self.listening_at_restore
            .iter()
            .map(|(_, _, ts)| *ts)
            .filter(|ts| released.is_none_or(|r| r < *ts) && now < ts.saturating_add(most))
            .min()
            .map_or(now, |ts| now.min(ts))
    }

    /// Marks settled, without an outcome, the incidents `changes` resolved with a
    /// listener of [`Self::listening_at_restore`].
    pub(super) fn settled_before_restore(&mut self, changes: &[Change]) {
        if self.listening_at_restore.is_empty() {
            return;
        }
        for c in changes {
            let Change::Resolved(id) = c else { continue };
            let Some(inc) = self.detector.incidents().get(*id) else {
                continue;
            };
            let by_restore_look = self.listening_at_restore.iter().any(|(uid, port, ts)| {
                *uid == inc.pod_uid && *port == inc.port && inc.listener_ready_at == Some(*ts)
            });
            if by_restore_look {
                self.accounts.settled.insert(*id, inc.refused_count);
            }
        }
    }
}
