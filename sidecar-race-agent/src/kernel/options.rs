//! Load-time options: the ring buffer's size, the budgets, which hooks to try, and
//! the sizes of the kernel's maps they set.

use aya::EbpfLoader;
use sidecar_race_ebpf::layout::{
    CONTROL_BURST, CONTROL_REFILL_PER_SECOND, REFUSAL_BURST, REFUSAL_REFILL_PER_SECOND,
    RefusalBudget,
};

use super::{
    attach::ProbeError, tcp_hooks::TcpHookChoice, udp_hook::UdpHookChoice,
    unix_hooks::UnixHookChoice,
};

/// Load-time options.
#[derive(Debug, Clone, Copy)]
pub struct ProbeOptions {
    pub ring_buffer_bytes: u32,
    /// Hierarchy id of cgroup v2 in the cgroup tracepoints (0 on every kernel today).
    pub cgroup2_hierarchy: i32,
    /// Refusal records each cgroup may send; the rest are counted in the kernel.
    pub refusal_budget: RefusalBudget,
    /// Control records (listeners, cgroups) each container may send.
    pub control_budget: RefusalBudget,
    /// Try the BTF tracepoint for `inet_sock_set_state` before the tracefs one.
    pub set_state_btf: bool,
    /// Which hooks see TCP listeners (and whether `inet_sock_set_state` is needed).
    pub tcp_hooks: TcpHookChoice,
    /// Which Unix domain socket hooks to use.
    pub unix_hooks: UnixHookChoice,
    /// Which hook sees UDP refusals.
    pub udp_hook: UdpHookChoice,
    /// Entries of every kernel LRU table instead of their built-in sizes, and the
    /// connect slots in front of `CONNECTING` down to one: for tests that fill them.
    pub lru_entries: Option<u32>,
}

/// The kernel's LRU tables, which `ProbeOptions::lru_entries` resizes.
const LRU_TABLES: [&str; 7] = [
    "CONNECTING",
    "LISTENING",
    "LOCAL_REFUSALS",
    "BUDGET",
    "CONTROL_BUDGET",
    "UNIX_KPROBE_CALLS",
    "TCP_LISTEN_CALLS",
];

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            ring_buffer_bytes: 1 << 20,
            cgroup2_hierarchy: 0,
            refusal_budget: RefusalBudget::new(REFUSAL_BURST, REFUSAL_REFILL_PER_SECOND),
            control_budget: RefusalBudget::new(CONTROL_BURST, CONTROL_REFILL_PER_SECOND),
            set_state_btf: true,
            tcp_hooks: TcpHookChoice::Auto,
            unix_hooks: UnixHookChoice::Auto,
            udp_hook: UdpHookChoice::Auto,
            lru_entries: None,
        }
    }
}

impl ProbeOptions {
    /// The ring buffer's size must be a power of two and a multiple of the page size.
    pub(super) fn check_ring_size(&self) -> Result<(), ProbeError> {
        let page = page_size();
        let size = self.ring_buffer_bytes;
        if !size.is_power_of_two() || !(size as usize).is_multiple_of(page) {
            return Err(ProbeError::RingSize { got: size, page });
        }
        Ok(())
    }

    /// Sizes the maps these options size: the ring buffer, and the LRU tables in tests.
    pub(super) fn size_maps(&self, loader: &mut EbpfLoader) {
        loader.map_max_entries("EVENTS", self.ring_buffer_bytes);
        if let Some(entries) = self.lru_entries {
            for table in LRU_TABLES {
                loader.map_max_entries(table, entries);
            }
            // One slot: nearly every connect then takes the LRU path that is filled.
            loader.map_max_entries("CONNECTING_SLOTS", 1);
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}
