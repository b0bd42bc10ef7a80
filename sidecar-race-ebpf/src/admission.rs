//! How a record is charged to its cgroup's budget entry, written once over two small
//! traits so that the kernel programs (over map pointers, see `programs/budget.rs`)
//! and the host's unit tests (over a table that lets another "CPU" write between our
//! read and our write) run the same steps.
//!
//! The steps: find the entry, or make it with a no-exist insert (a CPU that loses that
//! race charges the entry the winner made); read it; charge it; write it back only if
//! it still holds what was read (compare-and-exchange, 5.12+), or plainly below that.
//! A write that finds the entry changed since the read reads it again once; a second
//! conflict counts the record as over budget (so it is counted in the kernel, never
//! lost). Every conflict is reported, for a counter that shows the contended branch
//! is taken and still accounts for every record.

use crate::layout::{RefusalBudget, budget_entry};

/// A budget entry: read it, and replace it if it still holds a value.
pub trait Entry {
    fn load(&self) -> u64;
    /// Writes `new` if the entry still holds `seen` (plainly, without a check, where
    /// the kernel has no compare-and-exchange); whether it did.
    fn replace(&self, seen: u64, new: u64) -> bool;
}

/// The per-cgroup budget entries.
pub trait Entries {
    type Entry<'a>: Entry
    where
        Self: 'a;
    fn find(&self, cgroup_id: u64) -> Option<Self::Entry<'_>>;
    /// Inserts only if no entry exists (`BPF_NOEXIST`); whether this one was made.
    fn make(&self, cgroup_id: u64, value: u64) -> bool;
}

/// What charging one record did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Admission {
    /// The record may be sent (else: counted as over budget).
    pub admitted: bool,
    /// This record made its cgroup's entry.
    pub made: bool,
    /// Another CPU changed or made the entry between our read and our write.
    pub conflicts: u8,
}

/// Charges a record of `cgroup_id` at `now` to its entry in `entries`.
#[inline(always)]
pub fn admit<E: Entries>(
    entries: &E,
    budget: RefusalBudget,
    cgroup_id: u64,
    now: u64,
) -> Admission {
    let mut out = Admission {
        admitted: true,
        made: false,
        conflicts: 0,
    };
    if budget.interval_ns == 0 {
        return out;
    }
    let entry = match entries.find(cgroup_id) {
        Some(entry) => entry,
        None => {
            let next = match budget.admit(0, now) {
                Some(next) => next,
                None => now,
            };
            if entries.make(cgroup_id, budget_entry(next, cgroup_id)) {
                out.made = true;
                return out;
            }
            // Another CPU made it first: charge what it made.
            out.conflicts += 1;
            match entries.find(cgroup_id) {
                Some(entry) => entry,
                // Made and evicted at once (a full LRU): as a forgotten cgroup, a
                // fresh budget.
                None => return out,
            }
        }
    };
    // Two tries: a CPU charging the same cgroup may write between our read and our
    // write; a second conflict counts the record as over budget.
    let mut tries = 0;
    while tries < 2 {
        tries += 1;
        let seen = entry.load();
        // Another cgroup's tag (a write through a recycled entry) counts as a fresh
        // budget, as when the LRU forgets a cgroup.
        let Some(next) = budget.charge(seen, cgroup_id, now) else {
            out.admitted = false;
            return out;
        };
        if entry.replace(seen, next) {
            return out;
        }
        out.conflicts += 1;
    }
    out.admitted = false;
    out
}

#[cfg(test)]
mod tests {
    extern crate std;

    use core::cell::{Cell, RefCell};
    use std::{collections::BTreeMap, vec::Vec};

    use super::*;
    use crate::layout::budget_tat;

    const NOW: u64 = 1 << 34;

    /// One cgroup's entries as a kernel map would hold them, with an interferer: a
    /// scripted write by "another CPU" that lands between a read and the write after
    /// it, and a flag for compare-and-exchange.
    struct Table {
        values: RefCell<BTreeMap<u64, u64>>,
        cmpxchg: bool,
        /// Values another CPU writes, one before each of our next writes.
        interleaved: RefCell<Vec<u64>>,
        /// Another CPU makes the entry between our lookup and our insert.
        made_by_other: Cell<Option<u64>>,
    }

