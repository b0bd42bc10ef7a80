//! The real-runtime tier: pods made by a real container runtime through the CRI, and
//! the agent running from the image `cargo xtask image` built.
//!
//! The test kit plays the kubelet (`tests/src/cri.rs`) against a private containerd
//! (Debian's, CRI plugin, runc, the cgroupfs driver: this machine has no systemd) with
//! CNI networking (bridge, host-local, loopback from containernetworking-plugins):
//! `RunPodSandbox` with the kubelet's metadata and a kubelet-layout cgroup parent
//! (`/kubepods/<qos>/pod<uid>`), `CreateContainer` / `StartContainer` from busybox-static
//! images built here, `StopContainer` for a drain.
//!
//! The agent is imported from `target/image/sidecar-race-agent-<version>.oci.tar`
//! (`ctr images import`) and runs as a CRI container in its own pod sandbox with the
//! DaemonSet's arguments and security context (read from `deploy/base/daemonset.yaml`):
//! only BPF and PERFMON, RuntimeDefault seccomp, uid 0, no_new_privs, a read-only
//! root, tracefs and the cgroup tree mounted read-only, and `--pods-from file:` with
//! a pods file this test writes from the CRI's own `PodSandboxStatus` /
//! `ContainerStatus` (real pod UIDs, real container IDs, the kubelet's Pod JSON).
//!
//! Asserted: a classic pod's startup race is reported with the runtime's container
//! IDs and the right names; a pod started in native order (sidecar started and its
//! port probed before the app) gets no incident; the classic pod's drain is reported;
//! `/metrics` carries the workload's labels.

use std::{
    collections::HashMap,
    fs,
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use k8s_cri::v1 as cri;
use serde_json::{Value, json};
use sidecar_race_tests::{
    agent::incidents_at,
    cri::{
        BUSYBOX, CNI_BIN_DIR, ContainerSpec, PodSpec, Runtime, build_test_images, is_static_elf,
        kubelet_container_status, rfc3339_ns, sh,
    },
    http::get,
    pod::write_pod_list,
    root::{have, is_root_or_skip},
};

const VERSION: &str = env!("CARGO_PKG_VERSION");
const NODE: &str = "cri-node";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The archive `cargo xtask image` writes (or `SIDECAR_RACE_IMAGE_ARCHIVE`).
fn image_archive() -> PathBuf {
    std::env::var_os("SIDECAR_RACE_IMAGE_ARCHIVE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            repo().join(format!("target/image/sidecar-race-agent-{VERSION}.oci.tar"))
        })
}

/// The image reference recorded in the archive's index.
fn archive_reference(archive: &Path) -> String {
    let mut a = tar::Archive::new(fs::File::open(archive).unwrap());
    for e in a.entries().unwrap() {
        let mut e = e.unwrap();
        if e.path().unwrap().to_str() == Some("index.json") {
            let index: Value = serde_json::from_reader(&mut e).unwrap();
            return index["manifests"][0]["annotations"]["io.containerd.image.name"]
                .as_str()
                .expect("an image name in index.json")
                .to_string();
        }
    }
    panic!("{} has no index.json", archive.display())
}

/// A sidecar that listens on 15001 only after 1.5 s (as a proxy waiting for its
/// configuration) and exits at once on SIGTERM.
const PROXY: &str = "trap 'kill $! 2>/dev/null; exit 0' TERM; sleep 1.5; \
     nc -ll -p 15001 -e /bin/true & wait";
/// An app that dials the sidecar at once and every 100 ms until it answers, then
/// sends a request every 200 ms; on SIGTERM it goes on for 3 s (draining) and exits.
const APP: &str = "trap 'stop=1' TERM; \
     until nc -w 1 127.0.0.1 15001 </dev/null 2>/dev/null; do sleep 0.1; done; \
     echo connected; n=0; \
     while :; do nc -w 1 127.0.0.1 15001 </dev/null 2>/dev/null; sleep 0.2; \
       if [ -n \"$stop\" ]; then n=$((n+1)); [ \"$n\" -ge 15 ] && exit 0; fi; done";

/// One pod the test made: its spec, sandbox and containers (name → id).
struct Made {
    spec: PodSpec,
    sandbox: String,
    containers: Vec<(String, String)>,
    native: bool,
    deleting: bool,
}

