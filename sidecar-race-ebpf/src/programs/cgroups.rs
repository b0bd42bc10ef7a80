//! `cgroup:cgroup_mkdir` / `cgroup:cgroup_rmdir` on the cgroup v2 hierarchy: the
//! kernel's record of containers being created and torn down. Where tracefs is missing
//! and the kernel has BTF, the same tracepoints are hooked as BTF tracepoints
//! (`cgroup_mkdir_btf`), which read the cgroup itself at offsets from the BTF.

use aya_ebpf::{
    EbpfContext,
    helpers::{bpf_probe_read_kernel_str_bytes, generated},
    macros::{btf_tracepoint, tracepoint},
    programs::{BtfTracePointContext, TracePointContext},
};
use sidecar_race_ebpf::{
    abi::{CGROUP_PATH_LEN, CgroupEvent, counter, flags, kind},
    layout::CgroupDir,
};

use super::{
    charge,
    helpers::{field, now_boot_ns},
    kernel_read::{direct_reads, read},
    ledgers::control_admitted,
    maps::{CONTROL, config, count},
};

budgeted!(#[tracepoint] cgroup_mkdir / cgroup_mkdir_plain (TracePointContext) => made);
budgeted!(#[tracepoint] cgroup_rmdir / cgroup_rmdir_plain (TracePointContext) => removed);

budgeted!(
    /// `(struct cgroup *cgrp, const char *path)`.
    #[btf_tracepoint(function = "cgroup_mkdir")]
    cgroup_mkdir_btf / cgroup_mkdir_btf_plain (BtfTracePointContext) => made_btf
);
budgeted!(
    /// `(struct cgroup *cgrp, const char *path)`.
    #[btf_tracepoint(function = "cgroup_rmdir")]
    cgroup_rmdir_btf / cgroup_rmdir_btf_plain (BtfTracePointContext) => removed_btf
);

/// What a record says of its cgroup.
struct Dir {
    id: u64,
    level: u32,
    /// Where its path is: in the trace record at an offset, or a kernel string.
    path: Path,
}

enum Path {
    /// A `__data_loc` field of the record: offset and length (NUL included).
    Record {
        ctx: *const u8,
        offset: usize,
        len: usize,
    },
    Kernel(*const u8),
}

#[inline(always)]
fn made<const CMPXCHG: bool>(ctx: &TracePointContext) -> u32 {
    from_record::<CMPXCHG>(ctx, &config!(cgroup_mkdir), kind::CGROUP_CREATED)
}

#[inline(always)]
fn removed<const CMPXCHG: bool>(ctx: &TracePointContext) -> u32 {
    from_record::<CMPXCHG>(ctx, &config!(cgroup_rmdir), kind::CGROUP_REMOVED)
}

#[inline(always)]
fn made_btf<const CMPXCHG: bool>(ctx: &BtfTracePointContext) -> u32 {
    from_args::<CMPXCHG>(ctx, kind::CGROUP_CREATED)
}

#[inline(always)]
fn removed_btf<const CMPXCHG: bool>(ctx: &BtfTracePointContext) -> u32 {
    from_args::<CMPXCHG>(ctx, kind::CGROUP_REMOVED)
}

#[inline(always)]
fn from_record<const CMPXCHG: bool>(ctx: &TracePointContext, l: &CgroupDir, k: u8) -> u32 {
    let Ok(root) = field::<i32>(ctx, l.root) else {
        return 0;
    };
    let loc: u32 = field(ctx, l.path_loc).unwrap_or(0);
    let dir = Dir {
        id: field(ctx, l.id).unwrap_or(0),
        level: field::<i32>(ctx, l.level).unwrap_or(0) as u32,
        path: Path::Record {
            ctx: ctx.as_ptr() as *const u8,
            offset: (loc & 0xffff) as usize,
            len: (loc >> 16) as usize,
        },
    };
    emit::<CMPXCHG>(root, &dir, k)
}

#[inline(always)]
fn from_args<const CMPXCHG: bool>(ctx: &BtfTracePointContext, k: u8) -> u32 {
    let cgrp: u64 = ctx.arg(0);
    let path: u64 = ctx.arg(1);
    let f = config!(cgroup);
    let root = read::<u64>(cgrp, f.root).and_then(|r| read::<i32>(r, f.hierarchy_id));
    let id = read::<u64>(cgrp, f.kn).and_then(|kn| read::<u64>(kn, f.kn_id));
    let (Some(root), Some(id)) = (root, id) else {
        return 0;
    };
    let dir = Dir {
        id,
        level: read::<i32>(cgrp, f.level).unwrap_or(0) as u32,
        path: Path::Kernel(path as *const u8),
    };
    emit::<CMPXCHG>(root, &dir, k)
}

#[inline(always)]
fn emit<const CMPXCHG: bool>(root: i32, dir: &Dir, k: u8) -> u32 {
    if root != config!(cgroup2_hierarchy) {
        return 0; // a cgroup v1 hierarchy: ids there are not the ones sockets carry
    }
    count(counter::seen(k));
    // The task making or removing the cgroup pays: a container with a delegated tree
    // for its own sub-cgroups; the runtime making a pod is not budgeted.
    // SAFETY: helper without preconditions.
    let own = unsafe { generated::bpf_get_current_cgroup_id() };
    if !control_admitted::<CMPXCHG>(k, &charge::of_current_task(own)) {
        return 0;
    }
    let Some(mut entry) = CONTROL.reserve::<CgroupEvent>(0) else {
        count(counter::lost(k));
        return 0;
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
        (*ev).cgroup_id = dir.id;
        (*ev).level = dir.level;
        let path = &mut (*ev).path;
        path[0] = 0;
        let (src, truncated) = match dir.path {
            Path::Record { ctx, offset, len } => (ctx.add(offset), len > CGROUP_PATH_LEN),
            // A kernel string has no BTF type to load it through: with direct reads
            // it is left to the agent, which finds the id in cgroupfs.
            Path::Kernel(_) if direct_reads() => {
                (*ev).path_len = 0;
                (*ev).header.flags = flags::PATH_UNREAD;
                entry.submit(0);
                return 0;
            }
            // The string's length is not known before it is read: a path that fills
            // the buffer is taken as cut.
            Path::Kernel(p) => (p, false),
        };
        let len = match bpf_probe_read_kernel_str_bytes(src, path) {
            Ok(s) => s.len(),
            Err(_) => 0,
        };
        (*ev).path_len = len as u32;
        let filled = matches!(dir.path, Path::Kernel(_)) && len + 1 >= CGROUP_PATH_LEN;
        if truncated || filled {
            (*ev).header.flags = flags::PATH_TRUNCATED;
        }
    }
    entry.submit(0);
    0
}
