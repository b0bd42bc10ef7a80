//! What the pipeline counted so far, published at the end of each step so that its
//! readers (the `/metrics` collector, the periodic log line) never take the
//! pipeline's lock: a scrape never waits for a step, nor a step for a scrape.

use std::sync::Arc;

use parking_lot::Mutex;

/// The pipeline's counts and sizes as its last step left them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PipelineTotals {
    /// Refusals that are not pod-local, and those of a container on its own port.
    pub refusals_other: u64,
    pub self_refusals: u64,
    /// Kernel events whose cgroup is unknown or of an unknown layout.
    pub unattributed: u64,
    /// What the pipeline's bounds dropped or reordered.
    pub incidents_evicted: u64,
    pub facts_out_of_order: u64,
    pub listeners_dropped: u64,
    pub unix_facts_dropped: u64,
    /// Cgroups, pods and incidents known.
    pub cgroups: usize,
    pub pods: usize,
    pub incidents: usize,
}

/// The totals the pipeline published last, shared with their readers. Their lock is
/// their own, held for a copy.
#[derive(Debug, Clone, Default)]
pub struct PublishedTotals(Arc<Mutex<PipelineTotals>>);

impl PublishedTotals {
    pub fn read(&self) -> PipelineTotals {
        *self.0.lock()
    }

    pub(super) fn publish(&self, totals: PipelineTotals) {
        *self.0.lock() = totals;
    }
}
