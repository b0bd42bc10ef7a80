//! The authenticator: a request's verdict from the cache, the source's review budget,
//! the bounded review slots and the reviewer, and the count of every verdict.

use std::{
    net::IpAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed},
    },
    time::Instant,
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
                self.cache.lock().insert(digest, path, d, Instant::now());
                Verdict::Decided(d)
            }
            Err(e) => {
                tracing::warn!("cannot review a request to {path} with the API server: {e}");
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
