//! A simulated pod: its own network namespace, a pod cgroup and one cgroup per
//! container laid out as the kubelet's systemd driver with containerd lays them out,
//! and real processes started inside both.

use std::{
    fs,
    os::{fd::AsRawFd, unix::process::CommandExt},
    path::{Path, PathBuf},
    process::{Child, Command},
    sync::atomic::{AtomicU32, Ordering},
};

use anyhow::{Context, bail};
use sidecar_race_agent::{inventory::cgroups, kernel::cgroup2};
use sidecar_race_testbed::cgroup;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// QoS slice the simulated pods live in, as on a real node.
const QOS: &str = "kubepods.slice/kubepods-burstable.slice";

pub struct SimPod {
    pub name: String,
    pub uid: String,
    pub netns: String,
    /// Absolute path of the pod's cgroup directory.
    pub cgroup_dir: PathBuf,
    containers: Vec<PathBuf>,
    children: Vec<Child>,
    extra_links: Vec<String>,
}

/// One container's cgroup.
#[derive(Debug, Clone)]
pub struct SimContainer {
    pub name: String,
    pub id: String,
    pub cgroup_dir: PathBuf,
    pub cgroup_id: u64,
    /// Relative to the cgroup2 mount, as the agent reports it.
    pub cgroup_path: String,
}

impl SimPod {
    /// Creates the network namespace (loopback up) and the pod cgroup.
    pub fn new(name: &str) -> anyhow::Result<Self> {
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let uid = pseudo_uuid(pid, seq);
        let netns = format!("sr-{name}-{pid}-{seq}");
        run(Command::new("ip").args(["netns", "add", &netns]))?;
        run(Command::new("ip").args(["-n", &netns, "link", "set", "lo", "up"]))?;
        let root = cgroup2::find_cgroup2()?;
        let cgroup_dir = root.join(QOS).join(format!(
            "kubepods-burstable-pod{}.slice",
            uid.replace('-', "_")
        ));
        fs::create_dir_all(&cgroup_dir)
            .with_context(|| format!("creating {}", cgroup_dir.display()))?;
        Ok(Self {
            name: name.to_string(),
            uid,
            netns,
            cgroup_dir,
            containers: Vec::new(),
            children: Vec::new(),
            extra_links: Vec::new(),
        })
    }

    /// Creates a container cgroup (`cri-containerd-<64 hex>.scope`).
    pub fn container(&mut self, name: &str) -> anyhow::Result<SimContainer> {
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let id = hex64(&format!("{}/{name}/{seq}", self.uid));
        let dir = self.cgroup_dir.join(format!("cri-containerd-{id}.scope"));
        fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        self.containers.push(dir.clone());
        let root = cgroup2::find_cgroup2()?;
        Ok(SimContainer {
            name: name.to_string(),
            cgroup_id: cgroups::id_of(&dir)?,
            cgroup_path: format!("/{}", dir.strip_prefix(&root)?.display()),
            id,
            cgroup_dir: dir,
        })
    }

    /// Creates a cgroup `name` below a container's, as a container with a delegated
    /// cgroup tree does (systemd inside, Sysbox); removed before the container's.
    pub fn sub_cgroup(&mut self, c: &SimContainer, name: &str) -> anyhow::Result<SimContainer> {
        let dir = c.cgroup_dir.join(name);
        fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        self.containers.push(dir.clone());
        Ok(SimContainer {
            cgroup_id: cgroups::id_of(&dir)?,
            cgroup_path: format!("{}/{name}", c.cgroup_path),
            cgroup_dir: dir,
            ..c.clone()
        })
    }

    /// Starts `cmd` inside the pod's network namespace and the container's cgroup.
    pub fn spawn(&mut self, container: &SimContainer, mut cmd: Command) -> anyhow::Result<u32> {
        let netns = fs::File::open(format!("/run/netns/{}", self.netns))?;
        // The cgroup first (pre_exec hooks run in order), then the network namespace.
        cgroup::start_in(&mut cmd, &container.cgroup_dir)?;
        let fd = netns.as_raw_fd();
        // SAFETY: only an async-signal-safe syscall (setns) between fork and exec; the
        // netns file stays open in the parent until spawn returns.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .context("spawning a process in the simulated pod")?;
        let pid = child.id();
        self.children.push(child);
        Ok(pid)
    }

    /// Gives the namespace a veth (peer left in the host namespace, no traffic leaves
    /// the pod), `addr` (CIDR) on it and a default route: what a pod network has.
    pub fn add_pod_network(&mut self, addr_cidr: &str) -> anyhow::Result<()> {
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let host = format!("srh{}{}", std::process::id() % 100_000, seq);
        let peer = format!("srp{}{}", std::process::id() % 100_000, seq);
        run(Command::new("ip").args(["link", "add", &host, "type", "veth", "peer", "name", &peer]))?;
        self.extra_links.push(host.clone());
        run(Command::new("ip").args(["link", "set", &peer, "netns", &self.netns]))?;
        run(Command::new("ip").args(["link", "set", &host, "up"]))?;
        self.ip(&["addr", "add", addr_cidr, "dev", &peer])?;
        self.ip(&["link", "set", &peer, "up"])?;
        self.ip(&["route", "add", "default", "dev", &peer])?;
        Ok(())
    }

