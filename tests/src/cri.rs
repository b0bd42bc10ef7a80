//! The test kit as the kubelet, against a real container runtime: a private containerd
//! (Debian's, with its CRI plugin) driven over the CRI v1 gRPC API, with CNI
//! networking from Debian's `containernetworking-plugins` (bridge, host-local,
//! loopback), and images built from `busybox-static` (no registry). containerd's
//! configuration, the CNI network and the images are the local cluster's too
//! (`sidecar_race_testbed`), with this tier's paths and an isolated network.
//!
//! Everything it makes is private to one test process: containerd's root, state and
//! socket, the CNI configuration and IPAM state under `/tmp/sr-cri-<pid>`, a bridge
//! `srcri<n>` with a 10.x subnet of its own; pod cgroups in the kubelet's cgroupfs
//! layout (`/kubepods/<qos>/pod<uid>/<container id>`). [`Runtime`]'s drop removes the
//! pods (CNI teardown), stops containerd, unmounts what is left, deletes the bridge,
//! the pod cgroups and the directory, even when the test fails.

use std::{
    collections::HashMap,
    fs::{self, File},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::atomic::{AtomicU32, Ordering},
    time::{Duration, Instant},
};

use hyper_util::rt::TokioIo;
use k8s_cri::v1::{
    self as cri, image_service_client::ImageServiceClient,
    runtime_service_client::RuntimeServiceClient,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sidecar_race_mountinfo::{self as mountinfo, Mount};
use sidecar_race_testbed::{cni::BridgeNetwork, containerd, images};
use tonic::transport::{Channel, Endpoint, Uri};

// Locally built images (never pulled: the CRI plugin finds them imported).
pub use sidecar_race_testbed::{
    containerd::CNI_BIN_DIR,
    images::{BUSYBOX, BUSYBOX_IMAGE, PAUSE_IMAGE},
};

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A private containerd with its CRI plugin and a CRI client.
pub struct Runtime {
    pub dir: PathBuf,
    pub bridge: String,
    /// The pods' subnet, e.g. `10.237.42.0/24`.
    pub subnet: String,
    containerd: Option<Child>,
    rt: tokio::runtime::Runtime,
    runtime: Option<RuntimeServiceClient<Channel>>,
    images: Option<ImageServiceClient<Channel>>,
    /// Sandboxes to remove on drop, with their cgroup parents.
    sandboxes: Vec<(String, String)>,
    ip_forward: Option<String>,
}

/// Mount points at or below `dir`, deepest first.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    mountinfo::mount_points_under(&mountinfo::read_self().unwrap_or_default(), dir)
}

/// Mount points of every cgroup hierarchy (v1 controllers and v2).
fn cgroup_mounts() -> Vec<PathBuf> {
    mountinfo::read_self()
        .unwrap_or_default()
        .into_iter()
        .filter(Mount::is_cgroup)
        .map(|m| m.mount_point)
        .collect()
}

