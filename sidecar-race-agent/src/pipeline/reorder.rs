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
//!
//! Most facts arrive in order: they wait in a queue, and only those behind the queue's
//! newest go to a heap. A heap alone moved every fact (some 200 bytes) once per level
//! on the way out, a third of the agent's CPU per refusal counted into an incident.

use std::{
    cmp::Reverse,
    collections::{BinaryHeap, VecDeque},
};

use serde::{Deserialize, Serialize};

use crate::detect::Fact;

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

/// Facts held for reordering, oldest first, as a checkpoint carries them.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ReorderSnapshot {
    pub(super) facts: Vec<Fact>,
    newest: Option<u64>,
    released: Option<u64>,
}

pub struct Reorder {
    /// Facts that arrived in (ts, seq) order.
    in_order: VecDeque<Held>,
    /// Facts that arrived behind `in_order`'s newest.
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
            in_order: VecDeque::new(),
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
        let held = Held {
            ts,
            seq: self.seq,
            fact,
        };
        if self.in_order.back().is_none_or(|last| ts >= last.ts) {
            self.in_order.push_back(held);
        } else {
            self.heap.push(Reverse(held));
        }
    }

    /// Whether the oldest fact held, by (ts, seq), is the heap's rather than the
    /// queue's; `None` when nothing is held.
    fn oldest_is_straggler(&self) -> Option<bool> {
        match (self.in_order.front(), self.heap.peek()) {
            (Some(q), Some(Reverse(h))) => Some(h < q),
            (Some(_), None) => Some(false),
            (None, Some(_)) => Some(true),
            (None, None) => None,
        }
    }

    fn oldest(&self) -> Option<&Held> {
        if self.oldest_is_straggler()? {
            self.heap.peek().map(|Reverse(h)| h)
        } else {
            self.in_order.front()
        }
    }

    fn pop_oldest(&mut self) -> Option<Held> {
        if self.oldest_is_straggler()? {
            self.heap.pop().map(|Reverse(h)| h)
        } else {
            self.in_order.pop_front()
        }
    }

    /// The newest kernel time seen minus the window: everything older has arrived,
    /// up to the reordering the window allows.
    pub fn watermark(&self) -> Option<u64> {
        self.newest?.checked_sub(self.window_ns)
    }

    /// Facts at or below the watermark, oldest first; when the stream is `idle`
    /// (nothing arrived for a window), also those at least one window older than `now`.
    #[cfg(test)]
    pub fn release(&mut self, now: u64, idle: bool) -> Vec<Fact> {
        let mut out = Vec::new();
        self.release_into(now, idle, &mut out);
        out
    }

    /// [`Reorder::release`] appending to `out`, whose allocation the caller keeps from
    /// one release to the next (a storm's facts fill hundreds of kilobytes per tick).
    pub fn release_into(&mut self, now: u64, idle: bool, out: &mut Vec<Fact>) {
        let by_clock = now.checked_sub(self.window_ns).filter(|_| idle);
        let Some(limit) = self.watermark().max(by_clock) else {
            return;
        };
        while self.oldest().is_some_and(|h| h.ts <= limit) {
            let h = self.pop_oldest().expect("an oldest fact");
            self.released = self.released.max(Some(h.ts));
            out.push(h.fact);
        }
    }

    /// The newest kernel time released so far.
    pub fn released(&self) -> Option<u64> {
        self.released
    }

    /// Boot ns at which the oldest held fact is due for release: a window after its
    /// kernel time once the watermark passed it, else not before the stream has been
    /// idle for a window since the last fact arrived (`last_arrival`, boot ns).
    pub fn next_due(&self, last_arrival: u64) -> Option<u64> {
        let oldest = self.oldest()?;
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

    /// The facts held, in release order, and the watermarks, for a checkpoint.
    pub fn snapshot(&self) -> ReorderSnapshot {
        let mut held: Vec<&Held> = self
            .in_order
            .iter()
            .chain(self.heap.iter().map(|Reverse(h)| h))
            .collect();
        held.sort();
        ReorderSnapshot {
            facts: held.into_iter().map(|h| h.fact.clone()).collect(),
            newest: self.newest,
            released: self.released,
        }
    }

    /// Takes a checkpoint's facts in (before any new one); those `keep` refuses are
    /// left out, and counted in the return value.
    pub fn restore(&mut self, snap: ReorderSnapshot, keep: impl Fn(&Fact) -> bool) -> usize {
        let mut left_out = 0;
        for fact in snap.facts {
            if keep(&fact) {
                self.push(fact);
            } else {
                left_out += 1;
            }
        }
        self.newest = self.newest.max(snap.newest);
        self.released = self.released.max(snap.released);
        left_out
    }

    /// Everything, in order (at shutdown).
    pub fn drain(&mut self) -> Vec<Fact> {
        let mut out = Vec::with_capacity(self.in_order.len() + self.heap.len());
        while let Some(h) = self.pop_oldest() {
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
            pod_uid: ts.to_string().into(),
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

    #[test]
    fn stragglers_merge_with_the_facts_that_came_in_order() {
        let mut r = Reorder::new(100);
        // In order, then two behind the newest (another CPU's), one tying a queued ts.
        for ts in [10, 20, 40, 50, 15, 40, 60] {
            r.push(started(ts));
        }
        let seq: Vec<String> = r
            .drain()
            .iter()
            .map(|f| match f {
                Fact::PodStarted { ts, .. } => ts.to_string(),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(seq, ["10", "15", "20", "40", "40", "50", "60"]);
        // Ties keep arrival order: the queued 40 (pushed third) before the straggler.
        let mut r = Reorder::new(100);
        r.push(Fact::PodStarted {
            ts: 40,
            pod_uid: "first".into(),
        });
        r.push(started(50));
        r.push(Fact::PodStarted {
            ts: 40,
            pod_uid: "second".into(),
        });
        let uids: Vec<String> = r
            .drain()
            .into_iter()
            .filter_map(|f| match f {
                Fact::PodStarted { ts: 40, pod_uid } => Some(pod_uid.to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(uids, ["first", "second"]);
    }
}
