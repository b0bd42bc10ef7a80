//! The two budget ledgers (refusals, control records) over the shared maps, and the
//! admission of a control record.

use super::{
    budget, charge,
    helpers::now_boot_ns,
    maps::{BUDGET, CONTROL_BUDGET, CONTROL_SUPPRESSED, SUPPRESSED, config},
};
use sidecar_race_ebpf::abi::counter;

/// Refusals: their budget and suppressed counts.
#[inline(always)]
pub fn refusals() -> budget::Ledger {
    budget::Ledger {
        budget: &BUDGET,
        suppressed: &SUPPRESSED,
        suppressed_slot: counter::SUPPRESSED,
        unkeyed_slot: counter::SUPPRESSED_UNKEYED,
        made_slot: counter::BUDGET_MADE,
        conflict_slot: counter::BUDGET_CONFLICTS,
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
        conflict_slot: counter::CONTROL_BUDGET_CONFLICTS,
    }
}

/// Whether a control record of kind `k` charged to `charge` may be sent; counts it
/// when not. Only containers and pods the agent marked are budgeted.
#[inline(always)]
pub fn control_admitted<const CMPXCHG: bool>(k: u8, charge: &charge::Charge) -> bool {
    if !charge.marked {
        return true;
    }
    let ledger = control(k);
    if budget::admit::<CMPXCHG>(
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
