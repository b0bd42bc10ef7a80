//! The pipeline's state: the inventory, the detector, the reorder window and what
//! the sinks were told, with its constructor and the accessors its readers use.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::sync::Notify;

use super::{
    accounts::Accounts,
    reorder::Reorder,
    suppressed::Suppressed,
    totals::{PipelineTotals, PublishedTotals},
};
use crate::{
    detect::{Detector, DetectorConfig, Fact, Incident},
    inventory::Inventory,
};

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
    pub(super) inventory: Inventory,
    pub(super) detector: Detector,
    pub(super) reorder: Reorder,
    /// The buffer facts are released into, kept from tick to tick.
    pub(super) released: Vec<Fact>,
    pub(super) reorder_window_ns: u64,
    /// Boot ns when the last fact arrived (the stream is idle a window after it).
    pub(super) last_arrival: u64,
    pub(super) counts: PipelineCounts,
    /// What the sinks were told so far.
    pub(super) accounts: Accounts,
    pub(super) metadata_wait_ns: u64,
    /// Asks the pod source to re-read now (a pod it has not reported showed up).
    pub(super) refresh: Option<Arc<Notify>>,
    pub(super) last_refresh: Option<Instant>,
    /// Refusals the kernel counted instead of sending, per cgroup and client.
    pub(super) suppressed: Suppressed,
    /// The totals as of the last step, for readers that must not take this lock.
    pub(super) published: PublishedTotals,
    /// (pod uid, port, boot ns) of listeners the kernel showed at a restore whose
    /// records the agent before took with it (see `listening_at_restore`).
    pub(super) listening_at_restore: Vec<(String, u16, u64)>,
}

impl Pipeline {
    pub fn new(inventory: Inventory, mut config: DetectorConfig, reorder_window_ns: u64) -> Self {
        if !inventory.has_pod_source {
            config.metadata_wait_ns = 0; // no names or IPs will ever come
        }
        let pipeline = Self {
            inventory,
            detector: Detector::new(config),
            reorder: Reorder::new(reorder_window_ns),
            released: Vec::new(),
            reorder_window_ns,
            last_arrival: 0,
            counts: PipelineCounts::default(),
            accounts: Accounts::default(),
            metadata_wait_ns: 0,
            refresh: None,
            last_refresh: None,
            suppressed: Suppressed::default(),
            published: PublishedTotals::default(),
            listening_at_restore: Vec::new(),
        };
        pipeline.publish();
        pipeline
    }

    /// The totals this pipeline publishes at the end of each step (a handle: reading
    /// it never takes the pipeline's lock).
    pub fn totals(&self) -> PublishedTotals {
        self.published.clone()
    }

    pub(super) fn publish(&self) {
        let incidents = self.detector.incidents();
        self.published.publish(PipelineTotals {
            refusals_other: self.counts.refusals_other,
            self_refusals: self.counts.self_refusals,
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

    /// Final accounting of incidents whose names are unknown waits up to `wait` (with
    /// a pod source), and `refresh` is notified when a pod the source has not
    /// reported shows up.
    pub fn with_metadata_wait(mut self, wait: Duration, refresh: Option<Arc<Notify>>) -> Self {
        self.metadata_wait_ns = wait.as_nanos() as u64;
        self.refresh = refresh;
        self
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
        self.counts
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
}
