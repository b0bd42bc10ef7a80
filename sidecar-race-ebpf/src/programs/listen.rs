//! TCP listeners coming up (`started`) and going away (`stopped`), from any hook: the
//! state-transition tracepoint's record or the socket itself (`set_state`), read by
//! `inet_sock_set_state` or by the listen hooks (`tcp_listen`).

use sidecar_race_ebpf::abi::{SocketEvent, counter, flags, kind};

use super::{
    charge,
    helpers::{current_owner, now_boot_ns},
    ledgers::control_admitted,
    maps::{CONTROL, LISTENING, ListenOwner, count},
    set_state::{End, SetStateSource},
};

#[inline(always)]
pub fn started<const CMPXCHG: bool, S: SetStateSource>(src: &S, sk: u64) -> Result<u32, u32> {
    let end = src.local();
    let owner = ListenOwner {
        owner: current_owner(),
        start_boot_ns: now_boot_ns(),
        family: end.family,
        port: end.port,
        _pad: [0; 4],
        addr: end.addr,
    };
    let _ = LISTENING.insert(&sk, &owner, 0);
    emit::<CMPXCHG>(sk, kind::LISTEN, &owner, &end, 0)
}

#[inline(always)]
pub fn stopped<const CMPXCHG: bool, S: SetStateSource>(src: &S, sk: u64) -> Result<u32, u32> {
    // The closing task may not be the one that listened (fd passed on, exit of
    // another thread): prefer the owner recorded at listen().
    // SAFETY: the value is copied out before any other map operation.
    let recorded = unsafe { LISTENING.get(&sk) }.copied();
    let _ = LISTENING.remove(&sk);
    match recorded {
        Some(owner) => {
            // The end as it was at listen(): by `inet_csk_listen_stop` a port the
            // kernel chose is released (0).
            let end = if owner.port != 0 {
                End {
                    family: owner.family,
                    addr: owner.addr,
                    port: owner.port,
                }
            } else {
                src.local()
            };
            emit::<CMPXCHG>(
                sk,
                kind::LISTEN_CLOSED,
                &owner,
                &end,
                flags::OWNER_FROM_START,
            )
        }
        None => {
            // Evicted by a full table (or listening before the programs were loaded).
            count(counter::LISTENING_GONE);
            let owner = ListenOwner::new(current_owner(), 0);
            emit::<CMPXCHG>(sk, kind::LISTEN_CLOSED, &owner, &src.local(), 0)
        }
    }
}

#[inline(always)]
fn emit<const CMPXCHG: bool>(
    sk: u64,
    k: u8,
    owner: &ListenOwner,
    end: &End,
    event_flags: u8,
) -> Result<u32, u32> {
    count(counter::seen(k));
    if !control_admitted::<CMPXCHG>(k, &charge::of_socket(sk, owner.owner.cgroup_id)) {
        return Ok(0);
    }
    let Some(mut entry) = CONTROL.reserve::<SocketEvent>(0) else {
        count(counter::lost(k));
        return Ok(0);
    };
    let ev = entry.as_mut_ptr();
    // SAFETY: `ev` is a reserved record we own until submit; written in place to
    // stay within the 512-byte stack.
    unsafe {
        core::ptr::write_bytes(ev, 0, 1);
        (*ev).header.kind = k;
        (*ev).header.flags = event_flags;
        (*ev).header.ts_boot_ns = now_boot_ns();
        (*ev).owner = owner.owner;
        (*ev).start_boot_ns = owner.start_boot_ns;
        (*ev).family = end.family;
        (*ev).src_addr = end.addr;
        (*ev).src_port = end.port;
    }
    entry.submit(0);
    Ok(0)
}
