//! The atomics the core library cannot emit for BPF, written out as instructions.

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
