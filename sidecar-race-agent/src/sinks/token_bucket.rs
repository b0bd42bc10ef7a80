//! A token bucket: up to `burst` tokens, refilled continuously at `per_second`. The
//! Event publisher's rate limit and the log budget (per pod and per node) are ones.

use std::time::Instant;

#[derive(Debug, Clone, Copy)]
pub struct TokenBucket {
    burst: f64,
    per_second: f64,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    pub fn full(burst: f64, per_second: f64, now: Instant) -> Self {
        Self {
            burst,
            per_second,
            tokens: burst,
            at: now,
        }
    }

    /// Adds what accrued since the last refill, up to the burst.
    pub fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        self.at = self.at.max(now);
    }

    /// Whether a whole token is there (as of the last refill).
    pub fn has_token(&self) -> bool {
        self.tokens >= 1.0
    }

    /// Spends a token (there is one: see `has_token`).
    pub fn spend(&mut self) {
        self.tokens -= 1.0;
    }

    /// Takes a token if one is there now.
    pub fn take(&mut self, now: Instant) -> bool {
        self.refill(now);
        let has = self.has_token();
        if has {
            self.spend();
        }
        has
    }

    /// Whether it is full again (as of the last refill).
    pub fn is_full(&self) -> bool {
        self.tokens >= self.burst
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_burst_then_the_refill_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::full(3.0, 2.0, t0);
        assert_eq!((0..10).filter(|_| b.take(t0)).count(), 3);
        assert!(!b.take(t0 + Duration::from_millis(400)), "0.8 of a token");
        assert!(b.take(t0 + Duration::from_millis(500)));
        b.refill(t0 + Duration::from_secs(60));
        assert!(b.is_full(), "never more than the burst");
        assert_eq!(
            (0..10)
                .filter(|_| b.take(t0 + Duration::from_secs(60)))
                .count(),
            3
        );
    }
}
