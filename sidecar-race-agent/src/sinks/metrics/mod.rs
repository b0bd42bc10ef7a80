//! Prometheus metrics (`GET /metrics`, OpenMetrics). Names and labels are a public
//! interface, documented in docs/reference.md.
//!
//! Labels are workload-level so series stay bounded across pod churn (`--metrics-pod-label`
//! adds `pod`). Two sources feed them: the pipeline's outcomes, counted by the sink as
//! they come, and totals that live elsewhere (kernel, pipeline, drops), read at scrape
//! time by a collector.

mod cap;
mod families;
mod sink;
mod totals;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod unix_tests;

use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use prometheus_client::{encoding::text::encode, registry::Registry};

use self::{cap::SeriesCap, families::Families, sink::Sink, totals::TotalsCollector};
pub use self::{
    cap::{DEFAULT_MAX_SERIES, DEFAULT_SERIES_TTL},
    totals::{BoundsTotals, KernelTotals, StartTotals, Totals, TotalsSource},
};
use crate::pipeline::outcome::Outcome;

pub struct Metrics {
    registry: Registry,
    sink: Sink,
}

impl Metrics {
    pub fn new(pod_label: bool, version: &str, kernel: &str) -> Self {
        let mut registry = Registry::with_prefix("sidecar_race");
        let series = SeriesCap::new(DEFAULT_MAX_SERIES);
        let families = Families::register(&mut registry, &series, version, kernel);
        Self {
            registry,
            sink: Sink::new(families, series, pod_label),
        }
    }

    /// At most `max` series per family with user-chosen labels (`--max-series-per-metric`).
    pub fn with_max_series(mut self, max: usize) -> Self {
        self.sink.series.set_max(max);
        self
    }

    /// Series not written for `ttl` are dropped and free their slot (`--series-ttl`).
    pub fn with_series_ttl(mut self, ttl: Duration) -> Self {
        self.sink.series.set_ttl(ttl);
        self
    }

    /// Exports the totals `source` holds, read at each scrape.
    pub fn with_totals(mut self, source: Box<dyn TotalsSource>) -> Self {
        self.registry
            .register_collector(Box::new(TotalsCollector(source)));
        self
    }

    /// The exposition, OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }

    /// The exposition in Prometheus' classic text format (0.0.4), for clients that do
    /// not ask for OpenMetrics (curl, `promtool check metrics`).
    pub fn encode_classic(&self) -> String {
        openmetrics_to_classic(&self.encode())
    }

    /// Counts what the pipeline's outcomes say, at `now` (which also ages series out).
    pub fn consume(&mut self, outcomes: &[Outcome], now: Instant) {
        for o in outcomes {
            self.sink.consume(o, now);
        }
        self.sink.prune(now);
    }
}

/// OpenMetrics names a counter family without `_total` in HELP/TYPE; the classic format
/// names it as its samples are named, and has no `# EOF` or `# UNIT`.
pub fn openmetrics_to_classic(om: &str) -> String {
    let counters: HashSet<&str> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(om.len());
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}
