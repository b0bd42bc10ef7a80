//! The ring-buffer reader: decodes records and hands them to the pipeline, a batch
//! per drain, through a channel bounded in records. A full channel drops and counts;
//! it never blocks the reader, so the kernel side keeps draining. Two rings: control
//! records (cgroups, listeners), drained first on every wake-up, and refusals.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::Duration,
};

use aya::maps::{MapData, RingBuf};
use tokio::{io::unix::AsyncFd, sync::watch, task::JoinHandle};

use super::{
    batches::{self, BatchReceiver, BatchSender},
    events::{Decoder, KernelEvent, Kind},
};
use crate::clock;

/// How often the reader wakes without events, to prove it is alive.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// After a drain that found records, the reader waits this long before polling
/// again. In a storm the kernel then queues records without waking anyone (its
/// wakeups are adaptive: only when the reader has caught up), so one wakeup and one
/// hand-over to the pipeline carry a batch instead of one record each. A wakeup is
/// what a refusal costs most after its decoding: a worker parking and unparking, and
/// on a virtual machine the timer reprogramming exits to the hypervisor, tens of µs
/// each. 1 ms left ~20 µs of switches per batch of ~50 in a flood of 50,000 a second;
/// at 10 ms a batch is ~500 records. 10 ms is still small next to the reorder window
/// (200 ms), and the ring holds ~8,700 refusal records, 17 times what such a flood
/// queues meanwhile.
const BATCH_PAUSE: Duration = Duration::from_millis(10);

/// Userspace counts of the stream, shared with health checks and stats.
#[derive(Debug, Default)]
pub struct StreamStats {
    delivered: [AtomicU64; Kind::ALL.len()],
    /// Decoded but dropped because the pipeline was full.
    pub dropped_in_agent: AtomicU64,
    pub decode_errors: AtomicU64,
    /// Boot ns of the reader's last wake-up.
    pub last_poll_boot_ns: AtomicU64,
}

impl StreamStats {
    pub fn delivered(&self, kind: Kind) -> u64 {
        self.delivered[kind as usize].load(Relaxed)
    }

    /// Whether the reader woke within `max_age`.
    pub fn is_alive(&self, max_age: Duration) -> bool {
        let last = self.last_poll_boot_ns.load(Relaxed);
        last != 0 && clock::boot_now_ns().saturating_sub(last) <= max_age.as_nanos() as u64
    }
}

/// What the reader is told to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    On,
    /// Take what is left in the rings, then stop.
    Drain,
    /// Stop after the batch in hand: the rest stays in the rings for the next agent.
    Leave,
}

pub struct EventStream {
    /// Batches of decoded records, oldest first.
    pub events: BatchReceiver,
    pub stats: Arc<StreamStats>,
    shutdown: watch::Sender<Reading>,
    pub reader: JoinHandle<()>,
}

impl EventStream {
    /// Starts the reader of the refusal ring `ring` and the `control` ring on the
    /// current tokio runtime.
    pub fn spawn(
        ring: RingBuf<MapData>,
        control: RingBuf<MapData>,
        capacity: usize,
    ) -> std::io::Result<Self> {
        // SAFETY: a ring buffer owns its map fd and keeps it open, unchanged, for as
        // long as it lives, and the AsyncFd owns the ring buffer.
        let fd = unsafe { AsyncFd::register(ring) }.map_err(|e| e.into_parts().1)?;
        // SAFETY: as above.
        let mut control = unsafe { AsyncFd::register(control) }.map_err(|e| e.into_parts().1)?;
        let (tx, rx) = batches::channel(capacity);
        let (shutdown, mut shutdown_rx) = watch::channel(Reading::On);
        let stats = Arc::new(StreamStats::default());
        let reader_stats = stats.clone();
        let reader = tokio::spawn(async move {
            let mut fd = fd;
            let mut decoder = Decoder::default();
            // Each ring's last batch size, for the next to reserve.
            let (mut batch, mut control_batch) = (0, 0);
            loop {
                // Checked between batches: a drain in hand (and its pause) ends first.
                if *shutdown_rx.borrow() == Reading::Leave {
                    break;
                }
                reader_stats
                    .last_poll_boot_ns
                    .store(clock::boot_now_ns(), Relaxed);
                tokio::select! {
                    _ = shutdown_rx.changed() => {
                        if *shutdown_rx.borrow() == Reading::Leave {
                            break;
                        }
                        drain(control.get_mut(), &mut decoder, &mut control_batch, &tx, &reader_stats);
                        drain(fd.get_mut(), &mut decoder, &mut batch, &tx, &reader_stats);
                        break;
                    }
                    ready = control.readable_mut() => {
                        match ready {
                            Ok(mut guard) => {
                                drain(guard.get_inner_mut(), &mut decoder, &mut control_batch, &tx, &reader_stats);
                                guard.clear_ready();
                            }
                            Err(e) => {
                                tracing::error!("control ring buffer poll failed: {e}");
                                break;
                            }
                        }
                    }
                    ready = tokio::time::timeout(HEARTBEAT, fd.readable_mut()) => {
                        // Cgroups and listeners first: a refusal's container is then known.
                        drain(control.get_mut(), &mut decoder, &mut control_batch, &tx, &reader_stats);
                        match ready {
                            Ok(Ok(mut guard)) => {
                                let n = drain(guard.get_inner_mut(), &mut decoder, &mut batch, &tx, &reader_stats);
                                guard.clear_ready();
                                drop(guard);
                                if n > 0 {
                                    tokio::time::sleep(BATCH_PAUSE).await;
                                }
                            }
                            Ok(Err(e)) => {
                                tracing::error!("ring buffer poll failed: {e}");
                                break;
                            }
                            Err(_) => {
                                drain(fd.get_mut(), &mut decoder, &mut batch, &tx, &reader_stats);
                            }
                        }
                    }
                }
            }
        });
        Ok(Self {
            events: rx,
            stats,
            shutdown,
            reader,
        })
    }

