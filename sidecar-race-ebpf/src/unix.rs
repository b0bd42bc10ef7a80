//! Unix domain sockets: the record the kernel sends for a refused connect or send to
//! a socket path and for a Unix listener, and the offsets the programs read (from the
//! kernel's BTF for the `fexit` and kprobe hooks, the registers of this architecture's
//! calling convention for the kprobes, from tracefs for the syscall fallback).

use core::mem::size_of;

use crate::{
    abi::{Header, Owner},
    layout::MISSING,
};

/// `sizeof(sun_path)`.
pub const UNIX_PATH_MAX: usize = 108;

/// Which hook saw a record ([`UnixEvent::hook`]).
pub mod hook {
    /// `fexit` (or a kretprobe) on `unix_stream_connect` / `unix_dgram_connect`.
    pub const CONNECT: u8 = 1;
    /// `fexit` (or a kretprobe) on `unix_dgram_sendmsg`: a datagram sent to a path
    /// without connecting.
    pub const SENDMSG: u8 = 2;
    /// The `connect` syscall tracepoints (no BTF, or the fallback forced).
    pub const SYSCALL_CONNECT: u8 = 3;
    /// The `sendto` syscall tracepoints.
    pub const SYSCALL_SENDTO: u8 = 4;
    /// `fexit` on `unix_listen` / `fentry` on `unix_release` (or their kprobes).
    pub const LISTENER: u8 = 5;
    /// The `bind` and `listen` syscall tracepoints (listeners up, no close).
    pub const SYSCALL_LISTEN: u8 = 6;
    /// The `bind` syscall tracepoint on a Unix datagram socket (a listener up).
    pub const SYSCALL_DGRAM_BIND: u8 = 7;
}

/// `unix_refused`, `unix_listen` and `unix_listen_closed`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnixEvent {
    pub header: Header,
    pub owner: Owner,
    /// For listeners: when the socket started listening (boot ns); 0 when unknown.
    pub start_boot_ns: u64,
    /// Inode of the socket file (listeners on a path); 0 when unknown or abstract.
    pub inode: u64,
    /// Inode of the socket's network namespace, which abstract names belong to; 0 when
    /// unknown (the syscall fallback).
    pub netns: u32,
    /// For `unix_refused`: the error, positive (`ENOENT`, `ECONNREFUSED`).
    pub error: i32,
    /// Bytes of `path` used. An abstract name starts with a NUL byte.
    pub path_len: u16,
    /// `SOCK_STREAM`, `SOCK_DGRAM`, `SOCK_SEQPACKET`; 0 when unknown.
    pub sock_type: u16,
    /// See [`hook`].
    pub hook: u8,
    pub _pad: [u8; 7],
    /// `sun_path` as given (connect, send) or bound (listeners).
    pub path: [u8; UNIX_PATH_MAX],
}

pub const UNIX_EVENT_SIZE: usize = 192;
const _: () = assert!(size_of::<UnixEvent>() == UNIX_EVENT_SIZE);

/// Errors that make a Unix connect or send a refusal.
pub const ENOENT: i32 = 2;
pub const ECONNREFUSED: i32 = 111;

/// Byte offsets for the `fexit`/`fentry` hooks, from the kernel's BTF.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnixFields {
    /// `socket.sk`.
    pub socket_sk: u16,
    /// `socket.type` (short).
    pub socket_type: u16,
    /// `sock.__sk_common.skc_state` (u8).
    pub sk_state: u16,
    /// `sock.__sk_common.skc_net` (`struct net *`).
    pub sk_net: u16,
    /// `net.ns.inum` (u32).
    pub net_inum: u16,
    /// `unix_sock.addr` (`struct unix_address *`).
    pub unix_addr: u16,
    /// `unix_address.len` (int: bytes of `name` used, family included).
    pub addr_len: u16,
    /// `unix_address.name` (`struct sockaddr_un`).
    pub addr_name: u16,
    /// `unix_sock.path.dentry` (`struct dentry *`).
    pub path_dentry: u16,
    /// `dentry.d_inode`.
    pub dentry_inode: u16,
    /// `inode.i_ino` (unsigned long).
    pub inode_ino: u16,
    /// `msghdr.msg_name` (`void *`, the kernel's copy of the address).
    pub msg_name: u16,
    /// `msghdr.msg_namelen` (int).
    pub msg_namelen: u16,
    pub _pad: u16,
}

