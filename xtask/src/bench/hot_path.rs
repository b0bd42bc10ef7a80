//! The hot-path rows: what the agent's programs add to a connection that succeeds,
//! for each loop shape (TCP with FIN, TCP with RST, UDS), and by the same method to a
//! delivered UDP datagram and to an unrelated drop (`datagrams`). Per round, side by side:
//! the loop bare twice (the second a control of the noise), with the agent
//! (throughput and CPU), and a shorter run with the kernel's statistics on, where null
//! programs on the same hooks measure what the statistics themselves cost per run
//! (subtracted from the agent's run time).

use std::{collections::BTreeMap, path::Path};

use super::{
    agent::{Agent, UnixHooks},
    bpf_stats::{self, ProgStats, Stats},
    loops::{self, Run, Workload},
    null_prog::{HOOKS, Hook, NullProgram},
    peer::Bpftrace,
    plan::Plan,
};

/// The samples of one loop shape, one per round.
pub struct HotPath {
    pub workload: Workload,
    /// bare CPU / (bare CPU + the programs' run time without the statistics' cost).
    pub bound: Vec<f64>,
    /// The statistics' own cost per program run (ns), from the null programs (or the
    /// fallback, when none ran in this loop).
    pub stats_ns_per_run: Vec<f64>,
    pub bare_cpu_us: Vec<f64>,
    /// The agent's programs' run time per connection, statistics' cost taken out (ns).
    pub prog_ns: Vec<f64>,
    pub prog_runs: Vec<f64>,
    pub throughput: Vec<f64>,
    /// The loop threads' CPU per connection in each run's cheapest chunk, bare / with
    /// the agent: what users pay.
    pub cpu_ratio: Vec<f64>,
    /// The same ratio between the round's two bare runs: the noise it stands in.
    pub cpu_control: Vec<f64>,
    /// The loop threads' CPU per connection over whole runs, bare / with the agent.
    pub cpu_whole: Vec<f64>,
    /// The agent's Unix hooks in this loop, and what it attached (`auto`'s choice).
    pub hooks: UnixHooks,
    pub hooks_attached: Option<String>,
    /// bpftrace's throughput ratio (TCP RST loop only, when installed).
    pub peer: Option<Vec<f64>>,
    /// Per program (name as bpftool shows it): runs per connection, ns per run
    /// (statistics included), one sample per round.
    pub programs: BTreeMap<String, (Vec<f64>, Vec<f64>)>,
    /// Rounds where another process held a program on the loop's watched hook at the
    /// start or end of a bare run (`Workload::watched_hook`; `None`: none watched).
    pub foreign_rounds: Option<usize>,
    /// Drop storm only: the loop's CPU per drop bare / with a null program alone on
    /// `kfree_skb`, the tracefs tracepoint (the agent's fallback) and the BTF one (its
    /// hook where the kernel takes it): what the
    /// hook costs before any program's work.
    pub null_dispatch: Option<[Vec<f64>; 2]>,
}

/// The hooks of the drop storm's null-program runs: the tracefs tracepoint the agent
/// uses, and the BTF tracepoint, which fills no record.
pub const KFREE_SKB_HOOKS: [Hook; 2] = [
    Hook::Tracepoint("skb", "kfree_skb"),
    Hook::BtfTracepoint("kfree_skb"),
];

/// One round's statistics run: the agent's programs and the null programs.
struct Counted {
    programs: BTreeMap<(String, String), ProgStats>,
    /// Null programs' totals by prog type (`tracepoint`, `tracing`).
    nulls: BTreeMap<&'static str, ProgStats>,
    connects: u32,
}

/// Measures `w`. `fallback_stats_ns`: the statistics' cost per run to take out when
/// no null program runs in this loop (none on the UDS hooks, see `null_prog`).
pub fn measure(
    bin: &Path,
    plan: &Plan,
    w: Workload,
    fallback_stats_ns: Option<f64>,
) -> anyhow::Result<HotPath> {
    let peer = w == Workload::TcpRst && Bpftrace::available();
    let _off = Stats::set(false)?;
    let calibration = loops::run(w, plan.connects)?;
    let per_connect = calibration.wall.as_secs_f64() / f64::from(plan.connects);
    let n = ((plan.round.as_secs_f64() / per_connect) as u32).clamp(100, 1_000_000);
    eprintln!(
        "bench: {}: {n} operations ({}s) per run, {} rounds",
        w.label(),
        w.unit(),
        plan.success_rounds
    );
    let mut h = HotPath::new(w, peer);
    // Programs other processes hold on the watched hook, around a bare run.
    let foreign = || w.watched_hook().map_or(0, bpf_stats::attached_to);
    let bare_run = |seen: &mut usize| -> anyhow::Result<Run> {
        *seen += foreign();
        let run = loops::run(w, n)?;
        *seen += foreign();
        Ok(run)
    };
    for round in 0..plan.success_rounds {
        let (mut bare, mut control, mut with, mut traced) = (None, None, None, None);
        let (mut seen, mut nulls) = (0, None);
        for step in 0..4 {
            match (round + step) % 4 {
                0 => bare = Some(bare_run(&mut seen)?),
                1 => with = Some(with_agent(bin, w, n, &mut h.hooks_attached)?),
                2 => control = Some(bare_run(&mut seen)?),
                _ if peer => {
                    let _bt = Bpftrace::start()?;
                    traced = Some(loops::run(w, n)?);
                }
                _ if w == Workload::Drop => nulls = Some(null_runs(w, n)?),
                _ => {}
            }
        }
        if let Some(rounds) = h.foreign_rounds.as_mut() {
            *rounds += usize::from(seen > 0);
        }
        let (bare, (with, counted)) = (bare.expect("measured"), with.expect("measured"));
        if let (Some(ratios), Some(runs)) = (h.null_dispatch.as_mut(), nulls) {
            for (samples, run) in ratios.iter_mut().zip(runs) {
                samples.extend(run.map(|r: Run| bare.best_ns / r.best_ns));
            }
        }
        h.add(
            n,
            [&bare, &control.expect("measured"), &with],
            &counted,
            traced.as_ref(),
            fallback_stats_ns,
        );
    }
    Ok(h)
}

