//! Faults the agent survives, one test each, on the real kernel with the agent binary
//! run as users run it: the pod source failing (API server down at start or mid-run,
//! slow, 500, 410 Gone; a kubelet with a certificate that does not verify; the pods
//! file deleted or truncated), a tracepoint missing, and the agent SIGKILLed and
//! restarted. In each the agent says what is wrong, keeps detecting races (a race is
//! attributed by its cgroup path even without names), and recovers when the fault ends.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
    time::{Duration, Instant},
};

use serde_json::Value;
use sidecar_race_agent::kernel::layout::TRACEPOINTS;
use sidecar_race_tests::{
    agent::RunAgent,
    bpf::{bpf_ids_of, bpftool_ids},
    fake_api::{FakeApi, Mode},
    http::free_port,
    pod::{Declared, SimContainer, SimPod, write_pod_list},
    root::is_root_or_skip,
    scenario::{assert_startup_race_detected, late_proxy_race},
};

const SETTLE: Duration = Duration::from_secs(15);
/// kube's watcher backs off up to 30 s between retries.
const RECOVERY: Duration = Duration::from_secs(45);

/// A pod with a proxy and an app, and its manifest (a Deployment's pod in `shop`).
fn pod(name: &str) -> (SimPod, SimContainer, SimContainer, Value) {
    let mut pod = SimPod::new(name).unwrap();
    let p = pod.container("proxy").unwrap();
    let a = pod.container("app").unwrap();
    let manifest = pod.app_and_proxy_manifest("shop", "checkout", &a, &p, Declared::App);
    (pod, p, a, manifest)
}

/// Races in `pod` and returns its resolved incident (a startup race of the right
/// containers, whether or not names are known).
fn race(agent: &RunAgent, pod: &mut SimPod, p: &SimContainer, a: &SimContainer) -> Value {
    late_proxy_race(pod, p, a, 800);
    let found = agent.wait_incidents(&pod.uid, SETTLE, |i| {
        i.iter().any(|i| i["state"] == "resolved")
    });
    assert_eq!(found.len(), 1, "one incident for the race: {found:#?}");
    let i = found.into_iter().next().unwrap();
    assert_eq!(i["phase"], "startup", "{i:#}");
    assert_eq!(i["container_id"], a.id.as_str(), "{i:#}");
    assert_eq!(i["sidecar_container_id"], p.id.as_str(), "{i:#}");
    i
}

/// Waits until the pod's incident carries the names the pod source gives.
fn wait_named(agent: &RunAgent, uid: &str) -> Value {
    let found = agent.wait_incidents(uid, RECOVERY, |i| {
        i.iter()
            .any(|i| i["namespace"] == "shop" && i["container"] == "app")
    });
    found
        .into_iter()
        .find(|i| i["namespace"] == "shop")
        .unwrap_or_else(|| {
            panic!(
                "the pod source never named pod {uid}:\n{}",
                agent.stderr().join("\n")
            )
        })
}

fn api_agent(api: &FakeApi) -> RunAgent {
    let kubeconfig = api.kubeconfig();
    RunAgent::start_with_env(
        &["--pods-from", "api", "--node-name", "sim-node"],
        &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
    )
}

const API_FAILING: &str = "pod source api:";
const API_RECOVERED: &str = "pod source api: recovered";

#[test]
fn api_server_down_at_start() {
    if !is_root_or_skip("api_server_down_at_start") {
        return;
    }
    let mut api = FakeApi::down_on(free_port());
    let agent = api_agent(&api);
    agent.wait_log(&[API_FAILING, "retrying with backoff"], SETTLE);
    // No pod source: the race is still detected, from the cgroup path alone.
    let (mut pod, p, a, manifest) = pod("apidown");
    api.add_pod(manifest);
    let i = race(&agent, &mut pod, &p, &a);
    assert_eq!(
        i["namespace"],
        Value::Null,
        "no names without the API: {i:#}"
    );
    api.up();
    agent.wait_log(&[API_RECOVERED], RECOVERY);
    wait_named(&agent, &pod.uid);
}

