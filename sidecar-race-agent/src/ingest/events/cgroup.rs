//! `cgroup_created` and `cgroup_removed` records: a cgroup's id, level and path.

use sidecar_race_ebpf::abi::{CgroupEvent, flags};

use crate::names::c_string::c_string;

/// `cgroup_created`, `cgroup_removed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupFact {
    pub ts_boot_ns: u64,
    pub cgroup_id: u64,
    pub level: u32,
    /// Relative to the cgroup2 mount, starting with `/`.
    pub path: String,
    pub truncated: bool,
    /// The kernel could not read the path (lockdown for confidentiality): `path` is
    /// empty until the agent names the cgroup by its id (`Inventory::observe`).
    pub path_unread: bool,
}

pub fn cgroup_fact(ev: &CgroupEvent) -> CgroupFact {
    let len = (ev.path_len as usize).min(ev.path.len());
    CgroupFact {
        ts_boot_ns: ev.header.ts_boot_ns,
        cgroup_id: ev.cgroup_id,
        level: ev.level,
        path: c_string(&ev.path[..len]),
        truncated: ev.header.flags & flags::PATH_TRUNCATED != 0,
        path_unread: ev.header.flags & flags::PATH_UNREAD != 0,
    }
}
