//! `sock:inet_sock_set_state`: SYN_SENT entry/exit for the connect path, LISTEN
//! entry/exit for listeners. A successful connect costs one map insert and one
//! delete, and sends nothing to userspace.

use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use super::{
    CONNECTING, IPPROTO_TCP, PendingConnect, TCP_CLOSE, TCP_LISTEN, TCP_SYN_SENT, config,
    ctx_load::{load_addr16, load_i32, load_u16, load_u64},
    current_owner, listen, now_boot_ns,
};

#[tracepoint]
pub fn inet_sock_set_state(ctx: TracePointContext) -> u32 {
    match try_set_state(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

#[inline(always)]
fn try_set_state(ctx: &TracePointContext) -> Result<u32, u32> {
    // Earliest filter: the two states, by direct loads, before anything else. Most
    // state changes on a node (established, closing, time-wait) are none of ours.
    let old = load_i32(ctx, config!(set_state.oldstate))?;
    let new = load_i32(ctx, config!(set_state.newstate))?;
    let ours = new == TCP_SYN_SENT
        || old == TCP_SYN_SENT
        || new == TCP_LISTEN
        || (old == TCP_LISTEN && new == TCP_CLOSE);
    if !ours || load_u16(ctx, config!(set_state.protocol))? != IPPROTO_TCP {
        return Ok(0);
    }
    let sk = load_u64(ctx, config!(set_state.skaddr))?;
    let l = config!(set_state);
    if new == TCP_SYN_SENT {
        let pending = PendingConnect {
            owner: current_owner(),
            dst_addr: load_addr16(ctx, l.daddr_v6)?,
            dst_port: load_u16(ctx, l.dport)?,
            family: load_u16(ctx, l.family)?,
            _pad: 0,
            start_boot_ns: now_boot_ns(),
        };
        let _ = CONNECTING.insert(&sk, &pending, 0);
    } else if old == TCP_SYN_SENT {
        let _ = CONNECTING.remove(&sk);
    }
    if new == TCP_LISTEN {
        listen::started(ctx, &l, sk)?;
    } else if old == TCP_LISTEN && new == TCP_CLOSE {
        // Only a real close: a child socket cloned from a listener also leaves LISTEN
        // (to SYN_RECV), in the connecting task's context.
        listen::stopped(ctx, &l, sk)?;
    }
    Ok(0)
}
