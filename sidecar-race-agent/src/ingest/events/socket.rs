//! `refused`, `listen`, `listen_closed` and `udp_refused` records: a socket's (or a
//! dropped datagram's) addresses and the task behind it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use sidecar_race_ebpf::abi::{AF_INET, AF_INET6, SocketEvent, flags, kind};

use super::sender::Sender;

/// `refused`, `listen`, `listen_closed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketFact {
    pub ts_boot_ns: u64,
    pub owner: Sender,
    pub ipv6: bool,
    /// The client end for `refused`; the listening address for listeners.
    pub src: SocketAddr,
    /// The destination as dialed (`refused` only).
    pub dst: Option<SocketAddr>,
    /// Where the local stack refused the SYN, when that differs from `dst` (a NAT redirect).
    pub local_dst: Option<SocketAddr>,
    /// When the listen started, boot ns; 0 when unknown, and for refusals.
    pub start_boot_ns: u64,
}

pub fn socket_fact(ev: &SocketEvent) -> SocketFact {
    let ipv6 = match ev.family {
        AF_INET6 => true,
        AF_INET => false,
        // Kernel without a family field: v4-mapped addresses are IPv4 sockets.
        _ => Ipv6Addr::from(ev.src_addr).to_ipv4_mapped().is_none(),
    };
    let addr = |a: [u8; 16], port: u16| SocketAddr::new(ip(a, ipv6), port);
    let is_refused = matches!(ev.header.kind, kind::REFUSED | kind::UDP_REFUSED);
    let dst = is_refused.then(|| addr(ev.dst_addr, ev.dst_port));
    let local_dst = (is_refused && ev.header.flags & flags::HAS_LOCAL_DST != 0)
        .then(|| addr(ev.local_dst_addr, ev.local_dst_port))
        .filter(|local| Some(*local) != dst);
    SocketFact {
        ts_boot_ns: ev.header.ts_boot_ns,
        owner: Sender::from(&ev.owner),
        ipv6,
        src: addr(ev.src_addr, ev.src_port),
        dst,
        local_dst,
        start_boot_ns: ev.start_boot_ns,
    }
}

/// IPv4 sockets carry v4-mapped addresses; IPv6 sockets keep theirs as they are
/// (a v4-mapped destination dialed from an IPv6 socket stays `::ffff:a.b.c.d`).
fn ip(a: [u8; 16], ipv6: bool) -> IpAddr {
    let v6 = Ipv6Addr::from(a);
    match (ipv6, v6.to_ipv4_mapped()) {
        (false, Some(v4)) => IpAddr::V4(v4),
        (false, None) => IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])),
        (true, _) => IpAddr::V6(v6),
    }
}
