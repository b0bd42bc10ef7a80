//! Refusals. `tcp:tcp_receive_reset` on a socket still in SYN_SENT is a refused
//! connect: its owner as `connect.rs` recorded it (`connecting.rs`) where the
//! state-transition hook runs, else read from the socket (`socket_owner.rs`); both ends
//! from the reset's record. This hook runs only on resets, never on a connect that
//! succeeds. `tcp:tcp_send_reset` without a socket is the local stack refusing a
//! SYN that found no listener, which after a NAT REDIRECT tells where the SYN really
//! went. Where tracefs is missing and the kernel has BTF, the reset is hooked on its
//! BTF tracepoint instead (`tcp_receive_reset_btf`).

use aya_ebpf::{
    macros::{btf_tracepoint, tracepoint},
    programs::{BtfTracePointContext, TracePointContext},
};
use sidecar_race_ebpf::{
    abi::{
        AF_INET, AF_INET6, ClientEnd, Owner, SocketEvent, counter, destination_tag, flags, kind,
        v4_mapped,
    },
    layout::MISSING,
};

use super::{
    budget, charge, connecting,
    ctx_load::load_u64,
    helpers::{TCP_SYN_SENT, field, now_boot_ns},
    ledgers::refusals,
    maps::{EVENTS, LOCAL_REFUSALS, LocalRefusal, config, count},
    set_state::{SetStateSource, Sock},
    socket_owner,
};

/// A local refusal older than this is not the one a reset just delivered.
const LOCAL_REFUSAL_MAX_AGE_NS: u64 = 1_000_000_000;

