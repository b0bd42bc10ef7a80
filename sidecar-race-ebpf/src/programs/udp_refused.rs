//! UDP refusals: the port unreachable `icmp:icmp_send` answers a UDP datagram with
//! (IPv4), or `skb:kfree_skb` with the drop reason `NO_SOCKET` on a UDP datagram, that
//! arrived on the loopback device. The agent attaches one of the two, never both (a
//! refusal would count twice): `icmp_send` where the kernel has it, which runs only
//! when the kernel answers with an ICMP error, never on a delivered datagram or another
//! drop; `kfree_skb` otherwise, which runs on every dropped skb and leaves other drops
//! at the first compare (the reason). Delivered datagrams are consumed, not freed, so
//! they reach neither. On loopback the kernel never rate-limits the port unreachable
//! (`icmpv4_xrlim_allow`, and the global limit skips a datagram from loopback), so
//! `icmp_send` fires for each one. A datagram sent over loopback is received in the softirq its sender's
//! `local_bh_enable` runs, in the sender's own task, so the current task is the sender
//! and names the owner (the sender's cgroup), and loopback keeps it inside the sender's
//! network namespace: the pod's loopback or its own addresses, never traffic from off
//! the pod. A datagram the kernel's `ksoftirqd` delivered instead (a backlog too long
//! for one softirq) carries that thread, whose cgroup is no pod's: counted, not blamed.

use aya_ebpf::{
    macros::{btf_tracepoint, tracepoint},
    programs::{BtfTracePointContext, TracePointContext},
};
use sidecar_race_ebpf::{
    abi::{AF_INET, AF_INET6, SocketEvent, counter, kind, v4_mapped},
    layout::port_to_host,
    udp::{
        ETH_P_IP, ETH_P_IPV6, ICMP_DEST_UNREACH, ICMP_PORT_UNREACH, IPPROTO_UDP, IcmpConfig,
        LOOPBACK_IFINDEX, UdpConfig, ip_layout, udp_ports,
    },
};

use super::{
    budget, charge,
    ctx_load::{load_i32, load_u16, load_u64},
    helpers::{current_owner, now_boot_ns},
    kernel_read::read,
    ledgers::refusals,
    maps::{EVENTS, config, count},
};

/// Filled by the agent (tracefs and BTF) at load time; unset, the program sends nothing.
#[unsafe(no_mangle)]
static UDP: UdpConfig = UdpConfig::UNSET;

/// `icmp:icmp_send`'s record offsets, filled by the agent from tracefs.
#[unsafe(no_mangle)]
static ICMP: IcmpConfig = IcmpConfig::UNSET;

budgeted!(
    #[tracepoint]
    udp_kfree_skb / udp_kfree_skb_plain (TracePointContext) => on_record
);

budgeted!(
    /// The BTF tracepoint, where the kernel takes it: no trace record is filled before
    /// the program runs, which is most of the tracefs hook's cost per drop.
    #[btf_tracepoint(function = "kfree_skb")]
    udp_kfree_skb_btf / udp_kfree_skb_btf_plain (BtfTracePointContext) => on_args
);

budgeted!(
    #[tracepoint]
    udp_icmp_send / udp_icmp_send_plain (TracePointContext) => on_icmp_record
);

budgeted!(
    /// `icmp_send`'s BTF tracepoint: (const struct sk_buff *skb, int type, int code).
    #[btf_tracepoint(function = "icmp_send")]
    udp_icmp_send_btf / udp_icmp_send_btf_plain (BtfTracePointContext) => on_icmp_args
);

#[inline(always)]
fn icmp_config_now() -> IcmpConfig {
    // SAFETY: as `config_now`.
    unsafe { core::ptr::read_volatile(&raw const ICMP) }
}

/// The tracefs tracepoint of `icmp_send`: a port unreachable for a datagram of IPv4.
#[inline(always)]
fn on_icmp_record<const CMPXCHG: bool>(ctx: &TracePointContext) -> u32 {
    let i = icmp_config_now();
    let skb = (|| {
        let port_unreachable = load_i32(ctx, i.icmp_type)? == ICMP_DEST_UNREACH
            && load_i32(ctx, i.code)? == ICMP_PORT_UNREACH;
        if !port_unreachable {
            return Err(0);
        }
        load_u64(ctx, i.skbaddr)
    })();
    match skb.and_then(|skb| try_drop::<CMPXCHG>(&config_now(), ETH_P_IP, skb)) {
        Ok(r) | Err(r) => r,
    }
}

/// The BTF tracepoint of `icmp_send`: the type and code as arguments.
#[inline(always)]
fn on_icmp_args<const CMPXCHG: bool>(ctx: &BtfTracePointContext) -> u32 {
    let icmp_type: i32 = ctx.arg(1);
    let code: i32 = ctx.arg(2);
    if icmp_type != ICMP_DEST_UNREACH || code != ICMP_PORT_UNREACH {
        return 0;
    }
    let skb: u64 = ctx.arg(0);
    match try_drop::<CMPXCHG>(&config_now(), ETH_P_IP, skb) {
        Ok(r) | Err(r) => r,
    }
}