impl Made {
    fn id(&self, name: &str) -> String {
        self.containers
            .iter()
            .find(|c| c.0 == name)
            .unwrap_or_else(|| panic!("no container {name}"))
            .1
            .clone()
    }
}

/// A Deployment's pod `<deployment>-<hash>-<suffix>` with the sidecar annotation, in
/// the QoS class `qos` (its cgroup parent's layout).
fn deployment_pod(deployment: &str, qos: &'static str) -> PodSpec {
    let mut p = PodSpec::new("", "shop", qos);
    let hash = "6d4cf56db6";
    p.name = format!("{deployment}-{hash}-{}", &p.uid[..5]);
    p.labels.insert("app".into(), deployment.into());
    p.labels.insert("pod-template-hash".into(), hash.into());
    p.annotations
        .insert("sidecar-race.io/sidecars".into(), "proxy".into());
    p
}

/// The Pod as the kubelet reports it (`/pods`, or the API server), from the CRI's
/// statuses of its sandbox and containers.
fn pod_json(rt: &Runtime, made: &Made) -> Value {
    let sandbox = rt.pod_sandbox_status(&made.sandbox);
    let meta = sandbox.metadata.clone().unwrap();
    let ip = sandbox
        .network
        .as_ref()
        .map(|n| n.ip.clone())
        .unwrap_or_default();
    let statuses: HashMap<String, Value> = made
        .containers
        .iter()
        .map(|(name, id)| {
            (
                name.clone(),
                kubelet_container_status(&rt.container_status(id, false).0),
            )
        })
        .collect();
    let spec_of = |name: &str| -> Value {
        match name {
            "proxy" if made.native => json!({
                "name": "proxy", "image": sidecar_race_tests::cri::BUSYBOX_IMAGE,
                "restartPolicy": "Always",
                "ports": [{"containerPort": 15001, "protocol": "TCP"}],
                "startupProbe": {"tcpSocket": {"port": 15001}, "periodSeconds": 1},
            }),
            "proxy" => json!({
                "name": "proxy", "image": sidecar_race_tests::cri::BUSYBOX_IMAGE,
                "ports": [{"containerPort": 15001, "protocol": "TCP"}],
            }),
            "agent" => json!({
                "name": "agent", "image": "sidecar-race-agent",
                "ports": [{"name": "http-metrics", "containerPort": 9965, "protocol": "TCP"}],
            }),
            other => json!({"name": other, "image": sidecar_race_tests::cri::BUSYBOX_IMAGE}),
        }
    };
    let is_init = |name: &str| made.native && name == "proxy";
    let names: Vec<&str> = made.containers.iter().map(|c| c.0.as_str()).collect();
    let mut metadata = json!({
        "name": meta.name,
        "namespace": meta.namespace,
        "uid": meta.uid,
        "labels": made.spec.labels,
        "annotations": made.spec.annotations,
        "creationTimestamp": rfc3339_ns(sandbox.created_at),
    });
    if let Some(hash) = made.spec.labels.get("pod-template-hash") {
        let app = &made.spec.labels["app"];
        metadata["ownerReferences"] = json!([{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-{hash}"),
            "uid": "6a0f3c52-1f7e-4c9b-9a57-3f1d2b8e4c10", "controller": true, "blockOwnerDeletion": true,
        }]);
    }
    if made.deleting {
        metadata["deletionTimestamp"] = json!(rfc3339_ns(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as i64
        ));
        metadata["deletionGracePeriodSeconds"] = json!(10);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 10,
            "initContainers": names.iter().filter(|n| is_init(n)).map(|n| spec_of(n)).collect::<Vec<_>>(),
            "containers": names.iter().filter(|n| !is_init(n)).map(|n| spec_of(n)).collect::<Vec<_>>(),
        },
        "status": {
            "phase": "Running",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": rfc3339_ns(sandbox.created_at),
            "qosClass": match made.spec.qos {
                "besteffort" => "BestEffort",
                "burstable" => "Burstable",
                _ => "Guaranteed",
            },
            "initContainerStatuses": names.iter().filter(|n| is_init(n)).map(|n| statuses[*n].clone()).collect::<Vec<_>>(),
            "containerStatuses": names.iter().filter(|n| !is_init(n)).map(|n| statuses[*n].clone()).collect::<Vec<_>>(),
        },
    })
}

fn write_pods(rt: &Runtime, pods_file: &Path, made: &[&Made]) {
    let pods: Vec<Value> = made.iter().map(|m| pod_json(rt, m)).collect();
    write_pod_list(pods_file, &pods);
}

