//! One file per kernel concern; the shared maps, config and helpers live here.

mod budget;
mod cgroups;
mod charge;
mod connect;
mod connecting;
mod ctx_load;
mod listen;
mod process;
mod reset;
mod set_state;
mod unix_connect;
mod unix_listen;
mod unix_sock;
mod unix_syscall_listen;
mod unix_syscalls;

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, generated},
    macros::map,
    maps::{HashMap, LruHashMap, PerCpuArray, RingBuf},
    programs::TracePointContext,
};
use sidecar_race_ebpf::{
    abi::{
        BUDGET_CGROUPS, CHARGE_POINTS as CHARGE_POINT_ENTRIES, CONTROL_RING_BYTES, ClientEnd,
        Owner, SUPPRESSED_CGROUPS, counter,
    },
    layout::{Config, MISSING},
};

/// Filled by the agent from tracefs at load time.
#[unsafe(no_mangle)]
static CONFIG: Config = Config::UNSET;

/// Ring buffer of refusals to the agent. Its size is set by the agent at load time.
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(256 * 1024, 0);

/// Ring buffer of control records (cgroup mkdir/rmdir, listen, listen_closed): no
/// refusal storm can take its room.
#[map]
static CONTROL: RingBuf = RingBuf::with_byte_size(CONTROL_RING_BYTES, 0);

/// Refusal budget per cgroup id: its GCRA "theoretical arrival time" (boot ns).
#[map]
static BUDGET: LruHashMap<u64, u64> = LruHashMap::with_max_entries(BUDGET_CGROUPS, 0);

/// Refusals over budget per cgroup id, exact (atomic adds); the agent reads and deletes.
#[map]
static SUPPRESSED: HashMap<u64, u64> = HashMap::with_max_entries(SUPPRESSED_CGROUPS, 0);

/// Control-record budget per charged cgroup, as `BUDGET` (only containers and pods
/// the agent marked are budgeted: the runtimes and the kubelet making pods are not).
#[map]
static CONTROL_BUDGET: LruHashMap<u64, u64> = LruHashMap::with_max_entries(BUDGET_CGROUPS, 0);

/// Control records over budget per charged cgroup, exact, as `SUPPRESSED`.
#[map]
static CONTROL_SUPPRESSED: HashMap<u64, u64> = HashMap::with_max_entries(SUPPRESSED_CGROUPS, 0);

/// Cgroup ids of containers and pods, filled by the agent: what budgets are charged to.
#[map]
static CHARGE_POINTS: HashMap<u64, u8> = HashMap::with_max_entries(CHARGE_POINT_ENTRIES, 0);

/// Refusals: their budget and suppressed counts.
#[inline(always)]
pub fn refusals() -> budget::Ledger {
    budget::Ledger {
        budget: &BUDGET,
        suppressed: &SUPPRESSED,
        suppressed_slot: counter::SUPPRESSED,
        unkeyed_slot: counter::SUPPRESSED_UNKEYED,
        made_slot: counter::BUDGET_MADE,
    }
}

/// Control records of kind `k`: their budget and suppressed counts.
#[inline(always)]
pub fn control(k: u8) -> budget::Ledger {
    budget::Ledger {
        budget: &CONTROL_BUDGET,
        suppressed: &CONTROL_SUPPRESSED,
        suppressed_slot: counter::control_suppressed(k),
        unkeyed_slot: counter::CONTROL_SUPPRESSED_UNKEYED,
        made_slot: counter::CONTROL_BUDGET_MADE,
    }
}

/// Whether a control record of kind `k` charged to `charge` may be sent; counts it
/// when not. Only containers and pods the agent marked are budgeted.
#[inline(always)]
pub fn control_admitted(k: u8, charge: &charge::Charge) -> bool {
    if !charge.marked {
        return true;
    }
    let ledger = control(k);
    // Plain writes: control records are rare next to refusals, and one program per
    // hook is enough for them (SECURITY.md).
    if budget::admit::<false>(
        &ledger,
        config!(control_budget),
        charge.cgroup_id,
        now_boot_ns(),
    ) {
        return true;
    }
    budget::suppress(&ledger, charge.cgroup_id);
    false
}

/// Exact per-CPU counts (seen / lost per kind), independent of the ring buffer.
#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::SLOTS, 0);