#[inline(always)]
fn config_now() -> UdpConfig {
    // SAFETY: a plain read of a global nothing writes after load; volatile so the
    // compiler does not fold in the `UNSET` initialiser.
    unsafe { core::ptr::read_volatile(&raw const UDP) }
}

/// The tracefs tracepoint: the reason, the protocol and the skb from the record.
#[inline(always)]
fn on_record<const CMPXCHG: bool>(ctx: &TracePointContext) -> u32 {
    let c = config_now();
    let dropped = (|| {
        if load_i32(ctx, c.reason)? as u32 != c.no_socket {
            return Err(0);
        }
        Ok::<_, u32>((load_u16(ctx, c.protocol)?, load_u64(ctx, c.skbaddr)?))
    })();
    match dropped.and_then(|(protocol, skb)| try_drop::<CMPXCHG>(&c, protocol, skb)) {
        Ok(r) | Err(r) => r,
    }
}

/// The BTF tracepoint: (struct sk_buff *skb, void *location, enum skb_drop_reason
/// reason, …); `skb->protocol` read from the skb (network order, as the record's is
/// not).
#[inline(always)]
fn on_args<const CMPXCHG: bool>(ctx: &BtfTracePointContext) -> u32 {
    let c = config_now();
    let reason: u32 = ctx.arg(2);
    if reason != c.no_socket {
        return 0;
    }
    let skb: u64 = ctx.arg(0);
    let Some(protocol) = read::<u16>(skb, c.skb_protocol) else {
        return 0;
    };
    let protocol = port_to_host(protocol, cfg!(target_endian = "big"));
    match try_drop::<CMPXCHG>(&c, protocol, skb) {
        Ok(r) | Err(r) => r,
    }
}

/// A datagram `skb` no socket took (a `NO_SOCKET` drop, or the port unreachable sent
/// for it), whose `protocol` (host order) the hook read.
#[inline(always)]
fn try_drop<const CMPXCHG: bool>(c: &UdpConfig, protocol: u16, skb: u64) -> Result<u32, u32> {
    let ipv6 = match protocol {
        ETH_P_IP => false,
        ETH_P_IPV6 => true,
        _ => return Ok(0),
    };
    if read::<i32>(skb, c.skb_iif) != Some(LOOPBACK_IFINDEX) {
        return Ok(0); // from off the pod, or not received at all
    }
    let head = read::<u64>(skb, c.head).ok_or(0u32)?;
    let ip = head + u64::from(read::<u16>(skb, c.network_header).ok_or(0u32)?);
    let th = read::<u16>(skb, c.transport_header).ok_or(0u32)?;
    let at = ip_layout(ipv6);
    if read::<u8>(ip, at.protocol) != Some(IPPROTO_UDP) {
        return Ok(0); // TCP's own NO_SOCKET drops, ICMP, …
    }
    let (sport, dport) = udp_ports(read::<[u8; 4]>(head, th).ok_or(0u32)?);
    count(counter::seen(kind::UDP_REFUSED));
    let owner = current_owner();
    if owner.pid == 0 {
        return Ok(0); // the idle task: nobody's datagram to blame
    }
    let now = now_boot_ns();
    let charged = charge::of_current_task(owner.cgroup_id).cgroup_id;
    let ledger = refusals();
    if !budget::admit::<CMPXCHG>(&ledger, config!(refusal_budget), charged, now) {
        budget::suppress(&ledger, charged);
        return Ok(0);
    }
    let Some(mut entry) = EVENTS.reserve::<SocketEvent>(0) else {
        count(counter::lost(kind::UDP_REFUSED));
        return Ok(0);
    };
    let ev = entry.as_mut_ptr();
    // SAFETY: `ev` is a reserved record we own until submit; fields written in place
    // to stay within the 512-byte stack.
    unsafe {
        (*ev).header.kind = kind::UDP_REFUSED;
        (*ev).header.flags = 0;
        (*ev).header._pad = [0; 6];
        (*ev).header.ts_boot_ns = now;
        (*ev).owner = owner;
        (*ev).family = if ipv6 { AF_INET6 } else { AF_INET };
        (*ev).src_port = sport;
        (*ev).dst_port = dport;
        // The addresses straight into the record (v6-form, IPv4 mapped), off the stack.
        if ipv6 {
            (*ev).src_addr = read::<[u8; 16]>(ip, at.saddr).unwrap_or([0; 16]);
            (*ev).dst_addr = read::<[u8; 16]>(ip, at.daddr).unwrap_or([0; 16]);
        } else {
            (*ev).src_addr = v4_mapped(read::<[u8; 4]>(ip, at.saddr).unwrap_or([0; 4]));
            (*ev).dst_addr = v4_mapped(read::<[u8; 4]>(ip, at.daddr).unwrap_or([0; 4]));
        }
        (*ev).start_boot_ns = 0;
        (*ev).local_dst_addr = [0; 16];
        (*ev).local_dst_port = 0;
    }
    entry.submit(0);
    Ok(0)
}
