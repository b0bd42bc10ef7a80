//! The ring-buffer reader: decodes records and hands them to the pipeline through a
//! bounded channel. A full channel drops and counts; it never blocks the reader, so
//! the kernel side keeps draining. Two rings: control records (cgroups, listeners),
//! drained first on every wake-up, and refusals.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::Duration,
};

use aya::maps::{MapData, RingBuf};
use tokio::{
    io::unix::AsyncFd,
    sync::{mpsc, watch},
    task::JoinHandle,
};

use crate::{
    clock,
    events::{self, KernelEvent, Kind},
};

/// How often the reader wakes without events, to prove it is alive.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// After a drain that found records, the reader waits this long before polling
/// again. In a storm the kernel then queues records without waking anyone (its
/// wakeups are adaptive: only when the reader has caught up), so one wakeup and one
/// hand-over to the pipeline carry a batch instead of one record each. Profiling
/// showed the per-record wakeups and thread switches were most of the agent's CPU per
/// refusal; with 1 ms, a flood of 50,000 refusals a second still paid ~20 µs of
/// switches per batch of ~50 (a third of its cost). 4 ms is still nothing next to the
/// reorder window (200 ms), and the ring holds ~8,700 refusal records, some 40 times
/// what such a flood queues in 4 ms.
const BATCH_PAUSE: Duration = Duration::from_millis(4);

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

pub struct EventStream {
    pub events: mpsc::Receiver<KernelEvent>,
    pub stats: Arc<StreamStats>,
    shutdown: watch::Sender<bool>,
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
        let (tx, rx) = mpsc::channel(capacity);
        let (shutdown, mut shutdown_rx) = watch::channel(false);
        let stats = Arc::new(StreamStats::default());
        let reader_stats = stats.clone();
        let reader = tokio::spawn(async move {
            let mut fd = fd;
            loop {
                reader_stats
                    .last_poll_boot_ns
                    .store(clock::boot_now_ns(), Relaxed);
                tokio::select! {
                    _ = shutdown_rx.changed() => {
                        drain(control.get_mut(), &tx, &reader_stats);
                        drain(fd.get_mut(), &tx, &reader_stats);
                        break;
                    }
                    ready = control.readable_mut() => {
                        match ready {
                            Ok(mut guard) => {
                                drain(guard.get_inner_mut(), &tx, &reader_stats);
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
                        drain(control.get_mut(), &tx, &reader_stats);
                        match ready {
                            Ok(Ok(mut guard)) => {
                                let n = drain(guard.get_inner_mut(), &tx, &reader_stats);
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
                                drain(fd.get_mut(), &tx, &reader_stats);
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
        let _ = self.shutdown.send(true);
    }
}

/// Takes every record in the ring; returns how many there were.
fn drain(
    ring: &mut RingBuf<MapData>,
    tx: &mpsc::Sender<KernelEvent>,
    stats: &StreamStats,
) -> usize {
    let mut n = 0;
    while let Some(item) = ring.next() {
        n += 1;
        match events::decode(&item) {
            Ok(ev) => {
                let kind = ev.kind();
                match tx.try_send(ev) {
                    Ok(()) => {
                        stats.delivered[kind as usize].fetch_add(1, Relaxed);
                    }
                    Err(_) => {
                        stats.dropped_in_agent.fetch_add(1, Relaxed);
                    }
                }
            }
            Err(e) => {
                if stats.decode_errors.fetch_add(1, Relaxed) == 0 {
                    tracing::error!(
                        "undecodable kernel record (further ones are only counted): {e}"
                    );
                }
            }
        }
    }
    n
}
