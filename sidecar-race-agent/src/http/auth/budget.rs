//! Token reviews each source (the peer's IP address) may cause: a token bucket per
//! source, so a client sending new tokens in a loop spends its own budget and is
//! answered 429 without the API server being asked, while other sources' reviews go
//! on. The table of sources is bounded: idle sources (full buckets) are forgotten
//! first; sources beyond the bound share one bucket. Pure: the caller passes the time.

use std::{collections::HashMap, net::IpAddr, time::Instant};

use crate::sinks::token_bucket::TokenBucket;

/// A source's review budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReviewBudget {
    /// Reviews a source may cause at once.
    pub burst: f64,
    /// Reviews a source may cause per second after its burst.
    pub per_second: f64,
    /// Sources with a bucket of their own at most; further ones share one.
    pub max_sources: usize,
}

impl Default for ReviewBudget {
    /// A scraper causes one review per path every 10 s (the allow's freshness) and
    /// `report --agents-via-api` one per run, from the API server's address: 20 at
    /// once and 2 a second leave both far below their budget.
    fn default() -> Self {
        Self {
            burst: 20.0,
            per_second: 2.0,
            max_sources: 1024,
        }
    }
}

pub struct SourceBudgets {
    budget: ReviewBudget,
    sources: HashMap<IpAddr, TokenBucket>,
    /// The bucket of sources beyond `max_sources`.
    overflow: Option<TokenBucket>,
}

impl SourceBudgets {
    pub fn new(budget: ReviewBudget) -> Self {
        Self {
            budget,
            sources: HashMap::new(),
            overflow: None,
        }
    }

    /// Takes a review from `source`'s budget; false when it is spent.
    pub fn take(&mut self, source: IpAddr, now: Instant) -> bool {
        let ReviewBudget {
            burst,
            per_second,
            max_sources,
        } = self.budget;
        if !self.sources.contains_key(&source) && self.sources.len() >= max_sources {
            // Idle sources (their bucket full again) have nothing to remember.
            self.sources.retain(|_, b| {
                b.refill(now);
                !b.is_full()
            });
        }
        let bucket = if self.sources.len() < max_sources || self.sources.contains_key(&source) {
            self.sources
                .entry(source)
                .or_insert_with(|| TokenBucket::full(burst, per_second, now))
        } else {
            self.overflow
                .get_or_insert_with(|| TokenBucket::full(burst, per_second, now))
        };
        bucket.take(now)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn a_source_past_its_burst_waits_for_its_rate_and_others_are_untouched() {
        let mut b = SourceBudgets::new(ReviewBudget {
            burst: 3.0,
            per_second: 2.0,
            max_sources: 8,
        });
        let t0 = Instant::now();
        assert!((0..3).all(|_| b.take(ip(1), t0)));
        assert!(!b.take(ip(1), t0), "burst spent");
        assert!(b.take(ip(2), t0), "another source has its own budget");
        assert!(b.take(ip(1), t0 + Duration::from_millis(500)), "refilled");
        assert!(!b.take(ip(1), t0 + Duration::from_millis(500)));
    }

    #[test]
    fn sources_beyond_the_bound_share_one_bucket_and_idle_ones_make_room() {
        let mut b = SourceBudgets::new(ReviewBudget {
            burst: 1.0,
            per_second: 1.0,
            max_sources: 2,
        });
        let t0 = Instant::now();
        assert!(b.take(ip(1), t0));
        assert!(b.take(ip(2), t0));
        assert!(b.take(ip(3), t0), "the shared bucket");
        assert!(!b.take(ip(4), t0), "shares ip(3)'s spent bucket");
        assert_eq!(b.sources.len(), 2, "bounded");
        let later = t0 + Duration::from_secs(2);
        assert!(b.take(ip(5), later), "idle sources were forgotten");
        assert!(b.sources.contains_key(&ip(5)));
    }
}