fn pod_ip(rt: &Runtime, sandbox: &str) -> String {
    rt.pod_sandbox_status(sandbox)
        .network
        .map(|n| n.ip)
        .filter(|ip| !ip.is_empty())
        .expect("the sandbox has a pod IP from CNI")
}

/// A `run` agent pod with the DaemonSet's container settings.
fn agent_container(reference: &str, pods_dir: &Path) -> (ContainerSpec, Vec<String>) {
    let ds: Value = serde_saphyr::from_str(
        &fs::read_to_string(repo().join("deploy/base/daemonset.yaml")).unwrap(),
    )
    .unwrap();
    let pod_spec = &ds["spec"]["template"]["spec"];
    let c = &pod_spec["containers"][0];
    let sc = &c["securityContext"];
    // The DaemonSet's arguments, with the pod source a file instead of the API server.
    let mut args: Vec<String> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let i = args.iter().position(|a| a == "--pods-from").unwrap();
    args[i + 1] = "file:/etc/sidecar-race/pods.json".into();
    // No API server here to review callers: the incidents API is read without a token
    // (the cluster tier runs the shipped `--auth kubernetes`).
    let i = args.iter().position(|a| a == "--auth").unwrap();
    args[i + 1] = "none".into();
    args.extend(
        ["--pods-poll-seconds", "0.2", "--events=false"]
            .iter()
            .map(|s| s.to_string()),
    );
    // hostPath volumes, mounted where the DaemonSet mounts them, read-only.
    let volumes: HashMap<String, String> = pod_spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap().to_string(),
                v["hostPath"]["path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    // The read-write ones are the agent's node state (#33), kept off this host: the
    // state dir is a directory of the test's own, and the node's bpffs is not mounted,
    // so the agent runs unpinned (its container's /sys/fs/bpf is no bpffs) and leaves
    // nothing attached here; HostToContainer would also need the host's mount shared.
    let (mut ro_mounts, mut rw_mounts) = (Vec::new(), Vec::new());
    for m in c["volumeMounts"].as_array().unwrap() {
        let (at, host) = (
            m["mountPath"].as_str().unwrap().to_string(),
            volumes[m["name"].as_str().unwrap()].clone(),
        );
        match (m["readOnly"] == true, host.as_str()) {
            (true, _) => ro_mounts.push((at, host)),
            (false, "/sys/fs/bpf") => {}
            (false, "/var/lib/sidecar-race") => {
                let state = pods_dir.with_file_name("agent-state");
                fs::create_dir_all(&state).unwrap();
                rw_mounts.push((at, state.display().to_string()));
            }
            (false, other) => panic!("a read-write host path this test does not know: {other}"),
        }
    }
    ro_mounts.push(("/etc/sidecar-race".into(), pods_dir.display().to_string()));
    let caps = |k: &str| -> Vec<String> {
        sc["capabilities"][k]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_string())
            .collect()
    };
    let add = caps("add");
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    let security = cri::LinuxContainerSecurityContext {
        // What the kubelet passes for this securityContext.
        capabilities: Some(cri::Capability {
            add_capabilities: add.clone(),
            drop_capabilities: caps("drop"),
            add_ambient_capabilities: vec![],
        }),
        privileged: sc["privileged"].as_bool().unwrap(),
        namespace_options: Some(cri::NamespaceOption {
            network: cri::NamespaceMode::Pod as i32,
            pid: cri::NamespaceMode::Container as i32,
            ipc: cri::NamespaceMode::Pod as i32,
            ..Default::default()
        }),
        run_as_user: Some(cri::Int64Value {
            value: sc["runAsUser"].as_i64().unwrap(),
        }),
        readonly_rootfs: sc["readOnlyRootFilesystem"].as_bool().unwrap(),
        no_new_privs: !sc["allowPrivilegeEscalation"].as_bool().unwrap(),
        seccomp: Some(cri::SecurityProfile {
            profile_type: cri::security_profile::ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        }),
        ..Default::default()
    };
    let envs = vec![
        ("NODE_NAME".to_string(), NODE.to_string()),
        ("SIDECAR_RACE_LOG_FORMAT".to_string(), "json".to_string()),
    ];
    (
        ContainerSpec {
            name: c["name"].as_str().unwrap().into(),
            image: reference.into(),
            command: vec![],
            args,
            envs,
            ro_mounts,
            rw_mounts,
            security: Some(security),
        },
        add,
    )
}

