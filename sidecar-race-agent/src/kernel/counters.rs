//! The kernel's exact per-CPU counters, shared: the daemon's loop reads them for its
//! stats line and the metrics read them at scrape time.

use std::collections::BTreeMap;

use aya::maps::{MapData, PerCpuArray};
use sidecar_race_ebpf::abi::{counter, kind};

use super::probes::{KindCounts, ProbeError};
use crate::events::Kind;

pub struct KernelCounters(PerCpuArray<MapData, u64>);

impl std::fmt::Debug for KernelCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KernelCounters")
    }
}

impl KernelCounters {
    pub(super) fn new(map: PerCpuArray<MapData, u64>) -> Self {
        Self(map)
    }

    /// Counter `slot`, summed over CPUs.
    pub(super) fn sum(&self, slot: u32) -> Result<u64, ProbeError> {
        let values = self.0.get(&slot, 0).map_err(|cause| ProbeError::Map {
            name: "COUNTERS",
            cause,
        })?;
        Ok(values.iter().sum())
    }

    /// Sockets that left SYN_SENT or LISTEN without their entry in the kernel's LRU
    /// table (evicted when it was full, or older than the programs), per table.
    pub fn entries_gone(&self) -> Result<[(&'static str, u64); 2], ProbeError> {
        Ok([
            ("connecting", self.sum(counter::CONNECTING_GONE)?),
            ("listening", self.sum(counter::LISTENING_GONE)?),
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
