//! Puts facts back in kernel-time order. Records from different CPUs can reach the
//! agent slightly out of order; holding each fact for a short window and releasing in
//! timestamp order lets the detector see a listener come up after the refusals that
//! preceded it.

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
}

impl Reorder {
    pub fn new(window_ns: u64) -> Self {
        Self {
            heap: BinaryHeap::new(),
            window_ns,
            seq: 0,
        }
    }

    pub fn push(&mut self, fact: Fact) {
        self.seq += 1;
        self.heap.push(Reverse(Held {
            ts: fact.ts(),
            seq: self.seq,
            fact,
        }));
    }

    /// Facts at least one window older than `now`, oldest first.
    pub fn release(&mut self, now: u64) -> Vec<Fact> {
        let mut out = Vec::new();
        while let Some(Reverse(h)) = self.heap.peek() {
            if now.saturating_sub(h.ts) < self.window_ns {
                break;
            }
            out.push(self.heap.pop().expect("peeked").0.fact);
        }
        out
    }

    /// Boot ns at which the oldest held fact is due for release.
    pub fn next_due(&self) -> Option<u64> {
        self.heap
            .peek()
            .map(|Reverse(h)| h.ts.saturating_add(self.window_ns))
    }

    /// Everything, in order (at shutdown).
    pub fn drain(&mut self) -> Vec<Fact> {
        let mut out = Vec::with_capacity(self.heap.len());
        while let Some(Reverse(h)) = self.heap.pop() {
            out.push(h.fact);
        }
        out
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
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
    fn releases_in_timestamp_order_after_the_window() {
        let mut r = Reorder::new(100);
        r.push(started(50));
        r.push(started(10));
        r.push(started(30));
        assert_eq!(r.next_due(), Some(110));
        assert!(r.release(110).iter().map(Fact::ts).eq([10]));
        assert!(r.release(200).iter().map(Fact::ts).eq([30, 50]));
        assert!(r.is_empty());
        assert_eq!(r.next_due(), None);
        r.push(started(500));
        r.push(started(400));
        assert!(r.drain().iter().map(Fact::ts).eq([400, 500]));
    }
}
