//! The measuring half of `cargo xtask bench`: each function runs one part of the table
//! (bare and with the agent, side by side) and returns its raw samples; `report.rs`
//! turns them into rows and verdicts.

use std::{path::Path, time::Duration};

use anyhow::{Context, bail};

use super::{
    agent::{Agent, UnixHooks},
    plan::Plan,
    refuse,
    scale::{self, SimulatedPods},
    sidecar_pod::SidecarPod,
};

/// Refusal rows: what the agent spends per refusal from the sidecar pod's app.
#[derive(Default)]
pub struct Refusals {
    /// Throughput of the refusing loop with the agent / bare (TCP only).
    pub ratio: Vec<f64>,
    pub ns_per_refusal: Vec<f64>,
    /// Rounds in which the pod's `sidecar_race` incidents of `app` held every refusal
    /// of the run.
    pub exact_rounds: usize,
}

/// Refused TCP connects to the proxy's declared port, bare and with the agent
/// (alternating which goes first).
pub fn refusals(bin: &Path, plan: &Plan) -> anyhow::Result<Refusals> {
    let pod = SidecarPod::create()?;
    let mut r = Refusals::default();
    for round in 0..plan.rounds {
        let mut bare = None;
        if round % 2 == 0 {
            bare = Some(refuse::tcp(bin, &pod, plan.connects)?);
        }
        let (with, cost) = agent_cost(bin, &pod, plan.connects, UnixHooks::AsShipped, |n| {
            refuse::tcp(bin, &pod, n)
        })?;
        if round % 2 == 1 {
            bare = Some(refuse::tcp(bin, &pod, plan.connects)?);
        }
        r.ratio
            .push(bare.expect("measured").as_secs_f64() / with.as_secs_f64());
        r.add(cost, plan.connects);
    }
    Ok(r)
}

/// Refused UDS connects on the pod's shared volume, with the agent on the syscall
/// tracepoints (the Unix hooks this host has; `auto` attaches none here).
pub fn uds_refusals(bin: &Path, plan: &Plan) -> anyhow::Result<Refusals> {
    let pod = SidecarPod::create()?;
    let mut r = Refusals::default();
    for _ in 0..plan.rounds {
        let (_, cost) = agent_cost(bin, &pod, plan.connects, UnixHooks::Syscalls, |n| {
            refuse::uds(bin, &pod, n)
        })?;
        r.add(cost, plan.connects);
    }
    Ok(r)
}

impl Refusals {
    fn add(&mut self, cost: Cost, n: u32) {
        self.ns_per_refusal.push(cost.ns_per_refusal);
        if cost.in_incidents == u64::from(n) {
            self.exact_rounds += 1;
        }
    }
}

/// What the agent spent on one run of refusals.
struct Cost {
    ns_per_refusal: f64,
    /// Refusals the pod's `sidecar_race` incidents of `app` hold.
    in_incidents: u64,
}

/// Runs `refuse(n)` with a fresh agent watching `pod` and returns its wall time and
/// the agent's CPU per refusal: from the agent's first quiet moment to [`SETTLE`]
/// after the last refusal. The pod's incidents are read outside that window (an
/// answer costs the agent ~1 ms, a refusal well under 1 µs).
fn agent_cost(
    bin: &Path,
    pod: &SidecarPod,
    n: u32,
    hooks: UnixHooks,
    refuse: impl FnOnce(u32) -> anyhow::Result<Duration>,
) -> anyhow::Result<(Duration, Cost)> {
    // No refusal budget: this row measures what each delivered record costs (the
    // storm row measures the budget).
    let agent = Agent::start(
        bin,
        hooks,
        &["--pods-from", &pod.source(), "--refusal-burst", "0"],
    )?;
    agent.wait_quiet()?;
    let cpu0 = agent.cpu()?;
    // Each refusal is counted and sent by the kernel within its connect() call.
    let wall = refuse(n)?;
    // The agent may still be pausing before its last drain, or holding the last facts
    // in its reorder window. Its idle work over the window is charged too.
    std::thread::sleep(SETTLE);
    let cpu = agent.cpu()? - cpu0;
    let in_incidents = settled(|| held_by_incidents(&agent, &pod.uid), u64::from(n));
    Ok((
        wall,
        Cost {
            ns_per_refusal: cpu.as_secs_f64() * 1e9 / f64::from(n),
            in_incidents,
        },
    ))
}

/// The agent's reorder window (200 ms) and ten of the reader's pauses between drains
/// (`stream::BATCH_PAUSE`, 10 ms): the last refusal is then in its incident.
const SETTLE: Duration = Duration::from_millis(300);

/// `count()` once it reaches `want`, or once it stopped growing for 2 s (or 10 s).
fn settled(count: impl Fn() -> u64, want: u64) -> u64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut last = (u64::MAX, std::time::Instant::now());
    loop {
        let v = count();
        if v >= want || std::time::Instant::now() > deadline {
            return v;
        }
        if v != last.0 {
            last = (v, std::time::Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(2) {
            return v;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Refusals held by `pod_uid`'s `sidecar_race` incidents of `app` (against `proxy`
/// for the port; a socket nobody bound has no known server, so none is named).
fn held_by_incidents(agent: &Agent, pod_uid: &str) -> u64 {
    agent
        .incidents()
        .iter()
        .filter(|i| {
            i["pod_uid"] == pod_uid
                && i["kind"] == "sidecar_race"
                && i["container"] == "app"
                && (i["port"].is_null() || i["sidecar"] == "proxy")
        })
        .filter_map(|i| i["refused_count"].as_u64())
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
    let agent = Agent::start(bin, UnixHooks::AsShipped, &["--pods-from", &spec])?;
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
        plain.push(ms(&Agent::start(
            bin,
            UnixHooks::AsShipped,
            &["--pods-from", "none"],
        )?));
        let _extra = scale::BareCgroups::create(plan.index_cgroups)?;
        many.push(ms(&Agent::start(
            bin,
            UnixHooks::AsShipped,
            &["--pods-from", "none"],
        )?));
    }
    Ok((plain, many))
}
