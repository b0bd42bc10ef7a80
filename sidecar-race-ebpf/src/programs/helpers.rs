//! What every program calls: the kernel's helpers for time and the current task,
//! tracepoint field reads, the atomics the core library cannot emit for BPF, and the
//! TCP constants.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_kernel, generated},
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

/// Reads a `T` at `base + offset` of kernel memory; `None` when the offset is unknown
/// (`MISSING`) or the read fails. Offsets come from the running kernel's BTF.
#[inline(always)]
pub fn read<T>(base: u64, offset: u16) -> Option<T> {
    if offset == MISSING || base == 0 {
        return None;
    }
    // SAFETY: bpf_probe_read_kernel checks the access.
    unsafe { bpf_probe_read_kernel((base + u64::from(offset)) as *const T) }.ok()
}

/// Adds `v` to the u64 at `p` atomically, as seen by every CPU. Written out as
/// BPF_XADD (the core library has no atomic read-modify-write for this target);
/// every kernel since 4.x has it.
///
/// # Safety
/// `p` is an aligned u64 map value valid for this program run.
#[inline(always)]
pub unsafe fn atomic_add(p: *mut u64, v: u64) {
    // SAFETY: as the caller promises.
    unsafe {
        core::arch::asm!(
            "lock *(u64 *)({p} + 0) += {v}",
            p = in(reg) p,
            v = in(reg) v,
            options(nostack, preserves_flags),
        )
    };
}

/// Writes `new` at `p` if it holds `old`, atomically; whether it did. BPF_ATOMIC |
/// BPF_CMPXCHG (5.12+), written out because the core library has no atomics for this
/// target.
///
/// # Safety
/// `p` is an aligned u64 map value valid for this program run, in a program loaded
/// only on 5.12+.
#[inline(always)]
pub unsafe fn compare_exchange(p: *mut u64, old: u64, new: u64) -> bool {
    let mut seen = old;
    // SAFETY: as the caller promises.
    unsafe {
        core::arch::asm!(
            "r0 = cmpxchg_64({p} + 0, r0, {new})",
            p = in(reg) p,
            new = in(reg) new,
            inout("r0") seen,
            options(nostack),
        )
    };
    seen == old
}
