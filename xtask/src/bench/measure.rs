//! The measuring half of `cargo xtask bench`: each function runs one part of the table
//! (bare and with the agent, side by side) and returns its raw samples; `report.rs`
//! turns them into rows and verdicts.

use std::{path::Path, time::Duration};

use anyhow::{Context, bail};

use super::{
    Plan,
    agent::Agent,
    bpf_stats::{ProgStats, Stats},
    dial::{Run, dial},
    peer::Bpftrace,
    scale::{self, SimulatedPods},
};

pub struct Successful {
    pub agent: Vec<f64>,
    pub peer: Option<Vec<f64>>,
    pub cpu_ratio: Vec<f64>,
    pub bare_cpu_us: Vec<f64>,
    pub prog_ns: Vec<f64>,
    pub prog_runs: Vec<f64>,
    pub estimate: Vec<f64>,
}

/// One round of the successful-connect rows: the same number of connects bare, with
/// the agent and (when installed) under bpftrace.
struct Round {
    bare: Run,
    with: Run,
    /// The agent's programs over a shorter run of `counted` connects, statistics on.
    progs: ProgStats,
    counted: u32,
    traced: Option<Run>,
}

/// Bare, agent and (when installed) bpftrace, rotating which goes first each round;
/// each ratio is bare / measured of the same round. The connect count is set so a
/// bare run lasts `plan.round`. With the agent, its programs' run time comes from
/// `kernel.bpf_stats_enabled`.
pub fn successful(bin: &Path, plan: &Plan) -> anyhow::Result<Successful> {
    let peer = Bpftrace::available();
    let _off = Stats::set(false)?;
    let calibration = dial(bin, true, plan.connects)?;
    let per_connect = calibration.wall.as_secs_f64() / f64::from(plan.connects);
    let n = ((plan.round.as_secs_f64() / per_connect) as u32).clamp(100, 1_000_000);
    eprintln!(
        "bench: {n} connects per run, {} rounds",
        plan.success_rounds
    );
    let mut r = Successful {
        agent: Vec::new(),
        peer: peer.then(Vec::new),
        cpu_ratio: Vec::new(),
        bare_cpu_us: Vec::new(),
        prog_ns: Vec::new(),
        prog_runs: Vec::new(),
        estimate: Vec::new(),
    };
    for round in 0..plan.success_rounds {
        r.add(n, one_round(bin, n, round, peer)?);
    }
    Ok(r)
}

/// Runs the three variants of one round, the one that goes first rotating with `round`.
fn one_round(bin: &Path, n: u32, round: usize, peer: bool) -> anyhow::Result<Round> {
    let mut bare: Option<Run> = None;
    let mut with: Option<(Run, ProgStats, u32)> = None;
    let mut traced: Option<Run> = None;
    for step in 0..3 {
        match (round + step) % 3 {
            0 => bare = Some(dial(bin, true, n)?),
            1 => {
                let agent = Agent::start(bin, &["--pods-from", "none"])?;
                let run = dial(bin, true, n)?;
                // The programs' own cost, in a shorter run with statistics on.
                let _on = Stats::set(true)?;
                let before = ProgStats::of(agent.pid())?;
                dial(bin, true, n / 4)?;
                let progs = ProgStats::of(agent.pid())?.since(before);
                with = Some((run, progs, n / 4));
            }
            _ if peer => {
                let _bt = Bpftrace::start()?;
                traced = Some(dial(bin, true, n)?);
            }
            _ => {}
        }
    }
    let (bare, (with, progs, counted)) = (bare.expect("measured"), with.expect("measured"));
    Ok(Round {
        bare,
        with,
        progs,
        counted,
        traced,
    })
}

impl Successful {
    /// Adds one round's ratios; `n` is the connect count of its throughput runs.
    fn add(&mut self, n: u32, round: Round) {
        let Round {
            bare,
            with,
            progs,
            counted,
            traced,
        } = round;
        let (n, counted) = (f64::from(n), f64::from(counted));
        self.agent
            .push(bare.wall.as_secs_f64() / with.wall.as_secs_f64());
        self.cpu_ratio
            .push(bare.cpu.as_secs_f64() / with.cpu.as_secs_f64());
        let bare_ns = bare.cpu.as_secs_f64() * 1e9 / n;
        let prog_ns = progs.run_time_ns as f64 / counted;
        self.bare_cpu_us.push(bare_ns / 1e3);
        self.prog_ns.push(prog_ns);
        self.prog_runs.push(progs.run_cnt as f64 / counted);
        self.estimate.push(bare_ns / (bare_ns + prog_ns));
        if let (Some(p), Some(t)) = (self.peer.as_mut(), traced) {
            p.push(bare.wall.as_secs_f64() / t.wall.as_secs_f64());
        }
    }
}

