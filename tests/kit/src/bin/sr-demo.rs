//! `cargo xtask demo`: a real startup race in a simulated pod, seen by the agent.
//!
//! The pod `checkout` has a classic sidecar: `proxy` and `app` both in `containers`,
//! started together. The proxy listens on 127.0.0.1:15001 only after 1.5 s; the app
//! dials it at once and retries every 100 ms. The agent (`sidecar-race-agent run`,
//! with the pod's manifest as its pod source) watches the kernel; this program prints
//! the incident it reports on `/api/v1/incidents`, then the same pod fixed (the proxy
//! listening first, as a native sidecar with a startupProbe makes it) with no incident.

use std::time::Duration;

use serde_json::Value;
use sidecar_race_kit::{
    agent::RunAgent,
    pod::{Declared, SimPod, empty_pods_file, write_pod_list},
    root::is_root_or_skip,
    scenario::{app_done, proxy},
};

const PROXY_DELAY_MS: u64 = 1500;

fn main() -> anyhow::Result<()> {
    if !is_root_or_skip("the demo") {
        std::process::exit(1);
    }
    let (pods_file, source) = empty_pods_file("demo");
    println!("== starting the agent: sidecar-race-agent run --pods-from {source}");
    let agent = RunAgent::start(&["--pods-from", &source, "--pods-poll-seconds", "0.2"]);
    println!("   serving http://{}/api/v1/incidents", agent.addr);

    let racing = race(&agent, &pods_file, false)?;
    let fixed = race(&agent, &pods_file, true)?;

    println!("\n== what the agent reported (GET /api/v1/incidents)");
    let all = agent.incidents("");
    match all.iter().find(|i| i["pod_uid"] == racing.as_str()) {
        Some(i) => {
            println!("{}", serde_json::to_string_pretty(i)?);
            println!(
                "\n== {} of {} ({} {}) was refused {} times by its sidecar `{}` on port {} during startup:",
                i["container"].as_str().unwrap_or("?"),
                i["pod"].as_str().unwrap_or("?"),
                i["workload"]["kind"].as_str().unwrap_or("?"),
                i["workload"]["name"].as_str().unwrap_or("?"),
                i["refused_count"],
                i["sidecar"].as_str().unwrap_or("?"),
                i["port"],
            );
            println!(
                "   a {:.2} s race window ({} sidecar). Fix: {}",
                i["race_window_seconds"].as_f64().unwrap_or(0.0),
                i["pattern"].as_str().unwrap_or("?"),
                i["advice"].as_str().unwrap_or("?")
            );
        }
        None => println!(
            "   no incident for the racing pod (the proxy won this time); run the demo again"
        ),
    }
    let for_fixed: Vec<&Value> = all
        .iter()
        .filter(|i| i["pod_uid"] == fixed.as_str())
        .collect();
    println!(
        "== the fixed pod (proxy serving before the app starts): {} incidents",
        for_fixed.len()
    );
    let log = agent.stop();
    println!("== the agent's log line for it:");
    for l in log.iter().filter(|l| l.contains("incident resolved")) {
        println!("   {l}");
    }
    let _ = std::fs::remove_file(pods_file);
    Ok(())
}

/// One pod start: racing (both containers together) or fixed (proxy first). Returns the pod uid.
fn race(agent: &RunAgent, pods_file: &std::path::Path, fixed: bool) -> anyhow::Result<String> {
    let name = if fixed { "checkout-fixed" } else { "checkout" };
    let mut pod = SimPod::new(name)?;
    let p = pod.container("proxy")?;
    let a = pod.container("app")?;
    let proxy_decl = if fixed {
        Declared::NativeSidecarProbed { probe_port: 15001 }
    } else {
        Declared::App
    };
    let manifest = pod.app_and_proxy_manifest("shop", name, &a, &p, proxy_decl);
    let mut pods: Vec<Value> = std::fs::read_to_string(pods_file)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v["items"].as_array().cloned())
        .unwrap_or_default();
    pods.push(manifest);
    write_pod_list(pods_file, &pods);
    println!(
        "\n== pod `{name}` (uid {}), network namespace {}",
        pod.uid, pod.netns
    );
    println!("   container proxy: {}", p.cgroup_path);
    println!("   container app:   {}", a.cgroup_path);
    if fixed {
        println!("== proxy as a native sidecar with a startupProbe: it serves before app starts");
        proxy(&mut pod, &p, &["--listen", "127.0.0.1:15001"]);
        std::thread::sleep(Duration::from_millis(300));
    } else {
        println!(
            "== classic sidecar: both start together; proxy listens after {PROXY_DELAY_MS} ms, app dials at once and retries every 100 ms"
        );
        proxy(
            &mut pod,
            &p,
            &[
                "--listen",
                "127.0.0.1:15001",
                "--delay-ms",
                &PROXY_DELAY_MS.to_string(),
            ],
        );
    }
    app_done(
        &mut pod,
        &a,
        &["--connect", "127.0.0.1:15001", "--interval-ms", "100"],
    );
    let uid = pod.uid.clone();
    if !fixed {
        agent.wait_incidents(&uid, Duration::from_secs(5), |i| {
            i.iter().any(|i| i["state"] == "resolved")
        });
    } else {
        std::thread::sleep(Duration::from_millis(500));
    }
    Ok(uid)
}