#[test]
fn api_server_down_mid_run() {
    if !is_root_or_skip("api_server_down_mid_run") {
        return;
    }
    let mut api = FakeApi::start(Mode::Healthy);
    let agent = api_agent(&api);
    agent.wait_log(&["listed this node's pods"], SETTLE);
    let (mut first, p, a, manifest) = pod("apibefore");
    api.add_pod(manifest);
    race(&agent, &mut first, &p, &a);
    wait_named(&agent, &first.uid);

    api.down();
    agent.wait_log(&[API_FAILING, "retrying with backoff"], RECOVERY);
    let (mut second, p, a, manifest) = pod("apiduring");
    api.add_pod(manifest);
    race(&agent, &mut second, &p, &a);
    api.up();
    agent.wait_log(&[API_RECOVERED], RECOVERY);
    wait_named(&agent, &second.uid);
}

#[test]
fn api_server_slow() {
    if !is_root_or_skip("api_server_slow") {
        return;
    }
    let api = FakeApi::start(Mode::Slow(Duration::from_secs(20)));
    let agent = api_agent(&api);
    let (mut pod, p, a, manifest) = pod("apislow");
    api.add_pod(manifest);
    // The list is still on its way: detection does not wait for it.
    let i = race(&agent, &mut pod, &p, &a);
    assert!(
        !agent
            .stderr()
            .iter()
            .any(|l| l.contains("listed this node's pods")),
        "the race was detected while the first list was pending"
    );
    assert_eq!(i["namespace"], Value::Null, "{i:#}");
    agent.wait_log(
        &["pod source api: no pod list from the API server after 10 s"],
        SETTLE,
    );
    agent.wait_log(&["listed this node's pods"], RECOVERY);
    wait_named(&agent, &pod.uid);
}

#[test]
fn api_server_returning_500() {
    if !is_root_or_skip("api_server_returning_500") {
        return;
    }
    let api = FakeApi::start(Mode::Error500);
    let agent = api_agent(&api);
    let line = agent.wait_log(&[API_FAILING, "retrying with backoff"], SETTLE);
    assert!(
        line.contains("etcdserver: request timed out"),
        "the API server's own message is in the log: {line}"
    );
    let (mut pod, p, a, manifest) = pod("api500");
    api.add_pod(manifest);
    race(&agent, &mut pod, &p, &a);
    api.set_mode(Mode::Healthy);
    agent.wait_log(&[API_RECOVERED], RECOVERY);
    wait_named(&agent, &pod.uid);
}

#[test]
fn api_server_returning_410_relists() {
    if !is_root_or_skip("api_server_returning_410_relists") {
        return;
    }
    let api = FakeApi::start(Mode::WatchGone);
    let agent = api_agent(&api);
    agent.wait_log(&[API_FAILING, "too old resource version"], SETTLE);
    // A pod that only a relist can bring: every watch expires at once.
    let (mut pod, p, a, manifest) = pod("api410");
    api.add_pod(manifest);
    race(&agent, &mut pod, &p, &a);
    wait_named(&agent, &pod.uid);
    assert!(api.lists() >= 2, "410 Gone makes the agent list again");
}

/// A TLS server on loopback whose certificate no CA the agent is given signs.
fn kubelet_with_a_bad_certificate() -> u16 {
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap(),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let config = config.clone();
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let server = rustls::ServerConnection::new(config).unwrap();
                let mut tls = rustls::StreamOwned::new(server, conn);
                let mut buf = [0u8; 4096];
                // The client refuses the certificate during the handshake; if it ever
                // did not, it would get an empty pod list.
                if tls.read(&mut buf).unwrap_or(0) > 0 {
                    let body = r#"{"kind":"PodList","apiVersion":"v1","items":[]}"#;
                    let _ = write!(
                        tls,
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                }
            });
        }
    });
    port
}

