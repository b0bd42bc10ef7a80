//! Datagram sidecars end to end on the real kernel: a statsd-like sidecar on UDP and a
//! syslog-like one on a Unix datagram socket, bound late or gone at a drain, in
//! simulated pods; the agent binary run as users run it, and what `/api/v1/incidents`
//! says. Each count is compared with the app's own: the datagrams it sent that were
//! never answered (`sr-udp`).

use std::{path::PathBuf, time::Duration};

use serde_json::{Value, json};
use sidecar_race_tests::{
    agent::RunAgent,
    pod::{Decl, Declared, SimContainer, SimPod, require_binary, sibling_binary, write_pod_list},
    root::is_root_or_skip,
    scenario::CountedApp,
};

const SETTLE: Duration = Duration::from_secs(15);

fn sr_udp() -> PathBuf {
    require_binary(&sibling_binary("sr-udp"))
}

/// Starts `sr-udp` with `args` in container `c`; its pid.
fn spawn(pod: &mut SimPod, c: &SimContainer, args: &[&str]) -> u32 {
    let mut cmd = std::process::Command::new(sr_udp());
    cmd.args(args);
    pod.spawn(c, cmd).expect("start sr-udp")
}

/// Runs an `sr-udp` sender to completion in `c`: how many of its datagrams were lost.
fn send(pod: &mut SimPod, c: &SimContainer, args: &[&str]) -> u64 {
    CountedApp::start(pod, c, &sr_udp(), args).refused(pod)
}

/// A Deployment shop/metrics pod: `app` and a classic sidecar `statsd` declaring
/// `udp_ports` with `protocol: UDP`.
fn manifest(pod: &SimPod, app: &SimContainer, statsd: &SimContainer, udp_ports: &[u16]) -> Value {
    let mut m = pod.manifest(
        "shop",
        Some("metrics"),
        &[
            Decl {
                container: app,
                declared: Declared::App,
                ports: &[8080],
                with_status: true,
            },
            Decl {
                container: statsd,
                declared: Declared::App,
                ports: &[],
                with_status: true,
            },
        ],
    );
    for c in m["spec"]["containers"].as_array_mut().expect("containers") {
        if c["name"] == "statsd" {
            c["ports"] = udp_ports
                .iter()
                .map(|p| json!({"containerPort": p, "protocol": "UDP"}))
                .collect();
        }
    }
    m
}

fn agent(name: &str) -> (RunAgent, PathBuf) {
    RunAgent::start_with_pods_file(&format!("dgram-{name}"), &[])
}

fn window(i: &Value) -> f64 {
    i["race_window_seconds"]
        .as_f64()
        .unwrap_or_else(|| panic!("no window: {i:#}"))
}

/// A statsd sidecar bound `addr` 1.5 s late while the app sent to `dialed` every
/// 50 ms (`connected`: through a connected socket): one resolved startup incident with
/// exactly the datagrams the app lost. Returns the app's count and the incident.
fn late_statsd(name: &str, bound: &str, dialed: &str, connected: bool) -> (u64, Value) {
    let (agent, pods_file) = agent(name);
    let mut pod = SimPod::new(name).unwrap();
    let statsd = pod.container("statsd").unwrap();
    let app = pod.container("app").unwrap();
    write_pod_list(&pods_file, &[manifest(&pod, &app, &statsd, &[8125])]);
    spawn(&mut pod, &statsd, &["recv", bound, "--delay-ms", "1500"]);
    let mut args = vec!["send", dialed, "--interval-ms", "50"];
    if connected {
        args.push("--connected");
    }
    let lost = send(&mut pod, &app, &args);
    assert!(
        lost >= 15,
        "the app lost datagrams while statsd was late: {lost}"
    );
    let i = agent.one_resolved_holding(&pod.uid, lost, SETTLE);
    assert_eq!(
        (
            i["phase"].as_str(),
            i["state"].as_str(),
            i["protocol"].as_str()
        ),
        (Some("startup"), Some("resolved"), Some("udp")),
        "{i:#}"
    );
    assert_eq!(i["refused_count"].as_u64(), Some(lost), "{i:#}");
    assert_eq!(i["port"].as_u64(), Some(8125), "{i:#}");
    assert_eq!(i["container"], "app", "{i:#}");
    assert_eq!(i["sidecar"], "statsd", "{i:#}");
    assert_eq!(i["sidecar_container_id"], statsd.id.as_str(), "{i:#}");
    // First drop → the bind, found within a tick of the agent's loop.
    assert!((1.0..2.2).contains(&window(&i)), "window {}", window(&i));
    (lost, i)
}

#[test]
fn a_statsd_sidecar_bound_late_on_udp_v4_is_one_startup_race_with_the_apps_exact_loss() {
    if !is_root_or_skip(
        "a_statsd_sidecar_bound_late_on_udp_v4_is_one_startup_race_with_the_apps_exact_loss",
    ) {
        return;
    }
    let (lost, i) = late_statsd("udp-v4", "127.0.0.1:8125", "127.0.0.1:8125", false);
    eprintln!(
        "udp v4 unconnected: app lost {lost}, agent counted {}",
        i["refused_count"]
    );
    assert_eq!(i["destination"], "127.0.0.1:8125", "{i:#}");
}
