//! When a polling source (kubelet, file) reads next: on an interval, or at once when
//! the agent sees a pod the source has not reported.

use std::{sync::Arc, time::Duration};

use tokio::sync::Notify;

/// When a polling source reads next: every `interval`, or at once when asked to.
pub struct Pacer {
    interval: Duration,
    tick: Option<tokio::time::Interval>,
    refresh: Arc<Notify>,
}

impl Pacer {
    pub fn new(interval: Duration, refresh: Arc<Notify>) -> Self {
        Self {
            interval,
            tick: None,
            refresh,
        }
    }

    /// Only every `interval`.
    pub fn every(interval: Duration) -> Self {
        Self::new(interval, Arc::default())
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Waits for the next read (the first one is immediate).
    pub async fn wait(&mut self) {
        let interval = self.interval;
        let tick = self.tick.get_or_insert_with(|| {
            let mut t = tokio::time::interval(interval);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        tokio::select! {
            _ = tick.tick() => {}
            _ = self.refresh.notified() => tick.reset(),
        }
    }
}