#[test]
fn kubelet_with_a_bad_certificate_is_a_clear_error_and_detection_goes_on() {
    if !is_root_or_skip("kubelet_with_a_bad_certificate_is_a_clear_error_and_detection_goes_on") {
        return;
    }
    let port = kubelet_with_a_bad_certificate();
    // The CA the agent trusts is another one.
    let other = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    let dir = std::env::temp_dir().join(format!("sr-badcert-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ca, token) = (dir.join("ca.crt"), dir.join("token"));
    std::fs::write(&ca, other.cert.pem()).unwrap();
    std::fs::write(&token, "t").unwrap();
    let port = port.to_string();
    let agent = RunAgent::start(&[
        "--pods-from",
        "kubelet",
        "--node-ip",
        "127.0.0.1",
        "--kubelet-port",
        &port,
        "--kubelet-ca",
        ca.to_str().unwrap(),
        "--kubelet-token-file",
        token.to_str().unwrap(),
        "--pods-poll-seconds",
        "0.5",
    ]);
    let line = agent.wait_log(&["pod source kubelet: GET /pods"], SETTLE);
    eprintln!("{line}");
    assert!(
        line.to_lowercase().contains("certificate")
            && line.contains("attribution by cgroup continues"),
        "the log says the certificate is the problem: {line}"
    );
    let (mut pod, p, a, _) = pod("badcert");
    race(&agent, &mut pod, &p, &a);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn pods_file_deleted_or_truncated_keeps_the_last_good_pods() {
    if !is_root_or_skip("pods_file_deleted_or_truncated_keeps_the_last_good_pods") {
        return;
    }
    let file = std::env::temp_dir().join(format!("sr-faults-pods-{}.json", std::process::id()));
    write_pod_list(&file, &[]);
    let source = format!("file:{}", file.display());
    let agent = RunAgent::start(&["--pods-from", &source, "--pods-poll-seconds", "0.2"]);
    let (mut known, p1, a1, m1) = pod("filekept");
    write_pod_list(&file, std::slice::from_ref(&m1));
    agent.wait_log(&["pod source file: read", "\"pods\":1"], SETTLE);

    std::fs::remove_file(&file).unwrap();
    agent.wait_log(
        &["pod source file: cannot read", "keeping the last good pods"],
        SETTLE,
    );
    // The pod named before the file went away keeps its names.
    race(&agent, &mut known, &p1, &a1);
    wait_named(&agent, &known.uid);

    // Truncated mid-write (a writer that does not rename into place).
    let (mut later, p2, a2, m2) = pod("filelater");
    let full =
        serde_json::json!({"apiVersion": "v1", "kind": "PodList", "items": [m1, m2]}).to_string();
    std::fs::write(&file, &full[..full.len() / 2]).unwrap();
    agent.wait_log(
        &[
            "pod source file:",
            "neither JSON",
            "keeping the last good pods",
        ],
        SETTLE,
    );
    let i = race(&agent, &mut later, &p2, &a2);
    assert_eq!(
        i["namespace"],
        Value::Null,
        "not in any good file yet: {i:#}"
    );

    std::fs::write(&file, &full).unwrap();
    wait_named(&agent, &later.uid);
    std::fs::remove_file(&file).unwrap();
}

/// A tracefs with every format the agent reads but `hidden`'s.
fn tracefs_without(hidden: &str) -> PathBuf {
    let real = Path::new("/sys/kernel/tracing");
    if !real.join("events").is_dir() {
        let _ = Command::new("mount")
            .args(["-t", "tracefs", "nodev"])
            .arg(real)
            .status();
    }
    let fake = std::env::temp_dir().join(format!("sr-tracefs-{hidden}-{}", std::process::id()));
    for tp in TRACEPOINTS.iter().filter(|tp| tp.name != hidden) {
        let rel = format!("events/{}/{}/format", tp.category, tp.name);
        let to = fake.join(&rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(real.join(&rel), &to).unwrap();
    }
    fake
}

/// An agent whose tracefs lacks `category:name`, once it has said so; and that tracefs
/// (to remove) and the sentence.
fn agent_without(category: &str, name: &str) -> (RunAgent, PathBuf, String) {
    let tracefs = tracefs_without(name);
    // Without fexit and kprobes (this host) `auto` attaches no Unix hook and says so,
    // a degraded part of its own: the syscall tracepoints are asked for instead. Where
    // the kernel has icmp_send, `--udp-hook=auto` says IPv6's UDP refusals need
    // kfree_skb, another part of its own: kfree_skb is asked for, which sees both.
    let agent = RunAgent::start(&[
        "--pods-from",
        "none",
        "--tracefs",
        tracefs.to_str().unwrap(),
        "--unix-hooks",
        "syscalls",
        "--udp-hook",
        "kfree-skb",
    ]);
    let line = agent.wait_log(
        &[&format!(
            "degraded: tracepoint {category}:{name} is unusable"
        )],
        SETTLE,
    );
    (agent, tracefs, line)
}

#[test]
fn a_missing_tracepoint_degrades_one_capability_and_the_rest_works() {
    if !is_root_or_skip("a_missing_tracepoint_degrades_one_capability_and_the_rest_works") {
        return;
    }
    let (agent, tracefs, line) = agent_without("tcp", "tcp_send_reset");
    assert!(
        line.contains("this kernel does not have it") && line.contains("local_dst"),
        "{line}"
    );
    assert_only_degraded(&agent, "tcp_send_reset");
    assert_startup_race_detected(&agent.addr, "nosendreset");
    std::fs::remove_dir_all(tracefs).unwrap();
}

#[test]
fn without_cgroup_mkdir_new_containers_are_found_by_rescanning() {
    if !is_root_or_skip("without_cgroup_mkdir_new_containers_are_found_by_rescanning") {
        return;
    }
    let (agent, tracefs, line) = agent_without("cgroup", "cgroup_mkdir");
    assert!(line.contains("found by rescanning"), "{line}");
    assert_only_degraded(&agent, "cgroup_mkdir");
    // A pod that appears after the agent started: no creation event, yet its race is
    // attributed to the right pod and containers. (Without the creation time and a pod
    // source, the race reads as steady: the degraded part, said in the log line.)
    let (mut pod, p, a, _) = pod("nomkdir");
    late_proxy_race(&mut pod, &p, &a, 800);
    let found = agent.wait_incidents(&pod.uid, SETTLE, |i| {
        i.iter().any(|i| i["state"] == "resolved")
    });
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0]["container_id"], a.id.as_str());
    assert_eq!(found[0]["sidecar_container_id"], p.id.as_str());
    assert_eq!(found[0]["phase"], "steady", "{:#}", found[0]);
    std::fs::remove_dir_all(tracefs).unwrap();
}

fn assert_only_degraded(agent: &RunAgent, tracepoint: &str) {
    let others: Vec<String> = agent
        .stderr()
        .into_iter()
        .filter(|l| l.contains("degraded") && !l.contains(tracepoint))
        // This host takes neither fentry nor kprobes: its TCP fallback is a part of its
        // own, said in every run of the agent here.
        .filter(|l| !l.contains("degraded: TCP listeners and connects are seen through"))
        .collect();
    assert!(
        others.is_empty(),
        "only {tracepoint} is degraded: {others:#?}"
    );
}

#[test]
fn sigkill_leaves_no_attachment_behind_and_a_restart_detects() {
    if !is_root_or_skip("sigkill_leaves_no_attachment_behind_and_a_restart_detects") {
        return;
    }
    let progs_before = bpftool_ids("prog");
    let agent = RunAgent::start(&["--pods-from", "none"]);
    let (progs, links) = bpf_ids_of(agent.pid());
    assert!(
        progs.len() >= 2,
        "the agent holds its programs: {progs:?} (fdinfo of pid {})",
        agent.pid()
    );
    assert!(!links.is_empty(), "and their tracepoint links");
    let listed = bpftool_ids("prog");
    assert!(
        progs.iter().all(|p| listed.contains(p)),
        "bpftool lists them"
    );
    assert!(
        progs.iter().all(|p| !progs_before.contains(p)),
        "new programs"
    );

    agent.kill();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (now_progs, now_links) = (bpftool_ids("prog"), bpftool_ids("link"));
        let left: Vec<&u64> = progs.iter().filter(|p| now_progs.contains(p)).collect();
        let left_links: Vec<&u64> = links.iter().filter(|l| now_links.contains(l)).collect();
        if left.is_empty() && left_links.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after SIGKILL the kernel still holds programs {left:?} and links {left_links:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The programs are gone, not only detached: the count is back to where it was,
    // give or take other agents on this machine starting and stopping.
    eprintln!(
        "BPF programs before: {}, after the kill: {}",
        progs_before.len(),
        bpftool_ids("prog").len()
    );

    let again = RunAgent::start(&["--pods-from", "none"]);
    assert_startup_race_detected(&again.addr, "restarted");
}
