//! One step of the pipeline: kernel events and pod updates in, facts released from
//! the reorder window to the detector, its changes turned into outcomes.

use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use super::{outcome::Outcome, state::Pipeline, suppressed::Reading};
use crate::{
    clock,
    detect::{Change, Fact, detector::NotARace},
    ingest::events::KernelEvent,
    inventory::sources::PodUpdate,
    kernel::counters::SuppressedCounts,
};

/// Suppressed counts of a pod without incidents are kept this long.
const SUPPRESSED_MEMORY: Duration = Duration::from_secs(600);

/// The most released facts whose buffer is kept for the next tick (about 2 MB; the
/// reorder queue keeps as much).
const RELEASED_KEPT: usize = 16_384;

/// How often at most an unknown pod makes the pod source re-read at once.
const REFRESH_EVERY: Duration = Duration::from_millis(500);

impl Pipeline {
    /// Takes a kernel event in; it reaches the detector once the reorder window passed.
    pub fn kernel_event(&mut self, ev: &KernelEvent) {
        let named = self.inventory.observe(ev);
        if let Some(fact) = self.fact(named.as_ref().unwrap_or(ev)) {
            self.reorder.push(fact);
            self.last_arrival = clock::boot_now_ns();
        }
    }

    /// A pod the source has not reported: ask it to look again now (rate-limited).
    pub(super) fn unknown_pod_seen(&mut self, pod_uid: &str) {
        let Some(refresh) = &self.refresh else { return };
        if self.inventory.pods.pod(pod_uid).is_some()
            || self
                .last_refresh
                .is_some_and(|t| t.elapsed() < REFRESH_EVERY)
        {
            return;
        }
        self.last_refresh = Some(Instant::now());
        refresh.notify_one();
    }

    /// A UDP socket of cgroup `cgroup_id` found bound to `addr` at `ts` (the pod's
    /// socket table, read while a UDP incident waits for it).
    pub fn udp_bound(&mut self, cgroup_id: u64, addr: std::net::SocketAddr, ts: u64) {
        let Some(owner) = self.inventory.pod_owner(cgroup_id) else {
            return;
        };
        self.reorder.push(crate::detect::Fact::UdpBound {
            ts,
            pod_uid: owner.pod_uid,
            container_id: owner.container_id.map(|c| c.to_string()),
            addr,
        });
    }

    pub fn pod_update(&mut self, update: PodUpdate) {
        self.inventory.apply(update);
    }

    /// Feeds facts behind the reorder watermark to the detector (or, when no fact
    /// arrived for a window, those a window older than now), then lets time pass.
    pub fn tick(&mut self, now_boot_ns: u64) -> Vec<Outcome> {
        let pruned = self.inventory.maintain(now_boot_ns);
        let idle = now_boot_ns.saturating_sub(self.last_arrival) >= self.reorder_window_ns;
        let mut facts = std::mem::take(&mut self.released);
        self.reorder.release_into(now_boot_ns, idle, &mut facts);
        let gone = if pruned {
            self.forget_gone_pods(now_boot_ns)
        } else {
            Vec::new()
        };
        let outcomes = self.detect(facts.drain(..), now_boot_ns, false, gone);
        if facts.capacity() <= RELEASED_KEPT {
            self.released = facts;
        }
        self.publish();
        outcomes
    }

    /// Detector state of pods gone from both the pod source and the cgroup tree
    /// (their removal event was lost): their open incidents end as if removed.
    pub fn forget_gone_pods(&mut self, now_boot_ns: u64) -> Vec<Change> {
        let with_cgroups = self.inventory.pods_with_cgroups();
        let listed = |uid: &str| self.inventory.pods.pod(uid).is_some();
        let gone: Vec<String> = self
            .detector
            .tracked_pod_uids()
            .filter(|uid| !listed(uid) && !with_cgroups.contains(*uid))
            .map(str::to_string)
            .collect();
        let mut changes = Vec::new();
        for uid in gone {
            changes.extend(
                self.detector
                    .forget_pod(now_boot_ns, &uid, &self.inventory.pods),
            );
        }
        changes
    }

    /// Everything still held, at shutdown: accounted for now, named or not.
    pub fn flush(&mut self, now_boot_ns: u64) -> Vec<Outcome> {
        let facts = self.reorder.drain();
        let outcomes = self.detect(facts, now_boot_ns, true, Vec::new());
        self.publish();
        outcomes
    }

    fn detect(
        &mut self,
        facts: impl IntoIterator<Item = Fact>,
        now: u64,
        last: bool,
        mut changes: Vec<Change>,
    ) -> Vec<Outcome> {
        for fact in facts {
            changes.extend(self.detector.observe(fact, &self.inventory.pods));
        }
        let advance_to = self.advance_bound(now);
        changes.extend(self.detector.advance(advance_to, &self.inventory.pods));
        for c in &changes {
            if let Change::NotARace { why, refused } = c {
                match why {
                    NotARace::Other => self.counts.refusals_other += refused,
                    NotARace::SelfRefusal => self.counts.self_refusals += refused,
                }
            }
        }
        self.outcomes(&changes, now, last)
    }

    /// The next reading of the kernel's suppressed-refusal counts is their baseline:
    /// for a map adopted without a checkpoint of what was read of it.
    pub fn suppressed_from_now(&mut self) {
        self.suppressed.count_from_next_reading();
    }

    /// Takes a reading of the kernel's suppressed-refusal counts (`last`: the final
    /// one, nothing waits for names any more): its outcomes for the sinks, and the
    /// kernel entries that may be deleted.
    pub fn read_suppressed(&mut self, counts: &SuppressedCounts, last: bool) -> Reading {
        let wait = Duration::from_nanos(self.metadata_wait_ns);
        let now = Instant::now();
        let reading = self
            .suppressed
            .read(counts, &mut self.inventory, now, wait, last);
        let pods: HashSet<&str> = self
            .detector
            .incidents()
            .newest_first()
            .map(|i| i.pod_uid.as_str())
            .collect();
        self.suppressed.retain_pods(&pods, now, SUPPRESSED_MEMORY);
        reading
    }
}
