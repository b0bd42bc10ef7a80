//! Unix listeners for the fallback without BTF: `bind` on AF_UNIX remembers the path
//! per process and descriptor; a later successful `listen` on that descriptor is a
//! listener up. A datagram socket never listens: its successful `bind` is its listener
//! up, known as one by the `socket()` that made the descriptor (`UNIX_DGRAM_FDS`; a
//! descriptor passed in or duplicated is not known so). Closes are not seen this way: a
//! refusal on the path tells the agent the listener is gone.

use aya_ebpf::{
    bindings::BPF_ANY,
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user},
    macros::{map, tracepoint},
    maps::{LruHashMap, PerCpuArray},
    programs::TracePointContext,
};
use sidecar_race_ebpf::{
    abi::{AF_UNIX, kind},
    unix::{SOCK_DGRAM, SOCK_TYPE_MASK, UNIX_PATH_MAX, hook},
};

use super::{
    charge,
    ctx_load::load_u64,
    helpers::{current_owner, field, now_boot_ns},
    unix_sock::{self, Details, PathSource},
};

/// A `bind` in progress, by thread: the user's address and the descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
struct PendingBind {
    addr: u64,
    addr_len: i64,
    fd: u64,
}

/// A bound AF_UNIX socket, by (process id << 32 | descriptor).
#[repr(C)]
#[derive(Clone, Copy)]
struct Bound {
    path: [u8; UNIX_PATH_MAX],
    len: u32,
    /// Set once its listener was reported (a second listen() only changes the backlog).
    listening: u32,
}

/// An AF_UNIX `socket()` in progress on this CPU: the thread that entered it, and 1
/// for a datagram socket, else 0. One slot per CPU, not a hash keyed by thread:
/// `socket()` of every family of every process on the node passes here, so its entry
/// makes no map operation unless the family is AF_UNIX, and an AF_UNIX one writes this
/// slot in place.
#[repr(C)]
#[derive(Clone, Copy)]
struct SocketCall {
    pid_tgid: u64,
    dgram: u64,
}

#[map]
static UNIX_SOCKET_CALL: PerCpuArray<SocketCall> = PerCpuArray::with_max_entries(1, 0);

/// Unix datagram sockets, by (process id << 32 | descriptor), from their `socket()`.
#[map]
static UNIX_DGRAM_FDS: LruHashMap<u64, u8> = LruHashMap::with_max_entries(16_384, 0);

#[tracepoint]
pub fn unix_sys_enter_socket(ctx: TracePointContext) -> u32 {
    let a = unix_sock::config().syscalls;
    // The argument is an `int` in an 8-byte slot: its low half is what the kernel reads.
    let Ok(family) = load_u64(&ctx, a.socket_family) else {
        return 0;
    };
    if family as u32 != u32::from(AF_UNIX) {
        return 0;
    }
    let Ok(ty) = load_u64(&ctx, a.socket_type) else {
        return 0;
    };
    let Some(slot) = UNIX_SOCKET_CALL.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: this CPU's value of the array's one entry, valid for this program run.
    unsafe {
        (*slot).dgram = u64::from(ty & SOCK_TYPE_MASK == u64::from(SOCK_DGRAM));
        (*slot).pid_tgid = bpf_get_current_pid_tgid();
    }
    0
}

