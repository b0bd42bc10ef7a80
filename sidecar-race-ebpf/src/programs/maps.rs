//! The maps the programs share with each other and with the agent (by name), the
//! configuration the agent fills at load time, and the per-CPU counters.

use aya_ebpf::{
    macros::map,
    maps::{HashMap, LruHashMap, PerCpuArray, RingBuf},
};
use sidecar_race_ebpf::{
    abi::{
        BUDGET_CGROUPS, CHARGE_POINTS as CHARGE_POINT_ENTRIES, CONTROL_RING_BYTES, ClientEnd,
        Owner, SUPPRESSED_CGROUPS, counter,
    },
    layout::Config,
};

use super::atomics::atomic_add;

/// Filled by the agent from tracefs at load time.
#[unsafe(no_mangle)]
pub static CONFIG: Config = Config::UNSET;

/// Ring buffer of refusals to the agent. Its size is set by the agent at load time.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(256 * 1024, 0);

/// Ring buffer of control records (cgroup mkdir/rmdir, listen, listen_closed): no
/// refusal storm can take its room.
#[map]
pub static CONTROL: RingBuf = RingBuf::with_byte_size(CONTROL_RING_BYTES, 0);

/// Refusal budget per cgroup id: its GCRA "theoretical arrival time" (boot ns).
#[map]
pub static BUDGET: LruHashMap<u64, u64> = LruHashMap::with_max_entries(BUDGET_CGROUPS, 0);

/// Refusals over budget per cgroup id, exact (atomic adds); the agent reads and deletes.
#[map]
pub static SUPPRESSED: HashMap<u64, u64> = HashMap::with_max_entries(SUPPRESSED_CGROUPS, 0);

/// Control-record budget per charged cgroup, as `BUDGET` (only containers and pods
/// the agent marked are budgeted: the runtimes and the kubelet making pods are not).
#[map]
pub static CONTROL_BUDGET: LruHashMap<u64, u64> = LruHashMap::with_max_entries(BUDGET_CGROUPS, 0);

/// Control records over budget per charged cgroup, exact, as `SUPPRESSED`.
#[map]
pub static CONTROL_SUPPRESSED: HashMap<u64, u64> = HashMap::with_max_entries(SUPPRESSED_CGROUPS, 0);

/// Cgroup ids of containers and pods, filled by the agent: what budgets are charged to.
#[map]
pub static CHARGE_POINTS: HashMap<u64, u8> = HashMap::with_max_entries(CHARGE_POINT_ENTRIES, 0);

/// Exact per-CPU counts (seen / lost per kind), independent of the ring buffer.
#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::SLOTS, 0);

/// A socket in LISTEN, by `struct sock *`: who listens, recorded at listen().
#[map]
pub static LISTENING: LruHashMap<u64, ListenOwner> = LruHashMap::with_max_entries(65_536, 0);

/// Where the local stack refused a SYN for lack of a listener, by the client end the
/// reset went to; read when that client's socket receives the reset.
#[map]
pub static LOCAL_REFUSALS: LruHashMap<ClientEnd, LocalRefusal> =
    LruHashMap::with_max_entries(4_096, 0);

/// Who listens on a socket, since when, and where: its local end as it was at
/// listen(), because a port the kernel chose is released before the listener's close
/// is seen at `inet_csk_listen_stop` (Unix listeners leave the end empty).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ListenOwner {
    pub owner: Owner,
    pub start_boot_ns: u64,
    pub family: u16,
    pub port: u16,
    pub _pad: [u8; 4],
    pub addr: [u8; 16],
}

impl ListenOwner {
    /// `owner` since `start_boot_ns`, with no local end recorded.
    #[inline(always)]
    pub fn new(owner: Owner, start_boot_ns: u64) -> Self {
        Self {
            owner,
            start_boot_ns,
            family: 0,
            port: 0,
            _pad: [0; 4],
            addr: [0; 16],
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct LocalRefusal {
    pub addr: [u8; 16],
    pub port: u16,
    pub _pad: [u8; 6],
    pub ts_boot_ns: u64,
}

/// Reads one section of the config. Volatile so the compiler does not fold in the
/// `UNSET` initialiser (the loader rewrites it), and per section to keep the
/// 512-byte eBPF stack free.
macro_rules! config {
    ($($field:ident).+) => {
        // SAFETY: a plain read of a global that nothing writes after load.
        unsafe { core::ptr::read_volatile(&raw const $crate::programs::maps::CONFIG.$($field).+) }
    };
}
pub(crate) use config;

#[inline(always)]
pub fn count(slot: u32) {
    count_n(slot, 1);
}

/// Adds `n` to a per-CPU counter. Atomically although no other CPU writes the slot: a
/// program in softirq (a reset arriving) can interrupt one in process context on the
/// same CPU between a plain read and its write, and one of the two counts is lost.
#[inline(always)]
pub fn count_n(slot: u32, n: u64) {
    if let Some(p) = COUNTERS.get_ptr_mut(slot) {
        // SAFETY: an aligned u64 map value valid for this program run.
        unsafe { atomic_add(p, n) };
    }
}
