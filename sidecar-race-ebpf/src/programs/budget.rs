//! Budgets: each container may send a burst of records of one class (refusals, or
//! control records) and then a steady rate; the rest are counted in the kernel,
//! exactly, instead of sent. Only the refusal and control paths consult them.
//!
//! A budget entry lives in an LRU map, whose entries the kernel may recycle for
//! another key while a program still holds a pointer to it. The entry carries a tag
//! of its cgroup id (see `layout::budget_entry`): an entry with another cgroup's tag
//! counts as a fresh budget, so a write through a recycled entry cannot hold the
//! entry's new owner back. Where the kernel has compare-and-exchange (5.12+) the new
//! time is written only if the entry still holds the exact value read; below that
//! with a plain write (SECURITY.md: the race that is left). Every program that charges
//! a budget comes in both forms; the agent loads the one its kernel takes.

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    maps::{HashMap, LruHashMap},
};
use sidecar_race_ebpf::{
    admission::{self, Entries, Entry},
    layout::RefusalBudget,
};

use super::{
    atomics::{atomic_add, compare_exchange},
    maps::{count, count_n},
};

/// The maps and counter slots of one class of records.
pub struct Ledger {
    pub budget: &'static LruHashMap<u64, u64>,
    pub suppressed: &'static HashMap<u64, u64>,
    /// Counted for every record over budget.
    pub suppressed_slot: u32,
    /// Counted for those the per-cgroup map had no room for.
    pub unkeyed_slot: u32,
    /// Counted for every budget entry made (the agent tells evictions from it).
    pub made_slot: u32,
    /// Counted for every write another CPU got in first (the contended branch).
    pub conflict_slot: u32,
}

/// Whether a record charged to `cgroup_id` at `now` may be sent; takes its token if so
/// (the steps: `sidecar_race_ebpf::admission`). `CMPXCHG`: update the entry by
/// compare-and-exchange (only in programs loaded on 5.12+: older verifiers refuse the
/// instruction even where it is never reached).
#[inline(always)]
pub fn admit<const CMPXCHG: bool>(
    ledger: &Ledger,
    budget: RefusalBudget,
    cgroup_id: u64,
    now: u64,
) -> bool {
    let a = admission::admit(&Budgets::<CMPXCHG>(ledger.budget), budget, cgroup_id, now);
    if a.made {
        count(ledger.made_slot);
    }
    if a.conflicts > 0 {
        count_n(ledger.conflict_slot, u64::from(a.conflicts));
    }
    a.admitted
}

/// A ledger's budget map, as `admission` sees it.
struct Budgets<const CMPXCHG: bool>(&'static LruHashMap<u64, u64>);

/// A budget entry: a map value valid for this program run (RCU).
struct BudgetEntry<const CMPXCHG: bool>(*mut u64);

impl<const CMPXCHG: bool> Entries for Budgets<CMPXCHG> {
    type Entry<'a> = BudgetEntry<CMPXCHG>;

    #[inline(always)]
    fn find(&self, cgroup_id: u64) -> Option<BudgetEntry<CMPXCHG>> {
        self.0.get_ptr_mut(&cgroup_id).map(BudgetEntry)
    }

    #[inline(always)]
    fn make(&self, cgroup_id: u64, value: u64) -> bool {
        // No-exist: a CPU racing us to make it loses and charges ours (with `BPF_ANY`
        // each would overwrite the other's charge, and count one entry made twice).
        self.0
            .insert(&cgroup_id, &value, u64::from(BPF_NOEXIST))
            .is_ok()
    }
}

impl<const CMPXCHG: bool> Entry for BudgetEntry<CMPXCHG> {
    #[inline(always)]
    fn load(&self) -> u64 {
        // SAFETY: a map value valid for this program run (RCU); read once.
        unsafe { core::ptr::read_volatile(self.0) }
    }

    #[inline(always)]
    fn replace(&self, seen: u64, new: u64) -> bool {
        if !CMPXCHG {
            // SAFETY: as above. Without compare-and-exchange (before 5.12) a write by
            // another CPU since our read is overwritten, and a recycle since the read
            // lands our tagged time on another cgroup's entry, which that cgroup then
            // reads as a fresh budget (SECURITY.md: the race that is left).
            unsafe { core::ptr::write_volatile(self.0, new) };
            return true;
        }
        // SAFETY: an aligned u64 map value; `CMPXCHG` only in programs loaded on 5.12+.
        unsafe { compare_exchange(self.0, seen, new) }
    }
}

/// Counts a record charged to `cgroup_id` that was not sent: into its entry, or when
/// the map is full into a per-CPU slot, so none goes uncounted.
#[inline(always)]
pub fn suppress(ledger: &Ledger, cgroup_id: u64) {
    count(ledger.suppressed_slot);
    if add_one(ledger.suppressed, cgroup_id) {
        return;
    }
    // No entry yet: create it; a CPU racing us may create it first (then add to it).
    if ledger
        .suppressed
        .insert(&cgroup_id, &1, BPF_NOEXIST as u64)
        .is_ok()
        || add_one(ledger.suppressed, cgroup_id)
    {
        return;
    }
    count(ledger.unkeyed_slot);
}

#[inline(always)]
fn add_one(map: &HashMap<u64, u64>, cgroup_id: u64) -> bool {
    match map.get_ptr_mut(&cgroup_id) {
        Some(p) => {
            // SAFETY: an aligned u64 map value; other CPUs add to it atomically too.
            unsafe { atomic_add(p, 1) };
            true
        }
        None => false,
    }
}