pub fn sh(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn wait_for(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Runtime {
    /// Starts containerd with the CRI plugin (cgroupfs driver, runc) and CNI.
    pub fn start() -> Self {
        let pid = std::process::id();
        let dir = PathBuf::from(format!("/tmp/sr-cri-{pid}"));
        assert!(
            mounts_under(&dir).is_empty(),
            "{} still has mounts (a killed run?)",
            dir.display()
        );
        let _ = fs::remove_dir_all(&dir);
        for sub in ["cni", "ipam", "logs", "pods"] {
            fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let bridge = format!("srcri{}", pid % 100_000);
        // 10.237.<n>.0/24: no other test of the project uses 10.237/16.
        let subnet = format!("10.237.{}.0/24", pid % 250 + 1);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut r = Self {
            dir,
            bridge,
            subnet,
            containerd: None,
            rt,
            runtime: None,
            images: None,
            sandboxes: Vec::new(),
            ip_forward: fs::read_to_string("/proc/sys/net/ipv4/ip_forward").ok(),
        };
        let network = BridgeNetwork {
            name: &format!("sr-cri-{pid}"),
            bridge: &r.bridge,
            subnet: &r.subnet,
            ipam_dir: &r.dir.join("ipam"),
            // No default route: pods reach nothing but each other and the host.
            default_gateway: None,
            loopback: false,
        };
        fs::write(r.dir.join("cni/10-sr-cri.conflist"), network.conflist()).unwrap();
        let config = containerd::Config {
            dir: &r.dir,
            // SR_CRI_DEBUG=1: containerd's and runc's debug logs in containerd.log.
            log_level: if std::env::var_os("SR_CRI_DEBUG").is_some() {
                "debug"
            } else {
                "info"
            },
            cri: Some(containerd::Cri {
                cni_conf_dir: &r.dir.join("cni"),
            }),
        }
        .render();
        r.containerd = Some(spawn_containerd(&r.dir, &config));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = r.containerd.as_mut().unwrap().try_wait() {
                panic!("containerd exited ({status}):\n{}", r.log("containerd.log"));
            }
            if let Ok(v) = r.try_connect() {
                eprintln!(
                    "CRI: {} {} (CRI {})",
                    v.runtime_name, v.runtime_version, v.runtime_api_version
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "containerd's CRI did not answer within 30 s:\n{}",
                r.log("containerd.log")
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        r
    }

    fn try_connect(&mut self) -> anyhow::Result<cri::VersionResponse> {
        let sock = containerd::socket(&self.dir);
        let channel = self.rt.block_on(async {
            Endpoint::try_from("http://[::]:50051")?
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let sock = sock.clone();
                    async move {
                        Ok::<_, std::io::Error>(TokioIo::new(
                            tokio::net::UnixStream::connect(sock).await?,
                        ))
                    }
                }))
                .await
        })?;
        let mut client = RuntimeServiceClient::new(channel.clone());
        let v = self
            .rt
            .block_on(client.version(cri::VersionRequest {
                version: "v1".into(),
            }))?
            .into_inner();
        self.runtime = Some(client);
        self.images = Some(ImageServiceClient::new(channel));
        Ok(v)
    }

    /// The last 60 lines of a log in the runtime's directory.
    pub fn log(&self, name: &str) -> String {
        let text = fs::read_to_string(self.dir.join(name)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    /// `ctr` in containerd's `k8s.io` namespace, the CRI plugin's.
    pub fn ctr(&self) -> Command {
        let mut c = Command::new("ctr");
        c.arg("--address")
            .arg(containerd::socket(&self.dir))
            .args(["--namespace", "k8s.io"]);
        c
    }

    /// `ctr images import` of an OCI/docker archive; the CRI then lists the image.
    pub fn import(&self, archive: &Path, reference: &str) {
        sh(self.ctr().args(["images", "import"]).arg(archive));
        let listed = self.image_status(reference);
        assert!(
            listed.is_some(),
            "the CRI does not list {reference} after `ctr images import {}`",
            archive.display()
        );
    }

    /// The CRI's view of an image: (id, size).
    pub fn image_status(&self, reference: &str) -> Option<(String, u64)> {
        let mut c = self.images.clone().unwrap();
        let r = self
            .rt
            .block_on(c.image_status(cri::ImageStatusRequest {
                image: Some(cri::ImageSpec {
                    image: reference.into(),
                    ..Default::default()
                }),
                verbose: false,
            }))
            .expect("ImageStatus")
            .into_inner();
        r.image.map(|i| (i.id, i.size))
    }

    fn client(&self) -> RuntimeServiceClient<Channel> {
        self.runtime.clone().unwrap()
    }

    /// `RunPodSandbox` for `pod` (kubelet metadata, labels, cgroup parent).
    pub fn run_pod_sandbox(&mut self, pod: &PodSpec) -> String {
        let config = pod.sandbox_config(&self.dir);
        fs::create_dir_all(&config.log_directory).unwrap();
        let parent = pod.cgroup_parent();
        // Removed on drop even when RunPodSandbox fails half-way.
        self.sandboxes.push((String::new(), parent.clone()));
        let id = self
            .rt
            .block_on(self.client().run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(config),
                runtime_handler: String::new(),
            }))
            .unwrap_or_else(|e| {
                panic!(
                    "RunPodSandbox {}: {e}\n{}",
                    pod.name,
                    self.log("containerd.log")
                )
            })
            .into_inner()
            .pod_sandbox_id;
        self.sandboxes
            .retain(|s| !(s.0.is_empty() && s.1 == parent));
        self.sandboxes.push((id.clone(), parent));
        id
    }

    pub fn pod_sandbox_status(&self, id: &str) -> cri::PodSandboxStatus {
        self.rt
            .block_on(
                self.client()
                    .pod_sandbox_status(cri::PodSandboxStatusRequest {
                        pod_sandbox_id: id.into(),
                        verbose: false,
                    }),
            )
            .expect("PodSandboxStatus")
            .into_inner()
            .status
            .expect("a sandbox status")
    }

    /// `CreateContainer` in `sandbox`; its id.
    pub fn create_container(&self, sandbox: &str, pod: &PodSpec, c: &ContainerSpec) -> String {
        let config = c.config(pod);
        self.rt
            .block_on(self.client().create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sandbox.into(),
                config: Some(config),
                sandbox_config: Some(pod.sandbox_config(&self.dir)),
            }))
            .unwrap_or_else(|e| {
                panic!(
                    "CreateContainer {}/{}: {e}\n{}",
                    pod.name,
                    c.name,
                    self.log("containerd.log")
                )
            })
            .into_inner()
            .container_id
    }

    pub fn start_container(&self, id: &str) {
        self.rt
            .block_on(self.client().start_container(cri::StartContainerRequest {
                container_id: id.into(),
            }))
            .unwrap_or_else(|e| panic!("StartContainer {id}: {e}\n{}", self.log("containerd.log")));
    }

    /// `ContainerStatus`, and with `verbose` the runtime's info (pid, spec).
    pub fn container_status(&self, id: &str, verbose: bool) -> (cri::ContainerStatus, Value) {
        let r = self
            .rt
            .block_on(self.client().container_status(cri::ContainerStatusRequest {
                container_id: id.into(),
                verbose,
            }))
            .expect("ContainerStatus")
            .into_inner();
        let info = r
            .info
            .get("info")
            .and_then(|i| serde_json::from_str(i).ok())
            .unwrap_or(Value::Null);
        (r.status.expect("a container status"), info)
    }

    /// `StopContainer` on all of `ids` at once (as the kubelet kills a pod's
    /// containers in parallel), each with `grace` before SIGKILL.
    pub fn stop_containers(&self, ids: &[String], grace: Duration) {
        let client = self.client();
        self.rt.block_on(async {
            let stops: Vec<_> = ids
                .iter()
                .map(|id| {
                    let mut c = client.clone();
                    let id = id.clone();
                    tokio::spawn(async move {
                        c.stop_container(cri::StopContainerRequest {
                            container_id: id.clone(),
                            timeout: grace.as_secs() as i64,
                        })
                        .await
                        .map_err(|e| format!("StopContainer {id}: {e}"))
                    })
                })
                .collect();
            for s in stops {
                s.await.unwrap().unwrap();
            }
        });
    }

    /// Stops and removes a sandbox and its containers (CNI teardown included).
    pub fn remove_pod(&mut self, sandbox: &str) {
        let mut c = self.client();
        let _ = self
            .rt
            .block_on(c.stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: sandbox.into(),
            }));
        let _ = self
            .rt
            .block_on(c.remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: sandbox.into(),
            }));
        if let Some(i) = self.sandboxes.iter().position(|s| s.0 == sandbox) {
            let (_, parent) = self.sandboxes.remove(i);
            remove_cgroup(&parent);
        }
    }

    /// A container's log (`log_path` under the pod's log directory).
    pub fn container_log(&self, pod: &PodSpec, container: &str) -> String {
        fs::read_to_string(pod.log_dir(&self.dir).join(format!("{container}.log")))
            .unwrap_or_default()
    }
}

