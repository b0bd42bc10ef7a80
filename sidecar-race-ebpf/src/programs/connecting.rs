//! Who is connecting, by socket (`struct sock *`), from SYN_SENT until it leaves it.
//!
//! Every connect on the node records its owner here and removes it a moment later, so
//! this table is most of what a successful connect costs. A hash map operation costs
//! ~150 ns each (bucket lock, hashing, element free lists; measured with bpf_stats), so
//! the first place is a direct-mapped array of slots: the verifier inlines the array
//! lookup, a slot is claimed with one compare-and-exchange and released with one
//! store, and no lock is taken. A socket whose slot another socket holds goes to the
//! LRU hash, which is also the only table on kernels before 5.12 (no
//! compare-and-exchange; those programs never claim a slot).
//!
//! Each entry keeps the connect's destination (`abi::destination_tag`) beside its
//! owner, and a reset takes the owner only if it went to that destination: an entry
//! left behind by an earlier socket at the same address, whose exit from SYN_SENT was
//! never seen (a run the kernel skipped, counted in `recursion_misses`), cannot lend
//! its owner to another socket's refusal, with or without BTF.

use aya_ebpf::{
    macros::map,
    maps::{Array, LruHashMap},
};
use sidecar_race_ebpf::abi::{Owner, same_connect};

use super::atomics::compare_exchange;

/// Slots in the array: a power of two. A node has few sockets in SYN_SENT at once;
/// a collision only sends one of them to the LRU hash.
const SLOTS: u32 = 8_192;
const SLOT_BITS: u32 = SLOTS.trailing_zeros();

/// A claimed slot: the socket holding it (0: free) and its owner. Only the socket
/// holding a slot writes to it or frees it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Slot {
    sk: u64,
    dest: u64,
    owner: Owner,
}

/// An entry of the overflow table.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Connecting {
    dest: u64,
    owner: Owner,
}

#[map]
static CONNECTING_SLOTS: Array<Slot> = Array::with_max_entries(SLOTS, 0);

/// The overflow: sockets whose slot is taken, and all of them before 5.12.
#[map]
static CONNECTING: LruHashMap<u64, Connecting> = LruHashMap::with_max_entries(65_536, 0);

/// Fibonacci hashing of the socket's address (its low 32 bits, which tell slab
/// objects apart): the top bits of a multiply.
#[inline(always)]
fn slot_of(sk: u64) -> Option<*mut Slot> {
    let index = low_bits(sk).wrapping_mul(0x9E37_79B9) >> (32 - SLOT_BITS);
    CONNECTING_SLOTS.get_ptr_mut(index)
}

/// The low 32 bits of `sk` as a plain number. From a BTF tracepoint `sk` is a typed
/// pointer, and the verifier refuses to multiply one; a 32-bit subtraction is the one
/// operation it allows on a pointer (for a loader that may read addresses, as ours
/// must: CAP_PERFMON), and its result is a number.
#[inline(always)]
fn low_bits(sk: u64) -> u32 {
    let mut v = sk;
    // SAFETY: register arithmetic only.
    unsafe {
        core::arch::asm!("w0 -= 0", inout("r0") v, options(pure, nomem, nostack));
    }
    v as u32
}

/// Records that `owner` connects with `sk` to `dest`. `CMPXCHG`: the kernel has
/// compare-and-exchange (5.12+; older verifiers refuse the instruction even where it
/// is never reached).
#[inline(always)]
pub fn record<const CMPXCHG: bool>(sk: u64, owner: &Owner, dest: u64) {
    if CMPXCHG && let Some(slot) = slot_of(sk) {
        // SAFETY: a slot of the array, valid for this program run; its `sk` changes
        // only by the claim below (from 0) and the release in `forget` (by its holder).
        let held = unsafe { core::ptr::read_volatile(&raw const (*slot).sk) };
        // A slot still holding this address is this socket's own (a previous socket
        // at the same address whose release was never seen).
        let ours =
            held == sk || (held == 0 && unsafe { compare_exchange(&raw mut (*slot).sk, 0, sk) });
        if ours {
            // SAFETY: the slot is ours; a reset can only look it up after this run,
            // once the SYN has gone out.
            unsafe {
                core::ptr::write_volatile(&raw mut (*slot).dest, dest);
                core::ptr::write_volatile(&raw mut (*slot).owner, *owner);
            }
            return;
        }
    }
    let entry = Connecting {
        dest,
        owner: *owner,
    };
    let _ = CONNECTING.insert(&sk, &entry, 0);
}

/// The owner recorded for `sk` when it connected to `dest`, valid for this program
/// run. An entry for `sk` recorded with another destination is an earlier socket's,
/// left behind: none. (A destination that could not be read, 0, is not compared.)
#[inline(always)]
pub fn owner_of(sk: u64, dest: u64) -> Option<*const Owner> {
    let same = |recorded: u64| same_connect(recorded, dest);
    if let Some(slot) = slot_of(sk) {
        // SAFETY: as in `record`; only `sk` itself could change a slot it holds, and
        // its state changes are serialised by the socket's lock.
        unsafe {
            if core::ptr::read_volatile(&raw const (*slot).sk) == sk {
                if !same(core::ptr::read_volatile(&raw const (*slot).dest)) {
                    return None;
                }
                return Some(&raw const (*slot).owner);
            }
        }
    }
    let entry = CONNECTING.get_ptr(&sk)?;
    // SAFETY: a map value valid for this program run (RCU).
    unsafe { same((*entry).dest).then_some(&raw const (*entry).owner) }
}

/// Forgets `sk` as it leaves SYN_SENT; whether it was recorded.
#[inline(always)]
pub fn forget(sk: u64) -> bool {
    if let Some(slot) = slot_of(sk) {
        // SAFETY: as in `record`. A plain store releases it: no one else writes a
        // slot that is not free.
        unsafe {
            if core::ptr::read_volatile(&raw const (*slot).sk) == sk {
                core::ptr::write_volatile(&raw mut (*slot).sk, 0);
                return true;
            }
        }
    }
    CONNECTING.remove(&sk).is_ok()
}
