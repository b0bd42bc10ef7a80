//! `sr-latency RACES`: detection latency of classic startup races, for `cargo xtask
//! bench`. Each race is a new simulated pod whose proxy listens on 127.0.0.1:15001
//! 200 ms late while the app dials it every 20 ms. Latency is from the listener coming
//! up (the incident's `listener_ready_at`, the kernel's time of the listen) to the
//! incident first seen `resolved` on `/api/v1/incidents`, polled every 5 ms.
//! Prints `latency_ms X` per race and `missed N` for races not resolved within 10 s.
//!
//! `sr-latency RACES --storm SECONDS`: the same races, as many as fit (at most RACES),
//! while a pod next to them refuses as fast as it can (`sr-flood`) for SECONDS. Also
//! prints `storm_refused N` (what the flooder made), `storm_accounted DELIVERED
//! SUPPRESSED` (what `/metrics` accounts for it), `storm_lost N` (records the rings
//! could not take) and `storm_cpu_percent X` (the agent's CPU over the storm).

use std::{
    process::Command,
    time::{Duration, Instant},
};

use sidecar_race_agent::clock;
use sidecar_race_tests::{
    agent::RunAgent,
    http::get,
    pod::{
        Decl, Declared, SimPod, empty_pods_file, require_binary, sibling_binary, write_pod_list,
    },
    root::is_root_or_skip,
    scenario::{app, proxy},
};

fn main() -> anyhow::Result<()> {
    if !is_root_or_skip("sr-latency") {
        std::process::exit(1);
    }
    let args: Vec<String> = std::env::args().collect();
    let races: usize = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(10);
    let storm: Option<f64> = match (args.get(2).map(String::as_str), args.get(3)) {
        (Some("--storm"), Some(s)) => Some(s.parse()?),
        (None, _) => None,
        _ => anyhow::bail!("usage: sr-latency RACES [--storm SECONDS]"),
    };
    let (pods_file, source) = empty_pods_file("latency");
    let agent = RunAgent::start(&[
        "--pods-from",
        &source,
        "--pods-poll-seconds",
        "0.1",
        // The flooder's closed ports become final, and so counted, soon.
        "--unresolved-after-seconds",
        "3",
    ]);
    let mut flood = storm
        .map(|secs| Flood::start(&pods_file, &agent, secs))
        .transpose()?;
    let mut missed = 0;
    for n in 0..races {
        if flood.as_ref().is_some_and(Flood::is_over) {
            break;
        }
        let mut pod = SimPod::new("lat")?;
        let p = pod.container("proxy")?;
        let a = pod.container("app")?;
        let manifest =
            pod.app_and_proxy_manifest("bench", &format!("lat-{n}"), &a, &p, Declared::App);
        let mut pods = vec![manifest];
        pods.extend(flood.as_ref().map(|f| f.manifest.clone()));
        write_pod_list(&pods_file, &pods);
        proxy(
            &mut pod,
            &p,
            &["--listen", "127.0.0.1:15001", "--delay-ms", "200"],
        );
        app(
            &mut pod,
            &a,
            &["--connect", "127.0.0.1:15001", "--interval-ms", "20"],
        );
        match resolved_latency(&agent, &pod.uid) {
            Some(ms) => println!("latency_ms {ms:.1}"),
            None => missed += 1,
        }
    }
    println!("missed {missed}");
    if let Some(f) = flood.as_mut() {
        f.report(&agent)?;
    }
    let _ = std::fs::remove_file(&pods_file);
    Ok(())
}

/// A pod refusing as fast as it can next to the races.
struct Flood {
    pod: SimPod,
    pid: u32,
    manifest: serde_json::Value,
    until: Instant,
    started: Instant,
    out: std::path::PathBuf,
    cpu0: Duration,
    lost0: u64,
}

impl Flood {
    fn start(pods_file: &std::path::Path, agent: &RunAgent, secs: f64) -> anyhow::Result<Self> {
        let mut pod = SimPod::new("storm")?;
        let c = pod.container("flooder")?;
        let manifest = pod.manifest(
            "bench",
            None,
            &[Decl {
                container: &c,
                declared: Declared::App,
                ports: &[],
                with_status: true,
            }],
        );
        write_pod_list(pods_file, std::slice::from_ref(&manifest));
        let out = std::env::temp_dir().join(format!("sr-storm-{}.count", std::process::id()));
        let mut cmd = Command::new(require_binary(&sibling_binary("sr-flood")));
        cmd.args(["--seconds", &secs.to_string(), "--out"])
            .arg(&out);
        cmd.stdout(std::process::Stdio::null());
        let (cpu0, lost0) = (cpu_of(agent.pid())?, metric(agent, LOST));
        let started = Instant::now();
        let pid = pod.spawn(&c, cmd)?;
        Ok(Self {
            pod,
            pid,
            manifest,
            until: started + Duration::from_secs_f64(secs),
            started,
            out,
            cpu0,
            lost0,
        })
    }

    fn is_over(&self) -> bool {
        Instant::now() >= self.until
    }

    /// Waits for the flood to end and prints what it cost and how it was accounted.
    fn report(&mut self, agent: &RunAgent) -> anyhow::Result<()> {
        anyhow::ensure!(self.pod.wait(self.pid)?.success(), "sr-flood failed");
        let wall = self.started.elapsed().as_secs_f64();
        let cpu = (cpu_of(agent.pid())? - self.cpu0).as_secs_f64();
        let refused: u64 = std::fs::read_to_string(&self.out)?.trim().parse()?;
        let _ = std::fs::remove_file(&self.out);
        let name = self.manifest["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        let labels = format!(r#"namespace="bench",workload_kind="Pod",workload="{name}""#);
        let delivered = format!(r#"sidecar_race_refused_connections_total{{{labels},"#);
        let suppressed = format!(r#"sidecar_race_refusals_suppressed_total{{{labels},"#);
        // Refusals become final (and counted) 3 s after they start; give it 15 s.
        let deadline = Instant::now() + Duration::from_secs(15);
        let (d, s) = loop {
            let (d, s) = (metric(agent, &delivered), metric(agent, &suppressed));
            if d + s >= refused || Instant::now() >= deadline {
                break (d, s);
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        println!("storm_refused {refused}");
        println!("storm_accounted {d} {s}");
        println!(
            "storm_lost {}",
            metric(agent, LOST).saturating_sub(self.lost0)
        );
        println!("storm_cpu_percent {:.1}", cpu / wall * 100.0);
        Ok(())
    }
}

const LOST: &str = "sidecar_race_kernel_events_lost_total";

/// The sum of the `/metrics` samples whose line starts with `prefix`.
fn metric(agent: &RunAgent, prefix: &str) -> u64 {
    let body = get(&agent.addr, "/metrics")
        .map(|(_, b)| b)
        .unwrap_or_default();
    body.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// User + system CPU time of a process so far (USER_HZ 100).
fn cpu_of(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after_comm = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after_comm.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>()? + f[12].parse::<u64>()?;
    Ok(Duration::from_millis(ticks * 10))
}

/// Milliseconds from the listener coming up to the incident seen resolved.
fn resolved_latency(agent: &RunAgent, pod_uid: &str) -> Option<f64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let seen = clock::boot_now_ns();
        let resolved = agent
            .incidents_of(pod_uid)
            .into_iter()
            .find(|i| i["state"] == "resolved" && i["phase"] == "startup");
        if let Some(i) = resolved {
            let up = clock::rfc3339_to_boot_ns(i["listener_ready_at"].as_str()?)?;
            return Some(seen.saturating_sub(up) as f64 / 1e6);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}
