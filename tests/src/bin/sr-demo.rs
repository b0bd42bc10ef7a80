//! `cargo xtask demo`: a real startup race in a simulated pod, seen by the agent.
//!
//! The pod has a classic sidecar: `proxy` and `app` both in `containers`, started
//! together. The proxy listens on 127.0.0.1:15001 only after 1.5 s; the app dials it
//! at once and retries every 100 ms. The agent (`sidecar-race-agent trace`) watches
//! the kernel; this program prints what it reported for the pod.

use std::{process::Command, time::Duration};

use serde_json::Value;
use sidecar_race_tests::{
    agent::TraceAgent,
    pod::{SimPod, require_binary, sibling_binary},
    root::is_root_or_skip,
};

const PROXY_DELAY_MS: u64 = 1500;

fn main() -> anyhow::Result<()> {
    if !is_root_or_skip("the demo") {
        std::process::exit(1);
    }
    println!("== starting the agent (sidecar-race-agent trace)");
    let agent = TraceAgent::start(&[]);

    let mut pod = SimPod::new("checkout")?;
    let proxy = pod.container("proxy")?;
    let app = pod.container("app")?;
    println!("== simulated pod `checkout` (uid {})", pod.uid);
    println!("   network namespace {}", pod.netns);
    println!("   container proxy: {}", proxy.cgroup_path);
    println!("   container app:   {}", app.cgroup_path);
    println!(
        "== both containers start together; proxy listens on 127.0.0.1:15001 after {PROXY_DELAY_MS} ms, \
         app dials it at once and retries every 100 ms"
    );
    let mut proxy_cmd = Command::new(require_binary(&sibling_binary("sr-proxy")));
    proxy_cmd.args([
        "--listen",
        "127.0.0.1:15001",
        "--delay-ms",
        &PROXY_DELAY_MS.to_string(),
    ]);
    let mut app_cmd = Command::new(require_binary(&sibling_binary("sr-app")));
    app_cmd.args(["--connect", "127.0.0.1:15001", "--interval-ms", "100"]);
    pod.spawn(&proxy, proxy_cmd)?;
    let app_pid = pod.spawn(&app, app_cmd)?;
    pod.wait(app_pid)?;
    std::thread::sleep(Duration::from_millis(500));

    let ours = |v: &Value| v["cgroup_id"] == proxy.cgroup_id || v["cgroup_id"] == app.cgroup_id;
    let events =
        agent.events(|v| ours(v) && !v["kind"].as_str().unwrap_or("").starts_with("cgroup_"));
    let names = |v: &Value| {
        if v["cgroup_id"] == app.cgroup_id {
            "app"
        } else {
            "proxy"
        }
    };
    println!(
        "== what the agent saw in the kernel ({} events for this pod)",
        events.len()
    );
    let t0 = events.first().map(ts).unwrap_or(0.0);
    for ev in &events {
        let addr = ev["dst"].as_str().or(ev["src"].as_str()).unwrap_or("?");
        println!(
            "   +{:.3}s  {:<13} container {:<5} {} pid {}  {}",
            ts(ev) - t0,
            ev["kind"].as_str().unwrap_or("?"),
            names(ev),
            ev["comm"].as_str().unwrap_or("?"),
            ev["pid"],
            addr
        );
    }
    let refused: Vec<&Value> = events.iter().filter(|e| e["kind"] == "refused").collect();
    let listen = events.iter().find(|e| e["kind"] == "listen");
    match (refused.first(), listen) {
        (Some(first), Some(listen)) => println!(
            "== app was refused {} times by 127.0.0.1:15001 before proxy listened: the kernel shows a \
             {:.2} s startup race window (first refusal → listener up)",
            refused.len(),
            ts(listen) - ts(first)
        ),
        _ => println!("== no race this time (the proxy won); run the demo again"),
    }
    if let Some(first) = refused.first() {
        println!("== one event as `trace` prints it:\n{first}");
    }
    drop(pod);
    agent.stop();
    Ok(())
}

/// Seconds since the epoch of an event's RFC 3339 `ts` (same day is enough here).
fn ts(ev: &Value) -> f64 {
    let s = ev["ts"].as_str().unwrap_or("");
    let time = s
        .split('T')
        .nth(1)
        .unwrap_or("0:0:0Z")
        .trim_end_matches('Z');
    let mut parts = time.split(':');
    let h: f64 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0.0);
    let m: f64 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0.0);
    let sec: f64 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0.0);
    h * 3600.0 + m * 60.0 + sec
}