pub struct Refusals {
    pub ratio: Vec<f64>,
    pub us_per_refusal: Vec<f64>,
    pub exact_rounds: usize,
}

pub fn refusals(bin: &Path, plan: &Plan) -> anyhow::Result<Refusals> {
    let mut r = Refusals {
        ratio: Vec::new(),
        us_per_refusal: Vec::new(),
        exact_rounds: 0,
    };
    const SERIES: &str = "sidecar_race_kernel_events_total{kind=\"refused\"}";
    for round in 0..plan.rounds {
        let mut bare = None;
        if round % 2 == 0 {
            bare = Some(dial(bin, false, plan.connects)?.wall);
        }
        // No refusal budget: this row measures what each delivered record costs (the
        // storm row below measures the budget).
        let agent = Agent::start(bin, &["--pods-from", "none", "--refusal-burst", "0"])?;
        let cpu0 = agent.cpu()?;
        let seen0 = wait_metric(&agent, SERIES, |_| true)?;
        let with = dial(bin, false, plan.connects)?.wall;
        // Totals are copied into the metrics every second; wait for this run's.
        let want = seen0 + f64::from(plan.connects);
        let seen = wait_metric(&agent, SERIES, |v| v >= want)?;
        let cpu = agent.cpu()? - cpu0;
        drop(agent);
        if round % 2 == 1 {
            bare = Some(dial(bin, false, plan.connects)?.wall);
        }
        r.ratio
            .push(bare.expect("measured").as_secs_f64() / with.as_secs_f64());
        r.us_per_refusal
            .push(cpu.as_secs_f64() * 1e6 / f64::from(plan.connects));
        // Others' tests on this machine can add refusals of their own: exact means
        // at least ours and, in a quiet moment, exactly ours.
        if seen == want {
            r.exact_rounds += 1;
        }
    }
    Ok(r)
}

/// Polls a `/metrics` sample until `ok` holds (5 s at most); returns its last value.
fn wait_metric(agent: &Agent, series: &str, ok: impl Fn(f64) -> bool) -> anyhow::Result<f64> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let v = agent.metric(series).unwrap_or(0.0);
        if ok(v) || std::time::Instant::now() > deadline {
            return Ok(v);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub struct Scale {
    pub cpu_percent: f64,
    pub rss_mib: f64,
    pub peak_mib: f64,
}

pub fn node_scale(bin: &Path, plan: &Plan) -> anyhow::Result<Scale> {
    let pods = SimulatedPods::create(plan.scale_pods, "scale")?;
    let spec = format!("file:{}", pods.pods_file.display());
    let agent = Agent::start(bin, &["--pods-from", &spec])?;
    let cpu0 = agent.cpu()?;
    let t0 = std::time::Instant::now();
    // 10 connects per second: a node's ordinary background of dials.
    let attempts = (plan.scale.as_secs_f64() * 10.0).ceil() as u32;
    traffic(bin, attempts)?;
    let wall = t0.elapsed().as_secs_f64();
    let cpu = (agent.cpu()? - cpu0).as_secs_f64();
    let (rss, peak) = agent.rss()?;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    Ok(Scale {
        cpu_percent: cpu / wall * 100.0,
        rss_mib: mib(rss),
        peak_mib: mib(peak),
    })
}

/// Connects to a local listener, one every 100 ms.
fn traffic(bin: &Path, attempts: u32) -> anyhow::Result<()> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let target = listener.local_addr()?.to_string();
    std::thread::spawn(move || listener.incoming().for_each(drop));
    let status = std::process::Command::new(bin.join("sr-app"))
        .args([
            "--connect",
            &target,
            "--interval-ms",
            "100",
            "--keep-dialing",
        ])
        .args(["--attempts", &attempts.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .context("run sr-app")?;
    if !status.success() {
        bail!("sr-app failed: {status}");
    }
    Ok(())
}

/// Start-to-ready of the agent, without and with many more cgroups, alternating.
pub fn index_build(bin: &Path, plan: &Plan) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let ms = |a: &Agent| a.ready_after.as_secs_f64() * 1e3;
    let (mut plain, mut many) = (Vec::new(), Vec::new());
    for _ in 0..plan.rounds.min(3) {
        plain.push(ms(&Agent::start(bin, &["--pods-from", "none"])?));
        let _extra = scale::BareCgroups::create(plan.index_cgroups)?;
        many.push(ms(&Agent::start(bin, &["--pods-from", "none"])?));
    }
    Ok((plain, many))
}