/// Removes `parent` (e.g. `/kubepods/besteffort/pod<uid>`) from every hierarchy, and
/// its QoS and `kubepods` parents when nothing else is in them.
fn remove_cgroup(parent: &str) {
    for mnt in cgroup_mounts() {
        let mut p = PathBuf::from(parent.trim_start_matches('/'));
        loop {
            let _ = fs::remove_dir(mnt.join(&p));
            if !p.pop() || p.as_os_str().is_empty() {
                break;
            }
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if self.runtime.is_some() {
            for (id, _) in self.sandboxes.clone() {
                if !id.is_empty() {
                    self.remove_pod(&id);
                }
            }
        }
        if let Some(mut containerd) = self.containerd.take() {
            // SAFETY: kill(2) of our own child.
            unsafe { libc::kill(containerd.id() as i32, libc::SIGTERM) };
            if wait_for(&mut containerd, Duration::from_secs(10)).is_none() {
                let _ = containerd.kill();
                let _ = containerd.wait();
            }
        }
        // Shims of containers a failed run left behind exit with their tasks; mounts
        // (rootfs overlays, sandbox shm) go here.
        for m in mounts_under(&self.dir) {
            let _ = Command::new("umount").arg("-l").arg(&m).status();
        }
        for (_, parent) in std::mem::take(&mut self.sandboxes) {
            remove_cgroup(&parent);
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .stderr(Stdio::null())
            .status();
        if let Some(v) = &self.ip_forward {
            let _ = fs::write("/proc/sys/net/ipv4/ip_forward", v);
        }
        if mounts_under(&self.dir).is_empty() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// A pod as the kubelet would ask the runtime for it.
pub struct PodSpec {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    /// `besteffort`, `burstable` or `guaranteed` (directly under `kubepods`).
    pub qos: &'static str,
    pub annotations: HashMap<String, String>,
    pub labels: HashMap<String, String>,
}

/// A random-enough UUID v4 (pid, counter and clock through SHA-256).
pub fn new_uid() -> String {
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let h = Sha256::digest(format!("{}/{seq}/{now}", std::process::id()));
    let x: String = h.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-4{}-8{}-{}",
        &x[0..8],
        &x[8..12],
        &x[13..16],
        &x[17..20],
        &x[20..32]
    )
}

impl PodSpec {
    pub fn new(name: &str, namespace: &str, qos: &'static str) -> Self {
        Self {
            name: name.into(),
            namespace: namespace.into(),
            uid: new_uid(),
            qos,
            annotations: HashMap::new(),
            labels: HashMap::new(),
        }
    }

    /// The kubelet's cgroupfs layout: `/kubepods/<qos>/pod<uid>` (Guaranteed pods
    /// directly under `/kubepods`).
    pub fn cgroup_parent(&self) -> String {
        if self.qos == "guaranteed" {
            format!("/kubepods/pod{}", self.uid)
        } else {
            format!("/kubepods/{}/pod{}", self.qos, self.uid)
        }
    }

    fn log_dir(&self, dir: &Path) -> PathBuf {
        dir.join("logs").join(&self.uid)
    }

    /// The kubelet's own labels on sandboxes and containers.
    fn kubelet_labels(&self) -> HashMap<String, String> {
        let mut l = self.labels.clone();
        l.insert("io.kubernetes.pod.name".into(), self.name.clone());
        l.insert("io.kubernetes.pod.namespace".into(), self.namespace.clone());
        l.insert("io.kubernetes.pod.uid".into(), self.uid.clone());
        l
    }

    fn namespace_options() -> cri::NamespaceOption {
        // The kubelet's defaults: network and IPC per pod, PID per container.
        cri::NamespaceOption {
            network: cri::NamespaceMode::Pod as i32,
            pid: cri::NamespaceMode::Container as i32,
            ipc: cri::NamespaceMode::Pod as i32,
            ..Default::default()
        }
    }

    pub fn sandbox_config(&self, dir: &Path) -> cri::PodSandboxConfig {
        let mut annotations = self.annotations.clone();
        annotations.insert("kubernetes.io/config.source".into(), "api".into());
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: self.name.clone(),
                uid: self.uid.clone(),
                namespace: self.namespace.clone(),
                attempt: 0,
            }),
            hostname: self.name.clone(),
            log_directory: self.log_dir(dir).display().to_string(),
            labels: self.kubelet_labels(),
            annotations,
            linux: Some(cri::LinuxPodSandboxConfig {
                cgroup_parent: self.cgroup_parent(),
                security_context: Some(cri::LinuxSandboxSecurityContext {
                    namespace_options: Some(Self::namespace_options()),
                    seccomp: Some(cri::SecurityProfile {
                        profile_type: cri::security_profile::ProfileType::RuntimeDefault as i32,
                        localhost_ref: String::new(),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

/// A container as the kubelet would create it.
#[derive(Clone, Default)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub envs: Vec<(String, String)>,
    /// (container path, host path), read-only.
    pub ro_mounts: Vec<(String, String)>,
    /// (container path, host path), read-write, private propagation.
    pub rw_mounts: Vec<(String, String)>,
    pub security: Option<cri::LinuxContainerSecurityContext>,
}

impl ContainerSpec {
    /// A busybox container running `script` with `sh -c`.
    pub fn shell(name: &str, script: &str) -> Self {
        Self {
            name: name.into(),
            image: BUSYBOX_IMAGE.into(),
            command: vec!["/bin/sh".into(), "-c".into(), script.into()],
            ..Default::default()
        }
    }

    fn config(&self, pod: &PodSpec) -> cri::ContainerConfig {
        let mut labels = pod.kubelet_labels();
        labels.insert("io.kubernetes.container.name".into(), self.name.clone());
        let security =
            self.security
                .clone()
                .unwrap_or_else(|| cri::LinuxContainerSecurityContext {
                    namespace_options: Some(PodSpec::namespace_options()),
                    seccomp: Some(cri::SecurityProfile {
                        profile_type: cri::security_profile::ProfileType::RuntimeDefault as i32,
                        localhost_ref: String::new(),
                    }),
                    ..Default::default()
                });
        cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: self.name.clone(),
                attempt: 0,
            }),
            image: Some(cri::ImageSpec {
                image: self.image.clone(),
                ..Default::default()
            }),
            command: self.command.clone(),
            args: self.args.clone(),
            envs: self
                .envs
                .iter()
                .map(|(k, v)| cri::KeyValue {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect(),
            mounts: self
                .ro_mounts
                .iter()
                .map(|(c, h)| cri::Mount {
                    container_path: c.clone(),
                    host_path: h.clone(),
                    readonly: true,
                    ..Default::default()
                })
                .chain(self.rw_mounts.iter().map(|(c, h)| cri::Mount {
                    container_path: c.clone(),
                    host_path: h.clone(),
                    readonly: false,
                    ..Default::default()
                }))
                .collect(),
            labels,
            log_path: format!("{}.log", self.name),
            linux: Some(cri::LinuxContainerConfig {
                resources: None,
                security_context: Some(security),
            }),
            ..Default::default()
        }
    }
}

/// Starts a private containerd with `config` (written to `dir/config.toml`), its output
/// in `dir/containerd.log`.
pub fn spawn_containerd(dir: &Path, config: &str) -> Child {
    fs::write(dir.join("config.toml"), config).unwrap();
    let log = File::create(dir.join("containerd.log")).unwrap();
    Command::new("containerd")
        .arg("--config")
        .arg(dir.join("config.toml"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start containerd")
}

/// RFC 3339 UTC with nanoseconds of a CRI timestamp (ns since the epoch), as the
/// agent prints its own times.
pub fn rfc3339_ns(ns: i64) -> String {
    sidecar_race_agent::clock::rfc3339_nanos(i128::from(ns))
}

/// A container's entry in `status.containerStatuses` as the kubelet reports it, from
/// the CRI's `ContainerStatus`.
pub fn kubelet_container_status(s: &cri::ContainerStatus) -> Value {
    let name = s
        .metadata
        .as_ref()
        .map(|m| m.name.clone())
        .unwrap_or_default();
    let state = match cri::ContainerState::try_from(s.state) {
        Ok(cri::ContainerState::ContainerRunning) => {
            json!({"running": {"startedAt": rfc3339_ns(s.started_at)}})
        }
        Ok(cri::ContainerState::ContainerExited) => json!({"terminated": {
            "exitCode": s.exit_code, "reason": s.reason,
            "startedAt": rfc3339_ns(s.started_at), "finishedAt": rfc3339_ns(s.finished_at),
            "containerID": format!("containerd://{}", s.id),
        }}),
        _ => json!({"waiting": {"reason": "ContainerCreating"}}),
    };
    json!({
        "name": name,
        "containerID": format!("containerd://{}", s.id),
        "image": s.image.as_ref().map(|i| i.image.clone()).unwrap_or_default(),
        "imageID": s.image_ref,
        "ready": s.state == cri::ContainerState::ContainerRunning as i32,
        "started": s.state == cri::ContainerState::ContainerRunning as i32,
        "restartCount": 0,
        "state": state,
    })
}

/// The test images (`sidecar_race_testbed::images`): `busybox` (sh, nc, sleep, ...),
/// `pause` (the sandbox image: sleeps until killed) and `glibc` (the host's getent,
/// logger, curl, perl), as (archive, reference).
pub fn build_test_images(dir: &Path) -> Vec<(PathBuf, &'static str)> {
    images::write(dir).unwrap_or_else(|e| panic!("{e}"))
}

/// Whether an ELF file has no program interpreter (statically linked).
pub fn is_static_elf(path: &Path) -> bool {
    let Ok(elf) = fs::read(path) else {
        return false;
    };
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" || elf[4] != 2 {
        return false;
    }
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[32..40].try_into().unwrap()) as usize;
    !(0..u16_at(56)).any(|i| {
        let o = phoff + i * u16_at(54);
        elf.get(o..o + 4)
            .is_some_and(|t| u32::from_le_bytes(t.try_into().unwrap()) == 3)
    })
}