/// For kernels with compare-and-exchange (5.12+): the budget is updated atomically.
#[tracepoint]
pub fn tcp_receive_reset(ctx: TracePointContext) -> u32 {
    match try_receive_reset::<true>(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

/// The same for older kernels, whose verifier refuses that instruction even where it
/// is never reached.
#[tracepoint]
pub fn tcp_receive_reset_plain(ctx: TracePointContext) -> u32 {
    match try_receive_reset::<false>(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

budgeted!(
    /// The BTF tracepoint, which needs no tracefs: `(const struct sock *sk)`, both ends
    /// read from the socket at offsets from the kernel's BTF.
    #[btf_tracepoint(function = "tcp_receive_reset")]
    tcp_receive_reset_btf / tcp_receive_reset_btf_plain (BtfTracePointContext) => on_reset_args
);

#[inline(always)]
fn on_reset_args<const CMPXCHG: bool>(ctx: &BtfTracePointContext) -> u32 {
    let sk: u64 = ctx.arg(0);
    let s = Sock(sk);
    let state = s.state();
    if matches!(state, Ok(state) if state != TCP_SYN_SENT as u8) {
        return 0;
    }
    let Ok(dst) = s.remote() else {
        return 0;
    };
    let Some((owner, owner_flag)) = owner_of(sk, &dst, state) else {
        return 0; // not a connect in progress
    };
    let local = s.local();
    let client = ClientEnd {
        addr: local.addr,
        port: local.port,
        _pad: [0; 6],
    };
    match refused::<CMPXCHG>(sk, (owner, owner_flag), local.family, client, dst) {
        Ok(r) | Err(r) => r,
    }
}

#[inline(always)]
fn try_receive_reset<const CMPXCHG: bool>(ctx: &TracePointContext) -> Result<u32, u32> {
    let sk = load_u64(ctx, config!(receive_reset.skaddr))?;
    // Most resets end established flows. Where the kernel's BTF gives the state's
    // offset, a socket no longer connecting is passed over without hashing it into
    // the table (the tracepoint fires before the reset changes the state).
    let state = Sock(sk).state();
    if matches!(state, Ok(state) if state != TCP_SYN_SENT as u8) {
        return Ok(0);
    }
    let l = config!(receive_reset);
    let dst: ([u8; 16], u16) = (field(ctx, l.daddr_v6)?, field(ctx, l.dport)?);
    let Some(owner) = owner_of(sk, &dst, state) else {
        return Ok(0); // not a connect in progress: a reset of an established flow
    };
    let client = ClientEnd {
        addr: field(ctx, l.saddr_v6)?,
        port: field(ctx, l.sport)?,
        _pad: [0; 6],
    };
    let family = if l.family == MISSING {
        family_of(&dst.0)
    } else {
        field(ctx, l.family)?
    };
    refused::<CMPXCHG>(sk, owner, family, client, dst)
}

/// Who connects with `sk` to `dst`: as recorded when it entered SYN_SENT
/// (`OWNER_FROM_START`), where the state-transition hook runs and saw it; else, when
/// the socket is known to be in SYN_SENT (the kernel's BTF gives the state), read from
/// the socket (`OWNER_FROM_SOCKET`). Neither: not a connect in progress.
#[inline(always)]
fn owner_of(sk: u64, dst: &([u8; 16], u16), state: Result<u8, u32>) -> Option<(Owner, u8)> {
    if let Some(recorded) = connecting::owner_of(sk, destination_tag(&dst.0, dst.1)) {
        // SAFETY: a map value valid for this program run (RCU), copied out.
        return Some((unsafe { *recorded }, flags::OWNER_FROM_START));
    }
    match state {
        Ok(s) if s == TCP_SYN_SENT as u8 => {
            Some((socket_owner::of_connecting(sk), flags::OWNER_FROM_SOCKET))
        }
        _ => None,
    }
}

/// The family of a v6-form address as the record stores it (before 5.6 the record has
/// no family): an IPv4 socket's address is v4-mapped.
#[inline(always)]
fn family_of(addr: &[u8; 16]) -> u16 {
    let mapped = v4_mapped([addr[12], addr[13], addr[14], addr[15]]);
    if *addr == mapped { AF_INET } else { AF_INET6 }
}

/// A refused connect of socket `sk` by `owner` (with the flag saying where it was
/// found), from its own end `client`, where the reset went, to `dst` (address,
/// host-order port).
#[inline(always)]
fn refused<const CMPXCHG: bool>(
    sk: u64,
    (owner, owner_flag): (Owner, u8),
    family: u16,
    client: ClientEnd,
    dst: ([u8; 16], u16),
) -> Result<u32, u32> {
    count(counter::seen(kind::REFUSED));
    let now = now_boot_ns();
    let cgroup_id = owner.cgroup_id;
    // The container pays, not each sub-cgroup it makes (unmarked: the cgroup itself).
    let charged = charge::of_socket(sk, cgroup_id).cgroup_id;
    let ledger = refusals();
    if !budget::admit::<CMPXCHG>(&ledger, config!(refusal_budget), charged, now) {
        budget::suppress(&ledger, charged);
        forget_local_refusal(&client);
        return Ok(0);
    }
    let Some(mut entry) = EVENTS.reserve::<SocketEvent>(0) else {
        count(counter::lost(kind::REFUSED));
        return Ok(0);
    };
    let ev = entry.as_mut_ptr();
    // SAFETY: `ev` is a reserved record we own until submit. Fields are written in
    // place to stay within the 512-byte stack.
    unsafe {
        (*ev).header.kind = kind::REFUSED;
        (*ev).header.flags = owner_flag;
        (*ev).header._pad = [0; 6];
        (*ev).header.ts_boot_ns = now;
        (*ev).owner = owner;
        (*ev).family = family;
        (*ev).src_addr = client.addr;
        (*ev).src_port = client.port;
        (*ev).dst_addr = dst.0;
        (*ev).dst_port = dst.1;
        // The connect's start is not recorded: a clock read on every connect for a
        // value nothing uses.
        (*ev).start_boot_ns = 0;
        (*ev).local_dst_addr = [0; 16];
        (*ev).local_dst_port = 0;
        if let Some(local) = LOCAL_REFUSALS.get_ptr(&client) {
            if now.wrapping_sub((*local).ts_boot_ns) < LOCAL_REFUSAL_MAX_AGE_NS {
                (*ev).header.flags |= flags::HAS_LOCAL_DST;
                (*ev).local_dst_addr = (*local).addr;
                (*ev).local_dst_port = (*local).port;
            }
        }
    }
    forget_local_refusal(&client);
    entry.submit(0);
    Ok(0)
}

#[tracepoint]
pub fn tcp_send_reset(ctx: TracePointContext) -> u32 {
    match try_send_reset(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

#[inline(always)]
fn try_send_reset(ctx: &TracePointContext) -> Result<u32, u32> {
    if load_u64(ctx, config!(send_reset.skaddr))? != 0 {
        return Ok(0); // a socket's own reset, not "no listener here"
    }
    let l = config!(send_reset);
    // The reset goes from the refusing end (saddr) to the client (daddr).
    let refusing: [u8; 28] = field(ctx, l.saddr)?;
    let client: [u8; 28] = field(ctx, l.daddr)?;
    let (Some((addr, port)), Some((client_addr, client_port))) =
        (sockaddr(&refusing), sockaddr(&client))
    else {
        return Ok(0);
    };
    let key = ClientEnd {
        addr: client_addr,
        port: client_port,
        _pad: [0; 6],
    };
    let value = LocalRefusal {
        addr,
        port,
        _pad: [0; 6],
        ts_boot_ns: now_boot_ns(),
    };
    if LOCAL_REFUSALS.insert(&key, &value, 0).is_ok() {
        count(counter::LOCAL_REFUSALS_MADE);
    }
    Ok(0)
}

/// Removes the local refusal a reset to `client` used (or found too old); counted,
/// so the agent can tell the entries the full table evicted unused.
#[inline(always)]
fn forget_local_refusal(client: &ClientEnd) {
    if LOCAL_REFUSALS.remove(client).is_ok() {
        count(counter::LOCAL_REFUSALS_USED);
    }
}

/// Decodes a `sockaddr_in` / `sockaddr_in6` into (v6-form address, host-order port).
#[inline(always)]
fn sockaddr(raw: &[u8; 28]) -> Option<([u8; 16], u16)> {
    let family = u16::from_ne_bytes([raw[0], raw[1]]);
    let port = u16::from_be_bytes([raw[2], raw[3]]);
    match family {
        AF_INET => Some((v4_mapped([raw[4], raw[5], raw[6], raw[7]]), port)),
        AF_INET6 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(&raw[8..24]);
            Some((a, port))
        }
        _ => None,
    }
}
