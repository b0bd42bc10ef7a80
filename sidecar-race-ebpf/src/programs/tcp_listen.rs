//! TCP listeners at listen start and stop, where the kernel lets a program on a kernel
//! function (`fexit`/`fentry`, else a kprobe and kretprobe): they run once per
//! listen() and once per listener's close, never on a connection. Where neither can
//! be attached the state-transition tracepoint sees the same (`connect.rs`).
//!
//! Listen start is `inet_csk_listen_start`, read at its return: its return value sits
//! at a place that depends on the kernel (5.10 still passes a backlog), so success is
//! read from the socket, left in LISTEN only by a start that worked. Listen stop is
//! `inet_csk_listen_stop`, which every TCP listener's close and disconnect calls once.

use aya_ebpf::{
    bindings::BPF_ANY,
    helpers::bpf_get_current_pid_tgid,
    macros::{fentry, fexit, kprobe, kretprobe, map},
    maps::LruHashMap,
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};

use super::{
    helpers::{IPPROTO_TCP, TCP_LISTEN},
    listen,
    set_state::{SetStateSource, Sock},
    unix_kprobes::arg,
    unix_sock::take_call,
};

/// The socket of an `inet_csk_listen_start` call in progress, by thread, from its
/// kprobe to its kretprobe.
#[map]
static TCP_LISTEN_CALLS: LruHashMap<u64, u64> = LruHashMap::with_max_entries(1_024, 0);

budgeted!(
    /// `int inet_csk_listen_start(struct sock *sk)` (5.10: `, int backlog`).
    #[fexit(function = "inet_csk_listen_start")]
    tcp_listen_start / tcp_listen_start_plain (FExitContext) => on_listen_start
);

budgeted!(
    /// `void inet_csk_listen_stop(struct sock *sk)`.
    #[fentry(function = "inet_csk_listen_stop")]
    tcp_listen_stop / tcp_listen_stop_plain (FEntryContext) => on_listen_stop
);

/// Entry of `inet_csk_listen_start`: keeps its socket for the return.
#[kprobe]
pub fn tcp_kprobe_listen_start(ctx: ProbeContext) -> u32 {
    if let Some(sk) = arg(ctx.regs as u64, 0) {
        let _ = TCP_LISTEN_CALLS.insert(&bpf_get_current_pid_tgid(), &sk, BPF_ANY as u64);
    }
    0
}

budgeted!(
    /// Return of `inet_csk_listen_start`.
    #[kretprobe]
    tcp_kretprobe_listen_start / tcp_kretprobe_listen_start_plain (RetProbeContext) =>
        on_kretprobe_listen_start
);

budgeted!(
    /// Entry of `inet_csk_listen_stop`.
    #[kprobe]
    tcp_kprobe_listen_stop / tcp_kprobe_listen_stop_plain (ProbeContext) =>
        on_kprobe_listen_stop
);

#[inline(always)]
fn on_listen_start<const CMPXCHG: bool>(ctx: &FExitContext) -> u32 {
    listen_started::<CMPXCHG>(ctx.arg(0))
}

#[inline(always)]
fn on_listen_stop<const CMPXCHG: bool>(ctx: &FEntryContext) -> u32 {
    listen_stopped::<CMPXCHG>(ctx.arg(0))
}

#[inline(always)]
fn on_kretprobe_listen_start<const CMPXCHG: bool>(_ctx: &RetProbeContext) -> u32 {
    take_call(&TCP_LISTEN_CALLS).map_or(0, listen_started::<CMPXCHG>)
}

#[inline(always)]
fn on_kprobe_listen_stop<const CMPXCHG: bool>(ctx: &ProbeContext) -> u32 {
    arg(ctx.regs as u64, 0).map_or(0, listen_stopped::<CMPXCHG>)
}

/// `inet_csk_listen_start(sk)` returned: a TCP socket now in LISTEN listens (MPTCP's
/// own socket is not TCP; its subflow's listen is seen as TCP's, as by the tracepoint).
#[inline(always)]
fn listen_started<const CMPXCHG: bool>(sk: u64) -> u32 {
    let s = Sock(sk);
    if s.state() != Ok(TCP_LISTEN as u8) || s.protocol() != Ok(IPPROTO_TCP) {
        return 0; // the start failed (the port taken): the socket is back in CLOSE
    }
    match listen::started::<CMPXCHG, Sock>(&s, sk) {
        Ok(r) | Err(r) => r,
    }
}

/// `inet_csk_listen_stop(sk)`: a TCP listener closes (or disconnects).
#[inline(always)]
fn listen_stopped<const CMPXCHG: bool>(sk: u64) -> u32 {
    let s = Sock(sk);
    if s.protocol() != Ok(IPPROTO_TCP) {
        return 0;
    }
    match listen::stopped::<CMPXCHG, Sock>(&s, sk) {
        Ok(r) | Err(r) => r,
    }
}