/// What the per-CPU slot costs: where the thread moved to another CPU between the
/// entry and this exit (`socket()` can sleep), or another thread's AF_UNIX `socket()`
/// on the CPU took the slot meanwhile, the slot is not this thread's and the call goes
/// unseen. A datagram socket made so is not known as one: its bind reads as an
/// ordinary bind, as a descriptor passed in does (no listener up). A stream socket made
/// so leaves in place an entry a closed datagram socket left under the same descriptor
/// number: its bind is taken for a datagram socket's (a listener up at bind, not at
/// listen). And the slot a moved thread left behind matches that thread's next
/// `socket()` on the CPU if that call is of another family (an AF_UNIX one writes the
/// slot anew): its descriptor is taken for a datagram socket's, harmless (no AF_UNIX
/// bind succeeds on it) until the number is reused by a Unix socket that no
/// `socket()` made (accepted, from `socketpair`, passed in).
#[tracepoint]
pub fn unix_sys_exit_socket(ctx: TracePointContext) -> u32 {
    let Some(slot) = UNIX_SOCKET_CALL.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: this CPU's value of the array's one entry, valid for this program run.
    let call = unsafe { *slot };
    // No thread has pid_tgid 0 in process context (that is the idle task).
    if call.pid_tgid == 0 || call.pid_tgid != bpf_get_current_pid_tgid() {
        return 0;
    }
    // SAFETY: as above.
    unsafe { (*slot).pid_tgid = 0 };
    let Ok(fd) = load_u64(&ctx, unix_sock::config().syscalls.exit_ret) else {
        return 0;
    };
    let fd = fd as i64;
    if fd < 0 {
        return 0;
    }
    let key = bound_key(call.pid_tgid, fd as u64);
    if call.dgram != 0 {
        let _ = UNIX_DGRAM_FDS.insert(&key, &1, BPF_ANY as u64);
        return 0;
    }
    // A descriptor number reused by a stream socket is no datagram socket. A lookup
    // first: a stream socket's number is almost never in the table, and a lookup costs
    // less than a delete.
    // SAFETY: only checks presence.
    if unsafe { UNIX_DGRAM_FDS.get(&key) }.is_some() {
        let _ = UNIX_DGRAM_FDS.remove(&key);
    }
    0
}

#[map]
static UNIX_BINDING: LruHashMap<u64, PendingBind> = LruHashMap::with_max_entries(1_024, 0);

#[map]
static UNIX_BOUND: LruHashMap<u64, Bound> = LruHashMap::with_max_entries(16_384, 0);

/// A `listen` in progress, by thread: the key of its `UNIX_BOUND` entry.
#[map]
static UNIX_LISTENING_CALLS: LruHashMap<u64, u64> = LruHashMap::with_max_entries(1_024, 0);

#[tracepoint]
pub fn unix_sys_enter_bind(ctx: TracePointContext) -> u32 {
    let a = unix_sock::config().syscalls;
    let (Ok(addr), Ok(addr_len), Ok(fd)) = (
        field::<u64>(&ctx, a.bind_addr),
        field::<i64>(&ctx, a.bind_addrlen),
        field::<u64>(&ctx, a.fd),
    ) else {
        return 0;
    };
    // SAFETY: bpf_probe_read_user checks the access.
    if addr == 0 || unsafe { bpf_probe_read_user(addr as *const u16) } != Ok(AF_UNIX) {
        return 0;
    }
    let pending = PendingBind {
        addr,
        addr_len: addr_len as i32 as i64,
        fd,
    };
    let _ = UNIX_BINDING.insert(&bpf_get_current_pid_tgid(), &pending, BPF_ANY as u64);
    0
}

budgeted!(
    #[tracepoint]
    unix_sys_exit_bind / unix_sys_exit_bind_plain (TracePointContext) => bind_exited
);

