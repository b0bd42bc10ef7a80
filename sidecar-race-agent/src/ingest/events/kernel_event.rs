//! A decoded kernel event, of any kind, and what every kind has: its time and cgroup.

use super::{cgroup::CgroupFact, kind::Kind, socket::SocketFact, unix::UnixFact};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelEvent {
    Refused(SocketFact),
    /// A datagram dropped for want of a socket on its port (`src`: the sender's end).
    UdpRefused(SocketFact),
    Listen(SocketFact),
    ListenClosed(SocketFact),
    CgroupCreated(CgroupFact),
    CgroupRemoved(CgroupFact),
    UnixRefused(UnixFact),
    UnixListen(UnixFact),
    UnixListenClosed(UnixFact),
}

impl KernelEvent {
    pub fn kind(&self) -> Kind {
        match self {
            KernelEvent::Refused(_) => Kind::Refused,
            KernelEvent::UdpRefused(_) => Kind::UdpRefused,
            KernelEvent::Listen(_) => Kind::Listen,
            KernelEvent::ListenClosed(_) => Kind::ListenClosed,
            KernelEvent::CgroupCreated(_) => Kind::CgroupCreated,
            KernelEvent::CgroupRemoved(_) => Kind::CgroupRemoved,
            KernelEvent::UnixRefused(_) => Kind::UnixRefused,
            KernelEvent::UnixListen(_) => Kind::UnixListen,
            KernelEvent::UnixListenClosed(_) => Kind::UnixListenClosed,
        }
    }

    pub fn ts_boot_ns(&self) -> u64 {
        match self {
            KernelEvent::Refused(s)
            | KernelEvent::UdpRefused(s)
            | KernelEvent::Listen(s)
            | KernelEvent::ListenClosed(s) => s.ts_boot_ns,
            KernelEvent::CgroupCreated(c) | KernelEvent::CgroupRemoved(c) => c.ts_boot_ns,
            KernelEvent::UnixRefused(u)
            | KernelEvent::UnixListen(u)
            | KernelEvent::UnixListenClosed(u) => u.ts_boot_ns,
        }
    }

    pub fn cgroup_id(&self) -> u64 {
        match self {
            KernelEvent::Refused(s)
            | KernelEvent::UdpRefused(s)
            | KernelEvent::Listen(s)
            | KernelEvent::ListenClosed(s) => s.owner.cgroup_id,
            KernelEvent::CgroupCreated(c) | KernelEvent::CgroupRemoved(c) => c.cgroup_id,
            KernelEvent::UnixRefused(u)
            | KernelEvent::UnixListen(u)
            | KernelEvent::UnixListenClosed(u) => u.owner.cgroup_id,
        }
    }
}
