//! `sr-latency RACES`: detection latency of classic startup races, for `cargo xtask
//! bench`. Each race is a new simulated pod whose proxy listens on 127.0.0.1:15001
//! 200 ms late while the app dials it every 20 ms. Latency is from the listener coming
//! up (the incident's `listener_ready_at`, the kernel's time of the listen) to the
//! incident first seen `resolved` on `/api/v1/incidents`, polled every 5 ms.
//! Prints `latency_ms X` per race and `missed N` for races not resolved within 10 s.

use std::time::{Duration, Instant};

use sidecar_race_agent::clock;
use sidecar_race_tests::{
    agent::RunAgent,
    pod::{Declared, SimPod, write_pod_list},
    root::is_root_or_skip,
    scenario::{app, proxy},
};

fn main() -> anyhow::Result<()> {
    if !is_root_or_skip("sr-latency") {
        std::process::exit(1);
    }
    let races: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(10);
    let pods_file =
        std::env::temp_dir().join(format!("sr-latency-pods-{}.json", std::process::id()));
    write_pod_list(&pods_file, &[]);
    let source = format!("file:{}", pods_file.display());
    let agent = RunAgent::start(&["--pods-from", &source, "--pods-poll-seconds", "0.1"]);
    let mut missed = 0;
    for n in 0..races {
        let mut pod = SimPod::new("lat")?;
        let p = pod.container("proxy")?;
        let a = pod.container("app")?;
        let manifest =
            pod.app_and_proxy_manifest("bench", &format!("lat-{n}"), &a, &p, Declared::App);
        write_pod_list(&pods_file, &[manifest]);
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
    let _ = std::fs::remove_file(&pods_file);
    Ok(())
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
