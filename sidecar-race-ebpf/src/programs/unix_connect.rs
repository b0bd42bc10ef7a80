//! Refused connects and sends to Unix socket paths, where the kernel has BTF: `fexit`
//! on the AF_UNIX protocol operations sees the return value, the address and the
//! socket, in the caller's context (its cgroup), and costs nothing for TCP. What they
//! do with those values is shared with the kprobes (`unix_kprobes`).

use aya_ebpf::{macros::fexit, programs::FExitContext};
use sidecar_race_ebpf::{
    abi::AF_UNIX,
    unix::{hook, is_refusal},
};

use super::unix_sock::{self, Details, PathSource, read};

budgeted!(
    /// `int unix_stream_connect(struct socket *, struct sockaddr *, int addr_len, int flags)`
    /// (stream and seqpacket sockets).
    #[fexit(function = "unix_stream_connect")]
    unix_stream_connect / unix_stream_connect_plain (FExitContext) => connected
);

budgeted!(
    /// `int unix_dgram_connect(struct socket *, struct sockaddr *, int alen, int flags)`.
    #[fexit(function = "unix_dgram_connect")]
    unix_dgram_connect / unix_dgram_connect_plain (FExitContext) => connected
);

budgeted!(
    /// `int unix_dgram_sendmsg(struct socket *, struct msghdr *, size_t len)`: a datagram
    /// sent to a path without connecting first (statsd-style `sendto`).
    #[fexit(function = "unix_dgram_sendmsg")]
    unix_dgram_sendmsg / unix_dgram_sendmsg_plain (FExitContext) => sent
);

#[inline(always)]
fn sent<const CMPXCHG: bool>(ctx: &FExitContext) -> u32 {
    let ret: i64 = ctx.arg::<i32>(3).into();
    if !is_refusal(ret) {
        return 0;
    }
    sendmsg_refused::<CMPXCHG>(ctx.arg(0), ctx.arg(1), ret)
}

#[inline(always)]
fn connected<const CMPXCHG: bool>(ctx: &FExitContext) -> u32 {
    let ret: i64 = ctx.arg::<i32>(4).into();
    if !is_refusal(ret) {
        return 0;
    }
    send_refused::<CMPXCHG>(
        ctx.arg(0),
        ctx.arg(1),
        ctx.arg::<i32>(2).into(),
        ret,
        hook::CONNECT,
    )
}

/// The address a datagram send named (`msghdr.msg_name`, the kernel's copy), if any.
#[inline(always)]
pub fn sendmsg_name(msg: u64) -> Option<u64> {
    read::<u64>(msg, unix_sock::config().fields.msg_name).filter(|p| *p != 0)
}

/// A refused `unix_dgram_sendmsg` of `sock` with `msg` (a `struct msghdr *`).
#[inline(always)]
pub fn sendmsg_refused<const CMPXCHG: bool>(sock: u64, msg: u64, ret: i64) -> u32 {
    // A connected sender names no address: its refusal says nothing about a path.
    let Some(name) = sendmsg_name(msg) else {
        return 0;
    };
    let len = read::<i32>(msg, unix_sock::config().fields.msg_namelen).unwrap_or(0);
    send_refused::<CMPXCHG>(sock, name, len.into(), ret, hook::SENDMSG)
}

/// A refused connect or send of `sock` (a `struct socket *`) to the kernel's copy of
/// the address at `addr`.
#[inline(always)]
pub fn send_refused<const CMPXCHG: bool>(
    sock: u64,
    addr: u64,
    addr_len: i64,
    ret: i64,
    via: u8,
) -> u32 {
    if read::<u16>(addr, 0) != Some(AF_UNIX) {
        return 0;
    }
    let f = unix_sock::config().fields;
    let sk = read::<u64>(sock, f.socket_sk).unwrap_or(0);
    let details = Details {
        error: -(ret as i32),
        sock_type: read::<u16>(sock, f.socket_type).unwrap_or(0),
        netns: unix_sock::netns_of(sk, &f),
        inode: 0,
        hook: via,
    };
    match unix_sock::refused::<CMPXCHG>(&PathSource::of_sockaddr(addr, addr_len, false), &details) {
        Ok(r) | Err(r) => r,
    }
}