    /// Runs `ip <args>` inside the pod's namespace.
    pub fn ip(&self, args: &[&str]) -> anyhow::Result<()> {
        run(Command::new("ip").args(["-n", &self.netns]).args(args))
    }

    /// Runs a command inside the pod's namespace (e.g. iptables), waiting for it.
    pub fn exec(&self, program: &str, args: &[&str]) -> anyhow::Result<()> {
        run(Command::new("ip")
            .args(["netns", "exec", &self.netns, program])
            .args(args))
    }

    /// Tears a container's cgroup down, as the runtime does when the container exits
    /// (its processes must have exited).
    pub fn remove_container(&mut self, c: &SimContainer) -> anyhow::Result<()> {
        fs::remove_dir(&c.cgroup_dir)
            .with_context(|| format!("removing {}", c.cgroup_dir.display()))?;
        self.containers.retain(|d| d != &c.cgroup_dir);
        Ok(())
    }

    /// Waits for the process `pid` started with [`SimPod::spawn`] to exit.
    pub fn wait(&mut self, pid: u32) -> anyhow::Result<std::process::ExitStatus> {
        let child = self
            .children
            .iter_mut()
            .find(|c| c.id() == pid)
            .context("no such process in this pod")?;
        Ok(child.wait()?)
    }

    /// Sends SIGTERM to a process of the pod.
    pub fn terminate(&self, pid: u32) {
        // SAFETY: plain kill(2) of our own child.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    }
}

impl Drop for SimPod {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for dir in self.containers.iter().rev() {
            let _ = fs::remove_dir(dir);
        }
        let _ = fs::remove_dir(&self.cgroup_dir);
        for link in &self.extra_links {
            let _ = Command::new("ip").args(["link", "del", link]).output();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .output();
    }
}

fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// A stable-looking but unique 64-hex container id.
fn hex64(seed: &str) -> String {
    let mut out = String::with_capacity(64);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ now_nanos();
    for round in 0..4u64 {
        for b in seed.bytes().chain(round.to_le_bytes()) {
            h ^= b as u64;
            h = h.wrapping_mul(0x100_0000_01b3);
        }
        out.push_str(&format!("{h:016x}"));
    }
    out
}

fn pseudo_uuid(pid: u32, seq: u32) -> String {
    let h = hex64(&format!("pod/{pid}/{seq}"));
    format!(
        "{}-{}-4{}-8{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Path of a binary built next to the running test or tool (same profile).
pub fn sibling_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir.join(name)
}

/// `Path::exists`, failing with how to build it.
pub fn require_binary(path: &Path) -> PathBuf {
    assert!(
        path.exists(),
        "{} is not built; run `cargo xtask test` (or `cargo build --workspace` first)",
        path.display()
    );
    path.to_path_buf()
}

/// How a simulated container is declared in the pod spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Declared {
    /// In `containers`.
    App,
    /// In `initContainers` with `restartPolicy: Always`.
    NativeSidecar,
    /// A native sidecar with a startupProbe on `probe_port`.
    NativeSidecarProbed { probe_port: u16 },
    /// In `initContainers`, run to completion before `containers` start.
    Init,
}

/// One container of a simulated pod's manifest.
pub struct Decl<'a> {
    pub container: &'a SimContainer,
    pub declared: Declared,
    /// `ports[].containerPort`.
    pub ports: &'a [u16],
    /// Whether the status (with the container id) is in the manifest yet.
    pub with_status: bool,
}

impl SimPod {
    /// A bare pod with one app container `c` and its status, as the pods file lists it.
    pub fn app_manifest(&self, ns: &str, c: &SimContainer) -> serde_json::Value {
        self.manifest(
            ns,
            None,
            &[Decl {
                container: c,
                declared: Declared::App,
                ports: &[],
                with_status: true,
            }],
        )
    }

