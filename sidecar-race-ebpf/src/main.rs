//! The eBPF programs. Built only for `bpfel-unknown-none`; on the host this file is an
//! empty `main` so the workspace still builds.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]
// Inline assembly for direct context loads (programs/ctx_load.rs); both toolchain
// routes build this crate with nightly features enabled.
#![cfg_attr(target_arch = "bpf", feature(asm_experimental_arch))]

#[cfg(target_arch = "bpf")]
mod programs;

#[cfg(not(target_arch = "bpf"))]
fn main() {}
