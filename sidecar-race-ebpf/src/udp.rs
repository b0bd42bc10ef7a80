//! UDP refusals: a datagram dropped because no socket holds its port, seen at
//! `icmp:icmp_send` as the port unreachable the kernel answers it with (IPv4, where the kernel has it:
//! nothing runs on other drops), or at `skb:kfree_skb` with the drop reason
//! `NO_SOCKET` (5.17+, both families, but run on every dropped skb), each hooked as a
//! BTF tracepoint where the kernel takes it, else through tracefs. The agent reads the record's offsets
//! and the reason's number from tracefs (the number differs between kernels) and the
//! `sk_buff` offsets from the kernel's BTF; the record the program sends is a
//! `SocketEvent` of kind `UDP_REFUSED`.

use crate::layout::MISSING;

/// The loopback device's index in every network namespace (`LOOPBACK_IFINDEX`):
/// datagrams a pod sends to its own loopback or its own addresses arrive on it.
pub const LOOPBACK_IFINDEX: i32 = 1;
/// `ETH_P_IP` and `ETH_P_IPV6`, as `kfree_skb` records `skb->protocol` (host order).
pub const ETH_P_IP: u16 = 0x0800;
pub const ETH_P_IPV6: u16 = 0x86dd;
/// `IPPROTO_UDP`.
pub const IPPROTO_UDP: u8 = 17;
/// `ICMP_DEST_UNREACH` and `ICMP_PORT_UNREACH` (RFC 792): what the kernel answers a
/// datagram to a port no socket holds with.
pub const ICMP_DEST_UNREACH: i32 = 3;
pub const ICMP_PORT_UNREACH: i32 = 3;

/// Where `icmp:icmp_send`'s tracefs record keeps the skb and the message's type and
/// code. The BTF tracepoint has them as arguments and needs none of these.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcmpConfig {
    /// `icmp_send.skbaddr` (8 bytes): the datagram that had no socket.
    pub skbaddr: u16,
    /// `icmp_send.type` and `icmp_send.code` (4 bytes each).
    pub icmp_type: u16,
    pub code: u16,
    pub _pad: u16,
}

impl IcmpConfig {
    pub const UNSET: IcmpConfig = IcmpConfig {
        skbaddr: MISSING,
        icmp_type: MISSING,
        code: MISSING,
        _pad: 0,
    };
}

const _: () = assert!(core::mem::size_of::<IcmpConfig>() == 8);

/// Where the programs find what they need: `kfree_skb`'s record fields (tracefs) and
/// `struct sk_buff`'s members (BTF). Any `MISSING` one turns the program off.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpConfig {
    /// `kfree_skb.skbaddr` (8 bytes).
    pub skbaddr: u16,
    /// `kfree_skb.protocol` (u16, host order).
    pub protocol: u16,
    /// `kfree_skb.reason` (4 bytes).
    pub reason: u16,
    /// `sk_buff.head` (`unsigned char *`).
    pub head: u16,
    /// `sk_buff.network_header` and `sk_buff.transport_header` (u16 offsets from `head`).
    pub network_header: u16,
    pub transport_header: u16,
    /// `sk_buff.skb_iif` (int): the device the datagram arrived on.
    pub skb_iif: u16,
    /// `sk_buff.protocol` (`__be16`): what the BTF tracepoint reads, which has no record.
    pub skb_protocol: u16,
    /// The number of `SKB_DROP_REASON_NO_SOCKET` on this kernel.
    pub no_socket: u32,
    pub _pad2: u32,
}

impl UdpConfig {
    pub const UNSET: UdpConfig = UdpConfig {
        skbaddr: MISSING,
        protocol: MISSING,
        reason: MISSING,
        head: MISSING,
        network_header: MISSING,
        transport_header: MISSING,
        skb_iif: MISSING,
        skb_protocol: MISSING,
        no_socket: u32::MAX,
        _pad2: 0,
    };

    /// Whether every offset is known.
    pub const fn is_set(&self) -> bool {
        self.skbaddr != MISSING
            && self.protocol != MISSING
            && self.reason != MISSING
            && self.head != MISSING
            && self.network_header != MISSING
            && self.transport_header != MISSING
            && self.skb_iif != MISSING
            && self.skb_protocol != MISSING
            && self.no_socket != u32::MAX
    }
}

const _: () = assert!(core::mem::size_of::<UdpConfig>() == 24);

/// Where an IP header keeps what the program reads, by family: the protocol byte (the
/// next header of IPv6: UDP only without extension headers before it), and the source
/// and destination addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpLayout {
    pub protocol: u16,
    pub saddr: u16,
    pub daddr: u16,
}

#[inline(always)]
pub const fn ip_layout(ipv6: bool) -> IpLayout {
    if ipv6 {
        IpLayout {
            protocol: 6,
            saddr: 8,
            daddr: 24,
        }
    } else {
        IpLayout {
            protocol: 9,
            saddr: 12,
            daddr: 16,
        }
    }
}

/// The source and destination ports of a UDP header's first four bytes, host order.
#[inline(always)]
pub const fn udp_ports(udp: [u8; 4]) -> (u16, u16) {
    (
        u16::from_be_bytes([udp[0], udp[1]]),
        u16::from_be_bytes([udp[2], udp[3]]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ip_headers_fields_are_where_the_rfcs_put_them() {
        // RFC 791: protocol at 9, addresses at 12 and 16; RFC 8200: next header at 6,
        // addresses at 8 and 24.
        assert_eq!(
            ip_layout(false),
            IpLayout {
                protocol: 9,
                saddr: 12,
                daddr: 16
            }
        );
        assert_eq!(
            ip_layout(true),
            IpLayout {
                protocol: 6,
                saddr: 8,
                daddr: 24
            }
        );
    }

    #[test]
    fn udp_ports_are_read_in_network_order() {
        assert_eq!(udp_ports([0xc3, 0x50, 0x1f, 0xbd]), (50000, 8125));
    }
}
