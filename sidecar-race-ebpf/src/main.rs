//! The eBPF programs. Built only for `bpfel-unknown-none`; on the host this file is an
//! empty `main` so the workspace still builds.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]

#[cfg(target_arch = "bpf")]
mod programs;

#[cfg(not(target_arch = "bpf"))]
fn main() {}
