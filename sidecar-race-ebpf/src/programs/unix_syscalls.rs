//! The fallback for kernels without BTF (or when forced): the `connect` and `sendto`
//! syscall tracepoints, filtered to AF_UNIX in the kernel. Entry remembers the user's
//! address per thread; exit reads the result and, for a refusal, the path.
//!
//! These hooks see every connect and addressed send on the node, TCP's included, so
//! the common case is kept short. Where the kernel lends a task's registers (5.15+
//! with BTF) only the exits are hooked: a call that was not refused returns at once,
//! and a refusal finds its address in the registers the syscall was entered with.
//! Elsewhere entry and exit pair up through a per-thread map: fields are loaded from
//! the record directly, only the address family is read from user memory, and an exit
//! returns at once unless an AF_UNIX call is in progress somewhere.

use aya_ebpf::{
    bindings::BPF_ANY,
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user, generated},
    macros::{map, tracepoint},
    maps::{Array, LruHashMap},
    programs::TracePointContext,
};
use sidecar_race_ebpf::{
    abi::AF_UNIX,
    unix::{hook, is_refusal},
};

use super::{
    atomics::atomic_add,
    ctx_load::load_u64,
    unix_sock::{self, Details, PathSource},
};

/// An AF_UNIX connect or sendto in progress, by thread.
#[repr(C)]
#[derive(Clone, Copy)]
struct PendingCall {
    addr: u64,
    addr_len: i64,
    hook: u8,
    _pad: [u8; 7],
}

#[map]
static UNIX_CALLS: LruHashMap<u64, PendingCall> = LruHashMap::with_max_entries(4_096, 0);

/// How many entries `UNIX_CALLS` holds, node-wide (one slot, atomic adds): while it is
/// 0 an exit has nothing to look up. An entry the LRU evicts leaves it one too high,
/// which only costs lookups, never a missed refusal.
#[map]
static UNIX_CALLS_OPEN: Array<u64> = Array::with_max_entries(1, 0);

#[tracepoint]
pub fn unix_sys_enter_connect(ctx: TracePointContext) -> u32 {
    let a = unix_sock::config().syscalls;
    entered(
        &ctx,
        a.connect_addr,
        a.connect_addrlen,
        hook::SYSCALL_CONNECT,
    )
}

#[tracepoint]
pub fn unix_sys_enter_sendto(ctx: TracePointContext) -> u32 {
    let a = unix_sock::config().syscalls;
    entered(&ctx, a.sendto_addr, a.sendto_addrlen, hook::SYSCALL_SENDTO)
}

budgeted!(
    /// Shared by `sys_exit_connect` and `sys_exit_sendto`.
    #[tracepoint]
    unix_sys_exit / unix_sys_exit_plain (TracePointContext) => exit
);

#[inline(always)]
fn exit<const CMPXCHG: bool>(ctx: &TracePointContext) -> u32 {
    let Some(open) = UNIX_CALLS_OPEN.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: the array's one u64, valid for this program run; other CPUs change it
    // only by atomic adds.
    if unsafe { core::ptr::read_volatile(open) } == 0 {
        return 0;
    }
    let Some(call) = unix_sock::take_call(&UNIX_CALLS) else {
        return 0;
    };
    // SAFETY: as above; adding 2^64 - 1 takes one away.
    unsafe { atomic_add(open, u64::MAX) };
    match refusal(ctx) {
        Some(ret) => report::<CMPXCHG>(call.addr, call.addr_len, call.hook, ret),
        None => 0,
    }
}

/// `sys_exit_connect` where the kernel lends the task's registers: the only program
/// on the connect path.
#[tracepoint]
pub fn unix_sys_exit_connect_regs(ctx: TracePointContext) -> u32 {
    let a = unix_sock::config().syscalls;
    exited(
        &ctx,
        a.regs_connect_addr,
        a.regs_connect_addrlen,
        hook::SYSCALL_CONNECT,
    )
}

/// `sys_exit_sendto`, likewise.
#[tracepoint]
pub fn unix_sys_exit_sendto_regs(ctx: TracePointContext) -> u32 {
    let a = unix_sock::config().syscalls;
    exited(
        &ctx,
        a.regs_sendto_addr,
        a.regs_sendto_addrlen,
        hook::SYSCALL_SENDTO,
    )
}

#[inline(always)]
fn exited(ctx: &TracePointContext, addr_at: u16, len_at: u16, via: u8) -> u32 {
    let Some(ret) = refusal(ctx) else {
        return 0;
    };
    // SAFETY: helpers without preconditions (5.11+ and 5.15+); the agent loads these
    // programs only where the verifier accepts them.
    let regs = unsafe { generated::bpf_task_pt_regs(generated::bpf_get_current_task_btf()) } as u64;
    // One read at a time, each checked before the next: with both read first and
    // checked together, LLVM kept the first one's pointer in a register the read
    // helper's call clobbers, read on the path where that read had failed, and the
    // verifier refused the program (`R3 !read_ok`), so every kernel fell back to entry
    // and exit. The length only for an AF_UNIX address (a TCP refusal stops before).
    let Some(addr) = unix_sock::read::<u64>(regs, addr_at) else {
        return 0;
    };
    if !is_unix(addr) {
        return 0;
    }
    let Some(addr_len) = unix_sock::read::<u64>(regs, len_at) else {
        return 0;
    };
    // Only on 5.15+ (the helpers above): compare-and-exchange is there.
    report::<true>(addr, addr_len as i32 as i64, via, ret)
}

/// The syscall's result when it is a refusal.
#[inline(always)]
fn refusal(ctx: &TracePointContext) -> Option<i64> {
    let ret = load_u64(ctx, unix_sock::config().syscalls.exit_ret).ok()? as i64;
    is_refusal(ret).then_some(ret)
}

/// Whether the user's address at `addr` is an AF_UNIX one (0: a connected send).
#[inline(always)]
fn is_unix(addr: u64) -> bool {
    // SAFETY: bpf_probe_read_user checks the access.
    addr != 0 && unsafe { bpf_probe_read_user(addr as *const u16) } == Ok(AF_UNIX)
}

/// A refused AF_UNIX call to the user's address at `addr`, `addr_len` bytes.
#[inline(always)]
fn report<const CMPXCHG: bool>(addr: u64, addr_len: i64, via: u8, ret: i64) -> u32 {
    let details = Details {
        error: -(ret as i32),
        sock_type: 0,
        netns: 0,
        inode: 0,
        hook: via,
    };
    let path = PathSource::of_sockaddr(addr, addr_len, true);
    match unix_sock::refused::<CMPXCHG>(&path, &details) {
        Ok(r) | Err(r) => r,
    }
}

#[inline(always)]
fn entered(ctx: &TracePointContext, addr_at: u16, len_at: u16, via: u8) -> u32 {
    let (Ok(addr), Ok(addr_len)) = (load_u64(ctx, addr_at), load_u64(ctx, len_at)) else {
        return 0;
    };
    if !is_unix(addr) {
        return 0;
    }
    let call = PendingCall {
        addr,
        addr_len: addr_len as i32 as i64,
        hook: via,
        _pad: [0; 7],
    };
    if UNIX_CALLS
        .insert(&bpf_get_current_pid_tgid(), &call, BPF_ANY as u64)
        .is_ok()
        && let Some(open) = UNIX_CALLS_OPEN.get_ptr_mut(0)
    {
        // SAFETY: the array's one u64, valid for this program run.
        unsafe { atomic_add(open, 1) };
    }
    0
}
