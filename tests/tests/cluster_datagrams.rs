//! The cluster tier's datagram cases (issue #49) on the real kubelet: a datagram sidecar
//! started late as a classic sidecar, and gone at a rollout while its app still sends
//! (tests/kit/src/datagram_sidecars.rs): the Prometheus statsd exporter on UDP, and a
//! log relay on a Unix datagram socket in an emptyDir. What the app sent meanwhile was
//! lost, not retried: the agent's counts must be the app's own, and the exporter's own
//! counters must show only what the agent did not count arriving.
//!
//! Ignored by a plain `cargo test`: `cargo xtask test` runs them on the cluster of
//! `cargo xtask cluster up`, with the other cluster cases.

use std::time::Duration;

use serde_json::Value;
use sidecar_race_tests::{
    cluster::{
        cluster, container_id, name, refused_printed, running_pod, uid, wait_event, wait_until,
    },
    cluster_cases::{
        fresh_namespace, incidents_of, lines_left_by, named_and_resolved, namespace_series,
        wait_incident,
    },
    datagram_sidecars::{
        CHECKOUTS, LOG_RELAY, STATSD_EXPORTER, STATSD_PORT, exporter_counted, logging_app,
        metrics_app,
    },
};

/// A datagram sidecar's workload: the Deployment `name` (app, then the sidecar in
/// `containers`) and the protocol its incidents must carry.
struct Shape {
    name: &'static str,
    sidecar: &'static str,
    protocol: &'static str,
    deployment: fn(ns: &str, name: &str, evidence: &str) -> Value,
}

/// Seconds between the first loss and the sidecar's bind, as the agent measured it.
fn window(i: &Value) -> f64 {
    i["race_window_seconds"]
        .as_f64()
        .unwrap_or_else(|| panic!("no window: {i:#}"))
}

/// The shape in a fresh namespace: one resolved startup incident naming the sidecar,
/// with the app's own count of what it lost, its Event and series (`started` checks
/// more once the count is in); then, at a rollout, one drain incident with the app's
/// count of what it lost once the sidecar had gone.
fn lost_at_start_and_drain(shape: &Shape, started: impl Fn(&str, &Value, u64)) {
    let c = cluster();
    let addr = c.agent_addr();
    let ns = &fresh_namespace(shape.name);
    let evidence = format!("/var/lib/sidecar-race-cluster/evidence/{ns}");
    c.apply(&(shape.deployment)(ns, shape.name, &evidence).to_string());

    let pod = running_pod(ns, shape.name);
    let lost = refused_printed(ns, &name(&pod), "app");
    assert!(
        lost >= 10,
        "the app lost only {lost} while the sidecar was late"
    );
    // The count first, then the resolution: the sidecar's bind is what resolves it.
    let counted = wait_incident(
        &addr,
        &uid(&pod),
        &format!("{}'s startup incident with the app's count", shape.sidecar),
        Duration::from_secs(60),
        |i| i["container"].is_string() && i["refused_count"] == lost,
    );
    eprintln!(
        "{} startup race: the app lost {lost}, the agent counted {}",
        shape.sidecar, counted["refused_count"]
    );
    started(ns, &pod, lost);
    let incident = wait_incident(
        &addr,
        &uid(&pod),
        &format!("{}'s bind resolving the startup incident", shape.sidecar),
        Duration::from_secs(10),
        |i| named_and_resolved(i) && i["refused_count"] == lost,
    );
    eprintln!("window {:.3} s: {incident:#}", window(&incident));
    assert_eq!(incident["phase"], "startup", "{incident:#}");
    assert_eq!(incident["kind"], "sidecar_race", "{incident:#}");
    assert_eq!(incident["pattern"], "classic", "{incident:#}");
    assert_eq!(incident["protocol"], shape.protocol, "{incident:#}");
    assert_eq!(incident["container"], "app", "{incident:#}");
    assert_eq!(incident["sidecar"], shape.sidecar, "{incident:#}");
    assert_eq!(
        incident["container_id"],
        container_id(&pod, "app").as_str(),
        "{incident:#}"
    );
    // The app's postStart holds the sidecar's start 2 s.
    assert!(window(&incident) >= 1.5, "window {}", window(&incident));
    let advice = incident["advice"].as_str().unwrap_or_default();
    assert!(advice.contains("lost, not retried"), "{advice}");
    assert_eq!(incidents_of(&addr, &uid(&pod)).len(), 1);
    wait_event(ns, &name(&pod), "SidecarStartupRace");
    let series = namespace_series(&addr, ns);
    let labels = format!("phase=\"startup\",protocol=\"{}\"}} {lost}", shape.protocol);
    assert!(
        series.iter().any(|l| l.contains(&labels)),
        "no series ending {labels}: {series:#?}"
    );

    // At a rollout the sidecar exits at SIGTERM while the app, in its preStop sleep,
    // still sends once a second, and once more at its own SIGTERM: what it lost then
    // is the drain incident's.
    let deployment = format!("deployment/{}", shape.name);
    c.kubectl(&["-n", ns, "rollout", "restart", &deployment]);
    c.kubectl(&["-n", ns, "rollout", "status", &deployment, "--timeout=90s"]);
    let at_exit = lines_left_by(ns, &pod, &evidence);
    assert!(at_exit >= 1, "the app lost nothing after the sidecar went");
    let drain = wait_incident(
        &addr,
        &uid(&pod),
        &format!("{}'s drain incident", shape.sidecar),
        Duration::from_secs(60),
        |i| i["phase"] == "drain" && i["refused_count"].as_u64() == Some(at_exit),
    );
    eprintln!(
        "{} drain race: the app lost {at_exit}, the agent counted {}: {drain:#}",
        shape.sidecar, drain["refused_count"]
    );
    assert_eq!(drain["protocol"], shape.protocol, "{drain:#}");
    assert_eq!(drain["container"], "app", "{drain:#}");
    assert_eq!(drain["sidecar"], shape.sidecar, "{drain:#}");
    wait_event(ns, &name(&pod), "SidecarDrainRace");
}

