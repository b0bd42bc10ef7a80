//! The detector's input: timestamped kernel facts, already attributed to a pod.
//! Timestamps are the kernel's boot clock in nanoseconds.

use std::{net::SocketAddr, sync::Arc};

use serde::{Deserialize, Serialize};

use crate::names::{Comm, UnixName};

/// Which client made a refused connect: its container, or its cgroup when the cgroup
/// is not a container (a process in the pod cgroup itself). The id is shared with
/// the inventory's cache: every refusal of a container clones a count, not the id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Client {
    Container(Arc<str>),
    Cgroup(u64),
}

impl Client {
    /// The client of an event in cgroup `cgroup_id` of container `container_id`
    /// (`None`: a process in the pod's own cgroup).
    pub fn of(container_id: Option<Arc<str>>, cgroup_id: u64) -> Client {
        match container_id {
            Some(id) => Client::Container(id),
            None => Client::Cgroup(cgroup_id),
        }
    }

    /// The container's id; `None` for a cgroup that is not a container.
    pub fn container_id(&self) -> Option<&str> {
        match self {
            Client::Container(id) => Some(id),
            Client::Cgroup(_) => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Fact {
    /// A connect refused for a task of `pod_uid`.
    Refused {
        ts: u64,
        pod_uid: Arc<str>,
        client: Client,
        /// As dialed.
        dst: SocketAddr,
        /// Where the local stack refused it after a NAT redirect.
        local_dst: Option<SocketAddr>,
        /// The refused process's name (its thread-group leader's `comm`).
        process: Comm,
    },
    /// A UDP datagram of a task of `pod_uid` dropped: no socket held its port.
    UdpRefused {
        ts: u64,
        pod_uid: Arc<str>,
        client: Client,
        /// Where it was sent.
        dst: SocketAddr,
        process: Comm,
    },
    /// A UDP socket of the pod bound to `addr`, found in the pod's socket table (the
    /// bind itself is not hooked): at or before `ts`.
    UdpBound {
        ts: u64,
        pod_uid: Arc<str>,
        container_id: Option<String>,
        addr: SocketAddr,
    },
    /// A connect or send to a Unix socket refused for a task of `pod_uid`.
    UnixRefused {
        ts: u64,
        pod_uid: Arc<str>,
        client: Client,
        /// As the client named it.
        name: UnixName,
        process: Comm,
        /// Sent as a datagram (`sendto`, a datagram socket): the data was lost.
        #[serde(default)]
        datagram: bool,
    },
    /// A Unix socket of the pod started listening (a datagram socket: was bound).
    UnixListenerUp {
        ts: u64,
        pod_uid: Arc<str>,
        container_id: Option<String>,
        name: UnixName,
        /// A datagram socket's bind: what it resolves is `unixgram`.
        #[serde(default)]
        datagram: bool,
    },
    UnixListenerDown {
        ts: u64,
        pod_uid: Arc<str>,
        container_id: Option<String>,
        name: UnixName,
    },
    /// A socket of the pod started listening.
    ListenerUp {
        ts: u64,
        pod_uid: Arc<str>,
        container_id: Option<String>,
        addr: SocketAddr,
    },
    ListenerDown {
        ts: u64,
        pod_uid: Arc<str>,
        container_id: Option<String>,
        addr: SocketAddr,
    },
    /// The pod's cgroup was created: the agent watches this pod from its start.
    PodStarted { ts: u64, pod_uid: Arc<str> },
    /// The pod's cgroup was removed: the pod is gone from the node.
    PodRemoved { ts: u64, pod_uid: Arc<str> },
    /// A container's cgroup was created: that container starts.
    ContainerStarted {
        ts: u64,
        pod_uid: Arc<str>,
        container_id: String,
    },
    /// A container's cgroup was removed (torn down).
    ContainerRemoved {
        ts: u64,
        pod_uid: Arc<str>,
        container_id: String,
    },
}

impl Fact {
    /// The pod the fact is about.
    pub fn pod_uid(&self) -> &str {
        match self {
            Fact::Refused { pod_uid, .. }
            | Fact::UdpRefused { pod_uid, .. }
            | Fact::UdpBound { pod_uid, .. }
            | Fact::ListenerUp { pod_uid, .. }
            | Fact::ListenerDown { pod_uid, .. }
            | Fact::UnixRefused { pod_uid, .. }
            | Fact::UnixListenerUp { pod_uid, .. }
            | Fact::UnixListenerDown { pod_uid, .. }
            | Fact::PodStarted { pod_uid, .. }
            | Fact::PodRemoved { pod_uid, .. }
            | Fact::ContainerStarted { pod_uid, .. }
            | Fact::ContainerRemoved { pod_uid, .. } => pod_uid,
        }
    }

    pub fn ts(&self) -> u64 {
        match self {
            Fact::Refused { ts, .. }
            | Fact::UdpRefused { ts, .. }
            | Fact::UdpBound { ts, .. }
            | Fact::ListenerUp { ts, .. }
            | Fact::ListenerDown { ts, .. }
            | Fact::UnixRefused { ts, .. }
            | Fact::UnixListenerUp { ts, .. }
            | Fact::UnixListenerDown { ts, .. }
            | Fact::PodStarted { ts, .. }
            | Fact::PodRemoved { ts, .. }
            | Fact::ContainerStarted { ts, .. }
            | Fact::ContainerRemoved { ts, .. } => *ts,
        }
    }
}