fn wait_until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn cap_bit(name: &str) -> u32 {
    match name {
        "BPF" => 39,
        "PERFMON" => 38,
        other => panic!("capability {other} is not expected in the DaemonSet"),
    }
}

#[test]
fn pods_made_by_containerd_through_the_cri_are_observed_by_the_agent_from_its_image() {
    let name = "pods_made_by_containerd_through_the_cri_are_observed_by_the_agent_from_its_image";
    if !is_root_or_skip(name) {
        return;
    }
    let t0 = Instant::now();
    for tool in ["containerd", "ctr", "runc", "ip"] {
        assert!(have(tool), "`{tool}` is missing: run `cargo xtask setup`");
    }
    for plugin in ["bridge", "host-local", "loopback"] {
        assert!(
            Path::new(CNI_BIN_DIR).join(plugin).exists(),
            "CNI plugin {plugin} missing in {CNI_BIN_DIR}: run `cargo xtask setup` \
             (Debian's containernetworking-plugins)"
        );
    }
    assert!(
        is_static_elf(Path::new(BUSYBOX)),
        "{BUSYBOX} is not busybox-static: run `cargo xtask setup`"
    );
    let archive = image_archive();
    assert!(
        archive.exists(),
        "{} is missing: run `cargo xtask image` (`cargo xtask test` does)",
        archive.display()
    );
    let reference = archive_reference(&archive);
    let tracefs = Path::new("/sys/kernel/tracing");
    if !tracefs.join("events").is_dir() {
        sh(std::process::Command::new("mount")
            .args(["-t", "tracefs", "nodev"])
            .arg(tracefs));
    }

    let mut rt = Runtime::start();
    let version = sh(std::process::Command::new("containerd").arg("--version"));
    eprintln!("runtime: {}", version.trim());

    // Images: the test's own (busybox-static) and the agent's archive.
    for (path, reference) in build_test_images(&rt.dir) {
        rt.import(&path, reference);
    }
    rt.import(&archive, &reference);
    let (image_id, image_size) = rt.image_status(&reference).unwrap();
    eprintln!("agent image {reference}: {image_id}, {image_size} bytes");
    eprintln!("[{:.1?}] runtime up, images imported", t0.elapsed());

    // The agent pod.
    let pods_dir = rt.dir.join("pods");
    let pods_file = pods_dir.join("pods.json");
    write_pod_list(&pods_file, &[]);
    let mut agent_pod = PodSpec::new("", "sidecar-race", "burstable");
    agent_pod.name = format!("sidecar-race-agent-{}", &agent_pod.uid[..5]);
    agent_pod
        .labels
        .insert("app.kubernetes.io/name".into(), "sidecar-race-agent".into());
    let agent_sandbox = rt.run_pod_sandbox(&agent_pod);
    let (agent_spec, caps) = agent_container(&reference, &pods_dir);
    let agent_id = rt.create_container(&agent_sandbox, &agent_pod, &agent_spec);
    rt.start_container(&agent_id);
    let agent_made = Made {
        spec: agent_pod,
        sandbox: agent_sandbox.clone(),
        containers: vec![("agent".into(), agent_id.clone())],
        native: false,
        deleting: false,
    };
    let agent_addr = format!("{}:9965", pod_ip(&rt, &agent_sandbox));
    let agent_log = |rt: &Runtime| rt.container_log(&agent_made.spec, "agent");
    wait_until("the agent's /readyz", Duration::from_secs(60), || {
        let (status, _) = rt.container_status(&agent_id, false);
        assert_eq!(
            status.state,
            cri::ContainerState::ContainerRunning as i32,
            "the agent container is not running ({}):\n{}",
            status.reason,
            agent_log(&rt)
        );
        (get(&agent_addr, "/readyz").map(|r| r.0) == Some(200)).then_some(())
    });
    eprintln!("[{:.1?}] agent ready on {agent_addr}", t0.elapsed());

    // It runs as the DaemonSet says: only the manifest's capabilities, a seccomp
    // filter, no_new_privs, uid 0, a read-only root.
    let (_, info) = rt.container_status(&agent_id, true);
    let pid = info["pid"]
        .as_u64()
        .expect("the agent's pid in the verbose status");
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |n: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(n))
            .unwrap()
            .trim()
            .to_string()
    };
    let want: u64 = caps.iter().map(|c| 1u64 << cap_bit(c)).sum();
    assert_eq!(u64::from_str_radix(&field("CapEff:"), 16).unwrap(), want);
    assert_eq!(u64::from_str_radix(&field("CapBnd:"), 16).unwrap(), want);
    assert_eq!(field("Seccomp:"), "2");
    assert_eq!(field("NoNewPrivs:"), "1");
    assert!(field("Uid:").split_whitespace().all(|u| u == "0"));
    assert_eq!(info["runtimeSpec"]["root"]["readonly"], true, "{info:#}");
    let exe = fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert_eq!(
        exe,
        Path::new("/sidecar-race-agent"),
        "runs the image's binary"
    );

    // Classic: proxy and app in `containers`, created and started at once.
    let mut classic = Made {
        // /kubepods/besteffort/pod<uid>/<id>
        spec: deployment_pod("checkout", "besteffort"),
        sandbox: String::new(),
        containers: vec![],
        native: false,
        deleting: false,
    };
    classic.sandbox = rt.run_pod_sandbox(&classic.spec);
    for (name, script) in [("app", APP), ("proxy", PROXY)] {
        let id = rt.create_container(
            &classic.sandbox,
            &classic.spec,
            &ContainerSpec::shell(name, script),
        );
        classic.containers.push((name.into(), id));
    }
    write_pods(&rt, &pods_file, &[&agent_made, &classic]);
    for (_, id) in &classic.containers {
        rt.start_container(id);
    }
    write_pods(&rt, &pods_file, &[&agent_made, &classic]);
    let app_id = classic.id("app");
    let proxy_id = classic.id("proxy");
    wait_until(
        "the classic app to connect",
        Duration::from_secs(20),
        || {
            rt.container_log(&classic.spec, "app")
                .contains("connected")
                .then_some(())
        },
    );
    eprintln!("[{:.1?}] classic pod: app connected", t0.elapsed());

    // Native order: the proxy (an init container with restartPolicy Always and a
    // startupProbe) started, its port probed from the node as the kubelet does, and
    // only then the app.
    let mut native = Made {
        // /kubepods/pod<uid>/<id>: the Guaranteed layout (its pod start is counted
        // under its workload below, so the agent attributed it).
        spec: deployment_pod("catalog", "guaranteed"),
        sandbox: String::new(),
        containers: vec![],
        native: true,
        deleting: false,
    };
    native.sandbox = rt.run_pod_sandbox(&native.spec);
    for (name, script) in [("proxy", PROXY), ("app", APP)] {
        let id = rt.create_container(
            &native.sandbox,
            &native.spec,
            &ContainerSpec::shell(name, script),
        );
        native.containers.push((name.into(), id));
    }
    write_pods(&rt, &pods_file, &[&agent_made, &classic, &native]);
    rt.start_container(&native.id("proxy"));
    let probe: SocketAddr = format!("{}:15001", pod_ip(&rt, &native.sandbox))
        .parse()
        .unwrap();
    wait_until(
        "the native proxy's startupProbe",
        Duration::from_secs(20),
        || {
            TcpStream::connect_timeout(&probe, Duration::from_secs(1))
                .ok()
                .map(|_| ())
        },
    );
    rt.start_container(&native.id("app"));
    write_pods(&rt, &pods_file, &[&agent_made, &classic, &native]);
    wait_until("the native app to connect", Duration::from_secs(20), || {
        rt.container_log(&native.spec, "app")
            .contains("connected")
            .then_some(())
    });
    eprintln!("[{:.1?}] native pod: app connected", t0.elapsed());

    // The classic pod's startup race, with the runtime's container IDs and names.
    let startup = wait_until(
        "the classic pod's startup incident",
        Duration::from_secs(15),
        || {
            incidents_at(&agent_addr, "phase=startup&state=resolved")
                .into_iter()
                .find(|i| i["pod_uid"] == classic.spec.uid.as_str())
        },
    );
    eprintln!("startup incident: {startup:#}");
    assert_eq!(startup["container"], "app", "{startup:#}");
    assert_eq!(startup["container_id"], app_id.as_str(), "{startup:#}");
    assert_eq!(startup["sidecar"], "proxy", "{startup:#}");
    assert_eq!(
        startup["sidecar_container_id"],
        proxy_id.as_str(),
        "{startup:#}"
    );
    assert_eq!(startup["pattern"], "classic", "{startup:#}");
    assert_eq!(startup["namespace"], "shop", "{startup:#}");
    assert_eq!(startup["pod"], classic.spec.name.as_str(), "{startup:#}");
    assert_eq!(
        startup["workload"],
        json!({"kind": "Deployment", "name": "checkout"})
    );
    assert_eq!(startup["port"], 15001, "{startup:#}");
    let refused = startup["refused_count"].as_u64().unwrap();
    assert!(refused >= 3, "{startup:#}");
    let window = startup["race_window_seconds"].as_f64().unwrap();
    assert!(
        (0.3..=5.0).contains(&window),
        "race window {window} s for a proxy listening 1.5 s late"
    );

    // The native-order pod: no incident at all (given time for late ones).
    std::thread::sleep(Duration::from_secs(2));
    let none = incidents_at(&agent_addr, "")
        .into_iter()
        .filter(|i| i["pod_uid"] == native.spec.uid.as_str())
        .collect::<Vec<_>>();
    assert!(none.is_empty(), "native-order pod got incidents: {none:#?}");

    // Drain: the pod is deleted (deletionTimestamp), the kubelet stops its containers
    // in parallel; the proxy exits at once, the app keeps sending for 3 s.
    classic.deleting = true;
    write_pods(&rt, &pods_file, &[&agent_made, &classic, &native]);
    std::thread::sleep(Duration::from_millis(500));
    let ids: Vec<String> = classic.containers.iter().map(|c| c.1.clone()).collect();
    rt.stop_containers(&ids, Duration::from_secs(10));
    let drain = wait_until(
        "the classic pod's drain incident",
        Duration::from_secs(15),
        || {
            incidents_at(&agent_addr, "phase=drain")
                .into_iter()
                .find(|i| i["pod_uid"] == classic.spec.uid.as_str())
        },
    );
    eprintln!("drain incident: {drain:#}");
    assert_eq!(drain["container"], "app", "{drain:#}");
    assert_eq!(drain["container_id"], app_id.as_str(), "{drain:#}");
    assert_eq!(drain["sidecar"], "proxy", "{drain:#}");
    assert_eq!(
        drain["sidecar_container_id"],
        proxy_id.as_str(),
        "{drain:#}"
    );
    assert_eq!(drain["namespace"], "shop");
    assert_eq!(drain["workload"]["name"], "checkout");
    assert!(drain["refused_count"].as_u64().unwrap() >= 3, "{drain:#}");
    eprintln!("[{:.1?}] drain reported", t0.elapsed());
    rt.remove_pod(&classic.sandbox.clone());

    // /metrics: the workload's labels, not the agent pod's.
    let (status, metrics) = get(&agent_addr, "/metrics").unwrap();
    assert_eq!(status, 200);
    let series = |name: &str, labels: &[&str]| {
        metrics
            .lines()
            .any(|l| l.starts_with(&format!("{name}{{")) && labels.iter().all(|x| l.contains(x)))
    };
    let workload = [
        "namespace=\"shop\"",
        "workload_kind=\"Deployment\"",
        "workload=\"checkout\"",
    ];
    assert!(
        series(
            "sidecar_race_refused_connections_total",
            &[
                workload.as_slice(),
                &[
                    "container=\"app\"",
                    "sidecar=\"proxy\"",
                    "port=\"15001\"",
                    "phase=\"startup\""
                ]
            ]
            .concat()
        ),
        "{metrics}"
    );
    assert!(
        series(
            "sidecar_race_incidents_total",
            &[
                workload.as_slice(),
                &["phase=\"startup\"", "pattern=\"classic\""]
            ]
            .concat()
        ),
        "{metrics}"
    );
    assert!(
        series(
            "sidecar_race_pod_starts_total",
            &["namespace=\"shop\"", "workload=\"catalog\""]
        ),
        "{metrics}"
    );
    assert!(
        !series(
            "sidecar_race_affected_pod_starts_total",
            &["workload=\"catalog\""]
        ),
        "{metrics}"
    );
    eprintln!("[{:.1?}] done", t0.elapsed());
    // The agent stops as the kubelet stops it.
    rt.stop_containers(std::slice::from_ref(&agent_id), Duration::from_secs(10));
    let (st, _) = rt.container_status(&agent_id, false);
    assert_eq!(
        st.exit_code,
        0,
        "the agent's exit code on SIGTERM:\n{}",
        agent_log(&rt)
    );
}
