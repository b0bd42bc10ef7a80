//! From kernel events to incidents: attribution, facts, the reorder window, the
//! detector. Owned by the daemon's loop and read by the HTTP API under one lock; its
//! totals are published after each step for the metrics and logs, which never wait
//! for that lock.

mod accounting;
mod facts;
#[cfg(test)]
mod process_tests;
#[cfg(test)]
mod tests;
pub mod totals;

use std::{
    collections::HashSet,
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::sync::Notify;

use crate::{
    clock,
    detect::{
        Change, Detector, DetectorConfig, Fact, Incident,
        detector::NotARace,
        render::{Filter, IncidentView, view},
        reorder::Reorder,
    },
    ingest::events::KernelEvent,
    inventory::{Inventory, sources::PodUpdate},
    kernel::counters::SuppressedCounts,
    outcome::Outcome,
    suppressed::{Reading, Suppressed},
};

pub use self::accounting::POD_START_NAME_WAIT_NS;
use self::totals::{PipelineTotals, PublishedTotals};

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

/// Suppressed counts of a pod without incidents are kept this long.
const SUPPRESSED_MEMORY: Duration = Duration::from_secs(600);

/// The most released facts whose buffer is kept for the next tick (about 2 MB; the
/// reorder queue keeps as much).
const RELEASED_KEPT: usize = 16_384;

/// How often at most an unknown pod makes the pod source re-read at once.
const REFRESH_EVERY: Duration = Duration::from_millis(500);

pub struct Pipeline {
    pub inventory: Inventory,
    pub detector: Detector,
    reorder: Reorder,
    /// The buffer facts are released into, kept from tick to tick.
    released: Vec<Fact>,
    reorder_window_ns: u64,
    /// Boot ns when the last fact arrived (the stream is idle a window after it).
    last_arrival: u64,
    pub counts: PipelineCounts,
    /// What the sinks were told so far.
    accounts: accounting::Accounts,
    metadata_wait_ns: u64,
    /// Asks the pod source to re-read now (a pod it has not reported showed up).
    refresh: Option<Arc<Notify>>,
    last_refresh: Option<Instant>,
    /// Refusals the kernel counted instead of sending, per cgroup and client.
    pub suppressed: Suppressed,
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
            detector: Detector::new(config),
            reorder: Reorder::new(reorder_window_ns),
            released: Vec::new(),
            reorder_window_ns,
            last_arrival: 0,
            counts: PipelineCounts::default(),
            accounts: accounting::Accounts::default(),
            metadata_wait_ns: 0,
            refresh: None,
            last_refresh: None,
            suppressed: Suppressed::default(),
            published: PublishedTotals::default(),
        };
        pipeline.publish();
        pipeline
    }

    /// The totals this pipeline publishes at the end of each step (a handle: reading
    /// it never takes the pipeline's lock).
    pub fn totals(&self) -> PublishedTotals {
        self.published.clone()
    }

    fn publish(&self) {
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

    /// Takes a kernel event in; it reaches the detector once the reorder window passed.
    pub fn kernel_event(&mut self, ev: &KernelEvent) {
        self.inventory.observe(ev);
        if let Some(fact) = self.fact(ev) {
            self.reorder.push(fact);
            self.last_arrival = clock::boot_now_ns();
        }
    }

    /// A pod the source has not reported: ask it to look again now (rate-limited).
    fn unknown_pod_seen(&mut self, pod_uid: &str) {
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

    /// Boot ns at which the oldest held fact is due for the detector.
    pub fn next_release_boot_ns(&self) -> Option<u64> {
        self.reorder.next_due(self.last_arrival)
    }

    /// Facts that reached the detector out of kernel-time order.
    pub fn facts_out_of_order(&self) -> u64 {
        self.reorder.out_of_order()
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
        changes.extend(self.detector.advance(now, &self.inventory.pods));
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

    /// Incidents as the API shows them, newest first, at most `limit`, and whether
    /// more matched. Phase, state and namespace are checked before a view is built
    /// (views are what costs), the kind (it depends on the containers' roles) after.
    pub fn incidents(&self, filter: &Filter, limit: usize) -> (Vec<IncidentView>, bool) {
        let pods = &self.inventory.pods;
        // Filtered before any view is built: only the answer's incidents are rendered.
        let mut matching = self
            .detector
            .incidents()
            .newest_first()
            .filter(|i| i.is_shown() && filter.matches(i, pods));
        let list: Vec<IncidentView> = matching
            .by_ref()
            .take(limit)
            .map(|i| self.view(i))
            .collect();
        let more = matching.next().is_some();
        (list, more)
    }

    pub fn view(&self, incident: &Incident) -> IncidentView {
        #[cfg(test)]
        VIEWS_RENDERED.with(|n| n.set(n.get() + 1));
        let mut v = view(incident, &self.inventory.pods, &wall);
        v.refusals_suppressed = self
            .suppressed
            .of_client(&incident.pod_uid, &incident.client);
        v
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

    pub fn incident(&self, id: u64) -> Option<&Incident> {
        self.detector.incidents().get(id)
    }
}

#[cfg(test)]
thread_local! {
    static VIEWS_RENDERED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Incident views this thread has rendered (tests: what a filter spares).
#[cfg(test)]
pub fn views_rendered() -> u64 {
    VIEWS_RENDERED.with(std::cell::Cell::get)
}

/// Kernel boot-clock ns → RFC 3339 wall-clock time.
pub fn wall(boot_ns: u64) -> String {
    clock::rfc3339_nanos(clock::boot_to_unix_ns(boot_ns))
}
