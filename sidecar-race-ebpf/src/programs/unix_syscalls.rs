//! The fallback for kernels without BTF (or when forced): the `connect` and `sendto`
//! syscall tracepoints, filtered to AF_UNIX in the kernel. Entry remembers the user's
//! address per thread; exit reads the result and, for a refusal, the path.

use aya_ebpf::{
    bindings::BPF_ANY,
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user},
    macros::{map, tracepoint},
    maps::LruHashMap,
    programs::TracePointContext,
};
use sidecar_race_ebpf::{
    abi::AF_UNIX,
    unix::{hook, is_refusal},
};

use super::{
    field,
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

/// Shared by `sys_exit_connect` and `sys_exit_sendto`.
#[tracepoint]
pub fn unix_sys_exit(ctx: TracePointContext) -> u32 {
    let Some(call) = unix_sock::take_call(&UNIX_CALLS) else {
        return 0;
    };
    let Ok(ret) = field::<i64>(&ctx, unix_sock::config().syscalls.exit_ret) else {
        return 0;
    };
    if !is_refusal(ret) {
        return 0;
    }
    let details = Details {
        error: -(ret as i32),
        sock_type: 0,
        netns: 0,
        inode: 0,
        hook: call.hook,
    };
    let path = PathSource::of_sockaddr(call.addr, call.addr_len, true);
    match unix_sock::refused(&path, &details) {
        Ok(r) | Err(r) => r,
    }
}

#[inline(always)]
fn entered(ctx: &TracePointContext, addr_at: u16, len_at: u16, via: u8) -> u32 {
    let (Ok(addr), Ok(addr_len)) = (field::<u64>(ctx, addr_at), field::<i64>(ctx, len_at)) else {
        return 0;
    };
    if addr == 0 {
        return 0; // a connected send
    }
    // SAFETY: bpf_probe_read_user checks the access.
    let family = unsafe { bpf_probe_read_user(addr as *const u16) };
    if family != Ok(AF_UNIX) {
        return 0;
    }
    let call = PendingCall {
        addr,
        addr_len: addr_len as i32 as i64,
        hook: via,
        _pad: [0; 7],
    };
    let _ = UNIX_CALLS.insert(&bpf_get_current_pid_tgid(), &call, BPF_ANY as u64);
    0
}
