//! The authenticator: a request's verdict from the cache, the source's review budget,
//! the bounded review slots and the reviewer, and the count of every verdict.

use std::{
    net::IpAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use super::{
    budget::{ReviewBudget, SourceBudgets},
    cache::{CacheTtls, DecisionCache, TokenDigest},
    decision::Decision,
    review::Reviewer,
};

/// Reviews of new tokens sent to the API server at once (a client sending new tokens
/// in a loop cannot multiply its load on the API server).
const REVIEWS_AT_ONCE: usize = 4;

/// Requests waiting for one of those reviews at most; further ones are answered 429
/// at once instead of holding a connection while they wait.
const REVIEWS_WAITING: usize = 32;

/// Re-reviews at once of a token whose allow is cached but no longer fresh: apart
/// from new tokens' reviews, so a flood of new tokens does not queue the scrapers.
const REREVIEWS_AT_ONCE: usize = 2;

/// After a review found the API server unreachable, re-reviews of cached allows are
/// skipped for this long and the allow answers at once: a black-holed API server would
/// otherwise hold every scrape for the whole review timeout (5 s) before the cached
/// allow answers, half of Prometheus' default scrape timeout. Reviews of new tokens
/// still go out, so the API server's return is noticed by the first of them.
pub const REMEMBER_UNREACHABLE: Duration = Duration::from_secs(30);

/// How each request to a protected path was answered, since the agent started.
#[derive(Debug, Default)]
pub struct AuthCounts {
    pub allowed: AtomicU64,
    /// Allowed by a cached allow while the API server could not be reached.
    pub allowed_unreachable: AtomicU64,
    pub unauthenticated: AtomicU64,
    pub forbidden: AtomicU64,
    /// 503: the API server could not be reached and no cached allow held.
    pub unavailable: AtomicU64,
    /// 429: the source's review budget was spent, or too many requests waited for a
    /// review; the API server was not asked.
    pub throttled: AtomicU64,
}

impl AuthCounts {
    /// (result label, count), in a fixed order.
    pub fn read(&self) -> [(&'static str, u64); 6] {
        [
            ("allowed", self.allowed.load(Relaxed)),
            (
                "allowed_api_unreachable",
                self.allowed_unreachable.load(Relaxed),
            ),
            ("unauthenticated", self.unauthenticated.load(Relaxed)),
            ("forbidden", self.forbidden.load(Relaxed)),
            ("unavailable", self.unavailable.load(Relaxed)),
            ("throttled", self.throttled.load(Relaxed)),
        ]
    }
}

pub struct Authenticator {
    reviewer: Box<dyn Reviewer>,
    cache: Mutex<DecisionCache>,
    budgets: Mutex<SourceBudgets>,
    reviews: Semaphore,
    rereviews: Semaphore,
    waiting: AtomicUsize,
    /// When a review last found the API server unreachable, until one reaches it.
    unreachable_at: Mutex<Option<Instant>>,
    pub counts: Arc<AuthCounts>,
}

/// How a request was let in or turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Decided(Decision),
    AllowedWhileUnreachable,
    Unavailable,
    Throttled,
}

/// Counts a request among those waiting for a review while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

impl Authenticator {
    pub fn new(reviewer: Box<dyn Reviewer>, ttls: CacheTtls) -> Self {
        Self::with_budget(reviewer, ttls, ReviewBudget::default())
    }

    pub fn with_budget(reviewer: Box<dyn Reviewer>, ttls: CacheTtls, budget: ReviewBudget) -> Self {
        Self {
            reviewer,
            cache: Mutex::new(DecisionCache::new(ttls)),
            budgets: Mutex::new(SourceBudgets::new(budget)),
            reviews: Semaphore::new(REVIEWS_AT_ONCE),
            rereviews: Semaphore::new(REREVIEWS_AT_ONCE),
            waiting: AtomicUsize::new(0),
            unreachable_at: Mutex::new(None),
            counts: Arc::default(),
        }
    }

    pub async fn verdict(&self, token: &str, path: &str, source: IpAddr) -> Verdict {
        let digest: TokenDigest = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        let known = {
            let cache = self.cache.lock();
            if let Some(d) = cache.fresh(&digest, path, now) {
                return Verdict::Decided(d);
            }
            cache.allowed_while_unreachable(&digest, path, now)
        };
        if known && self.unreachable_recently(now) {
            return Verdict::AllowedWhileUnreachable;
        }
        // A token allowed within the unreachable bound is a caller's (no flood can
        // forge one): it is reviewed again on its own slots, outside every budget.
        let _slot = if known {
            self.rereviews.acquire().await
        } else {
            if !self.budgets.lock().take(source, now) {
                return Verdict::Throttled;
            }
            if self.waiting.fetch_add(1, Relaxed) >= REVIEWS_WAITING {
                self.waiting.fetch_sub(1, Relaxed);
                return Verdict::Throttled;
            }
            let _waiting = Waiting(&self.waiting);
            self.reviews.acquire().await
        };
        // Another request may have reviewed the same token meanwhile.
        if let Some(d) = self.cache.lock().fresh(&digest, path, Instant::now()) {
            return Verdict::Decided(d);
        }
        match self
            .reviewer
            .review(token.to_string(), path.to_string())
            .await
        {
            Ok(d) => {
                *self.unreachable_at.lock() = None;
                self.cache.lock().insert(digest, path, d, Instant::now());
                Verdict::Decided(d)
            }
            Err(e) => {
                tracing::warn!("cannot review a request to {path} with the API server: {e}");
                *self.unreachable_at.lock() = Some(Instant::now());
                if self
                    .cache
                    .lock()
                    .allowed_while_unreachable(&digest, path, Instant::now())
                {
                    Verdict::AllowedWhileUnreachable
                } else {
                    Verdict::Unavailable
                }
            }
        }
    }

    /// Whether a review found the API server unreachable less than
    /// [`REMEMBER_UNREACHABLE`] before `now` (and none reached it since).
    fn unreachable_recently(&self, now: Instant) -> bool {
        self.unreachable_at
            .lock()
            .is_some_and(|at| now.saturating_duration_since(at) < REMEMBER_UNREACHABLE)
    }

    pub fn count(&self, verdict: Verdict) {
        let c = &self.counts;
        let counter = match verdict {
            Verdict::Decided(Decision::Allowed) => &c.allowed,
            Verdict::AllowedWhileUnreachable => &c.allowed_unreachable,
            Verdict::Decided(Decision::Unauthenticated) => &c.unauthenticated,
            Verdict::Decided(Decision::Forbidden) => &c.forbidden,
            Verdict::Unavailable => &c.unavailable,
            Verdict::Throttled => &c.throttled,
        };
        counter.fetch_add(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::{
        net::Ipv4Addr,
        sync::atomic::{AtomicBool, AtomicUsize},
    };

    use super::*;
    use crate::http::auth::review::Unreachable;

    /// Allows every token while `up`; otherwise answers nothing for `hang` (a
    /// black-holed API server, its review timeout shortened), then fails.
    struct Fake {
        up: Arc<AtomicBool>,
        hang: Duration,
        calls: Arc<AtomicUsize>,
    }

    impl Reviewer for Fake {
        fn review(
            &self,
            _token: String,
            _path: String,
        ) -> futures::future::BoxFuture<'static, Result<Decision, Unreachable>> {
            self.calls.fetch_add(1, Relaxed);
            let (up, hang) = (self.up.load(Relaxed), self.hang);
            Box::pin(async move {
                if up {
                    return Ok(Decision::Allowed);
                }
                tokio::time::sleep(hang).await;
                Err(Unreachable("no answer".into()))
            })
        }
    }

    #[tokio::test]
    async fn a_black_holed_api_server_is_remembered_and_cached_allows_answer_at_once() {
        let (up, calls) = (
            Arc::new(AtomicBool::new(true)),
            Arc::new(AtomicUsize::new(0)),
        );
        let hang = Duration::from_millis(300);
        let ttls = CacheTtls {
            fresh: Duration::from_millis(10),
            ..CacheTtls::default()
        };
        let fake = Fake {
            up: up.clone(),
            hang,
            calls: calls.clone(),
        };
        let auth = Authenticator::new(Box::new(fake), ttls);
        let source = IpAddr::from(Ipv4Addr::LOCALHOST);
        let allowed = Verdict::Decided(Decision::Allowed);
        assert_eq!(auth.verdict("scraper", "/metrics", source).await, allowed);
        up.store(false, Relaxed);
        // Six scrapes past the fresh allow, with the API server black-holed.
        let mut slow = 0;
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let started = Instant::now();
            let got = auth.verdict("scraper", "/metrics", source).await;
            assert_eq!(got, Verdict::AllowedWhileUnreachable);
            slow += usize::from(started.elapsed() >= hang);
        }
        assert_eq!(
            calls.load(Relaxed),
            2,
            "one review, then one re-review found it unreachable and the rest were answered from the cache"
        );
        assert_eq!(slow, 1, "only the first scrape waited for the review");
        // A new token is still reviewed, and its answer clears what was remembered.
        up.store(true, Relaxed);
        assert_eq!(auth.verdict("other", "/metrics", source).await, allowed);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(auth.verdict("scraper", "/metrics", source).await, allowed);
        assert_eq!(calls.load(Relaxed), 4);
    }
}
