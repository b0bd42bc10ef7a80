//! The tracepoints of [`TRACEPOINTS`] (TCP state changes where the listen hooks cannot
//! serve, resets, cgroups, UDP refusals at `icmp_send` or dropped skbs), with
//! `inet_sock_set_state` and the UDP ones on their BTF tracepoints where the kernel
//! allows, and every one with a BTF program on that where tracefs is missing: which
//! were attached, which could not be, and the programs each kernel gets.

use aya::{Ebpf, programs::BtfTracePoint};

use super::{
    attach::{ProbeError, attach, chain, verifier_gist},
    layout::{ICMP_PROGRAM, KernelLayout, TRACEPOINTS, Tracepoint, UDP_PROGRAM},
    udp_hook::{self, UdpHookChoice},
};

/// The tracepoints attached, and those that could not be.
pub(super) struct Attached {
    pub tracepoints: Vec<Tracepoint>,
    pub degraded: Vec<Degraded>,
    pub set_state_hook: SetStateHook,
}

/// What the BTF tracepoints need besides the kernel's BTF: the offsets of the objects
/// they read (sockets, cgroups), or why they are missing.
pub(super) struct BtfReady {
    pub sock: Result<(), String>,
    pub cgroup: Result<(), String>,
    /// The `sk_buff` offsets the UDP refusal programs read (without them neither is
    /// attached).
    pub udp: Result<(), String>,
}

/// Attaches every usable tracepoint of the layout: `inet_sock_set_state` and
/// `kfree_skb` on their BTF tracepoints when `set_state_btf` (`--tp-btf`) asks for it
/// and the kernel takes them; the others
/// through tracefs, or, where tracefs cannot serve one (none is mounted), on its BTF
/// tracepoint. Fails only when a required one cannot be attached; optional ones end up
/// in `degraded`.
pub(super) fn attach_all(
    ebpf: &mut Ebpf,
    layout: &KernelLayout,
    set_state_needed: bool,
    set_state_btf: bool,
    udp_choice: UdpHookChoice,
    ready: &BtfReady,
    kernel_btf: &Result<aya::Btf, String>,
) -> Result<Attached, ProbeError> {
    let mut attached = Vec::new();
    let mut degraded = Vec::new();
    let mut set_state_hook = if !set_state_needed {
        SetStateHook::Off
    } else {
        match prefer_btf(set_state_btf)
            .and_then(|_| ready.sock.clone())
            .and_then(|_| attach_btf(ebpf, SET_STATE_BTF, "inet_sock_set_state", kernel_btf))
        {
            Ok(()) => SetStateHook::TpBtf,
            Err(why_not_btf) => SetStateHook::Tracepoint { why_not_btf },
        }
    };
    let udp_plan = udp_hook::plan(
        udp_choice,
        layout.is_usable(ICMP_PROGRAM),
        layout.is_usable(UDP_PROGRAM),
    );
    let mut icmp_attached = false;
    for tp in TRACEPOINTS {
        if tp.btf_program == Some(SET_STATE_BTF) {
            match set_state_hook {
                SetStateHook::TpBtf => {
                    attached.push(tp);
                    continue;
                }
                // The listen hooks see listeners, and refusals read their socket.
                SetStateHook::Off => continue,
                SetStateHook::Tracepoint { .. } => {}
            }
        }
        let needs = if tp.category == "cgroup" {
            &ready.cgroup
        } else {
            &ready.sock
        };
        // One UDP hook, never both (a refusal would count twice): icmp_send first.
        if tp.program == ICMP_PROGRAM {
            if udp_choice == UdpHookChoice::IcmpSend && !layout.is_usable(ICMP_PROGRAM) {
                degraded.push(Degraded {
                    tracepoint: tp,
                    reason: "this kernel does not have it: --udp-hook=icmp-send".into(),
                });
            }
            if !udp_plan.icmp_send {
                continue;
            }
        }
        if tp.program == UDP_PROGRAM {
            if icmp_attached {
                degraded.push(Degraded {
                    tracepoint: tp,
                    reason: udp_hook::kfree_skb_left_off(udp_choice),
                });
                continue;
            }
            if !udp_plan.kfree_skb_if_no_icmp {
                continue;
            }
        }
        let udp_btf = match tp.program {
            UDP_PROGRAM => Some(UDP_BTF),
            ICMP_PROGRAM => Some(ICMP_BTF),
            _ => None,
        };
        if let Some(btf_program) = udp_btf.filter(|_| layout.is_usable(tp.program)) {
            if let Err(why) = &ready.udp {
                degraded.push(Degraded {
                    tracepoint: tp,
                    reason: format!("no sk_buff offsets from the kernel's BTF: {why}"),
                });
                continue;
            }
            // The BTF tracepoint fills no record before the program runs.
            match prefer_btf(set_state_btf)
                .and_then(|_| attach_btf(ebpf, btf_program, tp.name, kernel_btf))
            {
                Ok(()) => {
                    icmp_attached |= tp.program == ICMP_PROGRAM;
                    attached.push(tp);
                    continue;
                }
                Err(why) => tracing::info!(
                    "{}:{} hooked through tracefs, not as a BTF tracepoint: {why}",
                    tp.category,
                    tp.name
                ),
            }
        }
        if layout.is_usable(tp.program) {
            let e = match attach(ebpf, &tp, tp.program) {
                Ok(()) => {
                    icmp_attached |= tp.program == ICMP_PROGRAM;
                    attached.push(tp);
                    continue;
                }
                Err(e) => e,
            };
            // perf_event_open refused (kernel.perf_event_paranoid above 2, or the
            // runtime's seccomp profile: CRI-O 1.34's built-in default allows it only
            // with CAP_SYS_ADMIN): the BTF tracepoint needs no perf event.
            let instead = tp
                .btf_program
                .filter(|_| e.is_permission_denied())
                .map(|program| {
                    needs
                        .clone()
                        .and_then(|_| attach_btf(ebpf, program, tp.name, kernel_btf))
                });
            match instead {
                Some(Ok(())) => {
                    tracing::info!(
                        "{}:{} hooked as a BTF tracepoint, which needs no perf event: the \
                         kernel refused perf_event_open (kernel.perf_event_paranoid above 2, \
                         or the container's seccomp profile)",
                        tp.category,
                        tp.name
                    );
                    attached.push(tp);
                }
                _ if tp.required => return Err(e),
                _ => degraded.push(Degraded {
                    tracepoint: tp,
                    reason: e.to_string(),
                }),
            }
            continue;
        }
        // No tracefs at all (the layout says so): its BTF tracepoint, if any.
        // Not the UDP ones: `NO_SOCKET`'s number comes from tracefs, and whether the
        // kernel has `icmp_send` too.
        let Some(program) = tp.btf_program.filter(|_| {
            layout.without_tracefs && tp.program != UDP_PROGRAM && tp.program != ICMP_PROGRAM
        }) else {
            continue;
        };
        match needs
            .clone()
            .and_then(|_| attach_btf(ebpf, program, tp.name, kernel_btf))
        {
            Ok(()) => {
                if program == SET_STATE_BTF {
                    set_state_hook = SetStateHook::TpBtf;
                }
                attached.push(tp);
            }
            Err(reason) if tp.required => {
                return Err(ProbeError::BtfOnly {
                    tracepoint: format!("{}:{}", tp.category, tp.name),
                    reason,
                });
            }
            Err(reason) => degraded.push(Degraded {
                tracepoint: tp,
                reason: format!("as a BTF tracepoint: {reason}"),
            }),
        }
    }
    Ok(Attached {
        tracepoints: attached,
        degraded,
        set_state_hook,
    })
}

