//! Datagram sidecars end to end on the real kernel: a statsd-like sidecar on UDP and a
//! syslog-like one on a Unix datagram socket, bound late or gone at a drain, in
//! simulated pods; the agent binary run as users run it, and what `/api/v1/incidents`
//! says. Each count is compared with the app's own: the datagrams it sent that were
//! never answered (`sr-udp`).

use std::{path::PathBuf, time::Duration};

use serde_json::{Value, json};
use sidecar_race_tests::{
    agent::RunAgent,
    pod::{
        Decl, Declared, SimContainer, SimPod, mark_deleting, require_binary, sibling_binary,
        write_pod_list,
    },
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
    agent_with(name, &[])
}

fn agent_with(name: &str, args: &[&str]) -> (RunAgent, PathBuf) {
    RunAgent::start_with_pods_file(&format!("dgram-{name}"), args)
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
    late_statsd_with(name, bound, dialed, connected, &[])
}

/// `late_statsd` with the agent started with `agent_args`.
fn late_statsd_with(
    name: &str,
    bound: &str,
    dialed: &str,
    connected: bool,
    agent_args: &[&str],
) -> (u64, Value) {
    let (agent, pods_file) = agent_with(name, agent_args);
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
    let advice = i["advice"].as_str().unwrap_or_default();
    assert!(advice.contains("lost, not retried"), "{advice}");
    assert!(
        advice.contains("a tcpSocket probe cannot test UDP"),
        "{advice}"
    );
    let series = format!(r#"port="8125",phase="startup",protocol="udp"}} {lost}"#);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !agent.metrics().contains(&series) {
        assert!(
            std::time::Instant::now() < deadline,
            "no {series} in:\n{}",
            agent.metrics()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
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

#[test]
fn a_statsd_sidecar_bound_late_on_udp_v6_is_one_startup_race_with_the_apps_exact_loss() {
    if !is_root_or_skip(
        "a_statsd_sidecar_bound_late_on_udp_v6_is_one_startup_race_with_the_apps_exact_loss",
    ) {
        return;
    }
    // IPv6 refusals are seen at kfree_skb only, which `auto` leaves off where the
    // kernel has icmp_send (this host, 6.18): asked for.
    let (lost, i) = late_statsd_with(
        "udp-v6",
        "[::1]:8125",
        "[::1]:8125",
        false,
        &["--udp-hook", "kfree-skb"],
    );
    eprintln!(
        "udp v6 unconnected (kfree_skb): app lost {lost}, agent counted {}",
        i["refused_count"]
    );
    assert_eq!(i["destination"], "[::1]:8125", "{i:#}");
}

/// `auto` on a kernel with `icmp:icmp_send` (6.12+; this host's 6.18) hooks UDP
/// refusals there, where nothing runs on a delivered datagram or another drop, leaves
/// `kfree_skb` off, and says in one `degraded:` line that IPv6 refusals then need
/// `--udp-hook=kfree-skb`; on a kernel without it, `kfree_skb` is attached and nothing
/// is said.
#[test]
fn auto_takes_the_udp_hook_that_runs_on_no_drop_and_says_what_ipv6_then_needs() {
    if !is_root_or_skip(
        "auto_takes_the_udp_hook_that_runs_on_no_drop_and_says_what_ipv6_then_needs",
    ) {
        return;
    }
    let has_icmp_send = std::path::Path::new("/sys/kernel/tracing/events/icmp/icmp_send").exists();
    let (agent, _) = agent("udp-auto");
    let log = agent.stderr();
    let watching = log
        .iter()
        .find(|l| l.contains("watching the kernel"))
        .unwrap_or_else(|| panic!("never watched the kernel: {log:#?}"));
    let left_off: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("degraded: tracepoint skb:kfree_skb not attached (left off"))
        .collect();
    if has_icmp_send {
        assert!(
            watching.contains("icmp_send") && !watching.contains("kfree_skb"),
            "{watching}"
        );
        assert_eq!(left_off.len(), 1, "{log:#?}");
        assert!(
            left_off[0].contains("--udp-hook=kfree-skb"),
            "{}",
            left_off[0]
        );
        assert!(left_off[0].contains("IPv6"), "{}", left_off[0]);
    } else {
        assert!(
            watching.contains("kfree_skb") && !watching.contains("icmp_send"),
            "{watching}"
        );
        assert!(left_off.is_empty(), "{log:#?}");
    }
}

/// The same race over IPv4 seen at kfree_skb instead of icmp_send: the two hooks count
/// the same datagrams.
#[test]
fn a_statsd_sidecar_bound_late_on_udp_v4_is_counted_alike_at_kfree_skb() {
    if !is_root_or_skip("a_statsd_sidecar_bound_late_on_udp_v4_is_counted_alike_at_kfree_skb") {
        return;
    }
    let (lost, i) = late_statsd_with(
        "udp-v4-kfree",
        "127.0.0.1:8125",
        "127.0.0.1:8125",
        false,
        &["--udp-hook", "kfree-skb"],
    );
    eprintln!(
        "udp v4 unconnected (kfree_skb): app lost {lost}, agent counted {}",
        i["refused_count"]
    );
}

/// A connected sender learns of a drop on its next send (`ECONNREFUSED`, which sends
/// nothing): the agent counts the datagrams dropped, never those errors too.
#[test]
fn a_connected_udp_sender_is_counted_once_per_lost_datagram_not_per_error() {
    if !is_root_or_skip("a_connected_udp_sender_is_counted_once_per_lost_datagram_not_per_error") {
        return;
    }
    let (lost, i) = late_statsd("udp-conn", "127.0.0.1:8125", "127.0.0.1:8125", true);
    eprintln!(
        "udp v4 connected: app lost {lost}, agent counted {}",
        i["refused_count"]
    );
}

/// The statsd sidecar exits at SIGTERM while the pod is deleted and the app still
/// sends: one drain incident holding exactly what the app lost after it went.
#[test]
fn a_statsd_sidecar_gone_at_a_drain_is_one_drain_incident_with_the_apps_exact_loss() {
    if !is_root_or_skip(
        "a_statsd_sidecar_gone_at_a_drain_is_one_drain_incident_with_the_apps_exact_loss",
    ) {
        return;
    }
    let (agent, pods_file) = agent("udp-drain");
    let mut pod = SimPod::new("udp-drain").unwrap();
    let statsd = pod.container("statsd").unwrap();
    let app = pod.container("app").unwrap();
    let mut m = manifest(&pod, &app, &statsd, &[8125]);
    write_pod_list(&pods_file, &[m.clone()]);
    let sidecar = spawn(&mut pod, &statsd, &["recv", "127.0.0.1:8125"]);
    std::thread::sleep(Duration::from_millis(500));
    let sender = CountedApp::start(
        &mut pod,
        &app,
        &sr_udp(),
        &[
            "send",
            "127.0.0.1:8125",
            "--interval-ms",
            "50",
            "--attempts",
            "60",
            "--keep-sending",
        ],
    );
    std::thread::sleep(Duration::from_millis(800));
    mark_deleting(&mut m, 30);
    write_pod_list(&pods_file, &[m]);
    std::thread::sleep(Duration::from_millis(300));
    pod.terminate(sidecar);
    let lost = sender.refused(&mut pod);
    assert!(lost >= 15, "lost after the sidecar went: {lost}");
    let uid = pod.uid.clone();
    drop(pod);
    let i = agent.one_resolved_holding(&uid, lost, SETTLE);
    eprintln!(
        "udp drain: app lost {lost}, agent counted {}",
        i["refused_count"]
    );
    assert_eq!(
        (
            i["phase"].as_str(),
            i["protocol"].as_str(),
            i["refused_count"].as_u64()
        ),
        (Some("drain"), Some("udp"), Some(lost)),
        "{i:#}"
    );
    assert_eq!(i["sidecar"], "statsd", "{i:#}");
}

/// In a pod whose statsd sidecar binds late, the app also looks a name up on a local
/// resolver nobody runs (127.0.0.53:53), sends to a UDP port no container declares,
/// and logs through glibc's `syslog()` with no `/dev/log`: only the statsd race is an
/// incident.
#[test]
fn dns_lookups_undeclared_udp_ports_and_dev_log_probes_are_no_incidents() {
    if !is_root_or_skip("dns_lookups_undeclared_udp_ports_and_dev_log_probes_are_no_incidents") {
        return;
    }
    let (agent, pods_file) =
        RunAgent::start_with_pods_file("dgram-noise", &["--unix-hooks", "syscalls"]);
    let mut pod = SimPod::new("udp-noise").unwrap();
    let statsd = pod.container("statsd").unwrap();
    let app = pod.container("app").unwrap();
    write_pod_list(&pods_file, &[manifest(&pod, &app, &statsd, &[8125])]);
    spawn(
        &mut pod,
        &statsd,
        &["recv", "127.0.0.1:8125", "--delay-ms", "1500"],
    );
    let to_statsd = ["send", "127.0.0.1:8125", "--interval-ms", "50"];
    let statsd_sender = CountedApp::start(&mut pod, &app, &sr_udp(), &to_statsd);
    let dns = [
        "send",
        "127.0.0.53:53",
        "--interval-ms",
        "20",
        "--attempts",
        "20",
    ];
    let dns_lost = send(&mut pod, &app, &dns);
    let other = [
        "send",
        "127.0.0.1:9999",
        "--interval-ms",
        "20",
        "--attempts",
        "20",
    ];
    let other_lost = send(&mut pod, &app, &other);
    assert_eq!((dns_lost, other_lost), (20, 20));
    // glibc's syslog(): a datagram socket connected to /dev/log, which is not there.
    let mut syslog = std::process::Command::new("python3");
    syslog.args(["-c", "import syslog\nfor _ in range(5): syslog.syslog('x')"]);
    let pid = pod.spawn(&app, syslog).expect("python3");
    assert!(pod.wait(pid).unwrap().success());
    let lost = statsd_sender.refused(&mut pod);
    let i = agent.one_resolved_holding(&pod.uid, lost, SETTLE);
    eprintln!(
        "noise: statsd lost {lost}, agent counted {}",
        i["refused_count"]
    );
    assert_eq!(
        (i["port"].as_u64(), i["refused_count"].as_u64()),
        (Some(8125), Some(lost))
    );
    // Past the agent's wait for a socket on those ports, they are still no incident.
    std::thread::sleep(Duration::from_secs(3));
    let all = agent.incidents_of(&pod.uid);
    assert_eq!(all.len(), 1, "{all:#?}");
}

/// A syslog-like sidecar `rsyslog` binds a Unix datagram socket `bound` 1.5 s late
/// while the app sends to `dialed` every 50 ms: one resolved startup incident naming
/// the sidecar, with exactly the sends the app had refused. `volume`: the directory
/// both containers mount as emptyDir `log` (none for an abstract name).
fn late_unix_datagram(name: &str, bound: &str, volume: Option<&str>) -> (u64, Value) {
    let (agent, pods_file) =
        RunAgent::start_with_pods_file(&format!("dgram-{name}"), &["--unix-hooks", "syscalls"]);
    let mut pod = SimPod::new(name).unwrap();
    let syslog = pod.container("rsyslog").unwrap();
    let app = pod.container("app").unwrap();
    let mut m = manifest(&pod, &app, &syslog, &[]);
    if let Some(dir) = volume {
        m["spec"]["volumes"] = json!([{"name": "log", "emptyDir": {}}]);
        for c in m["spec"]["containers"].as_array_mut().expect("containers") {
            c["volumeMounts"] = json!([{"name": "log", "mountPath": dir}]);
        }
    }
    write_pod_list(&pods_file, &[m]);
    spawn(&mut pod, &syslog, &["recv", bound, "--delay-ms", "1500"]);
    let lost = send(&mut pod, &app, &["send", bound, "--interval-ms", "50"]);
    assert!(
        lost >= 15,
        "sends refused while the sidecar was late: {lost}"
    );
    let i = agent.one_resolved_holding(&pod.uid, lost, SETTLE);
    assert_eq!(
        (
            i["phase"].as_str(),
            i["state"].as_str(),
            i["protocol"].as_str()
        ),
        (Some("startup"), Some("resolved"), Some("unixgram")),
        "{i:#}"
    );
    assert_eq!(i["refused_count"].as_u64(), Some(lost), "{i:#}");
    assert_eq!(i["sidecar"], "rsyslog", "{i:#}");
    assert_eq!(i["sidecar_container_id"], syslog.id.as_str(), "{i:#}");
    assert!((1.0..2.2).contains(&window(&i)), "window {}", window(&i));
    (lost, i)
}

#[test]
fn a_unix_datagram_sidecar_bound_late_on_a_shared_volume_is_one_resolved_startup_race() {
    if !is_root_or_skip(
        "a_unix_datagram_sidecar_bound_late_on_a_shared_volume_is_one_resolved_startup_race",
    ) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("sr-dgram-{}-vol", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("volume directory");
    let dir_s = dir.to_str().unwrap();
    let path = format!("{dir_s}/log.sock");
    let (lost, i) = late_unix_datagram("ugram-path", &path, Some(dir_s));
    eprintln!(
        "unix datagram path: app lost {lost}, agent counted {}",
        i["refused_count"]
    );
    assert_eq!(i["socket"]["volume"], "log", "{i:#}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_unix_datagram_sidecar_bound_late_on_an_abstract_name_is_one_resolved_startup_race() {
    if !is_root_or_skip(
        "a_unix_datagram_sidecar_bound_late_on_an_abstract_name_is_one_resolved_startup_race",
    ) {
        return;
    }
    let name = format!("@sr-syslog-{}", std::process::id());
    let (lost, i) = late_unix_datagram("ugram-abs", &name, None);
    eprintln!(
        "unix datagram abstract: app lost {lost}, agent counted {}",
        i["refused_count"]
    );
    assert_eq!(i["socket"]["abstract"], true, "{i:#}");
}
