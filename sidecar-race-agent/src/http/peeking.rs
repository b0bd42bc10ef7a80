//! The places of the connections beyond the cap whose request head is being read,
//! oldest first. When all are taken, a new connection takes the oldest one's place,
//! and that one is closed: it has had the longest to send its head, which a probe
//! sends at once. So connections that send nothing (or stall in their head) cannot
//! keep the kubelet's probes out however many come a second; they would have to come
//! faster than all the places within the moment a probe takes to send its head.

use std::{
    collections::VecDeque,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed},
    },
};

use parking_lot::Mutex;
use tokio::sync::Notify;

pub struct Peeking {
    places: usize,
    /// (id, its eviction) of each place taken, oldest first.
    queue: Mutex<VecDeque<(u64, Arc<Notify>)>>,
    next: AtomicU64,
    /// Places not yet given back, evicted ones included.
    live: AtomicUsize,
}

/// One connection's place; given back when dropped.
pub struct PeekPlace {
    peeking: Arc<Peeking>,
    id: u64,
    evicted: Arc<Notify>,
}

impl Peeking {
    pub fn new(places: usize) -> Arc<Self> {
        Arc::new(Self {
            places: places.max(1),
            queue: Mutex::new(VecDeque::new()),
            next: AtomicU64::new(0),
            live: AtomicUsize::new(0),
        })
    }

    /// A place for a new connection, and whether the oldest one was evicted for it.
    pub fn enter(self: &Arc<Self>) -> (PeekPlace, bool) {
        let evicted = Arc::new(Notify::new());
        let id = self.next.fetch_add(1, Relaxed);
        let mut queue = self.queue.lock();
        let full = queue.len() >= self.places;
        if full && let Some((_, oldest)) = queue.pop_front() {
            oldest.notify_one();
        }
        queue.push_back((id, evicted.clone()));
        self.live.fetch_add(1, Relaxed);
        let place = PeekPlace {
            peeking: self.clone(),
            id,
            evicted,
        };
        (place, full)
    }

    /// Places not given back yet (connections still reading their head).
    pub fn live(&self) -> usize {
        self.live.load(Relaxed)
    }
}

impl PeekPlace {
    /// Completes when a newer connection took this place.
    pub async fn evicted(&self) {
        self.evicted.notified().await;
    }
}

impl Drop for PeekPlace {
    fn drop(&mut self) {
        self.peeking.queue.lock().retain(|(id, _)| *id != self.id);
        self.peeking.live.fetch_sub(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_new_connection_takes_the_oldest_place_when_all_are_taken() {
        let peeking = Peeking::new(2);
        let (a, full) = peeking.enter();
        assert!(!full);
        let (b, _) = peeking.enter();
        let (c, full) = peeking.enter();
        assert!(full, "the third evicts");
        let soon = Duration::from_millis(50);
        assert!(
            tokio::time::timeout(soon, a.evicted()).await.is_ok(),
            "the oldest goes"
        );
        assert!(tokio::time::timeout(soon, b.evicted()).await.is_err());
        assert_eq!(peeking.live(), 3, "until the evicted one ends");
        drop(a);
        drop(b);
        // b's place is free again: nobody is evicted for the next.
        let (_d, full) = peeking.enter();
        assert!(!full);
        assert!(tokio::time::timeout(soon, c.evicted()).await.is_err());
        assert_eq!(peeking.live(), 2);
    }
}