/// `inet_sock_set_state` on its BTF tracepoint.
const SET_STATE_BTF: &str = "inet_sock_set_state_btf";

/// `skb:kfree_skb`'s program on its BTF tracepoint.
const UDP_BTF: &str = "udp_kfree_skb_btf";
/// `icmp:icmp_send`'s program on its BTF tracepoint.
const ICMP_BTF: &str = "udp_icmp_send_btf";

/// Whether the BTF tracepoints are wanted where the kernel takes them (`--tp-btf`).
fn prefer_btf(tp_btf: bool) -> Result<(), String> {
    if tp_btf {
        Ok(())
    } else {
        Err("turned off (--tp-btf=false)".to_string())
    }
}

/// A tracepoint that is loaded but could not be attached, and why.
#[derive(Debug, Clone)]
pub struct Degraded {
    pub tracepoint: Tracepoint,
    pub reason: String,
}

/// How `inet_sock_set_state` is hooked.
#[derive(
    Debug, Clone, PartialEq, Eq, strum::IntoStaticStr, serde::Serialize, serde::Deserialize,
)]
#[strum(serialize_all = "snake_case")]
pub enum SetStateHook {
    /// The BTF tracepoint: the states are arguments, no trace record is filled.
    TpBtf,
    /// The tracefs tracepoint, and why the BTF one was not used.
    Tracepoint { why_not_btf: String },
    /// Not attached: the listen hooks serve (`tcp_hooks`).
    Off,
}

impl std::fmt::Display for SetStateHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.into())
    }
}

/// Loads program `name` and attaches it to the BTF tracepoint `function`; the reason as
/// text when it cannot.
fn attach_btf(
    ebpf: &mut Ebpf,
    name: &str,
    function: &str,
    btf: &Result<aya::Btf, String>,
) -> Result<(), String> {
    let btf = btf.as_ref().map_err(Clone::clone)?;
    let program: &mut BtfTracePoint = super::variant::program_mut(ebpf, name)
        .ok_or_else(|| format!("no program {name}"))?
        .try_into()
        .map_err(|e| chain(&e))?;
    program
        .load(function, btf)
        .map_err(|e| verifier_gist(&format!("load: {}", chain(&e))))?;
    program
        .attach()
        .map_err(|e| format!("attach: {}", chain(&e)))?;
    Ok(())
}
