//! The unrelated-syscall rows: what the agent costs a process that never touches a
//! socket. A `getppid` loop pinned to the loop CPU, timed by its own thread CPU, runs
//! per round bare twice (the second a control of the noise) and beside a fresh agent in
//! each Unix hook mode, rotating which goes first. Enabling any syscall tracepoint
//! puts every syscall of every process on the kernel's slow path, whatever the
//! programs do, so this is where that cost shows and the programs' statistics cannot.

use std::path::Path;

use super::{
    agent::{Agent, UnixHooks},
    cpu,
    plan::Plan,
};

/// The modes measured beside bare, in the report's order.
pub const MODES: [UnixHooks; 3] = [UnixHooks::AsShipped, UnixHooks::Syscalls, UnixHooks::Off];

/// One mode's samples per round: bare CPU per call / CPU per call beside the agent, in
/// each run's cheapest chunk and over whole runs.
pub struct ModeRatios {
    pub hooks: UnixHooks,
    /// What the agent attached (`auto`'s choice on this kernel).
    pub attached: Option<String>,
    pub ratio: Vec<f64>,
    pub whole: Vec<f64>,
}

pub struct Syscalls {
    pub calls: u32,
    /// Bare CPU per call in the cheapest chunk (ns).
    pub bare_ns: Vec<f64>,
    /// Bare / bare, the round's two bare runs (cheapest chunks, and whole runs).
    pub control: Vec<f64>,
    pub control_whole: Vec<f64>,
    pub modes: Vec<ModeRatios>,
}

/// The rows' samples over `plan.syscall_rounds` rounds of `plan.syscall_calls` calls.
pub fn measure(bin: &Path, plan: &Plan) -> anyhow::Result<Syscalls> {
    let calls = plan.syscall_calls;
    let mut out = Syscalls {
        calls,
        bare_ns: Vec::new(),
        control: Vec::new(),
        control_whole: Vec::new(),
        modes: MODES
            .iter()
            .map(|&hooks| ModeRatios {
                hooks,
                attached: None,
                ratio: Vec::new(),
                whole: Vec::new(),
            })
            .collect(),
    };
    // Slots 0 and 1 bare, then one per mode.
    let slots = 2 + MODES.len();
    for round in 0..plan.syscall_rounds {
        let mut ns = vec![PerCall::default(); slots];
        for step in 0..slots {
            let slot = (round + step) % slots;
            ns[slot] = if slot < 2 {
                per_call_ns(calls)?
            } else {
                let mode = &mut out.modes[slot - 2];
                let agent = Agent::start(bin, mode.hooks, &["--pods-from", "none"])?;
                agent.wait_quiet()?;
                mode.attached = agent.unix_hooks_attached();
                per_call_ns(calls)?
            };
        }
        out.bare_ns.push(ns[0].best);
        out.control.push(ns[0].best / ns[1].best);
        out.control_whole.push(ns[0].whole / ns[1].whole);
        for (mode, with) in out.modes.iter_mut().zip(&ns[2..]) {
            mode.ratio.push(ns[0].best / with.best);
            mode.whole.push(ns[0].whole / with.whole);
        }
    }
    Ok(out)
}

/// CPU time per call of one run (ns): over the whole run, and in its cheapest chunk.
#[derive(Debug, Clone, Copy, Default)]
struct PerCall {
    whole: f64,
    best: f64,
}

/// CPU time per `getppid` over `calls` calls on the loop CPU, in a thread of its own
/// (the pin stays with it), cut into [`cpu::CHUNKS`] chunks. The raw syscall: no
/// library may cache the answer.
fn per_call_ns(calls: u32) -> anyhow::Result<PerCall> {
    let thread = std::thread::spawn(move || -> std::io::Result<PerCall> {
        cpu::pin_current(cpu::loop_cpu())?;
        let chunk = (calls / cpu::CHUNKS).max(1);
        let start = cpu::thread_cpu();
        let (mut mark, mut best) = (start, f64::INFINITY);
        for _ in 0..calls / chunk {
            for _ in 0..chunk {
                // SAFETY: getppid takes no arguments and cannot fail.
                std::hint::black_box(unsafe { libc::syscall(libc::SYS_getppid) });
            }
            let now = cpu::thread_cpu();
            best = best.min((now - mark).as_secs_f64() * 1e9 / f64::from(chunk));
            mark = now;
        }
        let done = (calls / chunk) * chunk;
        let whole = (cpu::thread_cpu() - start).as_secs_f64() * 1e9 / f64::from(done);
        Ok(PerCall { whole, best })
    });
    let ns = thread
        .join()
        .map_err(|_| anyhow::anyhow!("the getppid loop panicked"))??;
    Ok(ns)
}
