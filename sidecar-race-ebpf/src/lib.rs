//! The event ABI shared by the eBPF programs (kernel side) and the agent (user side).
//!
//! Every type crossing the boundary is `#[repr(C)]`, `Copy`, has explicit padding and
//! only fixed-width integers and byte arrays: no `bool`, `Option` or enums. Sizes are
//! asserted at compile time so both sides agree, and the agent decodes records in one
//! place with length checks.
#![no_std]

pub mod abi;
pub mod admission;
pub mod layout;
pub mod udp;
pub mod unix;
