//! The daemon's totals as the metrics read them at scrape time: the kernel's per-CPU
//! counters, the pipeline's counts and bounds, and the agent's own drops.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering::Relaxed},
};

use parking_lot::Mutex;

use crate::{
    http::auth::AuthCounts,
    ingest::stream::StreamStats,
    inventory::sources::SourceStats,
    k8s_events::PublisherStats,
    kernel::counters::KernelCounters,
    metrics::{BoundsTotals, KernelTotals, Totals, TotalsSource},
    pipeline::Pipeline,
};

pub(super) struct NodeTotals {
    pub pipeline: Arc<Mutex<Pipeline>>,
    pub kernel: Arc<KernelCounters>,
    pub stream: Arc<StreamStats>,
    pub source: &'static str,
    pub source_stats: Arc<SourceStats>,
    pub events: Option<Arc<PublisherStats>>,
    pub log_lines_suppressed: Arc<AtomicU64>,
    pub auth: Option<Arc<AuthCounts>>,
}

impl std::fmt::Debug for NodeTotals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeTotals")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl TotalsSource for NodeTotals {
    fn totals(&self) -> Totals {
        let gone = self.kernel.entries_gone().unwrap_or_default();
        let kernel = self.kernel.counts().ok().map(|counts| KernelTotals {
            seen: counts.iter().map(|(k, c)| (k.name(), c.seen)).collect(),
            lost: counts.values().map(|c| c.lost).sum(),
            suppressed: counts
                .iter()
                .map(|(k, c)| (k.name(), c.suppressed))
                .collect(),
            entries_gone: gone.to_vec(),
        });
        let p = self.pipeline.lock();
        Totals {
            kernel,
            refusals_other: p.counts.refusals_other,
            self_refusals: p.counts.self_refusals,
            unattributed: p.inventory.unattributed_events(),
            pod_source: (self.source, self.source_stats.errors()),
            dropped_in_agent: self.stream.dropped_in_agent.load(Relaxed),
            undecodable: self.stream.decode_errors.load(Relaxed),
            events_not_posted: self
                .events
                .as_ref()
                .map(|s| (s.dropped.load(Relaxed), s.failed.load(Relaxed))),
            bounds: BoundsTotals {
                incidents_evicted: p.detector.incidents().evicted(),
                facts_out_of_order: p.facts_out_of_order(),
                listeners_dropped: p.detector.listeners_dropped(),
                log_lines_suppressed: self.log_lines_suppressed.load(Relaxed),
            },
            auth: self.auth.as_ref().map(|a| a.read().to_vec()),
        }
    }
}
