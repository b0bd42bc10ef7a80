//! What a container's probe checks (`ProbeTarget`), read from its spec with named
//! ports resolved against the container's own `ports`.

use k8s_openapi::{
    api::core::v1::{ContainerPort, Probe},
    apimachinery::pkg::util::intstr::IntOrString,
};
use serde::{Deserialize, Serialize};

/// What a probe checks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ProbeTarget {
    TcpSocket {
        port: Option<u16>,
    },
    HttpGet {
        port: Option<u16>,
        path: Option<String>,
    },
    Grpc {
        port: u16,
    },
    Exec {
        command: Vec<String>,
    },
    Unknown,
}

impl ProbeTarget {
    /// The port the probe connects to, when it connects to one.
    pub fn port(&self) -> Option<u16> {
        match self {
            ProbeTarget::TcpSocket { port } | ProbeTarget::HttpGet { port, .. } => *port,
            ProbeTarget::Grpc { port } => Some(*port),
            _ => None,
        }
    }
}

/// A probe's port may be a number or the name of one of the container's ports.
fn resolve_port(port: &IntOrString, ports: Option<&[ContainerPort]>) -> Option<u16> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).ok(),
        IntOrString::String(name) => ports
            .into_iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok()),
    }
}

pub(super) fn probe_target(p: &Probe, ports: Option<&[ContainerPort]>) -> ProbeTarget {
    if let Some(t) = &p.tcp_socket {
        ProbeTarget::TcpSocket {
            port: resolve_port(&t.port, ports),
        }
    } else if let Some(h) = &p.http_get {
        ProbeTarget::HttpGet {
            port: resolve_port(&h.port, ports),
            path: h.path.clone(),
        }
    } else if let Some(g) = &p.grpc {
        u16::try_from(g.port)
            .map(|port| ProbeTarget::Grpc { port })
            .unwrap_or(ProbeTarget::Unknown)
    } else if let Some(e) = &p.exec {
        ProbeTarget::Exec {
            command: e.command.clone().unwrap_or_default(),
        }
    } else {
        ProbeTarget::Unknown
    }
}