/// The statsd exporter after its app, started 2 s late: every statsd line the app sent
/// before it bound UDP 9125 was dropped. The agent counts the app's loss, and the
/// exporter's own counters hold the one line of the start that arrived. The exporter
/// runs as nobody, so the agent (uid 0 without `CAP_SYS_PTRACE`) cannot read its fds:
/// its bound socket is matched by its user.
#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn case19_the_real_statsd_exporter_started_late_loses_the_apps_lines_at_start_and_drain() {
    let shape = Shape {
        name: "metrics",
        sidecar: STATSD_EXPORTER,
        protocol: "udp",
        deployment: metrics_app,
    };
    lost_at_start_and_drain(&shape, |ns, pod, lost| {
        let i = &incidents_of(&cluster().agent_addr(), &uid(pod))[0];
        assert_eq!(i["port"].as_u64(), Some(u64::from(STATSD_PORT)), "{i:#}");
        let advice = i["advice"].as_str().unwrap_or_default();
        assert!(
            advice.contains("a tcpSocket probe cannot test UDP"),
            "{advice}"
        );
        // The app printed the exporter's /metrics once the start was over, before any
        // other line: of all it sent, the exporter received only the last.
        let log = wait_until(
            "the exporter's counters in the app's log",
            Duration::from_secs(30),
            || {
                let log = cluster().logs(ns, &name(pod), "app");
                exporter_counted(&log, "statsd_exporter_udp_packets_total").map(|_| log)
            },
        );
        let sent: u64 = log
            .lines()
            .find_map(|l| l.strip_prefix("sent ")?.trim().parse().ok())
            .expect("the app's count of lines sent");
        let received = exporter_counted(&log, CHECKOUTS);
        let packets = exporter_counted(&log, "statsd_exporter_udp_packets_total");
        eprintln!(
            "statsd: the app sent {sent}, lost {lost}; the exporter counted {received:?} \
             ({CHECKOUTS}), {packets:?} UDP packets"
        );
        assert_eq!(sent, lost + 1, "{log}");
        assert_eq!((received, packets), (Some(1), Some(1)), "{log}");
    });
}

/// A syslog relay (socat on a Unix datagram socket in an emptyDir) after its app,
/// started 2 s late: every `logger` line before its bind was refused. The agent learns
/// the bind on the syscall hooks the cluster install turns on (`--unix-hooks=syscalls`).
/// The drain's refusals are `logger`'s datagram socket's connects, which the syscall
/// path cannot type: the agent calls them `unixgram` because the path's last listener
/// was the relay's datagram bind.
#[test]
#[ignore = "needs the cluster of `cargo xtask cluster up`; `cargo xtask test` runs it"]
fn case20_a_unix_datagram_log_relay_started_late_refuses_the_apps_lines_at_start_and_drain() {
    let shape = Shape {
        name: "logging",
        sidecar: LOG_RELAY,
        protocol: "unixgram",
        deployment: logging_app,
    };
    lost_at_start_and_drain(&shape, |_, pod, _| {
        let i = &incidents_of(&cluster().agent_addr(), &uid(pod))[0];
        assert_eq!(i["socket"]["volume"], "log", "{i:#}");
    });
}
