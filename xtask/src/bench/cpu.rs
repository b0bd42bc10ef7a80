//! Pinning and CPU time of the measured loop: on a shared 2-core machine the loop runs
//! on one fixed CPU (client and server alike), so rounds differ less by where the
//! scheduler happened to put them; and CPU time, unlike wall time, does not count
//! other people's processes. `timed` runs a loop's operations that way.

use std::time::{Duration, Instant};

use anyhow::Context;

/// The CPU the connect loop and its server run on: the last one (CPU 0 takes most
/// interrupts and housekeeping).
pub fn loop_cpu() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get() - 1)
}

/// Pins the calling thread (or, in a child before exec, the process) to `cpu`.
/// Only async-signal-safe calls, so it may run in `pre_exec`.
pub fn pin_current(cpu: usize) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes within it; sched_setaffinity
    // with pid 0 affects only the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// CPU time of the calling thread so far (nanosecond clock, not ticks).
pub fn thread_cpu() -> Duration {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Equal chunks each measured run is cut into: its cheapest chunk is the figure noise
/// cannot flatter (noise only adds CPU time, so it can only make a chunk dearer).
pub const CHUNKS: u32 = 20;

/// The CPU-time clock of another thread of this process.
pub fn clock_of(thread: libc::pthread_t) -> Option<libc::clockid_t> {
    let mut id: libc::clockid_t = 0;
    // SAFETY: `thread` is a live thread of ours (its JoinHandle is held); id is written.
    (unsafe { libc::pthread_getcpuclockid(thread, &mut id) } == 0).then_some(id)
}

pub fn clock(id: libc::clockid_t) -> Duration {
    // SAFETY: clock_gettime fills the zeroed timespec we pass.
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(id, &mut ts);
        ts
    };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// One run of a loop.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    pub wall: Duration,
    /// CPU time of the loop's threads (kernel work done on their behalf included, e.g.
    /// loopback softirqs and eBPF programs).
    pub cpu: Duration,
    /// CPU time of the loop's threads per operation (a connection, a datagram, a drop)
    /// in the cheapest of the run's [`CHUNKS`] equal chunks of operations (ns).
    pub best_ns: f64,
}

/// Runs `op` `n` times on a thread pinned to the loop CPU, timing each of the
/// [`CHUNKS`] equal chunks by that thread's CPU plus, if given, another loop
/// thread's (`other`, its CPU clock). The run's `cpu` is the pinned thread's alone.
pub fn timed(
    n: u32,
    other: Option<libc::clockid_t>,
    mut op: impl FnMut() -> std::io::Result<()> + Send + 'static,
) -> anyhow::Result<Run> {
    let on = loop_cpu();
    let client = std::thread::spawn(move || -> std::io::Result<Run> {
        let _ = pin_current(on);
        let both = || thread_cpu() + other.map_or(Duration::ZERO, clock);
        let chunk = (n / CHUNKS).max(1);
        let (cpu0, start) = (thread_cpu(), Instant::now());
        let (mut mark, mut best) = (both(), f64::INFINITY);
        for i in 1..=n {
            op()?;
            if i % chunk == 0 {
                let now = both();
                best = best.min((now - mark).as_secs_f64() * 1e9 / f64::from(chunk));
                mark = now;
            }
        }
        Ok(Run {
            wall: start.elapsed(),
            cpu: thread_cpu() - cpu0,
            best_ns: best,
        })
    });
    let result = client.join().expect("the loop thread");
    result.context("an operation of the loop failed")
}