/// The agent's Unix hooks for loop `w`: as shipped for TCP and the datagram loops; the syscall tracepoints
/// for UDS, the only Unix hooks a kernel without `fexit` and kprobes has (as shipped,
/// the agent attaches none there and the row would measure nothing).
pub fn hooks_for(w: Workload) -> UnixHooks {
    match w {
        Workload::TcpFin | Workload::TcpRst | Workload::Udp | Workload::Drop => {
            UnixHooks::AsShipped
        }
        Workload::Uds => UnixHooks::Syscalls,
    }
}

/// One run of `w` with a null program alone on each of [`KFREE_SKB_HOOKS`] in turn
/// (`None` where it would not attach).
fn null_runs(w: Workload, n: u32) -> anyhow::Result<[Option<Run>; 2]> {
    let mut runs = [None, None];
    for (run, hook) in runs.iter_mut().zip(KFREE_SKB_HOOKS) {
        let null = NullProgram::attach_all(&[hook]);
        if !null.is_empty() {
            *run = Some(loops::run(w, n)?);
        }
    }
    Ok(runs)
}

/// The agent's throughput run, then a quarter as many connects with the statistics
/// on and null programs beside the agent's; what it attached goes to `attached`.
fn with_agent(
    bin: &Path,
    w: Workload,
    n: u32,
    attached: &mut Option<String>,
) -> anyhow::Result<(Run, Counted)> {
    let agent = Agent::start(bin, hooks_for(w), &["--pods-from", "none"])?;
    *attached = agent.unix_hooks_attached();
    let run = loops::run(w, n)?;
    let nulls = NullProgram::attach_all(&HOOKS);
    let _on = Stats::set(true)?;
    let before = ProgStats::by_program(agent.pid())?;
    let nulls_before: Vec<ProgStats> = nulls.iter().map(NullProgram::stats).collect();
    let connects = (n / 4).max(100);
    loops::run(w, connects)?;
    let after = ProgStats::by_program(agent.pid())?;
    let mut by_type: BTreeMap<&'static str, ProgStats> = BTreeMap::new();
    for (null, earlier) in nulls.iter().zip(nulls_before) {
        let entry = by_type.entry(null.hook.bpftool_type()).or_default();
        *entry = entry.plus(null.stats().since(earlier));
    }
    let programs = after
        .into_iter()
        .map(|(k, s)| {
            let earlier = before.get(&k).copied().unwrap_or_default();
            (k, s.since(earlier))
        })
        .collect();
    Ok((
        run,
        Counted {
            programs,
            nulls: by_type,
            connects,
        },
    ))
}

impl Counted {
    /// The statistics' cost per run on hooks of `prog_type`: all null programs'
    /// when none of that type ran, `None` when none ran at all.
    fn stats_cost(&self, prog_type: &str) -> Option<f64> {
        let per_run =
            |s: &ProgStats| (s.run_cnt > 0).then(|| s.run_time_ns as f64 / s.run_cnt as f64);
        self.nulls
            .get(prog_type)
            .and_then(per_run)
            .or_else(|| per_run(&ProgStats::total(self.nulls.values())))
    }
}

impl HotPath {
    /// No samples yet; `peer`: with a bpftrace row.
    fn new(workload: Workload, peer: bool) -> HotPath {
        HotPath {
            workload,
            bound: Vec::new(),
            stats_ns_per_run: Vec::new(),
            bare_cpu_us: Vec::new(),
            prog_ns: Vec::new(),
            prog_runs: Vec::new(),
            throughput: Vec::new(),
            cpu_ratio: Vec::new(),
            cpu_control: Vec::new(),
            cpu_whole: Vec::new(),
            hooks: hooks_for(workload),
            hooks_attached: None,
            peer: peer.then(Vec::new),
            programs: BTreeMap::new(),
            foreign_rounds: workload.watched_hook().map(|_| 0),
            null_dispatch: (workload == Workload::Drop).then(Default::default),
        }
    }

