//! Refused connects and sends to Unix socket paths, where the kernel has BTF: `fexit`
//! on the AF_UNIX protocol operations sees the return value, the address and the
//! socket, in the caller's context (its cgroup), and costs nothing for TCP.

use aya_ebpf::{macros::fexit, programs::FExitContext};
use sidecar_race_ebpf::{
    abi::AF_UNIX,
    unix::{hook, is_refusal},
};

use super::unix_sock::{self, Details, PathSource, read};

/// `int unix_stream_connect(struct socket *, struct sockaddr *, int addr_len, int flags)`
/// (stream and seqpacket sockets).
#[fexit(function = "unix_stream_connect")]
pub fn unix_stream_connect(ctx: FExitContext) -> u32 {
    connected(&ctx)
}

/// `int unix_dgram_connect(struct socket *, struct sockaddr *, int alen, int flags)`.
#[fexit(function = "unix_dgram_connect")]
pub fn unix_dgram_connect(ctx: FExitContext) -> u32 {
    connected(&ctx)
}

/// `int unix_dgram_sendmsg(struct socket *, struct msghdr *, size_t len)`: a datagram
/// sent to a path without connecting first (statsd-style `sendto`).
#[fexit(function = "unix_dgram_sendmsg")]
pub fn unix_dgram_sendmsg(ctx: FExitContext) -> u32 {
    let ret: i64 = ctx.arg::<i32>(3).into();
    if !is_refusal(ret) {
        return 0;
    }
    let f = unix_sock::config().fields;
    let msg: u64 = ctx.arg(1);
    // A connected sender names no address: its refusal says nothing about a path.
    let Some(name) = read::<u64>(msg, f.msg_name).filter(|p| *p != 0) else {
        return 0;
    };
    let len = read::<i32>(msg, f.msg_namelen).unwrap_or(0);
    send_refused(&ctx, name, len.into(), ret, hook::SENDMSG)
}

#[inline(always)]
fn connected(ctx: &FExitContext) -> u32 {
    let ret: i64 = ctx.arg::<i32>(4).into();
    if !is_refusal(ret) {
        return 0;
    }
    let addr: u64 = ctx.arg(1);
    let len: i32 = ctx.arg(2);
    send_refused(ctx, addr, len.into(), ret, hook::CONNECT)
}

#[inline(always)]
fn send_refused(ctx: &FExitContext, addr: u64, addr_len: i64, ret: i64, via: u8) -> u32 {
    if read::<u16>(addr, 0) != Some(AF_UNIX) {
        return 0;
    }
    let f = unix_sock::config().fields;
    let sock: u64 = ctx.arg(0);
    let sk = read::<u64>(sock, f.socket_sk).unwrap_or(0);
    let details = Details {
        error: -(ret as i32),
        sock_type: read::<u16>(sock, f.socket_type).unwrap_or(0),
        netns: unix_sock::netns_of(sk, &f),
        inode: 0,
        hook: via,
    };
    match unix_sock::refused(&PathSource::of_sockaddr(addr, addr_len, false), &details) {
        Ok(r) | Err(r) => r,
    }
}
