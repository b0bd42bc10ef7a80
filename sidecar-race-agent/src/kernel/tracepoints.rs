//! The tracepoints of [`TRACEPOINTS`] (TCP state changes, resets, cgroups), with
//! `inet_sock_set_state` on its BTF tracepoint where the kernel allows: which were
//! attached, which could not be, and the programs each kernel gets.

use aya::{Ebpf, programs::BtfTracePoint};

use super::{
    attach::{ProbeError, attach, chain, verifier_gist},
    layout::{KernelLayout, TRACEPOINTS, Tracepoint},
};

/// The tracepoints attached, and those that could not be.
pub(super) struct Attached {
    pub tracepoints: Vec<Tracepoint>,
    pub degraded: Vec<Degraded>,
    pub set_state_hook: SetStateHook,
}

/// Attaches every usable tracepoint of the layout: `inet_sock_set_state` on its BTF
/// tracepoint when `sock` has its offsets and the kernel takes it. Fails only when a
/// required one cannot be attached; optional ones end up in `degraded`.
pub(super) fn attach_all(
    ebpf: &mut Ebpf,
    layout: &KernelLayout,
    sock: Result<(), String>,
    kernel_btf: &Result<aya::Btf, String>,
) -> Result<Attached, ProbeError> {
    let mut attached = Vec::new();
    let mut degraded = Vec::new();
    let set_state_hook = match sock.and_then(|_| attach_btf(ebpf, kernel_btf)) {
        Ok(()) => SetStateHook::TpBtf,
        Err(why_not_btf) => SetStateHook::Tracepoint { why_not_btf },
    };
    for tp in TRACEPOINTS {
        if tp.program == "inet_sock_set_state" && set_state_hook == SetStateHook::TpBtf {
            attached.push(tp);
            continue;
        }
        if !layout.is_usable(tp.program) {
            continue; // reported by the layout already
        }
        match attach(ebpf, &tp, tp.program) {
            Ok(()) => attached.push(tp),
            Err(e) if tp.required => return Err(e),
            Err(e) => degraded.push(Degraded {
                tracepoint: tp,
                reason: e.to_string(),
            }),
        }
    }
    Ok(Attached {
        tracepoints: attached,
        degraded,
        set_state_hook,
    })
}

/// A tracepoint that is loaded but could not be attached, and why.
#[derive(Debug, Clone)]
pub struct Degraded {
    pub tracepoint: Tracepoint,
    pub reason: String,
}

/// How `inet_sock_set_state` is hooked.
#[derive(Debug, Clone, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum SetStateHook {
    /// The BTF tracepoint: the states are arguments, no trace record is filled.
    TpBtf,
    /// The tracefs tracepoint, and why the BTF one was not used.
    Tracepoint { why_not_btf: String },
}

impl std::fmt::Display for SetStateHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.into())
    }
}

/// Loads and attaches the BTF tracepoint program; the reason as text when it cannot.
fn attach_btf(ebpf: &mut Ebpf, btf: &Result<aya::Btf, String>) -> Result<(), String> {
    let btf = btf.as_ref().map_err(Clone::clone)?;
    let name = "inet_sock_set_state_btf";
    let program: &mut BtfTracePoint = super::variant::program_mut(ebpf, name)
        .ok_or_else(|| format!("no program {name}"))?
        .try_into()
        .map_err(|e| chain(&e))?;
    program
        .load("inet_sock_set_state", btf)
        .map_err(|e| verifier_gist(&format!("load: {}", chain(&e))))?;
    program
        .attach()
        .map_err(|e| format!("attach: {}", chain(&e)))?;
    Ok(())
}
