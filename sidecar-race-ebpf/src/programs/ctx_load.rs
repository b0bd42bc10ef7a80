//! Direct loads of tracepoint fields from the program's context, instead of a
//! `bpf_probe_read_kernel` helper call per field.
//!
//! The verifier only allows context loads at offsets fixed in the instruction, yet our
//! offsets come from tracefs at load time (no CO-RE, nothing compiled in). So each
//! load is a `match` over every offset the field could legally have, one arm per
//! aligned offset with that offset as an immediate. The offset is read from the
//! frozen read-only config, so the verifier knows its value, follows only the matching
//! arm and hard-wires the branches (dead-code removal, kernel 5.2+): after loading,
//! one plain load is left. An offset past the covered range falls back to the helper.

use aya_ebpf::{EbpfContext, programs::TracePointContext};
use sidecar_race_ebpf::layout::MISSING;

use super::helpers::field;

macro_rules! direct {
    ($name:ident, $t:ty, $width:literal, [$($off:literal)*]) => {
        /// Loads a field of this type at `offset`; `Err` when the kernel lacks it.
        #[inline(always)]
        pub fn $name(ctx: &TracePointContext, offset: u16) -> Result<$t, u32> {
            let base = ctx.as_ptr();
            match offset {
                // Inline assembly, because LLVM folds plain loads of identical shape
                // back into one load at `base + offset`, which the verifier rejects.
                $($off => {
                    let v: u64;
                    // SAFETY: a context load at a constant, aligned offset within the
                    // tracepoint's record; the verifier checks it against the record.
                    unsafe {
                        core::arch::asm!(
                            concat!("{v} = *(", $width, " *)({b} + ", stringify!($off), ")"),
                            v = out(reg) v,
                            b = in(reg) base,
                            options(readonly, nostack, preserves_flags),
                        )
                    };
                    Ok(v as $t)
                })*
                MISSING => Err(0),
                _ => field(ctx, offset),
            }
        }
    };
}

// The fields we read come right after the 8-byte common header; every kernel's
// layout for them stays within the first 64 bytes, the 16-byte addresses within 80.
direct!(load_u16, u16, "u16", [8 10 12 14 16 18 20 22 24 26 28 30 32 34 36 38 40 42 44 46 48 50 52 54 56 58 60 62]);
direct!(load_i32, i32, "u32", [8 12 16 20 24 28 32 36 40 44 48 52 56 60]);
direct!(load_u64, u64, "u64", [8 16 24 32 40 48 56 64 72]);
