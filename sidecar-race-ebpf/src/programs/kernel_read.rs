//! Reads of kernel memory at offsets from the kernel's BTF: through the read helper, or,
//! where lockdown for confidentiality refuses it, by direct loads through BTF-typed
//! pointers.

use aya_ebpf::helpers::bpf_probe_read_kernel;
use sidecar_race_ebpf::layout::MISSING;

use super::maps::config;

/// Whether kernel memory is read by direct loads (`Config::direct_reads`: lockdown for
/// confidentiality). The verifier knows the answer (a frozen read-only global) and
/// drops the other way's code, helper calls included, before it checks helpers.
#[inline(always)]
pub fn direct_reads() -> bool {
    config!(direct_reads) != 0
}

/// Reads a `T` at `base + offset` of kernel memory; `None` when the offset is unknown
/// (`MISSING`) or the read fails. Offsets come from the running kernel's BTF. With
/// direct reads, `base` must be a pointer the verifier knows the BTF type of (a BTF
/// tracepoint's argument, or a pointer field read from one) and `offset` a field of
/// that type: the verifier checks the load against the type, and a fault reads 0.
#[inline(always)]
pub fn read<T>(base: u64, offset: u16) -> Option<T> {
    if offset == MISSING || base == 0 {
        return None;
    }
    let at = (base + u64::from(offset)) as *const T;
    if direct_reads() {
        // SAFETY: a load the verifier checks against the kernel's BTF and turns into a
        // fault-tolerant one (BPF_PROBE_MEM).
        return Some(unsafe { core::ptr::read_volatile(at) });
    }
    // SAFETY: bpf_probe_read_kernel checks the access.
    unsafe { bpf_probe_read_kernel(at) }.ok()
}
