//! The hand-over from the ring-buffer reader to the pipeline: one message per drain of
//! the ring, not one per record, bounded in records. A send per record cost a
//! semaphore, a queue slot and a wake-up each, about a sixth of the agent's CPU per
//! refusal in a flood; a batch pays them once.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering::Relaxed},
};

use tokio::sync::mpsc;

use super::events::KernelEvent;

/// The records sent and not yet taken, shared by both ends.
#[derive(Debug)]
struct Queued {
    records: AtomicUsize,
    capacity: usize,
}

/// Bounded in records: `capacity` decoded records may wait for the pipeline.
pub fn channel(capacity: usize) -> (BatchSender, BatchReceiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    let queued = Arc::new(Queued {
        records: AtomicUsize::new(0),
        capacity: capacity.max(1),
    });
    (
        BatchSender {
            tx,
            queued: queued.clone(),
        },
        BatchReceiver { rx, queued },
    )
}

#[derive(Debug)]
pub struct BatchSender {
    tx: mpsc::UnboundedSender<Vec<KernelEvent>>,
    queued: Arc<Queued>,
}

impl BatchSender {
    /// How many more records may be sent now. Only the receiver changes it meanwhile,
    /// and only upwards.
    pub fn room(&self) -> usize {
        self.queued
            .capacity
            .saturating_sub(self.queued.records.load(Relaxed))
    }

    /// Sends `batch`, which the caller cut to [`BatchSender::room`]; never waits. Gives
    /// the batch back when the receiver is gone.
    pub fn send(&self, batch: Vec<KernelEvent>) -> Result<(), Vec<KernelEvent>> {
        let n = batch.len();
        // Counted before the send, so the receiver never takes more than was added.
        self.queued.records.fetch_add(n, Relaxed);
        self.tx.send(batch).map_err(|e| {
            self.queued.records.fetch_sub(n, Relaxed);
            e.0
        })
    }
}

#[derive(Debug)]
pub struct BatchReceiver {
    rx: mpsc::UnboundedReceiver<Vec<KernelEvent>>,
    queued: Arc<Queued>,
}

impl BatchReceiver {
    /// The next batch; `None` once the sender is gone and every batch was taken.
    pub async fn recv(&mut self) -> Option<Vec<KernelEvent>> {
        let batch = self.rx.recv().await?;
        self.queued.records.fetch_sub(batch.len(), Relaxed);
        Some(batch)
    }

    /// No batch waits.
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_facts::socket;

    #[tokio::test]
    async fn batches_arrive_whole_and_in_order_and_room_counts_records() {
        let (tx, mut rx) = channel(5);
        let batch = |from: u64, n: u64| {
            (from..from + n)
                .map(|ts| {
                    KernelEvent::Refused(socket(ts, 1, "10.0.0.1:40000", Some("127.0.0.1:15001")))
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(tx.room(), 5);
        tx.send(batch(0, 3)).unwrap();
        assert_eq!(tx.room(), 2);
        tx.send(batch(3, 2)).unwrap();
        assert_eq!(tx.room(), 0);
        let ts = |b: Vec<KernelEvent>| b.iter().map(KernelEvent::ts_boot_ns).collect::<Vec<_>>();
        assert_eq!(ts(rx.recv().await.unwrap()), [0, 1, 2]);
        // Taking a batch makes room again.
        assert_eq!(tx.room(), 3);
        tx.send(batch(8, 3)).unwrap();
        assert_eq!(ts(rx.recv().await.unwrap()), [3, 4]);
        assert_eq!(ts(rx.recv().await.unwrap()), [8, 9, 10]);
        assert!(rx.is_empty());
        drop(rx);
        assert_eq!(tx.send(batch(11, 1)).unwrap_err().len(), 1, "given back");
    }
}
