//! The daemon's loop: kernel records and pod updates in, ticks and the periodic
//! checkpoint, the kernel's suppressed counts, and each step's outcomes out to the
//! [`Sinks`]: a refusal travels ingest → pipeline → sinks here, without going back
//! up to the command that wired it (`commands/run/`). At a stop it saves the state
//! for the next agent, or flushes every open incident to the sinks.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

use parking_lot::Mutex;
use tokio::sync::mpsc;

use crate::{
    checkpoint::CheckpointFile,
    clock,
    ingest::stream::EventStream,
    inventory::{charge_points::ChargePoints, sources::PodUpdate},
    kernel::probes::Probes,
    pipeline::{Pipeline, outcome::Outcome},
    sinks::fan_out::Sinks,
};

pub mod checkpoint;
pub mod totals;
mod udp_bound;

/// How often held facts are released and time advances in the detector.
const TICK: Duration = Duration::from_millis(100);
/// How often the kernel's suppressed-refusal counts are read.
const SUPPRESSED: Duration = Duration::from_secs(1);
/// Granularity of releases between ticks (see `release_delay`).
const RELEASE_GRAIN: Duration = Duration::from_millis(10);
/// Kernel events taken into the pipeline under one lock.
const BATCH: usize = 512;

/// Everything the loop owns, wired by `commands/run/`.
pub struct Daemon {
    pub pipeline: Arc<Mutex<Pipeline>>,
    pub probes: Probes,
    pub stream: EventStream,
    pub pod_updates: mpsc::Receiver<PodUpdate>,
    pub sinks: Sinks,
    /// Restored before the loop; written every [`checkpoint::EVERY`] and at a stop.
    pub checkpoint: Option<CheckpointFile>,
    /// Logged every `stats_interval`; its `start` counts the records read from
    /// before this agent started.
    pub totals: totals::NodeTotals,
    pub stats_interval: Duration,
    /// Records older than this (boot ns) were written before this agent started (0:
    /// it loaded the programs, so there are none).
    pub started_boot_ns: u64,
    /// Records older than this (boot ns) were handed over by an earlier build's
    /// rings, and taken already.
    pub cut_boot_ns: u64,
    /// `/readyz`: cleared when the stop begins.
    pub ready: Arc<AtomicBool>,
}

