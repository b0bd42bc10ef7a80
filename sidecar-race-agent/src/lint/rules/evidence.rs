//! What several rules share: the template's containers, the ports a container serves
//! and who dials them, the startupProbe a fix gives, and how findings name them.

use k8s_openapi::api::core::v1::Container;

use crate::{
    inventory::pod_info::{ContainerInfo, Role},
    lint::{Options, known, refs, workload::Workload},
};

/// The startupProbe `lint --fix` gives a sidecar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeSpec {
    Http { port: u16, path: &'static str },
    Tcp { port: u16 },
}

impl std::fmt::Display for ProbeSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            ProbeSpec::Http { port, path } => write!(f, "httpGet {path} on port {port}"),
            ProbeSpec::Tcp { port } => write!(f, "tcpSocket on port {port}"),
        }
    }
}

/// The typed container `name` of the template (any list).
pub fn container<'a>(w: &'a Workload, name: &str) -> Option<&'a Container> {
    let spec = w.pod.spec.as_ref()?;
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .find(|c| c.name == name)
}

/// Ports `c` serves: declared, plus the ports a known proxy gets by redirect.
pub fn served_ports(c: &ContainerInfo) -> Vec<u16> {
    let mut ports = c.ports.clone();
    if let Some(p) = known::proxy(c) {
        ports.extend(p.redirect_ports.iter().filter(|p| !c.ports.contains(p)));
    }
    ports
}

/// Other containers that dial `port` (command, args, env) or probe it.
pub fn dialers(w: &Workload, server: &str, port: u16) -> Vec<String> {
    w.info
        .containers
        .iter()
        .filter(|c| c.name != server && c.role != Role::Ephemeral)
        .filter(|c| {
            let probes = [&c.startup_probe, &c.readiness_probe]
                .into_iter()
                .flatten()
                .any(|p| p.port() == Some(port));
            probes || container(w, &c.name).is_some_and(|t| refs::dialed_ports(t).contains(&port))
        })
        .map(|c| c.name.clone())
        .collect()
}

/// The ports of `sidecar` that other containers dial.
pub(super) fn dialed(w: &Workload, sidecar: &ContainerInfo) -> Vec<u16> {
    served_ports(sidecar)
        .into_iter()
        .filter(|p| !dialers(w, &sidecar.name, *p).is_empty())
        .collect()
}

/// The startupProbe for `sidecar`: its documented readiness endpoint, else the port
/// clients were seen dialing (evidence), else the one they name, else its first.
pub fn probe_for(w: &Workload, sidecar: &ContainerInfo, opts: &Options) -> Option<ProbeSpec> {
    if let Some((port, path)) = known::ready_endpoint(sidecar) {
        return Some(ProbeSpec::Http { port, path });
    }
    let port = opts
        .probe_ports
        .get(&sidecar.name)
        .copied()
        .or_else(|| dialed(w, sidecar).first().copied())
        .or_else(|| sidecar.ports.first().copied())?;
    Some(ProbeSpec::Tcp { port })
}

pub(super) fn list(ports: &[u16]) -> String {
    let words: Vec<String> = ports.iter().map(u16::to_string).collect();
    match words.len() {
        1 => format!("port {}", words[0]),
        _ => format!("ports {}", words.join(", ")),
    }
}

pub(super) fn names(names: &[String]) -> String {
    names.join(", ")
}

pub(super) fn probe_clause(probe: Option<&ProbeSpec>) -> String {
    probe.map_or_else(String::new, |p| format!(" and a startupProbe ({p})"))
}
