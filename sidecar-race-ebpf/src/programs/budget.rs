//! The refusal budget: each cgroup (container) may send a burst of refusal records
//! and then a steady rate; the rest are counted per cgroup in the kernel, exactly,
//! instead of sent. Only the refusal path consults it.

use aya_ebpf::bindings::BPF_NOEXIST;
use sidecar_race_ebpf::abi::counter;

use super::{BUDGET, SUPPRESSED, config, count};

/// Whether a refusal of `cgroup_id` at `now` may be sent, and takes its token if so.
#[inline(always)]
pub fn admit(cgroup_id: u64, now: u64) -> bool {
    let budget = config!(refusal_budget);
    if budget.interval_ns == 0 {
        return true;
    }
    match BUDGET.get_ptr_mut(&cgroup_id) {
        Some(tat) => {
            // SAFETY: a map value valid for this program run. Two CPUs updating the
            // same cgroup at once may both pass or overwrite each other's time: the
            // budget is approximate, the counts of what it lets through are not.
            let current = unsafe { *tat };
            match budget.admit(current, now) {
                Some(next) => {
                    unsafe { *tat = next };
                    true
                }
                None => false,
            }
        }
        None => {
            let next = budget.admit(0, now).unwrap_or(now);
            let _ = BUDGET.insert(&cgroup_id, &next, 0);
            true
        }
    }
}

/// Counts a refusal of `cgroup_id` that was not sent: into its entry, or when the map
/// is full into a per-CPU slot, so none goes uncounted.
#[inline(always)]
pub fn suppress(cgroup_id: u64) {
    count(counter::SUPPRESSED);
    if add_one(cgroup_id) {
        return;
    }
    // No entry yet: create it; a CPU racing us may create it first (then add to it).
    if SUPPRESSED
        .insert(&cgroup_id, &1, BPF_NOEXIST as u64)
        .is_ok()
        || add_one(cgroup_id)
    {
        return;
    }
    count(counter::SUPPRESSED_UNKEYED);
}

#[inline(always)]
fn add_one(cgroup_id: u64) -> bool {
    match SUPPRESSED.get_ptr_mut(&cgroup_id) {
        Some(p) => {
            // SAFETY: an aligned u64 map value; other CPUs add to it atomically too.
            // Written out as BPF_XADD (the core library has no atomic read-modify-write
            // for this target); every kernel since 4.x has it.
            unsafe {
                core::arch::asm!(
                    "lock *(u64 *)({p} + 0) += {one}",
                    p = in(reg) p,
                    one = in(reg) 1u64,
                    options(nostack, preserves_flags),
                )
            };
            true
        }
        None => false,
    }
}