    /// Asks the reader to take what is left in the ring and stop; the channel closes
    /// once it has.
    pub fn stop(&self) {
        let _ = self.shutdown.send(Reading::Drain);
    }

    /// Asks the reader to stop after the batch it is taking, leaving the rest in the
    /// rings (whose read position is the kernel's) for the next agent; the channel
    /// closes once it has.
    pub fn leave(&self) {
        let _ = self.shutdown.send(Reading::Leave);
    }
}

/// At most this many records go in one batch: a ring that fills as fast as it is read
/// still hands records over as it goes.
const MAX_BATCH: usize = 4096;

/// Takes every record in the ring; returns how many there were. `last_batch` is the
/// size of the ring's last batch, which the next reserves at its first record: a
/// storm's batch of hundreds is allocated once rather than grown by doubling.
fn drain(
    ring: &mut RingBuf<MapData>,
    decoder: &mut Decoder,
    last_batch: &mut usize,
    tx: &BatchSender,
    stats: &StreamStats,
) -> usize {
    let mut n = 0;
    let mut batch = Vec::new();
    while let Some(item) = ring.next() {
        n += 1;
        match decoder.decode(&item) {
            Ok(ev) => {
                if batch.capacity() == 0 {
                    batch.reserve(*last_batch);
                }
                batch.push(ev);
            }
            Err(e) => {
                if stats.decode_errors.fetch_add(1, Relaxed) == 0 {
                    tracing::error!(
                        "undecodable kernel record (further ones are only counted): {e}"
                    );
                }
            }
        }
        if batch.len() == MAX_BATCH {
            *last_batch = MAX_BATCH;
            send(tx, std::mem::take(&mut batch), stats);
        }
    }
    if !batch.is_empty() {
        *last_batch = batch.len();
        send(tx, batch, stats);
    }
    n
}

/// Hands over what fits of `batch`, counting what was delivered (by kind) and what
/// was dropped: the newest records, as a full queue of single records would refuse.
fn send(tx: &BatchSender, mut batch: Vec<KernelEvent>, stats: &StreamStats) {
    let dropped = batch.len().saturating_sub(tx.room());
    batch.truncate(batch.len() - dropped);
    let lost = if batch.is_empty() {
        0
    } else {
        hand_over(tx, batch, stats)
    };
    if dropped + lost > 0 {
        stats
            .dropped_in_agent
            .fetch_add((dropped + lost) as u64, Relaxed);
    }
}

/// Sends `batch` and counts it delivered by kind; returns how many were lost instead
/// (all, when the pipeline is gone).
fn hand_over(tx: &BatchSender, batch: Vec<KernelEvent>, stats: &StreamStats) -> usize {
    let mut kinds = [0u64; Kind::ALL.len()];
    batch.iter().for_each(|ev| kinds[ev.kind() as usize] += 1);
    match tx.send(batch) {
        Ok(()) => {
            for (delivered, n) in stats.delivered.iter().zip(kinds) {
                if n > 0 {
                    delivered.fetch_add(n, Relaxed);
                }
            }
            0
        }
        Err(batch) => batch.len(),
    }
}
