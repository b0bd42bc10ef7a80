//! What every program calls: the kernel's helpers for time and the current task,
//! tracepoint field reads, and the TCP constants.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, generated},
    programs::TracePointContext,
};
use sidecar_race_ebpf::{abi::Owner, layout::MISSING};

use super::process;

pub const IPPROTO_TCP: u16 = 6;
pub const TCP_SYN_SENT: i32 = 2;
pub const TCP_CLOSE: i32 = 7;
pub const TCP_LISTEN: i32 = 10;

#[inline(always)]
pub fn now_boot_ns() -> u64 {
    // SAFETY: helper without preconditions (kernel 5.8+).
    unsafe { generated::bpf_ktime_get_boot_ns() }
}

/// The current task as owner, named by its process; only meaningful in process context.
#[inline(always)]
pub fn current_owner() -> Owner {
    let pid_tgid = bpf_get_current_pid_tgid();
    let (pid, tgid) = (pid_tgid as u32, (pid_tgid >> 32) as u32);
    Owner {
        // SAFETY: helper without preconditions.
        cgroup_id: unsafe { generated::bpf_get_current_cgroup_id() },
        pid,
        tgid,
        comm: process::current_process_name(pid, tgid),
    }
}

/// Reads a field at an offset from the config; `Err` when the kernel lacks it.
#[inline(always)]
pub fn field<T>(ctx: &TracePointContext, offset: u16) -> Result<T, u32> {
    if offset == MISSING {
        return Err(0);
    }
    // SAFETY: the offset comes from this kernel's tracefs format for this tracepoint;
    // bpf_probe_read_kernel checks the access.
    unsafe { ctx.read_at::<T>(offset as usize) }.map_err(|_| 0)
}