    /// The pod as `kubectl get pod -o json` would show it, for `--pods-from file:`.
    /// `deployment` makes it a Deployment's pod (through a ReplicaSet).
    pub fn manifest(
        &self,
        namespace: &str,
        deployment: Option<&str>,
        decls: &[Decl],
    ) -> serde_json::Value {
        use serde_json::json;
        let container = |d: &Decl| {
            let mut c = json!({
                "name": d.container.name,
                "image": format!("example.com/{}:1", d.container.name),
                "ports": d.ports.iter().map(|p| json!({"containerPort": p, "protocol": "TCP"})).collect::<Vec<_>>(),
            });
            match d.declared {
                Declared::App | Declared::Init => {}
                Declared::NativeSidecar => c["restartPolicy"] = json!("Always"),
                Declared::NativeSidecarProbed { probe_port } => {
                    c["restartPolicy"] = json!("Always");
                    c["startupProbe"] =
                        json!({"tcpSocket": {"port": probe_port}, "periodSeconds": 1});
                }
            }
            c
        };
        let status = |d: &Decl| {
            json!({
                "name": d.container.name,
                "containerID": format!("containerd://{}", d.container.id),
                "image": "x", "imageID": "x", "ready": true, "restartCount": 0,
                "state": {"running": {"startedAt": "2026-11-29T10:00:00Z"}},
            })
        };
        let init: Vec<&Decl> = decls
            .iter()
            .filter(|d| d.declared != Declared::App)
            .collect();
        let apps: Vec<&Decl> = decls
            .iter()
            .filter(|d| d.declared == Declared::App)
            .collect();
        let mut meta =
            json!({"name": self.name, "namespace": namespace, "uid": self.uid, "labels": {}});
        if let Some(dep) = deployment {
            let hash = "5f7b8c9d6";
            meta["name"] = json!(format!("{dep}-{hash}-{}", &self.uid[..5]));
            meta["labels"]["pod-template-hash"] = json!(hash);
            meta["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": format!("{dep}-{hash}"), "uid": "00000000-0000-4000-8000-000000000001", "controller": true}]);
        }
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {
                "nodeName": "sim-node",
                "initContainers": init.iter().map(|d| container(d)).collect::<Vec<_>>(),
                "containers": apps.iter().map(|d| container(d)).collect::<Vec<_>>(),
            },
            "status": {
                "phase": "Running",
                "podIP": "10.200.0.2",
                "initContainerStatuses": init.iter().filter(|d| d.with_status).map(|d| status(d)).collect::<Vec<_>>(),
                "containerStatuses": apps.iter().filter(|d| d.with_status).map(|d| status(d)).collect::<Vec<_>>(),
            }
        })
    }
}

/// Writes pods as a `kubectl get pods -o json` PodList, atomically (rename).
/// An empty pods file under the temp dir, per process, and the `--pods-from` value
/// that reads it: the agent's file source, filled as a test creates its pods.
pub fn empty_pods_file(name: &str) -> (PathBuf, String) {
    let path = std::env::temp_dir().join(format!("sr-{name}-pods-{}.json", std::process::id()));
    write_pod_list(&path, &[]);
    let source = format!("file:{}", path.display());
    (path, source)
}

/// Marks `manifest` as the API server does on a graceful deletion: `deletionTimestamp`
/// is the deadline (now plus the grace period), `deletionGracePeriodSeconds` the grace.
pub fn mark_deleting(manifest: &mut serde_json::Value, grace_seconds: u32) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos() as i128;
    let deadline = now + i128::from(grace_seconds) * 1_000_000_000;
    manifest["metadata"]["deletionTimestamp"] =
        serde_json::json!(sidecar_race_agent::clock::rfc3339_nanos(deadline));
    manifest["metadata"]["deletionGracePeriodSeconds"] = serde_json::json!(grace_seconds);
}

pub fn write_pod_list(path: &Path, pods: &[serde_json::Value]) {
    let list =
        serde_json::json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": pods});
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, list.to_string()).expect("write pods file");
    fs::rename(&tmp, path).expect("rename pods file");
}

impl SimPod {
    /// A mesh's outbound capture, as istio-init installs it but narrowed to one
    /// service: a pod network, and TCP to `service:port` REDIRECTed to local `to_port`.
    pub fn redirect_service(
        &mut self,
        service: &str,
        port: u16,
        to_port: u16,
    ) -> anyhow::Result<()> {
        self.add_pod_network("10.200.0.2/24")?;
        let (port, to_port) = (port.to_string(), to_port.to_string());
        self.exec(
            "iptables",
            &[
                "-t",
                "nat",
                "-A",
                "OUTPUT",
                "-p",
                "tcp",
                "-d",
                service,
                "--dport",
                &port,
                "-j",
                "REDIRECT",
                "--to-ports",
                &to_port,
            ],
        )
    }

    /// The manifest of a Deployment's pod with an `app` (port 8080) and a proxy
    /// declaring 15001, declared as `proxy_declared`, both with their statuses.
    pub fn app_and_proxy_manifest(
        &self,
        namespace: &str,
        deployment: &str,
        app: &SimContainer,
        proxy: &SimContainer,
        proxy_declared: Declared,
    ) -> serde_json::Value {
        self.manifest(
            namespace,
            Some(deployment),
            &[
                Decl {
                    container: app,
                    declared: Declared::App,
                    ports: &[8080],
                    with_status: true,
                },
                Decl {
                    container: proxy,
                    declared: proxy_declared,
                    ports: &[15001],
                    with_status: true,
                },
            ],
        )
    }
}