impl UnixFields {
    pub const UNSET: UnixFields = UnixFields {
        socket_sk: MISSING,
        socket_type: MISSING,
        sk_state: MISSING,
        sk_net: MISSING,
        net_inum: MISSING,
        unix_addr: MISSING,
        addr_len: MISSING,
        addr_name: MISSING,
        path_dentry: MISSING,
        dentry_inode: MISSING,
        inode_ino: MISSING,
        msg_name: MISSING,
        msg_namelen: MISSING,
        _pad: 0,
    };
}

/// Offsets of the syscall tracepoints' fields (`syscalls:sys_enter_connect`,
/// `sys_enter_sendto`, `sys_exit_*`), from tracefs.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyscallArgs {
    /// `sys_enter_connect.uservaddr`.
    pub connect_addr: u16,
    /// `sys_enter_connect.addrlen`.
    pub connect_addrlen: u16,
    /// `sys_enter_sendto.addr`.
    pub sendto_addr: u16,
    /// `sys_enter_sendto.addr_len`.
    pub sendto_addrlen: u16,
    /// `sys_exit_*.ret`.
    pub exit_ret: u16,
    /// `sys_enter_bind.umyaddr`.
    pub bind_addr: u16,
    /// `sys_enter_bind.addrlen`.
    pub bind_addrlen: u16,
    /// `fd` of `sys_enter_bind` and `sys_enter_listen` (the same offset).
    pub fd: u16,
    /// Where `struct pt_regs` keeps the syscall's arguments at its exit (this
    /// architecture's calling convention): `connect`'s address and its length, then
    /// `sendto`'s. `MISSING` on an architecture the agent does not know.
    pub regs_connect_addr: u16,
    pub regs_connect_addrlen: u16,
    pub regs_sendto_addr: u16,
    pub regs_sendto_addrlen: u16,
    /// `sys_enter_socket.family` and `.type`: which descriptors are Unix datagram
    /// sockets, whose `bind` is their listener (they never `listen`).
    pub socket_family: u16,
    pub socket_type: u16,
}

impl SyscallArgs {
    pub const UNSET: SyscallArgs = SyscallArgs {
        connect_addr: MISSING,
        connect_addrlen: MISSING,
        sendto_addr: MISSING,
        sendto_addrlen: MISSING,
        exit_ret: MISSING,
        bind_addr: MISSING,
        bind_addrlen: MISSING,
        fd: MISSING,
        regs_connect_addr: MISSING,
        regs_connect_addrlen: MISSING,
        regs_sendto_addr: MISSING,
        regs_sendto_addrlen: MISSING,
        socket_family: MISSING,
        socket_type: MISSING,
    };
}

/// Where a kprobe's `struct pt_regs` keeps a kernel function's first three arguments
/// and, at its return, the return value: the calling convention of the kernel's
/// architecture, which the agent (built for it) knows and the eBPF object (built once,
/// for any) does not.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KprobeRegs {
    pub args: [u16; 3],
    pub ret: u16,
}

impl KprobeRegs {
    pub const UNSET: KprobeRegs = KprobeRegs {
        args: [MISSING; 3],
        ret: MISSING,
    };
}

/// Entries of the kprobes' per-thread table of calls in progress (`UNIX_KPROBE_CALLS`,
/// an LRU): a call's arguments from its entry until its return.
pub const UNIX_KPROBE_CALLS: u32 = 4_096;

/// The `UNIX` global, apart from the TCP programs' `Config`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnixConfig {
    pub fields: UnixFields,
    pub syscalls: SyscallArgs,
    pub kprobe: KprobeRegs,
}

const _: () = assert!(size_of::<UnixConfig>() == 64);

impl UnixConfig {
    pub const UNSET: UnixConfig = UnixConfig {
        fields: UnixFields::UNSET,
        syscalls: SyscallArgs::UNSET,
        kprobe: KprobeRegs::UNSET,
    };
}

/// `SOCK_DGRAM`, and the bits of `socket()`'s type that are the type itself (the rest
/// are `SOCK_NONBLOCK` / `SOCK_CLOEXEC`).
pub const SOCK_DGRAM: u16 = 2;
pub const SOCK_TYPE_MASK: u64 = 0xf;

/// Whether a Unix connect or send that returned `ret` was refused: nothing serves the
/// path (`ENOENT`) or a socket file is left without a listener (`ECONNREFUSED`).
#[inline(always)]
pub const fn is_refusal(ret: i64) -> bool {
    ret == -(ENOENT as i64) || ret == -(ECONNREFUSED as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_missing_path_and_a_stale_socket_file_are_refusals() {
        assert!(is_refusal(-2));
        assert!(is_refusal(-111));
        for other in [0, 5, -11, -13, -98, -110, -1] {
            assert!(!is_refusal(other), "{other}");
        }
    }
}
