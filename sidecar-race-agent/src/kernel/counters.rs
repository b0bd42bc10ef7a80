//! The kernel's exact per-CPU counters, shared: the daemon's loop reads them for its
//! stats line and the metrics read them at scrape time; and the counts they make up
//! (per kind of event, and the refusals suppressed per cgroup).

use std::collections::BTreeMap;

use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray};
use parking_lot::Mutex;
use sidecar_race_ebpf::abi::{counter, kind};

use super::{
    attach::ProbeError,
    evicted::{Evicted, Made},
    recursion::RecursionMisses,
};
use crate::ingest::events::Kind;

/// Kernel-side counts for one kind of event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct KindCounts {
    /// Every event the kernel saw (for `refused`: every refusal).
    pub seen: u64,
    /// Those the full ring buffer could not take.
    pub lost: u64,
    /// Events over their container's budget: counted in the kernel, not sent.
    pub suppressed: u64,
}

/// Refusals the kernel counted instead of sending, per cgroup id (monotonic while the
/// entry lives), and those it had no per-cgroup room for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SuppressedCounts {
    pub by_cgroup: Vec<(u64, u64)>,
    pub unkeyed: u64,
}

/// The LRU tables whose evictions are told from what the kernel made, used and still
/// holds (see [`Evicted`]).
pub(super) struct LruTables {
    pub budget: BpfHashMap<MapData, u64, u64>,
    pub control_budget: BpfHashMap<MapData, u64, u64>,
    /// Keyed by `abi::ClientEnd`, valued by the programs' `LocalRefusal` (32 bytes).
    pub local_refusals: BpfHashMap<MapData, [u8; 24], [u8; 32]>,
    /// The Unix kprobes' calls in progress, by thread (three pointers: 24 bytes).
    pub unix_kprobe_calls: BpfHashMap<MapData, u64, [u8; 24]>,
}

pub struct KernelCounters {
    counters: PerCpuArray<MapData, u64>,
    tables: LruTables,
    /// Evictions reported so far per table, so the counters never go back.
    evicted: Mutex<[Evicted; 4]>,
    /// `None` where the kernel does not count every hook's skipped runs.
    recursion: Option<RecursionMisses>,
}

impl std::fmt::Debug for KernelCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KernelCounters")
    }
}

impl KernelCounters {
    pub(super) fn new(
        counters: PerCpuArray<MapData, u64>,
        tables: LruTables,
        recursion: Option<RecursionMisses>,
    ) -> Self {
        Self {
            counters,
            tables,
            evicted: Mutex::default(),
            recursion,
        }
    }

    /// Budget writes another CPU got in first, per budget (`refusal`, `control`): the
    /// contended branch of a budget update (see `sidecar_race_ebpf::admission`).
    pub fn budget_conflicts(&self) -> Result<[(&'static str, u64); 2], ProbeError> {
        Ok([
            ("refusal", self.sum(counter::BUDGET_CONFLICTS)?),
            ("control", self.sum(counter::CONTROL_BUDGET_CONFLICTS)?),
        ])
    }

    /// Runs the kernel skipped per program; `None` where it does not count them.
    pub fn recursion_misses(&self) -> Option<Vec<(String, u64)>> {
        self.recursion.as_ref().map(RecursionMisses::read)
    }

    /// Counter `slot`, summed over CPUs.
    pub(super) fn sum(&self, slot: u32) -> Result<u64, ProbeError> {
        let values = self
            .counters
            .get(&slot, 0)
            .map_err(|cause| ProbeError::Map {
                name: "COUNTERS",
                cause,
            })?;
        Ok(values.iter().sum())
    }

    /// Entries of the kernel's LRU tables that were gone before their use, per table:
    /// sockets that left SYN_SENT or LISTEN without their entry (evicted when the
    /// table was full, or older than the programs), budgets and local refusals the
    /// full table evicted (a forgotten container starts with a full burst again; a
    /// redirected refusal loses its local destination), and Unix kprobe calls whose
    /// return never came (the kernel's kretprobe instances were all taken) or that a
    /// full table evicted.
    pub fn entries_gone(&self) -> Result<[(&'static str, u64); 6], ProbeError> {
        let t = &self.tables;
        // What was made is read before what is left and what was used after it, so
        // an entry made or used during the read is never taken for an eviction.
        let made = [
            self.sum(counter::BUDGET_MADE)?,
            self.sum(counter::CONTROL_BUDGET_MADE)?,
            self.sum(counter::LOCAL_REFUSALS_MADE)?,
            self.sum(counter::UNIX_KPROBE_CALLS_MADE)?,
        ];
        let left = [
            live(t.budget.keys()),
            live(t.control_budget.keys()),
            live(t.local_refusals.keys()),
            live(t.unix_kprobe_calls.keys()),
        ];
        let used = [
            0,
            0,
            self.sum(counter::LOCAL_REFUSALS_USED)?,
            self.sum(counter::UNIX_KPROBE_CALLS_USED)?,
        ];
        let mut evicted = self.evicted.lock();
        let mut gone = [0; 4];
        for i in 0..4 {
            gone[i] = evicted[i].update(Made {
                made: made[i],
                left: left[i],
                used: used[i],
            });
        }
        Ok([
            ("connecting", self.sum(counter::CONNECTING_GONE)?),
            ("listening", self.sum(counter::LISTENING_GONE)?),
            ("budget", gone[0]),
            ("control_budget", gone[1]),
            ("local_refusals", gone[2]),
            ("unix_kprobe_calls", gone[3]),
        ])
    }

    /// Exact kernel counts per kind, summed over CPUs.
    pub fn counts(&self) -> Result<BTreeMap<Kind, KindCounts>, ProbeError> {
        Kind::ALL
            .into_iter()
            .map(|k| {
                Ok((
                    k,
                    KindCounts {
                        seen: self.sum(counter::seen(k.code()))?,
                        lost: self.sum(counter::lost(k.code()))?,
                        suppressed: self.sum(if k.code() == kind::REFUSED {
                            counter::SUPPRESSED
                        } else {
                            counter::control_suppressed(k.code())
                        })?,
                    },
                ))
            })
            .collect()
    }
}

/// Entries in a table now; a key that cannot be read ends the walk (the kernel
/// restarts a walk whose key was deleted meanwhile: counted twice is too many left,
/// which only delays an eviction's count).
fn live<K>(keys: impl Iterator<Item = Result<K, aya::maps::MapError>>) -> u64 {
    // A walk restarted again and again by deletions still ends.
    const MOST: usize = 1 << 18;
    keys.map_while(Result::ok).take(MOST).count() as u64
}
