//! A cap on the series of each metric family whose labels a pod owner or a client
//! chooses (workload, container, sidecar and port names): beyond the cap, samples go
//! to one series whose label values are all `overflow`, and each folded sample is
//! counted in `sidecar_race_series_overflow_total{metric}`.
//!
//! Series age out: one not written for `--series-ttl` is dropped and frees its slot,
//! so Jobs, CronJobs and bare pods (a new workload name per run) do not fill the cap
//! for the rest of the agent's life.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use prometheus_client::metrics::{counter::Counter, family::Family};

/// The label value of every label of the overflow series.
pub const OVERFLOW: &str = "overflow";

/// Default of `--max-series-per-metric`.
pub const DEFAULT_MAX_SERIES: usize = 10_000;

/// Default of `--series-ttl`: longer than any alert's `for`, so a firing alert's
/// series stays while the alert is evaluated.
pub const DEFAULT_SERIES_TTL: Duration = Duration::from_secs(3600);

/// Series are looked over for expiry at most this often (each look visits them all).
const SWEEP_EVERY: Duration = Duration::from_secs(10);

pub type Labels = Vec<(&'static str, String)>;

pub struct SeriesCap {
    max: usize,
    ttl: Duration,
    /// Per family, its series and when each was last written.
    seen: HashMap<&'static str, HashMap<Labels, Instant>>,
    last_sweep: Option<Instant>,
    overflow: Family<Labels, Counter>,
}

impl SeriesCap {
    pub fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            ttl: DEFAULT_SERIES_TTL,
            seen: HashMap::new(),
            last_sweep: None,
            overflow: Family::default(),
        }
    }

    pub fn set_max(&mut self, max: usize) {
        self.max = max.max(1);
    }

    pub fn set_ttl(&mut self, ttl: Duration) {
        self.ttl = ttl;
    }

    /// The family `sidecar_race_series_overflow_total{metric}`.
    pub fn overflow_family(&self) -> Family<Labels, Counter> {
        self.overflow.clone()
    }

    /// The labels to record a sample of `metric` under at `now`: `labels` while the
    /// family has room for them, else the overflow series.
    pub fn labels(&mut self, metric: &'static str, labels: Labels, now: Instant) -> Labels {
        let seen = self.seen.entry(metric).or_default();
        if let Some(last) = seen.get_mut(&labels) {
            *last = now;
            return labels;
        }
        if seen.len() < self.max {
            seen.insert(labels.clone(), now);
            return labels;
        }
        self.overflow
            .get_or_create(&vec![("metric", format!("sidecar_race_{metric}"))])
            .inc();
        labels
            .into_iter()
            .map(|(k, _)| (k, OVERFLOW.to_string()))
            .collect()
    }

    /// Marks a series as written at `now` without recording a sample (a gauge that
    /// still holds its value).
    pub fn touch(&mut self, metric: &'static str, labels: &Labels, now: Instant) {
        if let Some(last) = self.seen.get_mut(metric).and_then(|s| s.get_mut(labels)) {
            *last = now;
        }
    }

    /// Forgets the series not written for the TTL and returns them (family, labels),
    /// for the caller to drop from the exposition (looked over every `SWEEP_EVERY`).
    pub fn expire(&mut self, now: Instant) -> Vec<(&'static str, Labels)> {
        let mut gone = Vec::new();
        if self
            .last_sweep
            .is_some_and(|last| now.saturating_duration_since(last) < SWEEP_EVERY)
        {
            return gone;
        }
        self.last_sweep = Some(now);
        for (metric, seen) in &mut self.seen {
            seen.retain(|labels, last| {
                let keep = now.saturating_duration_since(*last) < self.ttl;
                if !keep {
                    gone.push((*metric, labels.clone()));
                }
                keep
            });
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(w: &str) -> Labels {
        vec![("workload", w.to_string()), ("port", "80".to_string())]
    }

    #[test]
    fn beyond_the_cap_samples_fold_into_the_overflow_series_and_are_counted() {
        let mut cap = SeriesCap::new(2);
        let now = Instant::now();
        assert_eq!(cap.labels("incidents", l("a"), now), l("a"));
        assert_eq!(cap.labels("incidents", l("b"), now), l("b"));
        let folded = cap.labels("incidents", l("c"), now);
        assert_eq!(
            folded,
            vec![
                ("workload", OVERFLOW.to_string()),
                ("port", OVERFLOW.to_string())
            ]
        );
        assert_eq!(
            cap.labels("incidents", l("a"), now),
            l("a"),
            "known series stay"
        );
        assert_eq!(cap.labels("pod_starts", l("c"), now), l("c"), "per family");
        let n = cap
            .overflow_family()
            .get_or_create(&vec![("metric", "sidecar_race_incidents".to_string())])
            .get();
        assert_eq!(n, 1);
    }

    #[test]
    fn series_not_written_for_the_ttl_expire_and_free_their_slot() {
        let mut cap = SeriesCap::new(2);
        cap.set_ttl(Duration::from_secs(60));
        let t0 = Instant::now();
        cap.labels("incidents", l("a"), t0);
        cap.labels("incidents", l("b"), t0);
        let t1 = t0 + Duration::from_secs(30);
        cap.labels("incidents", l("a"), t1);
        assert!(cap.expire(t1).is_empty());
        let gone = cap.expire(t0 + Duration::from_secs(61));
        assert_eq!(gone, vec![("incidents", l("b"))], "a was written since");
        let t2 = t0 + Duration::from_secs(62);
        assert_eq!(
            cap.labels("incidents", l("c"), t2),
            l("c"),
            "b's slot is free"
        );
        cap.touch("incidents", &l("a"), t0 + Duration::from_secs(89));
        let gone = cap.expire(t0 + Duration::from_secs(100));
        assert!(gone.is_empty(), "a was touched: {gone:?}");
    }
}
