//! Puts facts back in kernel-time order. Records from different CPUs can reach the
//! agent slightly out of order; holding each fact for a short window and releasing in
//! timestamp order lets the detector see a listener come up after the refusals that
//! preceded it.
//!
//! Release follows an event-time watermark (the newest kernel time seen minus the
//! window), not the wall clock: when the agent lags behind the kernel, a fact is held
//! until facts a window newer have arrived, so a refusal still queued from another CPU
//! is not overtaken by a later listener. When the stream is idle (nothing arrived for
//! a window), facts a window older than now are released too, so the last facts of a
//! burst do not wait for the next one. Facts that arrive behind what was already
//! released are counted.

use std::{cmp::Reverse, collections::BinaryHeap};

use super::fact::Fact;

struct Held {
    ts: u64,
    seq: u64,
    fact: Fact,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.ts, self.seq) == (o.ts, o.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.ts, self.seq).cmp(&(o.ts, o.seq))
    }
}

pub struct Reorder {
    heap: BinaryHeap<Reverse<Held>>,
    window_ns: u64,
    seq: u64,
    /// The newest kernel time seen.
    newest: Option<u64>,
    /// The newest kernel time released.
    released: Option<u64>,
    out_of_order: u64,
}

impl Reorder {
    pub fn new(window_ns: u64) -> Self {
        Self {
            heap: BinaryHeap::new(),
            window_ns,
            seq: 0,
            newest: None,
            released: None,
            out_of_order: 0,
        }
    }

    pub fn push(&mut self, fact: Fact) {
        self.seq += 1;
        let ts = fact.ts();
        if self.released.is_some_and(|r| ts < r) {
            self.out_of_order += 1;
        }
        self.newest = self.newest.max(Some(ts));
        self.heap.push(Reverse(Held {
            ts,
            seq: self.seq,
            fact,
        }));
    }

    /// The newest kernel time seen minus the window: everything older has arrived,
    /// up to the reordering the window allows.
    pub fn watermark(&self) -> Option<u64> {
        self.newest?.checked_sub(self.window_ns)
    }

    /// Facts at or below the watermark, oldest first; when the stream is `idle`
    /// (nothing arrived for a window), also those at least one window older than `now`.
    pub fn release(&mut self, now: u64, idle: bool) -> Vec<Fact> {
        let by_clock = now.checked_sub(self.window_ns).filter(|_| idle);
        let Some(limit) = self.watermark().max(by_clock) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        while let Some(Reverse(h)) = self.heap.peek() {
            if h.ts > limit {
                break;
            }
            let h = self.heap.pop().expect("peeked").0;
            self.released = self.released.max(Some(h.ts));
            out.push(h.fact);
        }
        out
    }

    /// Boot ns at which the oldest held fact is due for release: a window after its
    /// kernel time once the watermark passed it, else not before the stream has been
    /// idle for a window since the last fact arrived (`last_arrival`, boot ns).
    pub fn next_due(&self, last_arrival: u64) -> Option<u64> {
        let Reverse(oldest) = self.heap.peek()?;
        let due = oldest.ts.saturating_add(self.window_ns);
        if self.watermark().is_some_and(|w| oldest.ts <= w) {
            return Some(due);
        }
        Some(due.max(last_arrival.saturating_add(self.window_ns)))
    }

    /// Facts that arrived behind what had already been released
    /// (`sidecar_race_facts_out_of_order_total`).
    pub fn out_of_order(&self) -> u64 {
        self.out_of_order
    }

    /// Everything, in order (at shutdown).
    pub fn drain(&mut self) -> Vec<Fact> {
        let mut out = Vec::with_capacity(self.heap.len());
        while let Some(Reverse(h)) = self.heap.pop() {
            self.released = self.released.max(Some(h.ts));
            out.push(h.fact);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started(ts: u64) -> Fact {
        Fact::PodStarted {
            ts,
            pod_uid: ts.to_string(),
        }
    }

    #[test]
    fn releases_in_timestamp_order_behind_the_watermark() {
        let mut r = Reorder::new(100);
        r.push(started(50));
        r.push(started(10));
        r.push(started(30));
        assert!(
            r.release(1_000, false).is_empty(),
            "nothing a window newer yet"
        );
        r.push(started(140));
        assert!(r.release(1_000, false).iter().map(Fact::ts).eq([10, 30]));
        assert_eq!(
            r.next_due(1_000),
            Some(1_100),
            "held until idle for a window"
        );
        assert!(r.release(1_100, true).iter().map(Fact::ts).eq([50, 140]));
        assert_eq!(r.next_due(1_000), None, "nothing held");
        r.push(started(500));
        r.push(started(400));
        assert!(r.drain().iter().map(Fact::ts).eq([400, 500]));
        assert_eq!(r.out_of_order(), 0);
        r.push(started(450));
        assert_eq!(r.out_of_order(), 1, "behind what was released");
    }
}
