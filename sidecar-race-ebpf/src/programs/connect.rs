//! `sock:inet_sock_set_state`: SYN_SENT entry/exit for the connect path, LISTEN
//! entry/exit for listeners. A successful connect costs one map insert and one
//! delete, and sends nothing to userspace.

use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use super::{
    CONNECTING, IPPROTO_TCP, PendingConnect, TCP_CLOSE, TCP_LISTEN, TCP_SYN_SENT, config,
    current_owner, field, listen, now_boot_ns,
};

#[tracepoint]
pub fn inet_sock_set_state(ctx: TracePointContext) -> u32 {
    match try_set_state(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

#[inline(always)]
fn try_set_state(ctx: &TracePointContext) -> Result<u32, u32> {
    let l = config!(set_state);
    if field::<u16>(ctx, l.protocol)? != IPPROTO_TCP {
        return Ok(0);
    }
    let old: i32 = field(ctx, l.oldstate)?;
    let new: i32 = field(ctx, l.newstate)?;
    let sk: u64 = field(ctx, l.skaddr)?;
    if new == TCP_SYN_SENT {
        let pending = PendingConnect {
            owner: current_owner(),
            dst_addr: field(ctx, l.daddr_v6)?,
            dst_port: field(ctx, l.dport)?,
            family: field(ctx, l.family)?,
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
