//! Review decisions remembered per (token digest, path): a fresh decision is reused
//! briefly; when the API server cannot be reached, an allow stays usable for a
//! bounded time and nothing else does. Pure: the caller passes the time.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use super::decision::Decision;

/// A SHA-256 digest of a bearer token (the token itself is not kept).
pub type TokenDigest = [u8; 32];

/// How long decisions are reused, and allows kept for an unreachable API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheTtls {
    /// A decision is reused without asking the API server again for this long.
    pub fresh: Duration,
    /// While the API server cannot be reached, an allow this old at most still holds.
    pub allow_when_unreachable: Duration,
    /// Decisions kept at most (requests with new tokens beyond are reviewed, not kept).
    pub max_entries: usize,
}

impl Default for CacheTtls {
    fn default() -> Self {
        Self {
            fresh: Duration::from_secs(10),
            allow_when_unreachable: Duration::from_secs(300),
            max_entries: 4096,
        }
    }
}

pub struct DecisionCache {
    ttls: CacheTtls,
    entries: HashMap<(TokenDigest, String), (Decision, Instant)>,
}

impl DecisionCache {
    pub fn new(ttls: CacheTtls) -> Self {
        Self {
            ttls,
            entries: HashMap::new(),
        }
    }

    /// A decision reviewed less than `fresh` ago.
    pub fn fresh(&self, token: &TokenDigest, path: &str, now: Instant) -> Option<Decision> {
        let (decision, at) = self.entries.get(&(*token, path.to_string()))?;
        (now.saturating_duration_since(*at) < self.ttls.fresh).then_some(*decision)
    }

    /// With the API server unreachable: whether an allow reviewed less than
    /// `allow_when_unreachable` ago holds.
    pub fn allowed_while_unreachable(&self, token: &TokenDigest, path: &str, now: Instant) -> bool {
        matches!(
            self.entries.get(&(*token, path.to_string())),
            Some((Decision::Allowed, at))
                if now.saturating_duration_since(*at) < self.ttls.allow_when_unreachable
        )
    }

    /// Remembers a decision the API server just gave.
    pub fn insert(&mut self, token: TokenDigest, path: &str, decision: Decision, now: Instant) {
        let key = (token, path.to_string());
        if self.entries.len() >= self.ttls.max_entries && !self.entries.contains_key(&key) {
            self.forget_expired(now);
            if self.entries.len() >= self.ttls.max_entries {
                return; // full of live decisions: new tokens cannot push them out
            }
        }
        self.entries.insert(key, (decision, now));
    }

    /// Drops what can no longer be used: allows past the unreachable bound, the rest
    /// past their freshness.
    fn forget_expired(&mut self, now: Instant) {
        let ttls = self.ttls;
        self.entries.retain(|_, (decision, at)| {
            let age = now.saturating_duration_since(*at);
            match decision {
                Decision::Allowed => age < ttls.allow_when_unreachable,
                _ => age < ttls.fresh,
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: TokenDigest = [1; 32];
    const B: TokenDigest = [2; 32];

    #[test]
    fn decisions_are_reused_briefly_and_allows_outlive_an_unreachable_api_server() {
        let mut c = DecisionCache::new(CacheTtls::default());
        let t0 = Instant::now();
        let s = Duration::from_secs;
        c.insert(A, "/metrics", Decision::Allowed, t0);
        c.insert(B, "/metrics", Decision::Forbidden, t0);
        assert_eq!(c.fresh(&A, "/metrics", t0 + s(9)), Some(Decision::Allowed));
        assert_eq!(c.fresh(&A, "/api/v1/incidents", t0), None, "per path");
        assert_eq!(c.fresh(&A, "/metrics", t0 + s(10)), None, "reviewed again");
        assert!(c.allowed_while_unreachable(&A, "/metrics", t0 + s(299)));
        assert!(!c.allowed_while_unreachable(&A, "/metrics", t0 + s(300)));
        assert!(!c.allowed_while_unreachable(&B, "/metrics", t0 + s(1)));
    }

    #[test]
    fn a_full_cache_keeps_its_live_allows() {
        let mut c = DecisionCache::new(CacheTtls {
            max_entries: 2,
            ..CacheTtls::default()
        });
        let t0 = Instant::now();
        c.insert(A, "/metrics", Decision::Allowed, t0);
        c.insert(B, "/metrics", Decision::Unauthenticated, t0);
        c.insert([3; 32], "/metrics", Decision::Unauthenticated, t0);
        assert_eq!(c.fresh(&[3; 32], "/metrics", t0), None, "not kept: full");
        let later = t0 + Duration::from_secs(11);
        c.insert([3; 32], "/metrics", Decision::Unauthenticated, later);
        assert_eq!(
            c.fresh(&[3; 32], "/metrics", later),
            Some(Decision::Unauthenticated),
            "B's stale denial made room"
        );
        assert!(c.allowed_while_unreachable(&A, "/metrics", later));
    }
}
