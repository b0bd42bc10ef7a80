//! The daemon's totals, built in one place for the metrics (at scrape time) and the
//! periodic log line: the kernel's per-CPU counters, the totals the pipeline published
//! at its last step (never its lock: a scrape does not wait for a step), and the
//! agent's own drops.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
};

use crate::{
    http::auth::AuthCounts,
    ingest::events::Kind,
    ingest::stream::StreamStats,
    inventory::sources::SourceStats,
    kernel::{attach::ProbeError, counters::KernelCounters},
    pipeline::totals::{PipelineTotals, PublishedTotals},
    sinks::k8s_events::PublisherStats,
    sinks::metrics::{BoundsTotals, KernelTotals, StartTotals, Totals, TotalsSource},
};

/// Where the kernel's totals are read: its per-CPU counters (fixed ones in tests).
pub trait KernelSource: Send + Sync {
    fn read(&self) -> Result<KernelTotals, ProbeError>;
}

impl KernelSource for KernelCounters {
    fn read(&self) -> Result<KernelTotals, ProbeError> {
        let gone = self.entries_gone().unwrap_or_default();
        let counts = self.counts()?;
        Ok(KernelTotals {
            seen: counts.iter().map(|(k, c)| (k.name(), c.seen)).collect(),
            lost: counts.values().map(|c| c.lost).sum(),
            suppressed: counts
                .iter()
                .map(|(k, c)| (k.name(), c.suppressed))
                .collect(),
            entries_gone: gone.to_vec(),
            budget_conflicts: self.budget_conflicts()?.to_vec(),
            recursion_misses: self.recursion_misses(),
        })
    }
}

#[derive(Clone)]
pub struct NodeTotals {
    pub pipeline: PublishedTotals,
    pub kernel: Arc<dyn KernelSource>,
    pub stream: Arc<StreamStats>,
    pub source: &'static str,
    pub source_stats: Arc<SourceStats>,
    pub events: Option<Arc<PublisherStats>>,
    pub log_lines_suppressed: Arc<AtomicU64>,
    pub auth: Option<Arc<AuthCounts>>,
    /// How the agent started, and the records it read from before its start.
    pub start: Arc<Start>,
}

/// How the agent started (see [`StartTotals`]).
#[derive(Debug, Default)]
pub struct Start {
    pub kernel_state: &'static str,
    pub checkpoint: &'static str,
    pub records_before_start: AtomicU64,
}

impl std::fmt::Debug for NodeTotals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeTotals")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// The node's totals at one moment.
pub struct Snapshot {
    /// What `/metrics` exports.
    pub totals: Totals,
    /// Why `totals.kernel` is `None`.
    pub kernel_error: Option<ProbeError>,
    /// The pipeline's totals as published (its sizes are logged, not exported).
    pub pipeline: PipelineTotals,
    /// Kernel events the reader handed to the pipeline.
    pub delivered: u64,
}

impl NodeTotals {
    /// The one builder of the node's totals.
    pub fn snapshot(&self) -> Snapshot {
        let (kernel, kernel_error) = match self.kernel.read() {
            Ok(k) => (Some(k), None),
            Err(e) => (None, Some(e)),
        };
        let p = self.pipeline.read();
        let totals = Totals {
            kernel,
            refusals_other: p.refusals_other,
            self_refusals: p.self_refusals,
            unattributed: p.unattributed,
            pod_source: (self.source, self.source_stats.errors()),
            dropped_in_agent: self.stream.dropped_in_agent.load(Relaxed),
            undecodable: self.stream.decode_errors.load(Relaxed),
            events_not_posted: self
                .events
                .as_ref()
                .map(|s| (s.dropped.load(Relaxed), s.failed.load(Relaxed))),
            bounds: BoundsTotals {
                incidents_evicted: p.incidents_evicted,
                facts_out_of_order: p.facts_out_of_order,
                listeners_dropped: p.listeners_dropped,
                unix_facts_dropped: p.unix_facts_dropped,
                log_lines_suppressed: self.log_lines_suppressed.load(Relaxed),
            },
            auth: self.auth.as_ref().map(|a| a.read().to_vec()),
            start: Some(StartTotals {
                kernel_state: self.start.kernel_state,
                checkpoint: self.start.checkpoint,
                records_before_start: self.start.records_before_start.load(Relaxed),
            }),
        };
        Snapshot {
            totals,
            kernel_error,
            pipeline: p,
            delivered: Kind::ALL.iter().map(|k| self.stream.delivered(*k)).sum(),
        }
    }

