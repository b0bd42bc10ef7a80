//! The pipeline: each stage's own state (attribution, the reorder window, the
//! detector, the kernel's suppressed counts, what the sinks were told) beside the
//! inventory they all read, and its steps, each handing one stage what it reads of the
//! others. The only `impl Pipeline`: no other file reaches its fields (the house
//! checks it).

use std::{
    collections::HashSet,
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::sync::Notify;

use super::{
    accounting::Reads,
    accounts::Accounts,
    attributor::Attributor,
    detection::{self, NotRaces},
    outcome::Outcome,
    reorder::Reorder,
    restore_look::RestoreLook,
    snapshot::{PipelineSnapshot, Restored, named_pods},
    suppressed::{Reading, Suppressed},
    totals::{PipelineTotals, PublishedTotals},
    views,
};
use crate::{
    clock,
    detect::{
        Change, Detector, DetectorConfig, Fact, Incident,
        render::{Filter, IncidentView},
    },
    ingest::events::{KernelEvent, SocketFact, UnixFact},
    inventory::{Inventory, sources::PodUpdate},
    kernel::counters::SuppressedCounts,
};

/// The most released facts whose buffer is kept for the next tick (about 2 MB; the
/// reorder queue keeps as much).
const RELEASED_KEPT: usize = 16_384;

/// Counts of what did not become an incident, for logs and metrics.
#[derive(Debug, Default, Clone, Copy)]
pub struct PipelineCounts {
    /// Refusals that are not pod-local (or not tied to their hostNetwork pod).
    pub refusals_other: u64,
    /// Kernel events with no pod to attribute them to.
    pub events_without_pod: u64,
    /// Refusals of a container on a port it serves itself (its own probes).
    pub self_refusals: u64,
}

pub struct Pipeline {
    /// The node's cgroups and pods: every stage reads them, attribution and the pod
    /// source change them.
    inventory: Inventory,
    attributor: Attributor,
    reorder: Reorder,
    /// The buffer facts are released into, kept from tick to tick.
    released: Vec<Fact>,
    reorder_window_ns: u64,
    /// Boot ns when the last fact arrived (the stream is idle a window after it).
    last_arrival: u64,
    detector: Detector,
    /// Refusals the detector found were no race, so far.
    not_races: NotRaces,
    /// What the sinks were told so far.
    accounts: Accounts,
    /// Refusals the kernel counted instead of sending, per cgroup and client.
    suppressed: Suppressed,
    /// Listeners the kernel showed at a restore whose records the agent before took
    /// with it (see `listening_at_restore`).
    restore_look: RestoreLook,
    /// The totals as of the last step, for readers that must not take this lock.
    published: PublishedTotals,
}

impl Pipeline {
    pub fn new(inventory: Inventory, mut config: DetectorConfig, reorder_window_ns: u64) -> Self {
        if !inventory.has_pod_source {
            config.metadata_wait_ns = 0; // no names or IPs will ever come
        }
        let pipeline = Self {
            inventory,
            attributor: Attributor::default(),
            reorder: Reorder::new(reorder_window_ns),
            released: Vec::new(),
            reorder_window_ns,
            last_arrival: 0,
            detector: Detector::new(config),
            not_races: NotRaces::default(),
            accounts: Accounts::default(),
            suppressed: Suppressed::default(),
            restore_look: RestoreLook::default(),
            published: PublishedTotals::default(),
        };
        pipeline.publish();
        pipeline
    }

    /// Final accounting of incidents whose names are unknown waits up to `wait` (with
    /// a pod source), and `refresh` is notified when a pod the source has not
    /// reported shows up.
    pub fn with_metadata_wait(mut self, wait: Duration, refresh: Option<Arc<Notify>>) -> Self {
        self.attributor.wait_for_names(wait, refresh);
        self
    }

    /// The totals this pipeline publishes at the end of each step (a handle: reading
    /// it never takes the pipeline's lock).
    pub fn totals(&self) -> PublishedTotals {
        self.published.clone()
    }

    fn publish(&self) {
        let incidents = self.detector.incidents();
        self.published.publish(PipelineTotals {
            refusals_other: self.not_races.other,
            self_refusals: self.not_races.self_refusals,
            unattributed: self.inventory.unattributed_events(),
            incidents_evicted: incidents.evicted(),
            facts_out_of_order: self.facts_out_of_order(),
            listeners_dropped: self.detector.listeners_dropped(),
            unix_facts_dropped: self.detector.held_dropped(),
            cgroups: self.inventory.cgroups.len(),
            pods: self.inventory.pods.len(),
            incidents: incidents.len(),
        });
    }

    /// The node's cgroups and pods, as the pipeline attributes with them.
    pub fn inventory(&self) -> &Inventory {
        &self.inventory
    }

    /// The inventory, to change outside a step (tests: a cgroup tree rescanned).
    pub fn inventory_mut(&mut self) -> &mut Inventory {
        &mut self.inventory
    }

    /// The detector the facts reach.
    pub fn detector(&self) -> &Detector {
        &self.detector
    }

    /// The detector, to drive outside a step (tests: facts fed directly).
    pub fn detector_mut(&mut self) -> &mut Detector {
        &mut self.detector
    }

    /// What did not become an incident so far.
    pub fn counts(&self) -> PipelineCounts {
        PipelineCounts {
            refusals_other: self.not_races.other,
            events_without_pod: self.attributor.events_without_pod(),
            self_refusals: self.not_races.self_refusals,
        }
    }

    /// Boot ns at which the oldest held fact is due for the detector.
    pub fn next_release_boot_ns(&self) -> Option<u64> {
        self.reorder.next_due(self.last_arrival)
    }

    /// Facts that reached the detector out of kernel-time order.
    pub fn facts_out_of_order(&self) -> u64 {
        self.reorder.out_of_order()
    }

    pub fn incident(&self, id: u64) -> Option<&Incident> {
        self.detector.incidents().get(id)
    }

    /// Whether incident `id` had its final accounting.
    pub fn is_settled(&self, id: u64) -> bool {
        self.accounts.is_settled(id)
    }

    /// Incidents as the API shows them, newest first, at most `limit`, and whether
    /// more matched.
    pub fn incidents(&self, filter: &Filter, limit: usize) -> (Vec<IncidentView>, bool) {
        views::incidents(
            self.detector.incidents(),
            &self.inventory.pods,
            &self.suppressed,
            filter,
            limit,
        )
    }

    pub fn view(&self, incident: &Incident) -> IncidentView {
        views::incident_view(incident, &self.inventory.pods, &self.suppressed)
    }

    /// A copy of what the next agent needs to go on where this one stopped.
    pub fn snapshot(&self) -> PipelineSnapshot {
        PipelineSnapshot {
            detector: self.detector.snapshot(),
            reorder: self.reorder.snapshot(),
            accounts: self.accounts.clone(),
            suppressed: self.suppressed.snapshot(),
            last_arrival: self.last_arrival,
            pods: named_pods(&self.detector, &self.inventory.pods),
        }
    }

    /// Takes a kernel event in; it reaches the detector once the reorder window passed.
    pub fn kernel_event(&mut self, ev: &KernelEvent) {
        if let Some(fact) = self.attributor.attribute(&mut self.inventory, ev) {
            self.reorder.push(fact);
            self.last_arrival = clock::boot_now_ns();
        }
    }

    /// A UDP socket of cgroup `cgroup_id` found bound to `addr` at `ts` (the pod's
    /// socket table, read while a UDP incident waits for it).
    pub fn udp_bound(&mut self, cgroup_id: u64, addr: SocketAddr, ts: u64) {
        if let Some(fact) = Attributor::udp_bound(&mut self.inventory, cgroup_id, addr, ts) {
            self.reorder.push(fact);
        }
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
        detection::forget_gone_pods(&mut self.detector, &self.inventory, now_boot_ns)
    }

    /// Everything still held, at shutdown: accounted for now, named or not.
    pub fn flush(&mut self, now_boot_ns: u64) -> Vec<Outcome> {
        let facts = self.reorder.drain();
        let outcomes = self.detect(facts, now_boot_ns, true, Vec::new());
        self.publish();
        outcomes
    }

    /// One step of detection after `earlier` changes, counted and accounted for.
    fn detect(
        &mut self,
        facts: impl IntoIterator<Item = Fact>,
        now: u64,
        last: bool,
        earlier: Vec<Change>,
    ) -> Vec<Outcome> {
        let advance_to =
            self.restore_look
                .advance_bound(now, self.reorder.released(), self.reorder_window_ns);
        let detected = detection::detect(
            &mut self.detector,
            &self.inventory.pods,
            facts,
            advance_to,
            earlier,
        );
        self.not_races.add(detected.not_races);
        self.account(&detected.changes, now, last)
    }

    /// What `changes` mean to the sinks (`last`: nothing waits for names any more).
    fn account(&mut self, changes: &[Change], now: u64, last: bool) -> Vec<Outcome> {
        let reads = Reads {
            detector: &self.detector,
            inventory: &self.inventory,
            suppressed: &self.suppressed,
            metadata_wait_ns: self.attributor.metadata_wait_ns(),
            restore_look: &self.restore_look,
        };
        self.accounts.outcomes(changes, now, last, &reads)
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
        self.suppressed.take_reading(
            counts,
            &mut self.inventory,
            self.detector.incidents(),
            Duration::from_nanos(self.attributor.metadata_wait_ns()),
            last,
        )
    }

    /// Takes a checkpoint in, before any kernel event: pods whose cgroups the inventory
    /// no longer has (scanned afresh) end as a lost removal ends them, at `now_boot_ns`.
    pub fn restore(&mut self, snap: PipelineSnapshot, now_boot_ns: u64) -> Restored {
        let summary = snap.summary();
        let dead = snap.dead_pods(&self.inventory.pods_with_cgroups());
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
        let changes =
            detection::forget_pods(&mut self.detector, &self.inventory.pods, &dead, now_boot_ns);
        let outcomes = self.account(&changes, now_boot_ns, false);
        self.publish();
        Restored {
            summary,
            dead_pods: dead.len(),
            dead_facts,
            outcomes,
        }
    }

    /// Takes in a listener the kernel's tables show at a restore from a periodic
    /// checkpoint, for an open incident, as a listen record at its `ts`. The agent
    /// before read its record (it would be in the ring otherwise), resolved what it
    /// covers and told the sinks: the incidents it resolves now are settled as they
    /// are, never counted again (were that agent killed within the wait for names,
    /// they are not counted at all).
    pub fn listening_at_restore(&mut self, listen: &SocketFact) {
        self.kernel_event(&KernelEvent::Listen(listen.clone()));
        self.restore_look.remember(
            &self.inventory.cgroups,
            listen.owner.cgroup_id,
            listen.src.port(),
            listen.ts_boot_ns,
        );
    }

    /// As [`Self::listening_at_restore`], for a Unix listener the kernel's table shows
    /// for an open Unix socket incident (whose port is 0).
    pub fn unix_listening_at_restore(&mut self, listen: &UnixFact) {
        self.kernel_event(&KernelEvent::UnixListen(listen.clone()));
        self.restore_look.remember(
            &self.inventory.cgroups,
            listen.owner.cgroup_id,
            0,
            listen.ts_boot_ns,
        );
    }
}
