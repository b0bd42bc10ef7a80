//! The proof that the DaemonSet's capability list is enough: the agent runs as the
//! DaemonSet runs it — its arguments and environment from deploy/base/daemonset.yaml,
//! the host paths it mounts, uid 0 with only the manifest's capabilities (bounding,
//! permitted and effective sets cut down with setpriv) and no_new_privs — and still
//! loads, attaches and detects a simulated startup race, read through `--auth
//! kubernetes` with a token the (fake) API server allows. Its own test binary, as the
//! agent listens on the manifest's fixed port.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use sidecar_race_tests::{
    agent::agent_binary,
    fake_api::{FakeApi, Mode},
    http::get,
    pinned::PinnedPlace,
    root::{have, is_root_or_skip},
    scenario::assert_startup_race_detected_as,
};

/// A token the fake API server authenticates and allows `get` on the incidents.
const READER_TOKEN: &str = "least-privilege-reader";

fn daemonset() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/base/daemonset.yaml");
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).expect("daemonset.yaml parses")
}

/// Capability numbers of the names the manifest may use.
fn cap_bit(name: &str) -> u32 {
    match name {
        "PERFMON" => 38,
        "BPF" => 39,
        "SYS_RESOURCE" => 24,
        "SYS_ADMIN" => 21,
        "NET_ADMIN" => 12,
        other => panic!("capability {other} is not known to this test: add it"),
    }
}

#[test]
fn the_manifests_capabilities_are_enough_to_detect_a_startup_race() {
    if !is_root_or_skip("the_manifests_capabilities_are_enough_to_detect_a_startup_race") {
        return;
    }
    assert!(have("setpriv"), "setpriv (util-linux) is needed");
    let ds = daemonset();
    let c = &ds["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<String> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let caps: Vec<String> = c["securityContext"]["capabilities"]["add"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert_eq!(c["securityContext"]["capabilities"]["drop"][0], "ALL");
    let listen = args
        .iter()
        .position(|a| a == "--listen")
        .map(|i| args[i + 1].clone())
        .unwrap();
    let port = listen.rsplit(':').next().unwrap();
    let addr = format!("127.0.0.1:{port}");

    // The host paths the DaemonSet mounts must be there, as on a node (the agent
    // cannot mount tracefs itself without CAP_SYS_ADMIN).
    for volume in ds["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
    {
        let path = volume["hostPath"]["path"].as_str().unwrap();
        // The state dir is DirectoryOrCreate: the kubelet makes it, as the agent does.
        if volume["hostPath"]["type"] == "DirectoryOrCreate" {
            continue;
        }
        if path.ends_with("/tracing") && !PathBuf::from(path).join("events").is_dir() {
            assert!(
                Command::new("mount")
                    .args(["-t", "tracefs", "nodev", path])
                    .status()
                    .unwrap()
                    .success()
            );
        }
        assert!(PathBuf::from(path).is_dir(), "{path} missing");
    }

    let cap_list = caps
        .iter()
        .map(|c| format!("+{}", c.to_lowercase()))
        .collect::<Vec<_>>()
        .join(",");
    // The API server the agent's pod would reach: it reviews the callers of the
    // incidents (`--auth kubernetes`) and lists pods.
    let api = FakeApi::start(Mode::Healthy);
    api.add_token(READER_TOKEN, "system:serviceaccount:monitoring:reader");
    api.allow("system:serviceaccount:monitoring:reader", "incidents");
    // Pinning as the DaemonSet pins (#33), in a bpffs of the test's own: nothing is
    // left on the host, and the capabilities are shown to be enough for it too.
    let place = PinnedPlace::new("least-privilege");
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=0", "--regid=0", "--clear-groups", "--no-new-privs"])
        .arg(format!("--bounding-set=-all,{cap_list}"))
        .arg(format!("--inh-caps=-all,{cap_list}"))
        .arg(format!("--ambient-caps=-all,{cap_list}"))
        .arg("--")
        .arg(agent_binary())
        .args(&args)
        .args(place.args())
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("NODE_NAME", "least-privilege-node")
        .env("NODE_IP", "127.0.0.1")
        .env("SIDECAR_RACE_LOG_FORMAT", "json")
        .env("KUBECONFIG", api.kubeconfig())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut agent = cmd.spawn().expect("start the agent under setpriv");
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&addr, "/readyz").map(|r| r.0) != Some(200) {
        if let Ok(Some(status)) = agent.try_wait() {
            let out = agent.wait_with_output().unwrap();
            panic!(
                "agent exited ({status}) with only {caps:?}:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(Instant::now() < deadline, "agent not ready on {addr}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // It really runs with only those capabilities.
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.id())).unwrap();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .unwrap()
        .trim();
    let want: u64 = caps.iter().map(|c| 1u64 << cap_bit(c)).sum();
    assert_eq!(
        u64::from_str_radix(eff, 16).unwrap(),
        want,
        "effective capabilities"
    );
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("NoNewPrivs:") && l.ends_with('1'))
    );

    assert_eq!(
        get(&addr, "/api/v1/incidents").map(|r| r.0),
        Some(401),
        "the incidents need a token"
    );
    assert_startup_race_detected_as(&addr, "leastpriv", Some(READER_TOKEN));

    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
    let out = agent.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The api pod source used the API server.
    assert!(stderr.contains("pod source api"), "{stderr}");
    assert!(
        stderr.contains("programs and maps pinned") && stderr.contains("wrote the checkpoint"),
        "pinned and checkpointed with only {caps:?}: {stderr}"
    );
    // Its links are pinned, found without CAP_SYS_ADMIN (which asking the kernel for
    // links by id would need): they outlive it.
    let keys = place.keys();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let links = std::fs::read_dir(
        place
            .bpffs
            .join("sidecar-race")
            .join(&keys[0])
            .join("links"),
    )
    .map(|d| d.count())
    .unwrap_or(0);
    assert!(links >= 4, "{links} links pinned with only {caps:?}");
}
