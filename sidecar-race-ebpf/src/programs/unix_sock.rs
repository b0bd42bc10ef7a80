//! What the Unix socket programs share: their offsets (the `UNIX` global), reads of
//! kernel objects at those offsets, and the one place that fills a `UnixEvent`.

use aya_ebpf::{
    cty::c_void,
    helpers::{bpf_get_current_pid_tgid, generated},
    maps::{LruHashMap, RingBuf},
};
use sidecar_race_ebpf::{
    abi::{Owner, counter, kind},
    unix::{UNIX_PATH_MAX, UnixConfig, UnixEvent, UnixFields},
};

use super::{
    budget, charge,
    helpers::{current_owner, now_boot_ns},
    ledgers::{control_admitted, refusals},
    maps::{EVENTS, config, count},
};

/// Filled by the agent at load time: BTF offsets for the `fexit` hooks, tracefs
/// offsets for the syscall fallback.
#[unsafe(no_mangle)]
static UNIX: UnixConfig = UnixConfig::UNSET;

#[inline(always)]
pub fn config() -> UnixConfig {
    // SAFETY: a plain read of a global that nothing writes after load; volatile so the
    // compiler does not fold in the `UNSET` initialiser.
    unsafe { core::ptr::read_volatile(&raw const UNIX) }
}

/// The current thread's entry of a per-thread map of calls in progress (a syscall's
/// entry seen, its exit now), removed.
#[inline(always)]
pub fn take_call<V: Copy>(calls: &LruHashMap<u64, V>) -> Option<V> {
    let id = bpf_get_current_pid_tgid();
    // SAFETY: the value is copied out before the entry is removed.
    let value = unsafe { calls.get(&id) }.copied()?;
    let _ = calls.remove(&id);
    Some(value)
}

/// The programs' kernel read, under the name the Unix programs import it by.
pub use super::kernel_read::read;

/// The inode of the network namespace of `sk` (a `struct sock *`); 0 when unknown.
#[inline(always)]
pub fn netns_of(sk: u64, f: &UnixFields) -> u32 {
    read::<u64>(sk, f.sk_net)
        .and_then(|net| read::<u32>(net, f.net_inum))
        .unwrap_or(0)
}

/// Where the `sun_path` of an address is, and how many of its bytes are used.
pub struct PathSource {
    pub ptr: u64,
    pub len: u32,
    /// In user memory (the syscall fallback), else kernel memory.
    pub user: bool,
}

impl PathSource {
    /// The path of a `struct sockaddr_un` of `addr_len` bytes at `addr`.
    #[inline(always)]
    pub fn of_sockaddr(addr: u64, addr_len: i64, user: bool) -> PathSource {
        PathSource {
            ptr: addr + 2,
            len: if addr_len > 2 {
                (addr_len - 2) as u32
            } else {
                0
            },
            user,
        }
    }
}

/// What a record says besides its path.
pub struct Details {
    pub error: i32,
    pub sock_type: u16,
    pub netns: u32,
    pub inode: u64,
    pub hook: u8,
}

/// A refused connect or send by the current task: charged to its container's refusal
/// budget like a TCP refusal, then sent on the refusal ring.
#[inline(always)]
pub fn refused<const CMPXCHG: bool>(path: &PathSource, d: &Details) -> Result<u32, u32> {
    count(counter::seen(kind::UNIX_REFUSED));
    let owner = current_owner();
    let now = now_boot_ns();
    let charged = charge::of_current_task(owner.cgroup_id).cgroup_id;
    let ledger = refusals();
    if !budget::admit::<CMPXCHG>(&ledger, config!(refusal_budget), charged, now) {
        budget::suppress(&ledger, charged);
        return Ok(0);
    }
    send(&EVENTS, kind::UNIX_REFUSED, 0, &owner, 0, path, d);
    Ok(0)
}

/// A Unix listener up or down, on the control ring under its container's budget.
#[inline(always)]
pub fn listener<const CMPXCHG: bool>(
    k: u8,
    event_flags: u8,
    owner: &Owner,
    start_boot_ns: u64,
    charged: &charge::Charge,
    path: &PathSource,
    d: &Details,
) -> Result<u32, u32> {
    count(counter::seen(k));
    if !control_admitted::<CMPXCHG>(k, charged) {
        return Ok(0);
    }
    send(
        &super::maps::CONTROL,
        k,
        event_flags,
        owner,
        start_boot_ns,
        path,
        d,
    );
    Ok(0)
}

#[inline(always)]
fn send(
    ring: &RingBuf,
    k: u8,
    event_flags: u8,
    owner: &Owner,
    start_boot_ns: u64,
    path: &PathSource,
    d: &Details,
) {
    let Some(mut entry) = ring.reserve::<UnixEvent>(0) else {
        count(counter::lost(k));
        return;
    };
    let ev = entry.as_mut_ptr();
    // Bounded for the verifier: at most `sun_path`'s size.
    let mut n = path.len;
    if n > UNIX_PATH_MAX as u32 {
        n = UNIX_PATH_MAX as u32;
    }
    // SAFETY: `ev` is a reserved record we own until submit, written in place to stay
    // within the 512-byte stack; the path copy is at most `sun_path`'s size and the
    // probe-read helpers check the source.
    unsafe {
        core::ptr::write_bytes(ev, 0, 1);
        (*ev).header.kind = k;
        (*ev).header.flags = event_flags;
        (*ev).header.ts_boot_ns = now_boot_ns();
        (*ev).owner = *owner;
        (*ev).start_boot_ns = start_boot_ns;
        (*ev).inode = d.inode;
        (*ev).netns = d.netns;
        (*ev).error = d.error;
        (*ev).sock_type = d.sock_type;
        (*ev).hook = d.hook;
        let dst = (*ev).path.as_mut_ptr() as *mut c_void;
        let src = path.ptr as *const c_void;
        let copied = if path.user {
            generated::bpf_probe_read_user(dst, n, src)
        } else {
            generated::bpf_probe_read_kernel(dst, n, src)
        };
        (*ev).path_len = if copied == 0 { n as u16 } else { 0 };
    }
    entry.submit(0);
}
