//! `cgroup:cgroup_mkdir` / `cgroup:cgroup_rmdir` on the cgroup v2 hierarchy: the
//! kernel's record of containers being created and torn down.

use aya_ebpf::{
    EbpfContext,
    helpers::{bpf_probe_read_kernel_str_bytes, generated},
    macros::tracepoint,
    programs::TracePointContext,
};
use sidecar_race_ebpf::{
    abi::{CGROUP_PATH_LEN, CgroupEvent, counter, flags, kind},
    layout::CgroupDir,
};

use super::{
    charge,
    helpers::{field, now_boot_ns},
    ledgers::control_admitted,
    maps::{CONTROL, config, count},
};

budgeted!(#[tracepoint] cgroup_mkdir / cgroup_mkdir_plain (TracePointContext) => made);
budgeted!(#[tracepoint] cgroup_rmdir / cgroup_rmdir_plain (TracePointContext) => removed);

#[inline(always)]
fn made<const CMPXCHG: bool>(ctx: &TracePointContext) -> u32 {
    let (layout, hierarchy) = (config!(cgroup_mkdir), config!(cgroup2_hierarchy));
    match emit::<CMPXCHG>(ctx, &layout, hierarchy, kind::CGROUP_CREATED) {
        Ok(r) | Err(r) => r,
    }
}

#[inline(always)]
fn removed<const CMPXCHG: bool>(ctx: &TracePointContext) -> u32 {
    let (layout, hierarchy) = (config!(cgroup_rmdir), config!(cgroup2_hierarchy));
    match emit::<CMPXCHG>(ctx, &layout, hierarchy, kind::CGROUP_REMOVED) {
        Ok(r) | Err(r) => r,
    }
}

#[inline(always)]
fn emit<const CMPXCHG: bool>(
    ctx: &TracePointContext,
    l: &CgroupDir,
    hierarchy: i32,
    k: u8,
) -> Result<u32, u32> {
    if field::<i32>(ctx, l.root)? != hierarchy {
        return Ok(0); // a cgroup v1 hierarchy: ids there are not the ones sockets carry
    }
    count(counter::seen(k));
    // The task making or removing the cgroup pays: a container with a delegated tree
    // for its own sub-cgroups; the runtime making a pod is not budgeted.
    // SAFETY: helper without preconditions.
    let own = unsafe { generated::bpf_get_current_cgroup_id() };
    if !control_admitted::<CMPXCHG>(k, &charge::of_current_task(own)) {
        return Ok(0);
    }
    let Some(mut entry) = CONTROL.reserve::<CgroupEvent>(0) else {
        count(counter::lost(k));
        return Ok(0);
    };
    let ev = entry.as_mut_ptr();
    // SAFETY: `ev` points at a reserved, exclusively owned record; every field is
    // written before submit. The path is read in place: the record is too large for
    // the 512-byte eBPF stack.
    unsafe {
        (*ev).header.kind = k;
        (*ev).header.flags = 0;
        (*ev).header._pad = [0; 6];
        (*ev).header.ts_boot_ns = now_boot_ns();
        (*ev).cgroup_id = field(ctx, l.id).unwrap_or(0);
        (*ev).level = field::<i32>(ctx, l.level).unwrap_or(0) as u32;
        let loc: u32 = field(ctx, l.path_loc).unwrap_or(0);
        let offset = (loc & 0xffff) as usize;
        let src_len = (loc >> 16) as usize; // includes the NUL
        let path = &mut (*ev).path;
        path[0] = 0;
        let len =
            match bpf_probe_read_kernel_str_bytes((ctx.as_ptr() as *const u8).add(offset), path) {
                Ok(s) => s.len(),
                Err(_) => 0,
            };
        (*ev).path_len = len as u32;
        if src_len > CGROUP_PATH_LEN {
            (*ev).header.flags = flags::PATH_TRUNCATED;
        }
    }
    entry.submit(0);
    Ok(0)
}