impl Daemon {
    /// Runs until the reader stops after `signal` (SIGTERM), then saves or flushes.
    pub async fn run(mut self, mut signal: Pin<Box<dyn Future<Output = ()> + Send>>) {
        let mut stats = tokio::time::interval(self.stats_interval);
        stats.tick().await;
        let mut tick = tokio::time::interval(TICK);
        let mut suppressed = tokio::time::interval(SUPPRESSED);
        let mut periodic = tokio::time::interval(checkpoint::EVERY);
        periodic.tick().await;
        let (mut read_since_saved, mut save_failing) = (false, false);
        let mut stopping = false;
        let pipeline = self.pipeline.clone();
        let lock = || pipeline.lock();
        let mut charge_points = ChargePoints::with_marked(self.probes.charge_point_ids());
        charge_points.sync(&lock().inventory().cgroups, &mut self.probes);
        loop {
            let until_due = lock()
                .next_release_boot_ns()
                .map(|due| release_delay(due, clock::boot_now_ns()));
            tokio::select! {
                batch = self.stream.events.recv() => {
                    let Some(batch) = batch else {
                        break; // the reader stopped and the channel is empty
                    };
                    if self.started_boot_ns > 0 {
                        let before = batch
                            .iter()
                            .filter(|ev| ev.ts_boot_ns() < self.started_boot_ns)
                            .count();
                        self.totals.start.records_before_start.fetch_add(before as u64, Relaxed);
                    }
                    // A scrape waits for at most one chunk.
                    for chunk in batch.chunks(BATCH) {
                        let p = &mut *lock();
                        chunk
                            .iter()
                            .filter(|ev| ev.ts_boot_ns() >= self.cut_boot_ns)
                            .for_each(|ev| p.kernel_event(ev));
                    }
                    read_since_saved = true;
                    // New containers are charged as such from their first refusal on.
                    charge_points.sync(&lock().inventory().cgroups, &mut self.probes);
                }
                Some(update) = self.pod_updates.recv() => lock().pod_update(update),
                _ = tick.tick() => {
                    let now = clock::boot_now_ns();
                    udp_bound::poll(&mut lock(), now);
                    let outcomes = lock().tick(now);
                    self.sinks.consume(&outcomes, Instant::now());
                }
                // A held fact (a listener coming up) reaches the detector as soon as the
                // reorder window allows, not up to a tick later.
                _ = tokio::time::sleep(until_due.unwrap_or(TICK)), if until_due.is_some() => {
                    let outcomes = lock().tick(clock::boot_now_ns());
                    self.sinks.consume(&outcomes, Instant::now());
                }
                _ = suppressed.tick() => {
                    self.sinks.upkeep(Instant::now());
                    charge_points.sync(&lock().inventory().cgroups, &mut self.probes);
                    let outcomes = read_suppressed(&mut self.probes, &pipeline, false);
                    self.sinks.consume(&outcomes, Instant::now());
                }
                _ = stats.tick() => self.totals.log(),
                _ = periodic.tick(), if self.checkpoint.is_some() && read_since_saved && !stopping => {
                    if let Some(file) = &self.checkpoint {
                        let state = lock().snapshot();
                        checkpoint::save_periodic(file, state, clock::boot_now_ns(), &mut save_failing);
                    }
                    read_since_saved = false;
                }
                _ = &mut signal, if !stopping => {
                    tracing::info!("stopping");
                    stopping = true;
                    self.ready.store(false, Relaxed);
                    match self.checkpoint {
                        Some(_) => self.stream.leave(),
                        None => self.stream.stop(),
                    }
                }
            }
        }
        // With a checkpoint, what the stream handed over is in the pipeline now and goes
        // to the next agent as it is: nothing is finalised or published here.
        let saved = self
            .checkpoint
            .as_ref()
            .is_some_and(|file| checkpoint::save(file, &lock(), clock::boot_now_ns()));
        if !saved {
            let mut outcomes = lock().flush(clock::boot_now_ns());
            outcomes.extend(read_suppressed(&mut self.probes, &pipeline, true));
            self.sinks.consume_last(&outcomes, Instant::now());
        }
        self.totals.log();
    }
}

/// What the kernel counted instead of sending since the last reading, as outcomes for
/// the sinks; deletes the entries of removed cgroups once their final value is in.
/// The kernel's map is read before the pipeline's lock is taken.
fn read_suppressed(probes: &mut Probes, pipeline: &Mutex<Pipeline>, last: bool) -> Vec<Outcome> {
    match probes.suppressed() {
        Ok(counts) => {
            let reading = pipeline.lock().read_suppressed(&counts, last);
            reading
                .forget
                .iter()
                .for_each(|id| probes.forget_suppressed(*id));
            reading.outcomes
        }
        Err(e) => {
            tracing::warn!("cannot read suppressed refusal counts: {e}");
            Vec::new()
        }
    }
}

/// How long until a fact due at `due` (boot ns) may be released, rounded up to
/// `RELEASE_GRAIN` so a storm of held facts wakes the detector at most 100 times a
/// second.
fn release_delay(due: u64, now: u64) -> Duration {
    let grain = RELEASE_GRAIN.as_nanos() as u64;
    let wait = due.saturating_sub(now);
    Duration::from_nanos(wait.div_ceil(grain) * grain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_wait_for_the_due_time_rounded_up_to_the_grain() {
        let ms = Duration::from_millis;
        assert_eq!(release_delay(1_000_000, 0), ms(10));
        assert_eq!(release_delay(25_000_000, 0), ms(30));
        assert_eq!(release_delay(30_000_000, 10_000_000), ms(20));
        assert_eq!(release_delay(5, 10), Duration::ZERO);
    }
}