#[inline(always)]
fn bind_exited<const CMPXCHG: bool>(ctx: &TracePointContext) -> u32 {
    let Some(pending) = unix_sock::take_call(&UNIX_BINDING) else {
        return 0;
    };
    if field::<i64>(ctx, unix_sock::config().syscalls.exit_ret) != Ok(0) {
        return 0;
    }
    let src = PathSource::of_sockaddr(pending.addr, pending.addr_len, true);
    let mut n = src.len;
    if n > UNIX_PATH_MAX as u32 {
        n = UNIX_PATH_MAX as u32;
    }
    let mut bound = Bound {
        path: [0; UNIX_PATH_MAX],
        len: 0,
        listening: 0,
    };
    // SAFETY: at most `sun_path`'s size into a buffer of that size; the helper checks
    // the user source.
    let copied = unsafe {
        aya_ebpf::helpers::generated::bpf_probe_read_user(
            bound.path.as_mut_ptr() as *mut _,
            n,
            src.ptr as *const _,
        )
    };
    if copied != 0 {
        return 0;
    }
    bound.len = n;
    let key = bound_key(bpf_get_current_pid_tgid(), pending.fd);
    let _ = UNIX_BOUND.insert(&key, &bound, BPF_ANY as u64);
    // SAFETY: only checks presence.
    if unsafe { UNIX_DGRAM_FDS.get(&key) }.is_none() {
        return 0;
    }
    // A datagram socket bound: it receives from now on (it never listens).
    let Some(bound) = UNIX_BOUND.get_ptr_mut(&key) else {
        return 0;
    };
    // SAFETY: a map value valid for this program run (RCU).
    unsafe { (*bound).listening = 1 };
    listener_up::<CMPXCHG>(bound, SOCK_DGRAM, hook::SYSCALL_DGRAM_BIND)
}

#[tracepoint]
pub fn unix_sys_enter_listen(ctx: TracePointContext) -> u32 {
    let Ok(fd) = field::<u64>(&ctx, unix_sock::config().syscalls.fd) else {
        return 0;
    };
    let id = bpf_get_current_pid_tgid();
    let key = bound_key(id, fd);
    // SAFETY: only checks presence.
    if unsafe { UNIX_BOUND.get(&key) }.is_some() {
        let _ = UNIX_LISTENING_CALLS.insert(&id, &key, BPF_ANY as u64);
    }
    0
}

budgeted!(
    #[tracepoint]
    unix_sys_exit_listen / unix_sys_exit_listen_plain (TracePointContext) => listen_exited
);

#[inline(always)]
fn listen_exited<const CMPXCHG: bool>(ctx: &TracePointContext) -> u32 {
    let Some(key) = unix_sock::take_call(&UNIX_LISTENING_CALLS) else {
        return 0;
    };
    if field::<i64>(ctx, unix_sock::config().syscalls.exit_ret) != Ok(0) {
        return 0;
    }
    let Some(bound) = UNIX_BOUND.get_ptr_mut(&key) else {
        return 0;
    };
    // SAFETY: a map value valid for this program run (RCU); a second listen() on the
    // same descriptor finds the flag set.
    unsafe {
        if (*bound).listening != 0 {
            return 0;
        }
        (*bound).listening = 1;
    }
    listener_up::<CMPXCHG>(bound, 0, hook::SYSCALL_LISTEN)
}

/// The listener record of the socket bound at `bound` (a map value), seen by `hook`.
#[inline(always)]
fn listener_up<const CMPXCHG: bool>(bound: *mut Bound, sock_type: u16, hook: u8) -> u32 {
    let owner = current_owner();
    let path = PathSource {
        // SAFETY: the address of the path inside the map value.
        ptr: unsafe { (*bound).path.as_ptr() } as u64,
        // SAFETY: as above.
        len: unsafe { (*bound).len },
        user: false,
    };
    let details = Details {
        error: 0,
        sock_type,
        netns: 0,
        inode: 0,
        hook,
    };
    match unix_sock::listener::<CMPXCHG>(
        kind::UNIX_LISTEN,
        0,
        &owner,
        now_boot_ns(),
        &charge::of_current_task(owner.cgroup_id),
        &path,
        &details,
    ) {
        Ok(r) | Err(r) => r,
    }
}

/// The process (not the thread: descriptors are per process) and the descriptor.
#[inline(always)]
fn bound_key(pid_tgid: u64, fd: u64) -> u64 {
    (pid_tgid & 0xffff_ffff_0000_0000) | (fd & 0xffff_ffff)
}
