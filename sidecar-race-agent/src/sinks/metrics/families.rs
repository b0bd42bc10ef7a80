//! The metric families the sink counts into, registered with their names and HELP
//! (a public interface: docs/reference.md, the alert rules and dashboard use them).

use std::sync::atomic::{AtomicI64, AtomicU64};

use prometheus_client::{
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

use super::cap::{Labels, SeriesCap};

/// Race windows from 10 ms to 2 min.
const WINDOW_BUCKETS: [f64; 14] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
];

/// Families of what the pipeline's outcomes count.
pub(super) struct Families {
    pub refused: Family<Labels, Counter>,
    pub incidents: Family<Labels, Counter>,
    pub window: Family<Labels, Histogram, fn() -> Histogram>,
    pub pod_starts: Family<Labels, Counter>,
    pub affected_starts: Family<Labels, Counter>,
    pub app_not_ready: Family<Labels, Counter>,
    pub stuck_jobs: Family<Labels, Gauge>,
    pub refusals_suppressed: Family<Labels, Counter>,
    /// Per workload and template: the creation time (Unix seconds) of the earliest
    /// pod of that template this agent saw start.
    pub template_created: Family<Labels, Gauge<f64, AtomicU64>>,
}

impl Families {
    /// Registers the families, `build_info` and the series cap's overflow counter.
    pub(super) fn register(
        registry: &mut Registry,
        series: &SeriesCap,
        version: &str,
        kernel: &str,
    ) -> Self {
        let f = Families {
            refused: Family::default(),
            incidents: Family::default(),
            window: Family::new_with_constructor(|| Histogram::new(WINDOW_BUCKETS)),
            pod_starts: Family::default(),
            affected_starts: Family::default(),
            app_not_ready: Family::default(),
            stuck_jobs: Family::default(),
            refusals_suppressed: Family::default(),
            template_created: Family::default(),
        };
        registry.register(
            "refused_connections",
            "Connections refused by a sidecar port of the same pod, by phase",
            f.refused.clone(),
        );
        registry.register(
            "incidents",
            "Sidecar race incidents, counted once their phase is final",
            f.incidents.clone(),
        );
        registry.register(
            "window_seconds",
            "Race windows: startup first refusal→listener up, drain listener gone→last refusal, steady gone→back",
            f.window.clone(),
        );
        registry.register(
            "pod_starts",
            "Pod starts the agent saw (pod cgroup created)",
            f.pod_starts.clone(),
        );
        registry.register(
            "affected_pod_starts",
            "Pod starts with at least one startup incident",
            f.affected_starts.clone(),
        );
        registry.register(
            "app_not_ready_refusals",
            "Connections a sidecar made to an app container's port before the app listened (inbound forwarding, rewritten probes): not sidecar races",
            f.app_not_ready.clone(),
        );
        registry.register(
            "stuck_job_pods",
            "Job pods whose app containers finished while a classic sidecar keeps them running",
            f.stuck_jobs.clone(),
        );
        registry.register(
            "refusals_suppressed",
            "Refusals over their container's budget: counted in the kernel, not sent one by one",
            f.refusals_suppressed.clone(),
        );
        registry.register(
            "pod_template_created_timestamp_seconds",
            "Creation time (Unix seconds) of the earliest pod of each workload's pod template (pod-template-hash, controller-revision-hash) this agent saw start",
            f.template_created.clone(),
        );
        let build_info = Family::<Labels, Gauge<i64, AtomicI64>>::default();
        build_info
            .get_or_create(&vec![
                ("version", version.to_string()),
                ("kernel", kernel.to_string()),
            ])
            .set(1);
        registry.register(
            "build_info",
            "Agent version and kernel (always 1)",
            build_info,
        );
        registry.register(
            "series_overflow",
            "Samples folded into a family's `overflow` series because it reached --max-series-per-metric",
            series.overflow_family(),
        );
        f
    }

    /// Drops the series of `metric` (a name the series cap keeps) under `labels`.
    pub(super) fn remove(&self, metric: &str, labels: &Labels) {
        let removed = match metric {
            "refused_connections" => self.refused.remove(labels),
            "incidents" => self.incidents.remove(labels),
            "window_seconds" => self.window.remove(labels),
            "pod_starts" => self.pod_starts.remove(labels),
            "affected_pod_starts" => self.affected_starts.remove(labels),
            "app_not_ready_refusals" => self.app_not_ready.remove(labels),
            "stuck_job_pods" => self.stuck_jobs.remove(labels),
            "refusals_suppressed" => self.refusals_suppressed.remove(labels),
            "pod_template_created_timestamp_seconds" => self.template_created.remove(labels),
            _ => false,
        };
        debug_assert!(removed, "{metric} has no series {labels:?}");
    }
}
