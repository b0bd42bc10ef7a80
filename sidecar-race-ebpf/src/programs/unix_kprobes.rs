//! The same Unix socket hooks as `fexit`, by kprobes and kretprobes, for kernels that
//! refuse `fexit` (no BPF trampolines: arm64 before 6.5) but have kprobes. A function's
//! arguments are gone by its return, so its entry keeps them per thread
//! (`UNIX_KPROBE_CALLS`, bounded) and its return takes them; what the return does
//! with them is the `fexit` programs' own code (`unix_connect`, `unix_listen`).
//!
//! Registers are read where the agent says this architecture keeps them (the object
//! is built once for every architecture). Without the kernel's BTF the struct offsets
//! are unknown: connects are still seen with their path and error (the address is
//! read as the caller gave it), but not the socket's type or network namespace,
//! datagram sends to a path or listeners.
//!
//! A kretprobe has a fixed number of instances (aya cannot set `maxactive`: the
//! kernel's default, max(10, 2 × CPUs)); a return that found none free runs no
//! program. Its entry is then left behind, replaced by the thread's next call or
//! evicted, and counted so (`UNIX_KPROBE_CALLS_MADE` less `_USED` less what the
//! table holds).

use aya_ebpf::{
    bindings::BPF_ANY,
    helpers::bpf_get_current_pid_tgid,
    macros::{kprobe, kretprobe, map},
    maps::LruHashMap,
    programs::{ProbeContext, RetProbeContext},
};
use sidecar_race_ebpf::{
    abi::counter,
    unix::{UNIX_KPROBE_CALLS as ENTRIES, hook, is_refusal},
};

use super::{
    maps::count,
    unix_connect::{send_refused, sendmsg_name, sendmsg_refused},
    unix_listen::{listened, released},
    unix_sock::{self, read, take_call},
};

/// A call's first three arguments, from its entry to its return, by thread.
#[repr(C)]
#[derive(Clone, Copy)]
struct Call {
    args: [u64; 3],
}

#[map]
static UNIX_KPROBE_CALLS: LruHashMap<u64, Call> = LruHashMap::with_max_entries(ENTRIES, 0);

/// Argument `n` of the probed function, at its entry.
#[inline(always)]
pub(super) fn arg(regs: u64, n: usize) -> Option<u64> {
    read::<u64>(regs, unix_sock::config().kprobe.args[n])
}

/// The probed function's return value (an `int`), at its return.
#[inline(always)]
fn ret(regs: u64) -> Option<i64> {
    read::<u64>(regs, unix_sock::config().kprobe.ret).map(|r| i64::from(r as i32))
}

#[inline(always)]
fn keep(regs: u64) -> u32 {
    let (Some(a0), Some(a1), Some(a2)) = (arg(regs, 0), arg(regs, 1), arg(regs, 2)) else {
        return 0;
    };
    let call = Call { args: [a0, a1, a2] };
    if UNIX_KPROBE_CALLS
        .insert(&bpf_get_current_pid_tgid(), &call, BPF_ANY as u64)
        .is_ok()
    {
        count(counter::UNIX_KPROBE_CALLS_MADE);
    }
    0
}

/// The current thread's call, taken, with the function's return value.
#[inline(always)]
fn returned(regs: u64) -> Option<(Call, i64)> {
    let call = take_call(&UNIX_KPROBE_CALLS)?;
    count(counter::UNIX_KPROBE_CALLS_USED);
    Some((call, ret(regs)?))
}

/// Entry of `unix_stream_connect`, `unix_dgram_connect` and `unix_listen`.
#[kprobe]
pub fn unix_kprobe_enter(ctx: ProbeContext) -> u32 {
    keep(ctx.regs as u64)
}

/// Entry of `unix_dgram_sendmsg`: kept only when the send names an address (a
/// connected sender's refusal says nothing about a path), so a busy connected
/// datagram socket (syslog) costs no table entry.
#[kprobe]
pub fn unix_kprobe_enter_sendmsg(ctx: ProbeContext) -> u32 {
    let regs = ctx.regs as u64;
    if arg(regs, 1).and_then(sendmsg_name).is_none() {
        return 0;
    }
    keep(regs)
}

budgeted!(
    /// Return of `unix_stream_connect` / `unix_dgram_connect`
    /// `(struct socket *, struct sockaddr *, int addr_len, int flags)`.
    #[kretprobe]
    unix_kretprobe_connect / unix_kretprobe_connect_plain (RetProbeContext) => connect_returned
);

budgeted!(
    /// Return of `unix_dgram_sendmsg(struct socket *, struct msghdr *, size_t)`.
    #[kretprobe]
    unix_kretprobe_sendmsg / unix_kretprobe_sendmsg_plain (RetProbeContext) => sendmsg_returned
);

budgeted!(
    /// Return of `unix_listen(struct socket *, int backlog)`.
    #[kretprobe]
    unix_kretprobe_listen / unix_kretprobe_listen_plain (RetProbeContext) => listen_returned
);

budgeted!(
    /// Entry of `unix_release(struct socket *)`: nothing to keep, the socket is read now.
    #[kprobe]
    unix_kprobe_release / unix_kprobe_release_plain (ProbeContext) => release_entered
);

#[inline(always)]
fn connect_returned<const CMPXCHG: bool>(ctx: &RetProbeContext) -> u32 {
    match returned(ctx.regs as u64) {
        Some((c, r)) if is_refusal(r) => send_refused::<CMPXCHG>(
            c.args[0],
            c.args[1],
            i64::from(c.args[2] as i32),
            r,
            hook::CONNECT,
        ),
        _ => 0,
    }
}

#[inline(always)]
fn sendmsg_returned<const CMPXCHG: bool>(ctx: &RetProbeContext) -> u32 {
    match returned(ctx.regs as u64) {
        Some((c, r)) if is_refusal(r) => sendmsg_refused::<CMPXCHG>(c.args[0], c.args[1], r),
        _ => 0,
    }
}

#[inline(always)]
fn listen_returned<const CMPXCHG: bool>(ctx: &RetProbeContext) -> u32 {
    match returned(ctx.regs as u64) {
        Some((c, 0)) => listened::<CMPXCHG>(c.args[0]),
        _ => 0,
    }
}

#[inline(always)]
fn release_entered<const CMPXCHG: bool>(ctx: &ProbeContext) -> u32 {
    arg(ctx.regs as u64, 0).map_or(0, released::<CMPXCHG>)
}