    /// One round: `[bare, control, with]` runs of `n` connects, and the statistics run.
    fn add(
        &mut self,
        n: u32,
        [bare, control, with]: [&Run; 3],
        c: &Counted,
        traced: Option<&Run>,
        fallback_stats_ns: Option<f64>,
    ) {
        let (n, counted) = (f64::from(n), f64::from(c.connects));
        let bare_ns = bare.cpu.as_secs_f64() * 1e9 / n;
        let (mut raw_ns, mut stats_ns, mut runs) = (0.0, 0.0, 0.0);
        for ((name, prog_type), s) in &c.programs {
            let cost = c.stats_cost(prog_type).or(fallback_stats_ns).unwrap_or(0.0);
            raw_ns += s.run_time_ns as f64;
            stats_ns += s.run_cnt as f64 * cost;
            runs += s.run_cnt as f64;
            if s.run_cnt > 0 {
                let entry = self.programs.entry(name.clone()).or_default();
                entry.0.push(s.run_cnt as f64 / counted);
                entry.1.push(s.run_time_ns as f64 / s.run_cnt as f64);
            }
        }
        let prog_ns = (raw_ns - stats_ns).max(0.0) / counted;
        if let Some(cost) = c.stats_cost("").or(fallback_stats_ns) {
            self.stats_ns_per_run.push(cost);
        }
        self.bare_cpu_us.push(bare_ns / 1e3);
        self.prog_ns.push(prog_ns);
        self.prog_runs.push(runs / counted);
        self.bound.push(bare_ns / (bare_ns + prog_ns));
        self.throughput
            .push(bare.wall.as_secs_f64() / with.wall.as_secs_f64());
        self.cpu_ratio.push(bare.best_ns / with.best_ns);
        self.cpu_control.push(bare.best_ns / control.best_ns);
        self.cpu_whole
            .push(bare.cpu.as_secs_f64() / with.cpu.as_secs_f64());
        if let (Some(p), Some(t)) = (self.peer.as_mut(), traced) {
            p.push(bare.wall.as_secs_f64() / t.wall.as_secs_f64());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn stats(run_time_ns: u64, run_cnt: u64) -> ProgStats {
        ProgStats {
            run_time_ns,
            run_cnt,
        }
    }

    fn empty(w: Workload) -> HotPath {
        HotPath::new(w, false)
    }

    /// 1000 connects, 10 µs of bare CPU each; the agent's programs ran 9 times per
    /// connect for 900 ns, of which the null programs say 40 ns per run is the
    /// statistics': 540 ns are the programs', and the bound is 10000 / 10540.
    #[test]
    fn the_bound_takes_the_statistics_cost_out() {
        let run = |ms: u64| Run {
            wall: Duration::from_millis(ms),
            cpu: Duration::from_millis(ms),
            best_ns: ms as f64,
        };
        let counted = Counted {
            programs: BTreeMap::from([
                (
                    ("set_state".into(), "tracing".into()),
                    stats(700_000, 7_000),
                ),
                (("reset".into(), "tracepoint".into()), stats(200_000, 2_000)),
            ]),
            nulls: BTreeMap::from([
                ("tracing", stats(40_000, 1_000)),
                ("tracepoint", stats(80_000, 2_000)),
            ]),
            connects: 1_000,
        };
        let mut h = empty(Workload::TcpRst);
        h.add(1_000, [&run(10), &run(20), &run(10)], &counted, None, None);
        assert_eq!(h.cpu_control, [0.5]);
        assert!((h.prog_ns[0] - 540.0).abs() < 1e-9, "{:?}", h.prog_ns);
        assert!((h.bound[0] - 10_000.0 / 10_540.0).abs() < 1e-12);
        assert_eq!(h.prog_runs, [9.0]);
        assert_eq!(h.programs["set_state"], (vec![7.0], vec![100.0]));
    }

    /// Without any null program in the loop, the fallback figure is taken out; without
    /// one either, nothing is.
    #[test]
    fn a_loop_without_null_programs_takes_the_fallback() {
        let counted = Counted {
            programs: BTreeMap::from([(("unix".into(), "tracing".into()), stats(100_000, 1_000))]),
            nulls: BTreeMap::new(),
            connects: 1_000,
        };
        let run = Run {
            wall: Duration::from_millis(5),
            cpu: Duration::from_millis(5),
            best_ns: 5.0,
        };
        let mut h = empty(Workload::Uds);
        h.add(1_000, [&run; 3], &counted, None, Some(40.0));
        assert_eq!(h.prog_ns, [60.0]);
        assert_eq!(h.stats_ns_per_run, [40.0]);
        let mut h = empty(Workload::Uds);
        h.add(1_000, [&run; 3], &counted, None, None);
        assert_eq!(h.prog_ns, [100.0]);
        assert!(h.stats_ns_per_run.is_empty());
    }
}
