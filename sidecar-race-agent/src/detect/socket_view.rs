//! A Unix socket incident's `socket` as users see it, and the path the serving
//! container binds (through its own mount of the volume) for the advice's probe.

use serde::{Deserialize, Serialize};

use super::service::{SocketKey, UnixSocket};
use crate::pods::pod_info::ContainerInfo;

/// `socket` of an incident (field names are a stable interface).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketView {
    /// As the client dialed it; `@name` for an abstract name.
    pub path: String,
    /// The pod volume it lies on, when the pod spec tells.
    pub volume: Option<String>,
    #[serde(rename = "abstract")]
    pub is_abstract: bool,
}

impl SocketView {
    pub fn of(s: &UnixSocket) -> SocketView {
        SocketView {
            path: s.path.clone(),
            volume: s.volume.clone(),
            is_abstract: s.is_abstract,
        }
    }
}

/// Where `container` finds socket `s`: its mount of the socket's volume joined with
/// the path on the volume; `None` when it does not mount that volume's directory.
pub fn served_path(s: &UnixSocket, container: &ContainerInfo) -> Option<String> {
    let SocketKey::OnVolume { volume, relative } = &s.key else {
        return None;
    };
    container
        .mounts
        .iter()
        .filter(|m| &m.volume == volume)
        .find_map(|m| {
            let rest = if m.sub_path.is_empty() {
                relative.as_str()
            } else {
                relative.strip_prefix(&m.sub_path)?.strip_prefix('/')?
            };
            Some(format!("{}/{rest}", m.mount_path.trim_end_matches('/')))
        })
}
