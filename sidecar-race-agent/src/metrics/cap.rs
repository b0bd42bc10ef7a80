//! A cap on the series of each metric family whose labels a pod owner or a client
//! chooses (workload, container, sidecar and port names): beyond the cap, samples go
//! to one series whose label values are all `overflow`, and each folded sample is
//! counted in `sidecar_race_series_overflow_total{metric}`.

use std::collections::{HashMap, HashSet};

use prometheus_client::metrics::{counter::Counter, family::Family};

/// The label value of every label of the overflow series.
pub const OVERFLOW: &str = "overflow";

/// Default of `--max-series-per-metric`.
pub const DEFAULT_MAX_SERIES: usize = 10_000;

pub type Labels = Vec<(&'static str, String)>;

pub struct SeriesCap {
    max: usize,
    seen: HashMap<&'static str, HashSet<Labels>>,
    overflow: Family<Labels, Counter>,
}

impl SeriesCap {
    pub fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            seen: HashMap::new(),
            overflow: Family::default(),
        }
    }

    pub fn set_max(&mut self, max: usize) {
        self.max = max.max(1);
    }

    /// The family `sidecar_race_series_overflow_total{metric}`.
    pub fn overflow_family(&self) -> Family<Labels, Counter> {
        self.overflow.clone()
    }

    /// The labels to record a sample of `metric` under: `labels` while the family has
    /// room for them, else the overflow series.
    pub fn labels(&mut self, metric: &'static str, labels: Labels) -> Labels {
        let seen = self.seen.entry(metric).or_default();
        if seen.contains(&labels) {
            return labels;
        }
        if seen.len() < self.max {
            seen.insert(labels.clone());
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beyond_the_cap_samples_fold_into_the_overflow_series_and_are_counted() {
        let mut cap = SeriesCap::new(2);
        let l = |w: &str| vec![("workload", w.to_string()), ("port", "80".to_string())];
        assert_eq!(cap.labels("incidents", l("a")), l("a"));
        assert_eq!(cap.labels("incidents", l("b")), l("b"));
        let folded = cap.labels("incidents", l("c"));
        assert_eq!(
            folded,
            vec![
                ("workload", OVERFLOW.to_string()),
                ("port", OVERFLOW.to_string())
            ]
        );
        assert_eq!(cap.labels("incidents", l("a")), l("a"), "known series stay");
        assert_eq!(cap.labels("pod_starts", l("c")), l("c"), "per family");
        let n = cap
            .overflow_family()
            .get_or_create(&vec![("metric", "sidecar_race_incidents".to_string())])
            .get();
        assert_eq!(n, 1);
    }
}