    /// The periodic log line of the node's totals.
    pub fn log(&self) {
        let Snapshot {
            totals: t,
            kernel_error,
            pipeline: p,
            delivered,
        } = self.snapshot();
        let Some(kernel) = &t.kernel else {
            if let Some(e) = kernel_error {
                tracing::warn!("cannot read kernel counters: {e}");
            }
            return;
        };
        let seen: BTreeMap<&str, u64> = kernel.seen.iter().copied().collect();
        let suppressed: u64 = kernel.suppressed.iter().map(|(_, n)| n).sum();
        tracing::info!(
            ?seen,
            lost_in_kernel = kernel.lost,
            suppressed_in_kernel = suppressed,
            delivered,
            dropped_in_agent = t.dropped_in_agent,
            cgroups = p.cgroups,
            pods = p.pods,
            incidents = p.incidents,
            refusals_other = t.refusals_other,
            self_refusals = t.self_refusals,
            unattributed = t.unattributed,
            pod_source_errors = t.pod_source.1,
            "kernel event counts"
        );
    }
}

impl TotalsSource for NodeTotals {
    fn totals(&self) -> Totals {
        self.snapshot().totals
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::mpsc, time::Duration};

    use parking_lot::Mutex;

    use super::*;
    use crate::{
        detect::DetectorConfig,
        ingest::events::KernelEvent,
        sinks::metrics::Metrics,
        test_facts::{
            MS, OTHER_POD, container_path, created, pipeline, pod_path, socket, temp_dir,
        },
    };

    /// Kernel counters that read as nothing.
    struct NoKernel;

    impl KernelSource for NoKernel {
        fn read(&self) -> Result<KernelTotals, ProbeError> {
            Ok(KernelTotals::default())
        }
    }

    fn node(published: PublishedTotals) -> NodeTotals {
        NodeTotals {
            pipeline: published,
            kernel: Arc::new(NoKernel),
            stream: Arc::default(),
            source: "none",
            source_stats: Arc::default(),
            events: None,
            log_lines_suppressed: Arc::default(),
            auth: None,
            start: Arc::default(),
        }
    }

    /// A scrape reads what the pipeline published at its last step, while the
    /// pipeline's lock is held by the daemon's loop (here: this thread).
    #[test]
    fn a_scrape_completes_while_the_pipeline_lock_is_held() {
        let dir = temp_dir("node-totals");
        let mut p = pipeline(&dir, None, DetectorConfig::default());
        // A refusal to a non-loopback address: never pod-local, counted as other.
        for ev in [
            created(0, 200, pod_path(OTHER_POD)),
            created(MS, 201, container_path(OTHER_POD, &"c".repeat(64))),
            KernelEvent::Refused(socket(
                310 * MS,
                201,
                "10.0.0.1:40003",
                Some("10.96.0.1:443"),
            )),
        ] {
            p.kernel_event(&ev);
        }
        let pipeline = Arc::new(Mutex::new(p));
        let node = node(pipeline.lock().totals());
        let metrics = Metrics::new(false, "0.1.0", "k").with_totals(Box::new(node.clone()));
        let scrape = |metrics: Metrics| {
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || tx.send((metrics.encode(), metrics)).unwrap());
            // A deadlock guard, not a bound on the scrape's speed.
            rx.recv_timeout(Duration::from_secs(60))
                .expect("the scrape waited for the pipeline's lock")
        };
        let held = pipeline.lock();
        let (om, metrics) = scrape(metrics);
        assert!(om.contains("sidecar_race_refusals_other_total 0\n"), "{om}");
        drop(held);
        let mut held = pipeline.lock();
        held.tick(3000 * MS);
        let (om, _) = scrape(metrics);
        assert!(
            om.contains("sidecar_race_refusals_other_total 1\n"),
            "published by the step: {om}"
        );
        // The log line's totals are the scrape's.
        let s = node.snapshot();
        assert_eq!(s.totals.refusals_other, 1);
        assert_eq!(
            (s.pipeline.cgroups, s.pipeline.incidents),
            (held.inventory().cgroups.len(), 0)
        );
        drop(held);
    }
}