    struct Slot<'a>(&'a Table, u64);

    impl Entry for Slot<'_> {
        fn load(&self) -> u64 {
            self.0.values.borrow()[&self.1]
        }
        fn replace(&self, seen: u64, new: u64) -> bool {
            let mut values = self.0.values.borrow_mut();
            if let Some(other) = self.0.interleaved.borrow_mut().pop() {
                values.insert(self.1, other);
            }
            let held = values[&self.1];
            if self.0.cmpxchg && held != seen {
                return false;
            }
            values.insert(self.1, new);
            true
        }
    }

    impl Entries for Table {
        type Entry<'a>
            = Slot<'a>
        where
            Self: 'a;
        fn find(&self, cgroup_id: u64) -> Option<Slot<'_>> {
            self.values
                .borrow()
                .contains_key(&cgroup_id)
                .then_some(Slot(self, cgroup_id))
        }
        fn make(&self, cgroup_id: u64, value: u64) -> bool {
            let mut values = self.values.borrow_mut();
            if let Some(other) = self.made_by_other.take() {
                values.insert(cgroup_id, other);
            }
            if values.contains_key(&cgroup_id) {
                return false;
            }
            values.insert(cgroup_id, value);
            true
        }
    }

    fn table(cmpxchg: bool) -> Table {
        Table {
            values: RefCell::default(),
            cmpxchg,
            interleaved: RefCell::default(),
            made_by_other: Cell::new(None),
        }
    }

    /// Three at once, then one per 2^26 ns (67 ms): times that are multiples of the tag's
    /// 2^16 ns, so that the arithmetic below is exact.
    const BUDGET: RefusalBudget = RefusalBudget {
        interval_ns: 1 << 26,
        tolerance_ns: 2 << 26,
    };
    const CG: u64 = 0x1234_5678;

    fn tat(t: &Table) -> u64 {
        budget_tat(t.values.borrow()[&CG], CG).expect("our tag")
    }

    /// A table whose entry one record made at `NOW`, and the time it holds.
    fn charged_once(cmpxchg: bool) -> (Table, u64) {
        let t = table(cmpxchg);
        admit(&t, BUDGET, CG, NOW);
        let before = tat(&t);
        (t, before)
    }

    /// Other CPUs write these times (intervals past `before`), one before each of our
    /// next writes, the last listed first.
    fn interleave(t: &Table, before: u64, intervals: &[u64]) {
        t.interleaved.borrow_mut().extend(
            intervals
                .iter()
                .map(|n| budget_entry(before + n * BUDGET.interval_ns, CG)),
        );
    }

    #[test]
    fn the_first_record_makes_the_entry_and_the_burst_then_runs_out() {
        let t = table(true);
        let now = NOW;
        let first = admit(&t, BUDGET, CG, now);
        assert_eq!(
            (first.admitted, first.made, first.conflicts),
            (true, true, 0)
        );
        let rest: Vec<bool> = (0..3)
            .map(|_| admit(&t, BUDGET, CG, now).admitted)
            .collect();
        assert_eq!(rest, [true, true, false], "a burst of three");
        assert!(!admit(&t, BUDGET, CG, now).made, "made once");
    }

    #[test]
    fn a_write_between_our_read_and_ours_is_read_again_and_both_charges_stay() {
        let (t, before) = charged_once(true);
        // Another CPU charges the same cgroup between our read and our exchange.
        interleave(&t, before, &[1]);
        let ours = admit(&t, BUDGET, CG, NOW);
        assert_eq!((ours.admitted, ours.conflicts), (true, 1));
        assert_eq!(
            tat(&t),
            before + 2 * BUDGET.interval_ns,
            "its charge and ours"
        );
    }

    #[test]
    fn without_compare_and_exchange_the_other_cpus_charge_is_overwritten() {
        // The plain path below 5.12, as SECURITY.md states it: one token spent twice.
        let (t, before) = charged_once(false);
        interleave(&t, before, &[1]);
        let ours = admit(&t, BUDGET, CG, NOW);
        assert_eq!((ours.admitted, ours.conflicts), (true, 0));
        assert_eq!(tat(&t), before + BUDGET.interval_ns, "one charge lost");
    }

    #[test]
    fn a_second_conflict_counts_the_record_over_budget_not_lost() {
        let (t, before) = charged_once(true);
        // Before our first write another CPU's charge lands, before our second a third's.
        interleave(&t, before, &[2, 1]);
        let ours = admit(&t, BUDGET, CG, NOW);
        assert_eq!((ours.admitted, ours.conflicts), (false, 2));
        assert_eq!(
            tat(&t),
            before + 2 * BUDGET.interval_ns,
            "only the others' charges"
        );
    }

    #[test]
    fn a_cpu_that_loses_the_insert_charges_the_entry_the_winner_made() {
        let t = table(true);
        let now = NOW;
        let winners = budget_entry(BUDGET.admit(0, now).expect("fits"), CG);
        t.made_by_other.set(Some(winners));
        let ours = admit(&t, BUDGET, CG, now);
        assert_eq!((ours.admitted, ours.made, ours.conflicts), (true, false, 1));
        assert_eq!(
            tat(&t),
            now + 2 * BUDGET.interval_ns,
            "both records charged"
        );
    }

    #[test]
    fn an_entry_over_budget_is_left_as_it_is() {
        let t = table(true);
        let now = NOW;
        for _ in 0..3 {
            admit(&t, BUDGET, CG, now);
        }
        let spent = t.values.borrow()[&CG];
        let ours = admit(&t, BUDGET, CG, now);
        assert_eq!((ours.admitted, ours.conflicts), (false, 0));
        assert_eq!(t.values.borrow()[&CG], spent);
    }

    #[test]
    fn no_budget_touches_no_entry() {
        let t = table(true);
        assert!(admit(&t, RefusalBudget::OFF, CG, NOW).admitted);
        assert!(t.values.borrow().is_empty());
    }
}