/// A socket in LISTEN, by `struct sock *`: who listens, recorded at listen().
#[map]
static LISTENING: LruHashMap<u64, ListenOwner> = LruHashMap::with_max_entries(65_536, 0);

/// Where the local stack refused a SYN for lack of a listener, by the client end the
/// reset went to; read when that client's socket receives the reset.
#[map]
static LOCAL_REFUSALS: LruHashMap<ClientEnd, LocalRefusal> = LruHashMap::with_max_entries(4_096, 0);

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ListenOwner {
    pub owner: Owner,
    pub start_boot_ns: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct LocalRefusal {
    pub addr: [u8; 16],
    pub port: u16,
    pub _pad: [u8; 6],
    pub ts_boot_ns: u64,
}

pub const IPPROTO_TCP: u16 = 6;
pub const TCP_SYN_SENT: i32 = 2;
pub const TCP_CLOSE: i32 = 7;
pub const TCP_LISTEN: i32 = 10;

/// Reads one section of the config. Volatile so the compiler does not fold in the
/// `UNSET` initialiser (the loader rewrites it), and per section to keep the
/// 512-byte eBPF stack free.
macro_rules! config {
    ($($field:ident).+) => {
        // SAFETY: a plain read of a global that nothing writes after load.
        unsafe { core::ptr::read_volatile(&raw const $crate::programs::CONFIG.$($field).+) }
    };
}
pub(crate) use config;

#[inline(always)]
pub fn now_boot_ns() -> u64 {
    // SAFETY: helper without preconditions (kernel 5.8+).
    unsafe { generated::bpf_ktime_get_boot_ns() }
}

/// The current task as owner, named by its process; only meaningful in process context.
#[inline(always)]
pub fn current_owner() -> Owner {
    let pid_tgid = bpf_get_current_pid_tgid();
    let (pid, tgid) = (pid_tgid as u32, (pid_tgid >> 32) as u32);
    Owner {
        // SAFETY: helper without preconditions.
        cgroup_id: unsafe { generated::bpf_get_current_cgroup_id() },
        pid,
        tgid,
        comm: process::current_process_name(pid, tgid),
    }
}

/// Reads a field at an offset from the config; `Err` when the kernel lacks it.
#[inline(always)]
pub fn field<T>(ctx: &TracePointContext, offset: u16) -> Result<T, u32> {
    if offset == MISSING {
        return Err(0);
    }
    // SAFETY: the offset comes from this kernel's tracefs format for this tracepoint;
    // bpf_probe_read_kernel checks the access.
    unsafe { ctx.read_at::<T>(offset as usize) }.map_err(|_| 0)
}

/// Adds `v` to the u64 at `p` atomically, as seen by every CPU. Written out as
/// BPF_XADD (the core library has no atomic read-modify-write for this target);
/// every kernel since 4.x has it.
///
/// # Safety
/// `p` is an aligned u64 map value valid for this program run.
#[inline(always)]
pub unsafe fn atomic_add(p: *mut u64, v: u64) {
    // SAFETY: as the caller promises.
    unsafe {
        core::arch::asm!(
            "lock *(u64 *)({p} + 0) += {v}",
            p = in(reg) p,
            v = in(reg) v,
            options(nostack, preserves_flags),
        )
    };
}

/// Writes `new` at `p` if it holds `old`, atomically; whether it did. BPF_ATOMIC |
/// BPF_CMPXCHG (5.12+), written out because the core library has no atomics for this
/// target.
///
/// # Safety
/// `p` is an aligned u64 map value valid for this program run, in a program loaded
/// only on 5.12+.
#[inline(always)]
pub unsafe fn compare_exchange(p: *mut u64, old: u64, new: u64) -> bool {
    let mut seen = old;
    // SAFETY: as the caller promises.
    unsafe {
        core::arch::asm!(
            "r0 = cmpxchg_64({p} + 0, r0, {new})",
            p = in(reg) p,
            new = in(reg) new,
            inout("r0") seen,
            options(nostack),
        )
    };
    seen == old
}

#[inline(always)]
pub fn count(slot: u32) {
    if let Some(p) = COUNTERS.get_ptr_mut(slot) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU.
        unsafe { *p += 1 };
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
