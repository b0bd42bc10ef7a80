//! Listeners coming up (`listen`) and going away (`listen_closed`).

use sidecar_race_ebpf::abi::{SocketEvent, counter, flags, kind};

use super::{
    charge,
    helpers::{current_owner, now_boot_ns},
    ledgers::control_admitted,
    maps::{CONTROL, LISTENING, ListenOwner, count},
    set_state::SetStateSource,
};

#[inline(always)]
pub fn started<const CMPXCHG: bool, S: SetStateSource>(src: &S, sk: u64) -> Result<u32, u32> {
    let owner = ListenOwner {
        owner: current_owner(),
        start_boot_ns: now_boot_ns(),
    };
    let _ = LISTENING.insert(&sk, &owner, 0);
    emit::<CMPXCHG, S>(src, sk, kind::LISTEN, &owner, 0)
}

#[inline(always)]
pub fn stopped<const CMPXCHG: bool, S: SetStateSource>(src: &S, sk: u64) -> Result<u32, u32> {
    // The closing task may not be the one that listened (fd passed on, exit of
    // another thread): prefer the owner recorded at listen().
    // SAFETY: the value is copied out before any other map operation.
    let recorded = unsafe { LISTENING.get(&sk) }.copied();
    let _ = LISTENING.remove(&sk);
    match recorded {
        Some(owner) => emit::<CMPXCHG, S>(
            src,
            sk,
            kind::LISTEN_CLOSED,
            &owner,
            flags::OWNER_FROM_START,
        ),
        None => {
            // Evicted by a full table (or listening before the programs were loaded).
            count(counter::LISTENING_GONE);
            let owner = ListenOwner {
                owner: current_owner(),
                start_boot_ns: 0,
            };
            emit::<CMPXCHG, S>(src, sk, kind::LISTEN_CLOSED, &owner, 0)
        }
    }
}

#[inline(always)]
fn emit<const CMPXCHG: bool, S: SetStateSource>(
    src: &S,
    sk: u64,
    k: u8,
    owner: &ListenOwner,
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
        let local = src.local();
        (*ev).family = local.family;
        (*ev).src_addr = local.addr;
        (*ev).src_port = local.port;
    }
    entry.submit(0);
    Ok(0)
}
