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
//! with a plain write (SECURITY.md: the race that is left).

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    maps::{HashMap, LruHashMap},
};
use sidecar_race_ebpf::layout::{RefusalBudget, budget_entry};

use super::{
    helpers::{atomic_add, compare_exchange},
    maps::count,
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
}

/// Whether a record charged to `cgroup_id` at `now` may be sent; takes its token if so.
/// `CMPXCHG`: update the entry by compare-and-exchange (only in programs loaded on
/// 5.12+: older verifiers refuse the instruction even where it is never reached).
#[inline(always)]
pub fn admit<const CMPXCHG: bool>(
    ledger: &Ledger,
    budget: RefusalBudget,
    cgroup_id: u64,
    now: u64,
) -> bool {
    if budget.interval_ns == 0 {
        return true;
    }
    let Some(entry) = ledger.budget.get_ptr_mut(&cgroup_id) else {
        let next = budget.admit(0, now).unwrap_or(now);
        if ledger
            .budget
            .insert(&cgroup_id, &budget_entry(next, cgroup_id), 0)
            .is_ok()
        {
            count(ledger.made_slot);
        }
        return true;
    };
    // Two tries: another CPU charging the same cgroup may update the entry between
    // our read and our exchange; a second conflict counts the record as over budget.
    for _ in 0..2 {
        // SAFETY: a map value valid for this program run (RCU); read once.
        let seen = unsafe { core::ptr::read_volatile(entry) };
        // Another cgroup's tag (a write through a recycled entry landed here, or this
        // one was recycled since the lookup) counts as a fresh budget, as when the LRU
        // forgets a cgroup, and the entry is taken back.
        let Some(next) = budget.charge(seen, cgroup_id, now) else {
            return false;
        };
        if store::<CMPXCHG>(entry, seen, next) {
            return true;
        }
    }
    false
}

/// Writes `new` into the entry if it still holds `seen`; whether it did.
#[inline(always)]
fn store<const CMPXCHG: bool>(entry: *mut u64, seen: u64, new: u64) -> bool {
    if !CMPXCHG {
        // SAFETY: as above. Without compare-and-exchange (before 5.12): a recycle
        // since the read lands our tagged time on another cgroup's entry, which that
        // cgroup then reads as a fresh budget.
        unsafe { core::ptr::write_volatile(entry, new) };
        return true;
    }
    // SAFETY: an aligned u64 map value; `CMPXCHG` only in programs loaded on 5.12+.
    unsafe { compare_exchange(entry, seen, new) }
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
