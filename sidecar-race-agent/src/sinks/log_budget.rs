//! A budget for incident log lines: a token bucket per pod and one for the node, so
//! a pod dialing thousands of closed ports cannot write hundreds of megabytes of logs.
//! Suppressed lines are counted (`sidecar_race_log_lines_suppressed_total`) and
//! summed up per pod in a periodic summary line.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

use crate::sinks::token_bucket::TokenBucket;

/// Lines one pod may log in a burst, and per second after it.
pub const POD_BURST: f64 = 20.0;
pub const POD_PER_SECOND: f64 = 1.0;
/// Lines the whole agent may log in a burst, and per second after it.
pub const NODE_BURST: f64 = 200.0;
pub const NODE_PER_SECOND: f64 = 20.0;
/// How often at most the summary of suppressed lines is logged.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(10);

pub struct LogBudget {
    node: TokenBucket,
    pods: HashMap<String, TokenBucket>,
    /// Lines suppressed per pod since the last summary.
    pending: HashMap<String, u64>,
    /// Lines suppressed so far (shared: the metrics read it at scrape time).
    suppressed: Arc<AtomicU64>,
    last_summary: Instant,
}

impl LogBudget {
    pub fn new(now: Instant) -> Self {
        Self {
            node: TokenBucket::full(NODE_BURST, NODE_PER_SECOND, now),
            pods: HashMap::new(),
            pending: HashMap::new(),
            suppressed: Arc::default(),
            last_summary: now,
        }
    }

    /// Whether a line about `pod_uid` may be logged now; counted when not.
    pub fn allow(&mut self, pod_uid: &str, now: Instant) -> bool {
        self.node.refill(now);
        let pod = self
            .pods
            .entry(pod_uid.to_string())
            .or_insert_with(|| TokenBucket::full(POD_BURST, POD_PER_SECOND, now));
        pod.refill(now);
        if pod.has_token() && self.node.has_token() {
            pod.spend();
            self.node.spend();
            return true;
        }
        self.suppressed.fetch_add(1, Relaxed);
        *self.pending.entry(pod_uid.to_string()).or_default() += 1;
        false
    }

    /// Pods with lines suppressed since the last summary and how many, once the
    /// summary is due; pods whose budget is full again are forgotten then.
    pub fn summary(&mut self, now: Instant) -> Vec<(String, u64)> {
        if now.saturating_duration_since(self.last_summary) < SUMMARY_EVERY {
            return Vec::new();
        }
        self.last_summary = now;
        self.pods.retain(|_, b| {
            b.refill(now);
            !b.is_full()
        });
        let mut out: Vec<(String, u64)> = self.pending.drain().collect();
        out.sort();
        out
    }

    /// The count of lines suppressed, to read it elsewhere.
    pub fn suppressed_counter(&self) -> Arc<AtomicU64> {
        self.suppressed.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flooding_pod_is_limited_and_summed_up_while_others_still_log() {
        let t0 = Instant::now();
        let mut b = LogBudget::new(t0);
        let logged = (0..10_000).filter(|_| b.allow("flooder", t0)).count();
        assert_eq!(logged, POD_BURST as usize);
        assert!(b.allow("quiet", t0), "another pod has its own budget");
        assert_eq!(
            b.suppressed_counter().load(Relaxed),
            10_000 - POD_BURST as u64
        );
        assert!(b.summary(t0).is_empty(), "not due yet");
        let later = t0 + SUMMARY_EVERY;
        assert_eq!(
            b.summary(later),
            [("flooder".to_string(), 10_000 - POD_BURST as u64)]
        );
        assert!(b.summary(later + SUMMARY_EVERY).is_empty(), "reset");
        // Ten seconds later the pod may log again, at the refill rate.
        assert!(b.allow("flooder", later));
    }

    #[test]
    fn many_pods_together_are_limited_by_the_node_budget() {
        let t0 = Instant::now();
        let mut b = LogBudget::new(t0);
        let logged = (0..1_000)
            .filter(|n| b.allow(&format!("pod-{n}"), t0))
            .count();
        assert_eq!(logged, NODE_BURST as usize);
        assert_eq!(
            b.suppressed_counter().load(Relaxed),
            1_000 - NODE_BURST as u64
        );
    }
}
