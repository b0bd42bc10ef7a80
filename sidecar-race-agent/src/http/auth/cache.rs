//! Review decisions remembered per (token digest, path), allows and denials apart: an
//! allow is reused briefly and, when the API server cannot be reached, stays usable for
//! a bounded time; a denial (the negative cache) is reused for a shorter time, in a
//! table of its own, so a flood of fresh denials (random tokens) can never push a
//! cached allow out. Each table has its own bound. Pure: the caller passes the time.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use super::decision::Decision;

/// A SHA-256 digest of a bearer token (the token itself is not kept).
pub type TokenDigest = [u8; 32];

/// How long decisions are reused, allows kept for an unreachable API server, and how
/// many of each are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheTtls {
    /// An allow is reused without asking the API server again for this long.
    pub fresh: Duration,
    /// While the API server cannot be reached, an allow this old at most still holds.
    pub allow_when_unreachable: Duration,
    /// Allows kept at most (new tokens beyond are reviewed, not kept).
    pub max_entries: usize,
    /// A denial (401 or 403) is reused for this long: shorter than an allow's, so a
    /// token granted just now is let in soon.
    pub denied_fresh: Duration,
    /// Denials kept at most, apart from the allows.
    pub max_denials: usize,
}

impl Default for CacheTtls {
    fn default() -> Self {
        Self {
            fresh: Duration::from_secs(10),
            allow_when_unreachable: Duration::from_secs(300),
            max_entries: 4096,
            denied_fresh: Duration::from_secs(5),
            max_denials: 1024,
        }
    }
}

type Key = (TokenDigest, String);

/// Decisions of one kind, at most `max`, each usable for `keep`.
struct Table {
    entries: HashMap<Key, (Decision, Instant)>,
    keep: Duration,
    max: usize,
}

impl Table {
    fn new(keep: Duration, max: usize) -> Self {
        Self {
            entries: HashMap::new(),
            keep,
            max,
        }
    }

    fn get(&self, key: &Key, now: Instant, within: Duration) -> Option<Decision> {
        let (decision, at) = self.entries.get(key)?;
        (now.saturating_duration_since(*at) < within).then_some(*decision)
    }

    /// Keeps `decision`, unless the table is full of live ones: those stay.
    fn insert(&mut self, key: Key, decision: Decision, now: Instant) {
        if self.entries.len() >= self.max && !self.entries.contains_key(&key) {
            let keep = self.keep;
            self.entries
                .retain(|_, (_, at)| now.saturating_duration_since(*at) < keep);
            if self.entries.len() >= self.max {
                return;
            }
        }
        self.entries.insert(key, (decision, now));
    }
}

pub struct DecisionCache {
    ttls: CacheTtls,
    allows: Table,
    denials: Table,
}

impl DecisionCache {
    pub fn new(ttls: CacheTtls) -> Self {
        Self {
            ttls,
            allows: Table::new(ttls.allow_when_unreachable, ttls.max_entries),
            denials: Table::new(ttls.denied_fresh, ttls.max_denials),
        }
    }

    /// A decision reviewed recently enough to reuse: an allow less than `fresh` ago, a
    /// denial less than `denied_fresh` ago.
    pub fn fresh(&self, token: &TokenDigest, path: &str, now: Instant) -> Option<Decision> {
        let key = (*token, path.to_string());
        self.allows
            .get(&key, now, self.ttls.fresh)
            .or_else(|| self.denials.get(&key, now, self.ttls.denied_fresh))
    }

    /// With the API server unreachable: whether an allow reviewed less than
    /// `allow_when_unreachable` ago holds.
    pub fn allowed_while_unreachable(&self, token: &TokenDigest, path: &str, now: Instant) -> bool {
        let key = (*token, path.to_string());
        self.allows
            .get(&key, now, self.ttls.allow_when_unreachable)
            .is_some()
    }

    /// Remembers a decision the API server just gave, in its own table; a token's new
    /// decision replaces its old one of the other kind.
    pub fn insert(&mut self, token: TokenDigest, path: &str, decision: Decision, now: Instant) {
        let key = (token, path.to_string());
        if decision == Decision::Allowed {
            self.denials.entries.remove(&key);
            self.allows.insert(key, decision, now);
        } else {
            self.allows.entries.remove(&key);
            self.denials.insert(key, decision, now);
        }
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
    fn denials_are_reused_for_their_own_shorter_time() {
        let mut c = DecisionCache::new(CacheTtls::default());
        let t0 = Instant::now();
        let s = Duration::from_secs;
        c.insert(B, "/metrics", Decision::Unauthenticated, t0);
        assert_eq!(
            c.fresh(&B, "/metrics", t0 + s(4)),
            Some(Decision::Unauthenticated),
            "a repeated bad token costs no review"
        );
        assert_eq!(c.fresh(&B, "/metrics", t0 + s(5)), None);
        // Granted meanwhile: the new allow replaces the denial.
        c.insert(B, "/metrics", Decision::Allowed, t0 + s(1));
        assert_eq!(c.fresh(&B, "/metrics", t0 + s(2)), Some(Decision::Allowed));
    }

    #[test]
    fn a_full_cache_keeps_its_live_allows() {
        let mut c = DecisionCache::new(CacheTtls {
            max_entries: 2,
            ..CacheTtls::default()
        });
        let t0 = Instant::now();
        c.insert(A, "/metrics", Decision::Allowed, t0);
        c.insert(B, "/metrics", Decision::Allowed, t0);
        c.insert([3; 32], "/metrics", Decision::Allowed, t0);
        assert_eq!(c.fresh(&[3; 32], "/metrics", t0), None, "not kept: full");
        let later = t0 + Duration::from_secs(301);
        c.insert([3; 32], "/metrics", Decision::Allowed, later);
        assert_eq!(
            c.fresh(&[3; 32], "/metrics", later),
            Some(Decision::Allowed),
            "expired allows made room"
        );
    }

    #[test]
    fn a_flood_of_fresh_denials_neither_evicts_nor_keeps_out_an_allow() {
        let ttls = CacheTtls {
            max_entries: 2,
            max_denials: 8,
            ..CacheTtls::default()
        };
        let mut c = DecisionCache::new(ttls);
        let t0 = Instant::now();
        c.insert(A, "/metrics", Decision::Allowed, t0);
        for i in 0..10_000u32 {
            let mut token = [0u8; 32];
            token[..4].copy_from_slice(&i.to_le_bytes());
            token[31] = 9;
            let at = t0 + Duration::from_millis(u64::from(i));
            c.insert(token, "/metrics", Decision::Unauthenticated, at);
        }
        let end = t0 + Duration::from_secs(10);
        assert!(c.allowed_while_unreachable(&A, "/metrics", end));
        // ...and a new allow still finds room among the live denials.
        c.insert(B, "/metrics", Decision::Allowed, end);
        assert_eq!(c.fresh(&B, "/metrics", end), Some(Decision::Allowed));
        assert!(c.denials.entries.len() <= ttls.max_denials);
        assert_eq!(c.allows.entries.len(), 2);
    }
}
