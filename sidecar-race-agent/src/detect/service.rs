//! What a client was refused on, within its pod: a port, or a Unix socket named so
//! that both containers' views of it meet (the volume and path on it, an abstract
//! name, or the path itself when no volume is known).

use serde::{Deserialize, Serialize};

use crate::{
    names::UnixName,
    pods::{mounts, pod_info::ContainerInfo},
};

/// The identity of a Unix socket in a pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum SocketKey {
    /// A path on a pod volume: the same for every container that mounts it.
    OnVolume { volume: String, relative: String },
    /// An abstract name: per network namespace, which a pod's containers share.
    Abstract(String),
    /// A path on no known volume: matched as written.
    Path(String),
}

/// A Unix socket as an incident names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnixSocket {
    pub key: SocketKey,
    /// As the client dialed it (the path, or `@name`).
    pub path: String,
    /// The pod volume it lies on, when known.
    pub volume: Option<String>,
    pub is_abstract: bool,
}

impl UnixSocket {
    /// The socket `name` as seen from `container` (its mounts, when known); `None` for
    /// an unnamed socket.
    pub fn resolve(name: &UnixName, container: Option<&ContainerInfo>) -> Option<UnixSocket> {
        match name {
            UnixName::Unnamed => None,
            UnixName::Abstract(n) => Some(UnixSocket {
                key: SocketKey::Abstract(n.to_string()),
                path: name.to_string(),
                volume: None,
                is_abstract: true,
            }),
            UnixName::Path(p) => {
                let on = container.and_then(|c| mounts::on_volume(&c.mounts, p));
                Some(UnixSocket {
                    volume: on.as_ref().map(|o| o.volume.clone()),
                    key: match on {
                        Some(o) => SocketKey::OnVolume {
                            volume: o.volume,
                            relative: o.relative,
                        },
                        None => SocketKey::Path(p.to_string()),
                    },
                    path: p.to_string(),
                    is_abstract: false,
                })
            }
        }
    }

    /// The bounded metric label: `<volume>/<name>`, `@name`, or the file name alone.
    pub fn label(&self) -> String {
        match &self.key {
            SocketKey::OnVolume { volume, relative } => format!("{volume}/{relative}"),
            SocketKey::Abstract(n) => format!("@{n}"),
            SocketKey::Path(p) => p.rsplit('/').next().unwrap_or(p).to_string(),
        }
    }
}

/// What an incident is keyed on besides its client.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Service {
    /// A TCP port.
    Port(u16),
    Socket(SocketKey),
    /// A UDP port: the same number as a TCP port is another service.
    UdpPort(u16),
}

impl Service {
    /// The port service of `protocol` (TCP, or UDP).
    pub fn port(protocol: Protocol, port: u16) -> Service {
        match protocol {
            Protocol::Udp => Service::UdpPort(port),
            _ => Service::Port(port),
        }
    }
}

/// How the data travelled: the incident's `protocol` and the metrics' `protocol`
/// label (bounded: these four values). Datagrams (`udp`, `unixgram`) are lost when
/// refused, never retried by the kernel.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Protocol {
    #[default]
    Tcp,
    Udp,
    /// A Unix stream or seqpacket socket.
    Unix,
    /// A Unix datagram socket.
    Unixgram,
}

impl Protocol {
    pub const ALL: [Protocol; 4] = [
        Protocol::Tcp,
        Protocol::Udp,
        Protocol::Unix,
        Protocol::Unixgram,
    ];

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Datagrams: a refused one is lost, not retried.
    pub fn is_datagram(self) -> bool {
        matches!(self, Protocol::Udp | Protocol::Unixgram)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::{mounts::Mount, pod_info::Role};

    fn with_mount(volume: &str, path: &str) -> ContainerInfo {
        ContainerInfo {
            name: "c".into(),
            role: Role::App,
            sidecar_by: None,
            image: None,
            ports: vec![],
            udp_ports: vec![],
            startup_probe: None,
            readiness_probe: None,
            mounts: vec![Mount {
                volume: volume.into(),
                mount_path: path.into(),
                sub_path: String::new(),
                unexpanded: None,
            }],
        }
    }

    #[test]
    fn the_client_and_the_sidecar_meet_on_the_volume_not_the_path() {
        let app = with_mount("dapr", "/var/run/dapr");
        let sidecar = with_mount("dapr", "/sockets");
        let dialed =
            UnixSocket::resolve(&UnixName::Path("/var/run/dapr/app.sock".into()), Some(&app))
                .unwrap();
        let bound =
            UnixSocket::resolve(&UnixName::Path("/sockets/app.sock".into()), Some(&sidecar))
                .unwrap();
        assert_eq!(dialed.key, bound.key);
        assert_eq!(dialed.path, "/var/run/dapr/app.sock");
        assert_eq!(dialed.volume.as_deref(), Some("dapr"));
        assert_eq!(dialed.label(), "dapr/app.sock");
    }

    #[test]
    fn without_mounts_paths_meet_only_when_equal_and_abstract_names_always() {
        let a = UnixSocket::resolve(&UnixName::Path("/tmp/x.sock".into()), None).unwrap();
        assert_eq!(a.key, SocketKey::Path("/tmp/x.sock".into()));
        assert_eq!(a.label(), "x.sock");
        let abs = UnixSocket::resolve(&UnixName::Abstract("otel".into()), None).unwrap();
        assert!(abs.is_abstract);
        assert_eq!(
            (abs.path.as_str(), abs.label().as_str()),
            ("@otel", "@otel")
        );
        assert_eq!(UnixSocket::resolve(&UnixName::Unnamed, None), None);
    }
}
