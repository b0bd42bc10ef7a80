//! One port for every sink: the daemon hands each step's outcomes to [`Sinks`], which
//! gives them to each sink the same way ([`OutcomeSink`]). Adding a sink is one `impl`
//! and one line where the daemon is wired, never another argument through its loop.

use std::{sync::Arc, time::Instant};

use parking_lot::Mutex;

use super::{incident_logs::IncidentLogs, k8s_events::EventPublisher, metrics::Metrics};
use crate::pipeline::outcome::Outcome;

/// A destination of the pipeline's outcomes.
pub trait OutcomeSink: Send {
    /// What one step of the pipeline came to, at `now`.
    fn consume(&mut self, outcomes: &[Outcome], now: Instant);

    /// Periodic upkeep, once a second (the logs' summary of what their budget held
    /// back). Nothing by default.
    fn upkeep(&mut self, _now: Instant) {}

    /// Whether the outcomes of the agent's last flush (a stop without a checkpoint)
    /// reach this sink.
    fn takes_the_last_flush(&self) -> bool {
        true
    }
}

/// Every sink of the daemon, in the order they are told.
#[derive(Default)]
pub struct Sinks {
    sinks: Vec<Box<dyn OutcomeSink>>,
}

impl Sinks {
    pub fn with(mut self, sink: impl OutcomeSink + 'static) -> Self {
        self.add(sink);
        self
    }

    pub fn add(&mut self, sink: impl OutcomeSink + 'static) {
        self.sinks.push(Box::new(sink));
    }

    pub fn consume(&mut self, outcomes: &[Outcome], now: Instant) {
        for sink in &mut self.sinks {
            sink.consume(outcomes, now);
        }
    }

    pub fn upkeep(&mut self, now: Instant) {
        for sink in &mut self.sinks {
            sink.upkeep(now);
        }
    }

    /// The last flush's outcomes, to the sinks that take them.
    pub fn consume_last(&mut self, outcomes: &[Outcome], now: Instant) {
        for sink in self.sinks.iter_mut().filter(|s| s.takes_the_last_flush()) {
            sink.consume(outcomes, now);
        }
    }
}

impl OutcomeSink for IncidentLogs {
    fn consume(&mut self, outcomes: &[Outcome], now: Instant) {
        IncidentLogs::consume(self, outcomes, now);
    }

    fn upkeep(&mut self, now: Instant) {
        self.summary(now);
    }
}

/// The metrics are shared with the HTTP server (scrapes) and the OTLP exporter.
impl OutcomeSink for Arc<Mutex<Metrics>> {
    fn consume(&mut self, outcomes: &[Outcome], now: Instant) {
        self.lock().consume(outcomes, now);
    }
}

impl OutcomeSink for EventPublisher {
    fn consume(&mut self, outcomes: &[Outcome], _now: Instant) {
        EventPublisher::consume(self, outcomes);
    }

    /// Events are posted by a task of the runtime; the agent exits right after its
    /// last flush, before that task could post them, so they are not queued.
    fn takes_the_last_flush(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts outcomes; shares the count with the test.
    struct Counting(Arc<Mutex<(usize, usize)>>, bool);

    impl OutcomeSink for Counting {
        fn consume(&mut self, outcomes: &[Outcome], _now: Instant) {
            self.0.lock().0 += outcomes.len().max(1);
        }
        fn upkeep(&mut self, _now: Instant) {
            self.0.lock().1 += 1;
        }
        fn takes_the_last_flush(&self) -> bool {
            self.1
        }
    }

    #[test]
    fn every_sink_is_told_and_the_last_flush_skips_those_that_refuse_it() {
        let (a, b) = (Arc::default(), Arc::default());
        let mut sinks = Sinks::default()
            .with(Counting(Arc::clone(&a), true))
            .with(Counting(Arc::clone(&b), false));
        let now = Instant::now();
        sinks.consume(&[], now);
        sinks.upkeep(now);
        sinks.consume_last(&[], now);
        assert_eq!(*a.lock(), (2, 1));
        assert_eq!(*b.lock(), (1, 1));
    }
}
