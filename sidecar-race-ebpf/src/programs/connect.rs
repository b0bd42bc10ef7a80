//! `inet_sock_set_state`: SYN_SENT entry/exit for the connect path, LISTEN entry/exit
//! for listeners. A successful connect records its owner and forgets it (see
//! `connecting.rs`), reads nothing of its socket, and sends nothing to userspace. Two
//! hooks with one body: the BTF tracepoint where the kernel has BTF (the states are
//! arguments, and no trace record is filled for each of the node's state changes),
//! else the tracefs tracepoint; each also in a `_plain` form for kernels without
//! compare-and-exchange (before 5.12).

use aya_ebpf::{
    macros::{btf_tracepoint, tracepoint},
    programs::{BtfTracePointContext, TracePointContext},
};

use sidecar_race_ebpf::abi::counter;

use super::{
    connecting,
    ctx_load::{load_i32, load_u64},
    helpers::{IPPROTO_TCP, TCP_CLOSE, TCP_LISTEN, TCP_SYN_SENT, current_owner},
    listen,
    maps::{config, count},
    set_state::{SetStateSource, Sock},
};

#[tracepoint]
pub fn inet_sock_set_state(ctx: TracePointContext) -> u32 {
    on_record::<true>(&ctx)
}

#[tracepoint]
pub fn inet_sock_set_state_plain(ctx: TracePointContext) -> u32 {
    on_record::<false>(&ctx)
}

#[btf_tracepoint(function = "inet_sock_set_state")]
pub fn inet_sock_set_state_btf(ctx: BtfTracePointContext) -> u32 {
    on_args::<true>(&ctx)
}

#[btf_tracepoint(function = "inet_sock_set_state")]
pub fn inet_sock_set_state_btf_plain(ctx: BtfTracePointContext) -> u32 {
    on_args::<false>(&ctx)
}

/// The tracefs tracepoint: the states and the socket from the record.
#[inline(always)]
fn on_record<const CMPXCHG: bool>(ctx: &TracePointContext) -> u32 {
    let states = (|| {
        Ok::<_, u32>((
            load_i32(ctx, config!(set_state.oldstate))?,
            load_i32(ctx, config!(set_state.newstate))?,
        ))
    })();
    let Ok((old, new)) = states else {
        return 0;
    };
    if !ours(old, new) {
        return 0;
    }
    let Ok(sk) = load_u64(ctx, config!(set_state.skaddr)) else {
        return 0;
    };
    match changed::<CMPXCHG, _>(ctx, sk, old, new) {
        Ok(r) | Err(r) => r,
    }
}

/// The BTF tracepoint: (const struct sock *sk, const int oldstate, const int newstate).
#[inline(always)]
fn on_args<const CMPXCHG: bool>(ctx: &BtfTracePointContext) -> u32 {
    let (old, new): (i32, i32) = (ctx.arg(1), ctx.arg(2));
    if !ours(old, new) {
        return 0;
    }
    let sk: u64 = ctx.arg(0);
    match changed::<CMPXCHG, _>(&Sock(sk), sk, old, new) {
        Ok(r) | Err(r) => r,
    }
}

/// Earliest filter, on the two states only: most state changes on a node
/// (established, closing, time-wait) are none of ours.
#[inline(always)]
fn ours(old: i32, new: i32) -> bool {
    new == TCP_SYN_SENT
        || old == TCP_SYN_SENT
        || new == TCP_LISTEN
        || (old == TCP_LISTEN && new == TCP_CLOSE)
}

#[inline(always)]
fn changed<const CMPXCHG: bool, S: SetStateSource>(
    src: &S,
    sk: u64,
    old: i32,
    new: i32,
) -> Result<u32, u32> {
    // Only TCP and MPTCP sockets pass through SYN_SENT, so the connect path skips the
    // protocol read: an MPTCP socket is recorded and forgotten like its subflow, and
    // only a reset of a TCP socket looks one up.
    if new == TCP_SYN_SENT {
        connecting::record::<CMPXCHG>(sk, &current_owner(), src.destination());
        return Ok(0);
    }
    if old == TCP_SYN_SENT {
        if !connecting::forget(sk) && src.protocol()? == IPPROTO_TCP {
            // Evicted by a full table (or in SYN_SENT before the programs were loaded).
            count(counter::CONNECTING_GONE);
        }
        return Ok(0);
    }
    if src.protocol()? != IPPROTO_TCP {
        return Ok(0);
    }
    if new == TCP_LISTEN {
        listen::started::<CMPXCHG, S>(src, sk)?;
    } else if old == TCP_LISTEN && new == TCP_CLOSE {
        // Only a real close: a child socket cloned from a listener also leaves LISTEN
        // (to SYN_RECV), in the connecting task's context.
        listen::stopped::<CMPXCHG, S>(src, sk)?;
    }
    Ok(0)
}
