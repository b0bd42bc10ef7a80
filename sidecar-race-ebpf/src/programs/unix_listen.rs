//! Unix listeners up (`fexit` on `unix_listen`) and down (`fentry` on `unix_release`
//! of a socket still in LISTEN), with the bound path, the socket file's inode and
//! the network namespace (which abstract names belong to). The kprobes (`unix_kprobes`)
//! call the same `listened` and `released`.

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    macros::{fentry, fexit},
    programs::{FEntryContext, FExitContext},
};
use sidecar_race_ebpf::{
    abi::{counter, flags, kind},
    unix::{UnixFields, hook},
};

use super::{
    charge,
    helpers::{TCP_LISTEN, current_owner, now_boot_ns},
    maps::{LISTENING, ListenOwner, count},
    unix_sock::{self, Details, PathSource, read},
};

budgeted!(
    /// `int unix_listen(struct socket *sock, int backlog)`.
    #[fexit(function = "unix_listen")]
    unix_listen / unix_listen_plain (FExitContext) => on_listen
);

budgeted!(
    /// `int unix_release(struct socket *sock)`: every Unix socket's close; only a
    /// listener's is ours.
    #[fentry(function = "unix_release")]
    unix_release / unix_release_plain (FEntryContext) => on_release
);

#[inline(always)]
fn on_listen<const CMPXCHG: bool>(ctx: &FExitContext) -> u32 {
    if ctx.arg::<i32>(2) != 0 {
        return 0;
    }
    listened::<CMPXCHG>(ctx.arg(0))
}

#[inline(always)]
fn on_release<const CMPXCHG: bool>(ctx: &FEntryContext) -> u32 {
    released::<CMPXCHG>(ctx.arg(0))
}

/// A successful `unix_listen` of `sock` (a `struct socket *`).
#[inline(always)]
pub fn listened<const CMPXCHG: bool>(sock: u64) -> u32 {
    let f = unix_sock::config().fields;
    let Some(sk) = read::<u64>(sock, f.socket_sk) else {
        return 0;
    };
    let owner = ListenOwner::new(current_owner(), now_boot_ns());
    // A second listen() on a listening socket only changes its backlog.
    if LISTENING.insert(&sk, &owner, BPF_NOEXIST as u64).is_err() {
        return 0;
    }
    emit::<CMPXCHG>(kind::UNIX_LISTEN, 0, &owner, sock, sk, &f)
}

/// `unix_release` of `sock`: a listener's close, else nothing.
#[inline(always)]
pub fn released<const CMPXCHG: bool>(sock: u64) -> u32 {
    let f = unix_sock::config().fields;
    let Some(sk) = read::<u64>(sock, f.socket_sk) else {
        return 0;
    };
    if read::<u8>(sk, f.sk_state) != Some(TCP_LISTEN as u8) {
        return 0;
    }
    // SAFETY: the value is copied out before any other map operation.
    let recorded = unsafe { LISTENING.get(&sk) }.copied();
    let _ = LISTENING.remove(&sk);
    match recorded {
        Some(owner) => emit::<CMPXCHG>(
            kind::UNIX_LISTEN_CLOSED,
            flags::OWNER_FROM_START,
            &owner,
            sock,
            sk,
            &f,
        ),
        None => {
            count(counter::LISTENING_GONE);
            let owner = ListenOwner::new(current_owner(), 0);
            emit::<CMPXCHG>(kind::UNIX_LISTEN_CLOSED, 0, &owner, sock, sk, &f)
        }
    }
}

#[inline(always)]
fn emit<const CMPXCHG: bool>(
    k: u8,
    event_flags: u8,
    owner: &ListenOwner,
    sock: u64,
    sk: u64,
    f: &UnixFields,
) -> u32 {
    // `unix_sock` starts with its `struct sock`: the same pointer.
    let addr = read::<u64>(sk, f.unix_addr).unwrap_or(0);
    let len = read::<i32>(addr, f.addr_len).unwrap_or(0);
    let name = if addr == 0 || f.addr_name == sidecar_race_ebpf::layout::MISSING {
        0
    } else {
        addr + u64::from(f.addr_name)
    };
    let inode = read::<u64>(sk, f.path_dentry)
        .and_then(|dentry| read::<u64>(dentry, f.dentry_inode))
        .and_then(|inode| read::<u64>(inode, f.inode_ino))
        .unwrap_or(0);
    let details = Details {
        error: 0,
        sock_type: read::<u16>(sock, f.socket_type).unwrap_or(0),
        netns: unix_sock::netns_of(sk, f),
        inode,
        hook: hook::LISTENER,
    };
    let path = if name == 0 {
        PathSource {
            ptr: 0,
            len: 0,
            user: false,
        }
    } else {
        PathSource::of_sockaddr(name, len.into(), false)
    };
    match unix_sock::listener::<CMPXCHG>(
        k,
        event_flags,
        &owner.owner,
        owner.start_boot_ns,
        &charge::of_socket(sk, owner.owner.cgroup_id),
        &path,
        &details,
    ) {
        Ok(r) | Err(r) => r,
    }
}
