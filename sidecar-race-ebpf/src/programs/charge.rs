//! Which cgroup pays for a refusal or a control record: the deepest ancestor of the
//! socket's (or the task's) cgroup, itself included, that the agent marked as a
//! container or a pod in `CHARGE_POINTS`. A container that makes sub-cgroups
//! (privileged, systemd inside, Sysbox) then spends one budget, not one per
//! sub-cgroup. Only the refusal and control paths walk; a successful connect never.
//!
//! The walk reads `struct cgroup` at offsets from the kernel's BTF (no CO-RE in Rust
//! eBPF) and goes top down over at most `CHARGE_MAX_LEVEL` levels: the runtime decides
//! how deep a container sits, the container only how deep it nests below itself.
//!
//! With direct reads (lockdown for confidentiality) each cgroup is charged for itself:
//! the walk reads `cgroup.ancestors`, an array of pointers whose elements the verifier
//! does not type (only integers or structs), and tests a socket's cgroup pointer's low
//! bits, arithmetic it refuses on a pointer. The agent says so (`per_cgroup_budgets`).

use aya_ebpf::helpers::generated;
use sidecar_race_ebpf::{abi::CHARGE_MAX_LEVEL, layout::MISSING};

use super::{
    kernel_read::{direct_reads, read},
    maps::{CHARGE_POINTS, config},
};

/// Where a charge was found.
pub struct Charge {
    pub cgroup_id: u64,
    /// Whether it is a container or pod the agent marked (else: the cgroup itself).
    pub marked: bool,
}

/// The charge for socket `sk`, owned by cgroup `own` (used when the walk cannot run).
#[inline(always)]
pub fn of_socket(sk: u64, own: u64) -> Charge {
    if direct_reads() {
        return unmarked(own); // see the module's docs
    }
    match socket_cgroup(sk) {
        Some(cgrp) => walk(cgrp, own),
        None => unmarked(own),
    }
}

/// The id of socket `sk`'s cgroup (v2), read from the socket; `None` where it cannot
/// be read: direct reads (see the module's docs), or a socket whose `sk_cgrp_data`
/// holds cgroup v1 data (before 5.15, its low bits set).
#[inline(always)]
pub fn socket_cgroup_id(sk: u64) -> Option<u64> {
    if direct_reads() {
        return None;
    }
    cgroup_id(socket_cgroup(sk)?, &config!(cgroup)).filter(|&id| id != 0)
}

/// Socket `sk`'s `struct cgroup *` (cgroup v2), from `sk_cgrp_data`; `None` when it
/// cannot be read or holds other data (kernels before 5.15 keep cgroup v1 data there,
/// its two low bits set). Not for direct reads (see the module's docs).
#[inline(always)]
fn socket_cgroup(sk: u64) -> Option<u64> {
    read::<u64>(sk, config!(cgroup.sk_cgrp)).filter(|&cgrp| cgrp != 0 && cgrp & 3 == 0)
}

/// The charge for the current task, whose cgroup is `own`.
#[inline(always)]
pub fn of_current_task(own: u64) -> Charge {
    if direct_reads() {
        return unmarked(own); // see the module's docs
    }
    let f = config!(cgroup);
    // SAFETY: helper without preconditions.
    let task = unsafe { generated::bpf_get_current_task() };
    match read::<u64>(task, f.task_cgroups).and_then(|css_set| read::<u64>(css_set, f.dfl_cgrp)) {
        Some(cgrp) if cgrp != 0 => walk(cgrp, own),
        _ => unmarked(own),
    }
}

#[inline(always)]
fn unmarked(own: u64) -> Charge {
    Charge {
        cgroup_id: own,
        marked: false,
    }
}

#[inline(always)]
fn walk(cgrp: u64, own: u64) -> Charge {
    let f = config!(cgroup);
    let Some(level) = read::<i32>(cgrp, f.level) else {
        return unmarked(own);
    };
    let mut found = unmarked(own);
    for lvl in 1..=CHARGE_MAX_LEVEL {
        if lvl as i32 > level {
            break;
        }
        let Some(id) = ancestor_id(cgrp, lvl, &f) else {
            break;
        };
        // SAFETY: a plain lookup; the value is not used.
        if unsafe { CHARGE_POINTS.get(&id) }.is_some() {
            found = Charge {
                cgroup_id: id,
                marked: true,
            };
        }
    }
    found
}

/// The id of `cgrp`'s ancestor at `lvl` (its own id at its own level).
#[inline(always)]
fn ancestor_id(cgrp: u64, lvl: u32, f: &sidecar_race_ebpf::layout::CgroupFields) -> Option<u64> {
    if f.ancestors == MISSING {
        return None;
    }
    let slot = cgrp + u64::from(f.ancestors) + 8 * u64::from(lvl);
    if f.ancestors_are_ids != 0 {
        return read::<u64>(slot, 0);
    }
    cgroup_id(read::<u64>(slot, 0)?, f)
}

/// The id of cgroup `cgrp` (a `struct cgroup *`): its kernfs node's id.
#[inline(always)]
fn cgroup_id(cgrp: u64, f: &sidecar_race_ebpf::layout::CgroupFields) -> Option<u64> {
    let kn = read::<u64>(cgrp, f.kn)?;
    read::<u64>(kn, f.kn_id)
}
