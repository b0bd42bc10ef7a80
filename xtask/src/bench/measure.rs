//! The measuring half of `cargo xtask bench`: each function runs one part of the table
//! (bare and with the agent, side by side) and returns its raw samples; `report.rs`
//! turns them into rows and verdicts.

use std::{path::Path, time::Duration};

use anyhow::{Context, bail};

use super::{
    Plan,
    agent::Agent,
    dial::dial,
    loops,
    scale::{self, SimulatedPods},
};

pub struct Refusals {
    pub ratio: Vec<f64>,
    pub ns_per_refusal: Vec<f64>,
    pub exact_rounds: usize,
}

/// Refused TCP connects: `sr-app` dialing a closed loopback port.
pub fn refusals(bin: &Path, plan: &Plan) -> anyhow::Result<Refusals> {
    let mut r = Refusals {
        ratio: Vec::new(),
        ns_per_refusal: Vec::new(),
        exact_rounds: 0,
    };
    for round in 0..plan.rounds {
        let mut bare = None;
        if round % 2 == 0 {
            bare = Some(dial(bin, false, plan.connects)?.wall);
        }
        let (with, cost) = agent_cost(bin, plan.connects, |n| Ok(dial(bin, false, n)?.wall))?;
        if round % 2 == 1 {
            bare = Some(dial(bin, false, plan.connects)?.wall);
        }
        r.ratio
            .push(bare.expect("measured").as_secs_f64() / with.as_secs_f64());
        r.ns_per_refusal.push(cost.ns_per_refusal);
        // Others' tests on this machine can add refusals of their own: exact means
        // at least ours and, in a quiet moment, exactly ours.
        if cost.counted == f64::from(plan.connects) {
            r.exact_rounds += 1;
        }
    }
    Ok(r)
}

pub struct UdsRefusals {
    pub ns_per_refusal: Vec<f64>,
    /// Refusals the kernel counted per run (0 where the agent has no UDS hooks).
    pub counted: Vec<f64>,
}

/// Refused UDS connects (an absent path, a stale socket file), with the agent.
pub fn uds_refusals(bin: &Path, plan: &Plan) -> anyhow::Result<UdsRefusals> {
    let mut r = UdsRefusals {
        ns_per_refusal: Vec::new(),
        counted: Vec::new(),
    };
    for _ in 0..plan.rounds {
        let (_, cost) = agent_cost(bin, plan.connects, loops::uds_refusals)?;
        r.ns_per_refusal.push(cost.ns_per_refusal);
        r.counted.push(cost.counted);
    }
    Ok(r)
}

/// What the agent spent on one run of refusals.
struct Cost {
    ns_per_refusal: f64,
    /// Refusals the kernel counted during the run (every kind whose name says refused).
    counted: f64,
}

/// Runs `refuse(n)` with a fresh agent and returns its wall time and the agent's CPU
/// per refusal: from the agent's first quiet moment to [`SETTLE`] after the last
/// refusal. The kernel's refusal count in `/metrics` is read outside that window (a
/// scrape costs the agent ~1 ms, a refusal well under 1 µs).
fn agent_cost(
    bin: &Path,
    n: u32,
    refuse: impl FnOnce(u32) -> anyhow::Result<Duration>,
) -> anyhow::Result<(Duration, Cost)> {
    // No refusal budget: this row measures what each delivered record costs (the
    // storm row measures the budget).
    let agent = Agent::start(bin, &["--pods-from", "none", "--refusal-burst", "0"])?;
    let seen0 = settled_refusals(&agent, |_| true)?;
    agent.wait_quiet()?;
    let cpu0 = agent.cpu()?;
    // Each refusal is counted and sent by the kernel within its connect() call.
    let wall = refuse(n)?;
    // The agent may still be pausing before its last drain, or processing it. Its
    // idle work over the window is charged too (not subtracted).
    std::thread::sleep(SETTLE);
    let cpu = agent.cpu()? - cpu0;
    let want = seen0 + f64::from(n);
    let seen = settled_refusals(&agent, |v| v >= want)?;
    Ok((
        wall,
        Cost {
            ns_per_refusal: cpu.as_secs_f64() * 1e9 / f64::from(n),
            counted: seen - seen0,
        },
    ))
}

/// Ten of the reader's pauses between drains (`stream::BATCH_PAUSE`, 10 ms).
const SETTLE: Duration = Duration::from_millis(100);

/// The kernel's refusal count in `/metrics` once `ok` holds, or once it stopped
/// growing for two copies (totals are copied into the metrics every second).
fn settled_refusals(agent: &Agent, ok: impl Fn(f64) -> bool) -> anyhow::Result<f64> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut last = (f64::NAN, std::time::Instant::now());
    loop {
        let v = refused_total(agent);
        if ok(v) || std::time::Instant::now() > deadline {
            return Ok(v);
        }
        if v != last.0 {
            last = (v, std::time::Instant::now());
        } else if last.1.elapsed() > Duration::from_millis(2_100) {
            return Ok(v);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The sum of `sidecar_race_kernel_events_total` over kinds naming a refusal.
fn refused_total(agent: &Agent) -> f64 {
    agent
        .samples("sidecar_race_kernel_events_total{")
        .into_iter()
        .filter(|(labels, _)| labels.contains("refused"))
        .map(|(_, v)| v)
        .sum()
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
