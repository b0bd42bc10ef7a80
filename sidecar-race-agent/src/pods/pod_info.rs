//! What detection needs to know about a pod, analysed from its Kubernetes object:
//! names, owner workload, which containers are app containers or (native) sidecars,
//! the ports they declare, their probes, statuses and lifecycle.

use jiff::Timestamp;
use std::{collections::BTreeMap, net::IpAddr};

use k8s_openapi::api::core::v1::{Container, ContainerPort, ContainerStatus, Pod, VolumeMount};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::{
    container_id::{Runtime, parse_status_container_id},
    mounts::Mount,
    probes::probe_target,
    sidecars::{Evidence, PodSidecarHints},
    sub_path_expr::ExprEnv,
    workload::{template, workload},
};
pub use super::{
    probes::ProbeTarget, roles::Pattern, roles::Role, workload::PodTemplate, workload::Workload,
};

#[derive(Debug, Error, PartialEq, Eq)]
pub enum PodError {
    #[error("pod object has no {0}")]
    Missing(&'static str),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerInfo {
    pub name: String,
    pub role: Role,
    /// Why a `containers[]` entry counts as a classic sidecar.
    pub sidecar_by: Option<Evidence>,
    pub image: Option<String>,
    /// TCP ports the container declares (`ports[].containerPort`).
    pub ports: Vec<u16>,
    /// UDP ports it serves: declared with `protocol: UDP`, or a known sidecar's
    /// (`udp_ports` in data/known-sidecars.yaml).
    #[serde(default)]
    pub udp_ports: Vec<u16>,
    pub startup_probe: Option<ProbeTarget>,
    pub readiness_probe: Option<ProbeTarget>,
    /// Its `volumeMounts` (Unix sockets on a shared volume are matched through them).
    pub mounts: Vec<Mount>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusInfo {
    pub name: String,
    pub container_id: String,
    pub runtime: Runtime,
    pub state: RunState,
    /// When the current instance started running (parsed once, as the pod is read).
    pub started_at: Option<Timestamp>,
    /// When it terminated (`state: terminated`).
    pub finished_at: Option<Timestamp>,
    pub ready: bool,
    /// `started`: its startupProbe passed (or it has none and runs); absent in old
    /// pod sources.
    #[serde(default)]
    pub started: Option<bool>,
    pub restart_count: i32,
    /// `lastState.terminated.reason` of the instance before this one: the kubelet's
    /// `RestartingAllContainers` marks an in-place restart of the whole pod (KEP-5532).
    #[serde(default)]
    pub last_terminated_reason: Option<String>,
}

/// A container status' `state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Waiting,
    Running,
    Terminated,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodInfo {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub workload: Workload,
    pub containers: Vec<ContainerInfo>,
    pub statuses: Vec<StatusInfo>,
    pub deletion_timestamp: Option<Timestamp>,
    pub deletion_grace_period_seconds: Option<i64>,
    pub termination_grace_period_seconds: Option<i64>,
    pub host_network: bool,
    pub pod_ips: Vec<IpAddr>,
    pub node_name: Option<String>,
    /// `status.startTime`: when the kubelet took the pod. Times a client whose own
    /// start is unknown, e.g. after an agent restart.
    pub start_time: Option<Timestamp>,
    /// The template the pod was made from, when its controller labels one.
    #[serde(default)]
    pub template: Option<PodTemplate>,
}

impl PodInfo {
    /// Analyses a Pod object. Fails only without the identity fields.
    pub fn from_pod(pod: &Pod) -> Result<Self, PodError> {
        let meta = &pod.metadata;
        let uid = meta.uid.clone().ok_or(PodError::Missing("metadata.uid"))?;
        let name = meta
            .name
            .clone()
            .ok_or(PodError::Missing("metadata.name"))?;
        let namespace = meta.namespace.clone().unwrap_or_else(|| "default".into());
        let spec = pod.spec.as_ref();
        let status = pod.status.as_ref();
        let mut containers = Vec::new();
        if let Some(spec) = spec {
            for c in spec.init_containers.iter().flatten() {
                let role = if c.restart_policy.as_deref() == Some("Always") {
                    Role::NativeSidecar
                } else {
                    Role::Init
                };
                containers.push(container_info(pod, c, role, None));
            }
            let hints = PodSidecarHints::from_annotations(meta.annotations.as_ref());
            containers.extend(spec.containers.iter().map(|c| {
                match hints.recognise(&c.name, c.image.as_deref()) {
                    Some(evidence) => container_info(pod, c, Role::ClassicSidecar, Some(evidence)),
                    None => container_info(pod, c, Role::App, None),
                }
            }));
            for e in spec.ephemeral_containers.iter().flatten() {
                containers.push(ContainerInfo {
                    name: e.name.clone(),
                    role: Role::Ephemeral,
                    sidecar_by: None,
                    image: e.image.clone(),
                    ports: tcp_ports(e.ports.as_deref()),
                    udp_ports: udp_ports(e.ports.as_deref(), &e.name, e.image.as_deref()),
                    startup_probe: None,
                    readiness_probe: None,
                    mounts: mounts(
                        e.volume_mounts.as_deref(),
                        &ExprEnv::of(pod, e.env.as_deref(), e.env_from.is_some()),
                    ),
                });
            }
        }
        let statuses = status
            .map(|s| {
                [
                    s.init_container_statuses.as_deref(),
                    s.container_statuses.as_deref(),
                    s.ephemeral_container_statuses.as_deref(),
                ]
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(status_info)
                .collect()
            })
            .unwrap_or_default();
        let pod_ips = status
            .map(|s| {
                let mut ips: Vec<IpAddr> = s
                    .pod_ips
                    .iter()
                    .flatten()
                    .filter_map(|p| p.ip.parse().ok())
                    .collect();
                if let Some(ip) = s.pod_ip.as_ref().and_then(|p| p.parse().ok())
                    && !ips.contains(&ip)
                {
                    ips.push(ip);
                }
                ips
            })
            .unwrap_or_default();
        Ok(PodInfo {
            workload: workload(pod, &name),
            template: template(pod),
            uid,
            namespace,
            name,
            containers,
            statuses,
            deletion_timestamp: meta.deletion_timestamp.as_ref().map(|t| t.0),
            deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
            termination_grace_period_seconds: spec.and_then(|s| s.termination_grace_period_seconds),
            host_network: spec.and_then(|s| s.host_network).unwrap_or(false),
            pod_ips,
            node_name: spec.and_then(|s| s.node_name.clone()),
            start_time: status.and_then(|s| s.start_time.as_ref()).map(|t| t.0),
        })
    }

    /// Parses the JSON of a Pod and analyses it.
    pub fn from_json(value: serde_json::Value) -> Result<Self, String> {
        let pod: Pod =
            serde_json::from_value(value).map_err(|e| format!("not a valid Pod: {e}"))?;
        Self::from_pod(&pod).map_err(|e| e.to_string())
    }

    pub fn container(&self, name: &str) -> Option<&ContainerInfo> {
        self.containers.iter().find(|c| c.name == name)
    }

    /// The container that serves UDP `port`, if exactly one does.
    pub fn declaring_udp(&self, port: u16) -> Option<&ContainerInfo> {
        let mut it = self
            .containers
            .iter()
            .filter(|c| c.udp_ports.contains(&port));
        match (it.next(), it.next()) {
            (Some(c), None) => Some(c),
            _ => None,
        }
    }

    /// Whether a container of the pod serves UDP `port` (the noise rule of datagrams:
    /// a refusal on a port no container owns is never an incident on its own).
    pub fn owns_udp(&self, port: u16) -> bool {
        self.containers.iter().any(|c| c.udp_ports.contains(&port))
    }

    /// The container that declares `port`, if exactly one does (ambiguity is not guessed).
    pub fn declaring(&self, port: u16) -> Option<&ContainerInfo> {
        let mut it = self.containers.iter().filter(|c| c.ports.contains(&port));
        match (it.next(), it.next()) {
            (Some(c), None) => Some(c),
            _ => None,
        }
    }

    /// Also counts the containers in `containers[]` named in `names` (the site-wide
    /// `--sidecar-names`) as classic sidecars.
    pub fn mark_site_sidecars(&mut self, names: &[String]) {
        for c in &mut self.containers {
            if c.role == Role::App && names.contains(&c.name) {
                c.role = Role::ClassicSidecar;
                c.sidecar_by = Some(Evidence::SiteName);
            }
        }
    }

    /// Whether container `later` is declared after container `earlier` (init
    /// containers come first, in their order, then `containers`).
    pub fn declared_after(&self, later: &str, earlier: &str) -> bool {
        let at = |name: &str| self.containers.iter().position(|c| c.name == name);
        at(later).zip(at(earlier)).is_some_and(|(l, e)| l > e)
    }

    pub fn role(&self, name: &str) -> Option<Role> {
        self.container(name).map(|c| c.role)
    }

    /// Owned by a Job (directly or through a CronJob).
    pub fn is_job(&self) -> bool {
        matches!(self.workload.kind.as_str(), "Job" | "CronJob")
    }

    pub fn status(&self, name: &str) -> Option<&StatusInfo> {
        self.statuses.iter().find(|s| s.name == name)
    }

    /// How container `name` is declared as a sidecar.
    pub fn pattern(&self, name: &str) -> Pattern {
        match self.container(name) {
            Some(c) => match c.role {
                Role::App | Role::ClassicSidecar => Pattern::Classic,
                Role::NativeSidecar if c.startup_probe.is_some() => Pattern::NativeProbed,
                Role::NativeSidecar => Pattern::Native,
                Role::Init | Role::Ephemeral => Pattern::Unknown,
            },
            None => Pattern::Unknown,
        }
    }

    /// Container name of a runtime container id (from the statuses).
    pub fn container_name_of(&self, container_id: &str) -> Option<&str> {
        self.statuses
            .iter()
            .find(|s| s.container_id == container_id)
            .map(|s| s.name.as_str())
    }

    pub fn is_terminating(&self) -> bool {
        self.deletion_timestamp.is_some()
    }

    /// Container ids → names, for the inventory's index.
    pub fn container_ids(&self) -> BTreeMap<&str, &str> {
        self.statuses
            .iter()
            .map(|s| (s.container_id.as_str(), s.name.as_str()))
            .collect()
    }
}

fn container_info(
    pod: &Pod,
    c: &Container,
    role: Role,
    sidecar_by: Option<Evidence>,
) -> ContainerInfo {
    let ports = c.ports.as_deref();
    ContainerInfo {
        name: c.name.clone(),
        role,
        sidecar_by,
        image: c.image.clone(),
        ports: tcp_ports(ports),
        udp_ports: udp_ports(ports, &c.name, c.image.as_deref()),
        startup_probe: c.startup_probe.as_ref().map(|p| probe_target(p, ports)),
        readiness_probe: c.readiness_probe.as_ref().map(|p| probe_target(p, ports)),
        mounts: mounts(
            c.volume_mounts.as_deref(),
            &ExprEnv::of(pod, c.env.as_deref(), c.env_from.is_some()),
        ),
    }
}

fn mounts(specs: Option<&[VolumeMount]>, env: &ExprEnv) -> Vec<Mount> {
    specs
        .into_iter()
        .flatten()
        .filter_map(|m| Mount::from_spec(m, env))
        .collect()
}

fn tcp_ports(ports: Option<&[ContainerPort]>) -> Vec<u16> {
    ports
        .into_iter()
        .flatten()
        .filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
        .filter_map(|p| u16::try_from(p.container_port).ok())
        .collect()
}

/// The UDP ports a container serves: declared (`protocol: UDP`), and a known
/// sidecar's own.
fn udp_ports(ports: Option<&[ContainerPort]>, name: &str, image: Option<&str>) -> Vec<u16> {
    let mut udp: Vec<u16> = ports
        .into_iter()
        .flatten()
        .filter(|p| p.protocol.as_deref() == Some("UDP"))
        .filter_map(|p| u16::try_from(p.container_port).ok())
        .collect();
    if let Some(known) = crate::pods::catalog::CATALOG.known(name, image) {
        for p in known.udp_ports.iter().chain(&known.udp_receivers) {
            if !udp.contains(p) {
                udp.push(*p);
            }
        }
    }
    udp
}

fn status_info(s: &ContainerStatus) -> Option<StatusInfo> {
    let (runtime, container_id) = parse_status_container_id(s.container_id.as_deref()?)?;
    Some(StatusInfo {
        name: s.name.clone(),
        container_id,
        runtime,
        state: match s.state.as_ref() {
            Some(st) if st.running.is_some() => RunState::Running,
            Some(st) if st.terminated.is_some() => RunState::Terminated,
            _ => RunState::Waiting,
        },
        started_at: s.state.as_ref().and_then(|st| {
            st.running
                .as_ref()
                .and_then(|r| r.started_at.as_ref())
                .or(st.terminated.as_ref().and_then(|t| t.started_at.as_ref()))
                .map(|t| t.0)
        }),
        finished_at: s
            .state
            .as_ref()
            .and_then(|st| st.terminated.as_ref())
            .and_then(|t| t.finished_at.as_ref())
            .map(|t| t.0),
        ready: s.ready,
        started: s.started,
        restart_count: s.restart_count,
        last_terminated_reason: s
            .last_state
            .as_ref()
            .and_then(|st| st.terminated.as_ref())
            .and_then(|t| t.reason.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PodInfo {
        PodInfo::from_json(fixture_json(name)).unwrap()
    }

    /// A pod object of tests/fixtures/pods, to change before it is read.
    fn fixture_json(name: &str) -> serde_json::Value {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/pods")
            .join(name);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn classic_sidecar_deployment() {
        let p = fixture("classic-deployment.json");
        assert_eq!(
            p.workload,
            Workload {
                kind: "Deployment".into(),
                name: "checkout".into()
            }
        );
        assert_eq!(p.namespace, "shop");
        assert_eq!(p.pattern("istio-proxy"), Pattern::Classic);
        assert_eq!(p.declaring(15001).unwrap().name, "istio-proxy");
        assert_eq!(p.container_name_of(&"a".repeat(64)), Some("app"));
        assert_eq!(p.container_name_of(&"b".repeat(64)), Some("istio-proxy"));
        assert!(!p.is_terminating());
        assert_eq!(p.pod_ips, vec!["10.244.1.17".parse::<IpAddr>().unwrap()]);
        assert_eq!(p.termination_grace_period_seconds, Some(30));
    }

    #[test]
    fn native_sidecar_with_and_without_startup_probe() {
        let p = fixture("native-probed-statefulset.json");
        assert_eq!(
            p.workload,
            Workload {
                kind: "StatefulSet".into(),
                name: "ledger".into()
            }
        );
        assert_eq!(p.pattern("db-proxy"), Pattern::NativeProbed);
        let proxy = p.container("db-proxy").unwrap();
        assert_eq!(proxy.role, Role::NativeSidecar);
        // the probe names the port: resolved to its number
        assert_eq!(
            proxy.startup_probe,
            Some(ProbeTarget::TcpSocket { port: Some(5432) })
        );
        assert_eq!(p.container("migrate").unwrap().role, Role::Init);
        assert_eq!(p.pattern("migrate"), Pattern::Unknown);
        assert_eq!(
            p.pattern("app"),
            Pattern::Classic,
            "an app container has the classic pattern"
        );
        assert!(p.is_terminating());
        assert_eq!(p.deletion_grace_period_seconds, Some(30));

        let n = fixture("native-unprobed-daemonset.json");
        assert_eq!(
            n.workload,
            Workload {
                kind: "DaemonSet".into(),
                name: "log-agent".into()
            }
        );
        assert_eq!(n.pattern("shipper"), Pattern::Native);
        assert!(n.host_network);
        let shipper = n.container("shipper").unwrap();
        assert_eq!(
            shipper.readiness_probe,
            Some(ProbeTarget::HttpGet {
                port: Some(2020),
                path: Some("/api/v1/health".into())
            })
        );
    }

    #[test]
    fn jobs_cronjobs_and_bare_pods() {
        let job = fixture("job.json");
        assert_eq!(
            job.workload,
            Workload {
                kind: "Job".into(),
                name: "reindex".into()
            }
        );
        let cron = fixture("cronjob.json");
        assert_eq!(
            cron.workload,
            Workload {
                kind: "CronJob".into(),
                name: "nightly-report".into()
            }
        );
        assert_eq!(cron.statuses.len(), 2, "init container statuses are kept");
        let bare = fixture("bare-pod.json");
        assert_eq!(
            bare.workload,
            Workload {
                kind: "Pod".into(),
                name: "debug-shell".into()
            }
        );
        assert_eq!(
            bare.containers
                .iter()
                .filter(|c| c.role == Role::Ephemeral)
                .count(),
            1
        );
        assert_eq!(bare.container_name_of(&"e".repeat(64)), Some("debugger"));
    }

    /// The template a controller labels its pods with, and when the pod was made.
    #[test]
    fn the_pod_template_is_read_from_the_controllers_label() {
        let mut v = fixture_json("classic-deployment.json");
        v["metadata"]["creationTimestamp"] = "2026-12-01T10:00:00Z".into();
        let p = PodInfo::from_json(v.clone()).unwrap();
        assert_eq!(
            p.template,
            Some(PodTemplate {
                hash: "7d4b9c8f5".into(),
                created: Some("2026-12-01T10:00:00Z".parse().unwrap()),
            })
        );
        // A StatefulSet's or DaemonSet's pods carry a controller revision instead.
        let labels = v["metadata"]["labels"].as_object_mut().unwrap();
        labels.remove("pod-template-hash");
        labels.insert("controller-revision-hash".into(), "web-6d9f7c".into());
        let p = PodInfo::from_json(v.clone()).unwrap();
        assert_eq!(p.template.map(|t| t.hash).as_deref(), Some("web-6d9f7c"));
        v["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("controller-revision-hash");
        assert_eq!(PodInfo::from_json(v).unwrap().template, None);
    }

    #[test]
    fn replicaset_without_template_hash_stays_a_replicaset() {
        let mut v = fixture_json("classic-deployment.json");
        v["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("pod-template-hash");
        let p = PodInfo::from_json(v).unwrap();
        assert_eq!(
            p.workload,
            Workload {
                kind: "ReplicaSet".into(),
                name: "checkout-7d4b9c8f5".into()
            }
        );
    }

    #[test]
    fn malformed_pods_are_rejected_with_a_reason() {
        let err =
            PodInfo::from_json(serde_json::json!({"metadata": {"name": "x"}, "spec": "oops"}))
                .unwrap_err();
        assert!(err.contains("not a valid Pod"), "{err}");
        let err = PodInfo::from_json(serde_json::json!({"metadata": {"name": "x"}})).unwrap_err();
        assert_eq!(err, "pod object has no metadata.uid");
    }
}
