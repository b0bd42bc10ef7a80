//! Builds the programs' [`Config`] from this kernel's tracefs formats, and says
//! which capability is degraded when a tracepoint or field is missing.

use std::fmt;

use sidecar_race_ebpf::layout::{
    CgroupDir, Config, InetSockSetState, MISSING, TcpReceiveReset, TcpSendReset,
};
use sidecar_race_ebpf::{
    udp::{IcmpConfig, UdpConfig},
    unix::SyscallArgs,
};
use thiserror::Error;

use super::tracefs::{EventFormat, Tracefs, TracefsError};

/// A tracepoint the agent attaches to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tracepoint {
    pub category: &'static str,
    pub name: &'static str,
    /// The eBPF program's name in the object.
    pub program: &'static str,
    /// The program on the same tracepoint as a BTF tracepoint, which needs no tracefs
    /// (it reads its arguments at offsets from the kernel's BTF), if there is one.
    pub btf_program: Option<&'static str>,
    /// Without it the agent cannot do its job at all.
    pub required: bool,
    /// What is lost without it, in words for the operator.
    pub capability: &'static str,
}

pub const TRACEPOINTS: [Tracepoint; 7] = [
    Tracepoint {
        category: "sock",
        name: "inet_sock_set_state",
        program: "inet_sock_set_state",
        btf_program: Some("inet_sock_set_state_btf"),
        required: true,
        capability: "connect tracking and listener events",
    },
    Tracepoint {
        category: "tcp",
        name: "tcp_receive_reset",
        program: "tcp_receive_reset",
        btf_program: Some("tcp_receive_reset_btf"),
        required: true,
        capability: "refused-connection events",
    },
    Tracepoint {
        category: "tcp",
        name: "tcp_send_reset",
        program: "tcp_send_reset",
        btf_program: None,
        required: false,
        capability: "local-redirect awareness (local_dst of refusals after a NAT REDIRECT)",
    },
    Tracepoint {
        category: "cgroup",
        name: "cgroup_mkdir",
        program: "cgroup_mkdir",
        btf_program: Some("cgroup_mkdir_btf"),
        required: false,
        capability: "container-created events (cgroup paths are then found by rescanning; without a pod source, startup races then read as steady)",
    },
    Tracepoint {
        category: "cgroup",
        name: "cgroup_rmdir",
        program: "cgroup_rmdir",
        btf_program: Some("cgroup_rmdir_btf"),
        required: false,
        capability: "container-removed events",
    },
    // Before kfree_skb: where it attaches, `auto` leaves kfree_skb off
    // (`tracepoints::attach_all`).
    Tracepoint {
        category: "icmp",
        name: "icmp_send",
        program: ICMP_PROGRAM,
        btf_program: Some("udp_icmp_send_btf"),
        required: false,
        capability: "UDP refusals over IPv4 at the port unreachable the kernel answers them with",
    },
    Tracepoint {
        category: "skb",
        name: "kfree_skb",
        program: UDP_PROGRAM,
        // Tried first where the tracefs record is readable (the reason's number comes
        // from it), never without tracefs: `tracepoints::attach_all`.
        btf_program: Some("udp_kfree_skb_btf"),
        required: false,
        capability: "UDP refusals over IPv6, and over IPv4 where icmp:icmp_send is missing (datagrams to a pod's loopback port no socket holds; needs the drop reason NO_SOCKET, 5.17+)",
    },
];

/// The program on `skb:kfree_skb` (see `sidecar_race_ebpf::udp`).
pub const UDP_PROGRAM: &str = "udp_kfree_skb";
/// The program on `icmp:icmp_send`, the other hook of UDP refusals.
pub const ICMP_PROGRAM: &str = "udp_icmp_send";

/// Why one tracepoint cannot be used on this kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unusable {
    pub tracepoint: Tracepoint,
    pub reason: String,
}

impl fmt::Display for Unusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tp = &self.tracepoint;
        if tp.required {
            write!(
                f,
                "tracepoint {}:{} is unusable ({}): {} cannot work",
                tp.category, tp.name, self.reason, tp.capability
            )
        } else {
            write!(
                f,
                "tracepoint {}:{} is unusable ({}): {} disabled",
                tp.category, tp.name, self.reason, tp.capability
            )
        }
    }
}

/// The config to load plus what could not be configured.
#[derive(Debug, Clone)]
pub struct KernelLayout {
    pub config: Config,
    /// `skb:kfree_skb`'s offsets and `NO_SOCKET`'s number (the `sk_buff` offsets come
    /// from BTF, `kernel::globals`); unset when the tracepoint is unusable.
    pub udp: UdpConfig,
    /// `icmp:icmp_send`'s offsets; unset when the kernel lacks it.
    pub icmp: IcmpConfig,
    pub unusable: Vec<Unusable>,
    /// Offsets of the syscall tracepoints for the Unix socket fallback, or why not.
    pub unix_syscalls: Result<SyscallArgs, String>,
    /// There is no tracefs at all: the tracepoints with a BTF program are hooked as BTF
    /// tracepoints. (A tracepoint that tracefs lacks is one the kernel lacks: its BTF
    /// tracepoint is not tried.)
    pub without_tracefs: bool,
}

impl KernelLayout {
    /// The kernel refuses `bpf_probe_read_kernel` (lockdown for confidentiality): the
    /// BTF tracepoints read through their typed pointers (`Config::direct_reads`), and
    /// what only the helper reads is off.
    pub fn direct_reads(&self) -> bool {
        self.config.direct_reads != 0
    }

    /// Which programs and reads this layout loads, for the pins' layout key.
    pub fn hooks(&self) -> &'static str {
        match (self.without_tracefs, self.direct_reads()) {
            (_, true) => "btf-direct",
            (true, false) => "btf",
            (false, false) => "tracefs",
        }
    }

    pub fn is_usable(&self, program: &str) -> bool {
        !self
            .unusable
            .iter()
            .any(|u| u.tracepoint.program == program)
    }
}

/// Without tracefs: every tracepoint unusable through it (`why`), and no syscall
/// tracepoints; those with a BTF program are then attached as BTF tracepoints.
pub fn without_tracefs(why: &str) -> KernelLayout {
    KernelLayout {
        config: Config::UNSET,
        udp: UdpConfig::UNSET,
        icmp: IcmpConfig::UNSET,
        unusable: TRACEPOINTS
            .into_iter()
            .map(|tracepoint| Unusable {
                tracepoint,
                reason: format!("no tracefs: {why}"),
            })
            .collect(),
        unix_syscalls: Err(format!("no tracefs: {why}")),
        without_tracefs: true,
    }
}

/// Locked down for confidentiality (`why` says how that was told): tracefs is locked and
/// the read helper refused, so the BTF tracepoints read through their typed pointers.
pub fn locked_down(why: &str) -> KernelLayout {
    let mut layout = without_tracefs(&format!("locked by lockdown ({why})"));
    layout.config.direct_reads = 1;
    layout
}

/// Reads every tracepoint's format and fills in the offsets.
pub fn from_tracefs(tracefs: &Tracefs) -> KernelLayout {
    KernelLayout {
        unix_syscalls: syscall_args(tracefs).map_err(|e| e.to_string()),
        ..build(|tp| tracefs.format(tp.category, tp.name))
    }
}

/// `formats` gives the format of a tracepoint (a tracefs, or fixtures in tests).
pub fn build(formats: impl Fn(&Tracepoint) -> Result<EventFormat, TracefsError>) -> KernelLayout {
    let mut config = Config::UNSET;
    let mut udp = UdpConfig::UNSET;
    let mut icmp = IcmpConfig::UNSET;
    let mut unusable = Vec::new();
    for tp in TRACEPOINTS {
        let result = formats(&tp)
            .map_err(|e| match e {
                TracefsError::MissingTracepoint(..) => "this kernel does not have it".to_string(),
                other => other.to_string(),
            })
            .and_then(|fmt| {
                if tp.program == UDP_PROGRAM {
                    udp = udp_fields(&fmt)?;
                    Ok(())
                } else if tp.program == ICMP_PROGRAM {
                    icmp = icmp_fields(&fmt)?;
                    Ok(())
                } else {
                    fill(&mut config, &tp, &fmt)
                }
            });
        if let Err(reason) = result {
            unusable.push(Unusable {
                tracepoint: tp,
                reason,
            });
        }
    }
    KernelLayout {
        config,
        udp,
        icmp,
        unusable,
        unix_syscalls: Err("syscall tracepoints not read".to_string()),
        without_tracefs: false,
    }
}

fn fill(config: &mut Config, tp: &Tracepoint, fmt: &EventFormat) -> Result<(), String> {
    let f = |name: &str, sizes: &[u16]| offset(fmt, name, sizes);
    match tp.name {
        "inet_sock_set_state" => {
            config.set_state = InetSockSetState {
                skaddr: f("skaddr", &[8])?,
                oldstate: f("oldstate", &[4])?,
                newstate: f("newstate", &[4])?,
                sport: f("sport", &[2])?,
                family: f("family", &[2])?,
                protocol: f("protocol", &[2])?,
                saddr_v6: f("saddr_v6", &[16])?,
                dport: f("dport", &[2])?,
                daddr_v6: f("daddr_v6", &[16])?,
                _pad: 0,
            }
        }
        "tcp_receive_reset" => {
            config.receive_reset = TcpReceiveReset {
                skaddr: f("skaddr", &[8])?,
                sport: f("sport", &[2])?,
                dport: f("dport", &[2])?,
                family: f("family", &[2]).unwrap_or(MISSING),
                saddr_v6: f("saddr_v6", &[16])?,
                daddr_v6: f("daddr_v6", &[16])?,
            }
        }
        "tcp_send_reset" => {
            // Before 6.10 this tracepoint only fired for a socket's own resets and had
            // 4-byte addresses; the socket-less shape stores sockaddrs of 28 bytes.
            config.send_reset = TcpSendReset {
                skaddr: f("skaddr", &[8])?,
                saddr: f("saddr", &[28]).map_err(|e| {
                    format!("{e}; this kernel's tcp_send_reset does not report resets sent without a socket (needs 6.10+)")
                })?,
                daddr: f("daddr", &[28])?,
                _pad: 0,
            }
        }
        "cgroup_mkdir" | "cgroup_rmdir" => {
            let dir = CgroupDir {
                root: f("root", &[4])?,
                level: f("level", &[4])?,
                id: f("id", &[8])?,
                path_loc: f("path", &[4])?,
            };
            if tp.name == "cgroup_mkdir" {
                config.cgroup_mkdir = dir;
            } else {
                config.cgroup_rmdir = dir;
            }
        }
        other => return Err(format!("no layout known for {other}")),
    }
    Ok(())
}

/// `skb:kfree_skb`'s record: the drop's reason and its number for `NO_SOCKET`, which
/// kernels before 5.17 do not record (the `sk_buff` offsets are BTF's, added later).
fn udp_fields(fmt: &EventFormat) -> Result<UdpConfig, String> {
    let f = |name: &str, sizes: &[u16]| offset(fmt, name, sizes);
    let reason =
        f("reason", &[4]).map_err(|e| format!("{e}: the kernel records no drop reason (5.17+)"))?;
    let no_socket = fmt
        .symbol_value("NO_SOCKET")
        .ok_or("the drop reason NO_SOCKET is not in its print format")?;
    Ok(UdpConfig {
        skbaddr: f("skbaddr", &[8])?,
        protocol: f("protocol", &[2])?,
        reason,
        no_socket,
        ..UdpConfig::UNSET
    })
}

/// `icmp:icmp_send`'s record: the skb the message answers, its type and code.
fn icmp_fields(fmt: &EventFormat) -> Result<IcmpConfig, String> {
    let f = |name: &str, sizes: &[u16]| offset(fmt, name, sizes);
    Ok(IcmpConfig {
        skbaddr: f("skbaddr", &[8])?,
        icmp_type: f("type", &[4])?,
        code: f("code", &[4])?,
        _pad: 0,
    })
}

fn offset(fmt: &EventFormat, name: &str, sizes: &[u16]) -> Result<u16, String> {
    let field = fmt
        .field(name)
        .ok_or_else(|| format!("no field `{name}`"))?;
    if !sizes.contains(&field.size) {
        return Err(format!(
            "field `{name}` has {} bytes, expected {}",
            field.size,
            sizes
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(" or ")
        ));
    }
    Ok(field.offset)
}

/// Why the syscall tracepoints cannot serve the Unix socket fallback.
#[derive(Debug, Error)]
pub enum SyscallArgsError {
    #[error("{0}")]
    Tracefs(#[from] TracefsError),
    #[error("syscall tracepoint {event}: {reason}")]
    Field { event: &'static str, reason: String },
}

/// The syscall tracepoints' offsets, from tracefs.
pub fn syscall_args(tracefs: &Tracefs) -> Result<SyscallArgs, SyscallArgsError> {
    let field = |event: &'static str, name: &str| -> Result<u16, SyscallArgsError> {
        let fmt = tracefs.format("syscalls", event)?;
        let f = fmt.field(name).ok_or_else(|| SyscallArgsError::Field {
            event,
            reason: format!("no field `{name}`"),
        })?;
        if f.size != 8 {
            return Err(SyscallArgsError::Field {
                event,
                reason: format!("field `{name}` has {} bytes, expected 8", f.size),
            });
        }
        Ok(f.offset)
    };
    let exit_ret = field("sys_exit_connect", "ret")?;
    for exit in [
        "sys_exit_sendto",
        "sys_exit_bind",
        "sys_exit_listen",
        "sys_exit_socket",
    ] {
        if field(exit, "ret")? != exit_ret {
            return Err(SyscallArgsError::Field {
                event: exit,
                reason: "`ret` is not where sys_exit_connect has it".into(),
            });
        }
    }
    let fd = field("sys_enter_bind", "fd")?;
    if field("sys_enter_listen", "fd")? != fd {
        return Err(SyscallArgsError::Field {
            event: "sys_enter_listen",
            reason: "`fd` is not where sys_enter_bind has it".into(),
        });
    }
    let regs = |n: usize| SYSCALL_ARG_REGS.map_or(MISSING, |r| r[n]);
    Ok(SyscallArgs {
        regs_connect_addr: regs(1),
        regs_connect_addrlen: regs(2),
        regs_sendto_addr: regs(4),
        regs_sendto_addrlen: regs(5),
        connect_addr: field("sys_enter_connect", "uservaddr")?,
        connect_addrlen: field("sys_enter_connect", "addrlen")?,
        sendto_addr: field("sys_enter_sendto", "addr")?,
        sendto_addrlen: field("sys_enter_sendto", "addr_len")?,
        exit_ret,
        bind_addr: field("sys_enter_bind", "umyaddr")?,
        bind_addrlen: field("sys_enter_bind", "addrlen")?,
        fd,
        socket_family: field("sys_enter_socket", "family")?,
        socket_type: field("sys_enter_socket", "type")?,
    })
}

/// Offsets in `struct pt_regs` of a syscall's six arguments as the task entered it
/// (the architecture's syscall convention; stable kernel ABI), for the agent's own
/// architecture, which is the kernel's.
const SYSCALL_ARG_REGS: Option<[u16; 6]> = if cfg!(target_arch = "x86_64") {
    // di, si, dx, r10, r8, r9
    Some([112, 104, 96, 56, 72, 64])
} else if cfg!(target_arch = "aarch64") {
    // regs[0..6]; regs[0] is the return value by the exit, the others are kept.
    Some([0, 8, 16, 24, 32, 40])
} else {
    None
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{btf::Btf, tracefs::parse_format};

    /// Fixtures: tracefs formats as kernels of several versions print them.
    fn fixtures(kernel: &str) -> impl Fn(&Tracepoint) -> Result<EventFormat, TracefsError> {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/tracefs")
            .join(kernel);
        move |tp: &Tracepoint| {
            let path = dir.join(format!("{}.{}.format", tp.category, tp.name));
            match std::fs::read_to_string(&path) {
                Ok(text) => parse_format(tp.name, &text),
                Err(_) => Err(TracefsError::MissingTracepoint(tp.name.into(), path)),
            }
        }
    }

    #[test]
    fn kernel_6_18_has_everything() {
        let l = build(fixtures("6.18"));
        assert!(l.unusable.is_empty(), "{:?}", l.unusable);
        assert_eq!(l.config.set_state.skaddr, 8);
        assert_eq!(l.config.set_state.saddr_v6, 40);
        assert_eq!(l.config.receive_reset.daddr_v6, 46);
        assert_eq!(l.config.receive_reset.saddr_v6, 30);
        assert_eq!(l.config.send_reset.saddr, 32);
        assert_eq!(l.config.send_reset.daddr, 60);
        assert_eq!(l.config.cgroup_mkdir.path_loc, 24);
        assert_eq!((l.udp.skbaddr, l.udp.protocol, l.udp.reason), (8, 32, 36));
        assert_eq!(l.udp.no_socket, 3, "NO_SOCKET as 6.18 numbers it");
        assert_eq!((l.icmp.skbaddr, l.icmp.icmp_type, l.icmp.code), (8, 16, 20));
    }

    #[test]
    fn kernel_6_1_records_the_reason_at_its_own_offset() {
        let l = build(fixtures("6.1"));
        assert!(l.is_usable(UDP_PROGRAM));
        assert_eq!((l.udp.protocol, l.udp.reason, l.udp.no_socket), (24, 28, 3));
    }

    #[test]
    fn kernel_6_1_degrades_only_redirect_awareness() {
        let l = build(fixtures("6.1"));
        // This 6.1 (an early one) has no icmp_send: kfree_skb sees UDP refusals instead.
        assert!(!l.is_usable(ICMP_PROGRAM));
        assert_eq!(l.icmp, IcmpConfig::UNSET);
        let unusable: Vec<_> = l
            .unusable
            .iter()
            .filter(|u| u.tracepoint.program != ICMP_PROGRAM)
            .collect();
        assert_eq!(unusable.len(), 1, "{unusable:?}");
        let u = unusable[0];
        assert_eq!(u.tracepoint.name, "tcp_send_reset");
        assert!(u.to_string().contains("local-redirect awareness"), "{u}");
        assert!(u.to_string().contains("6.10"), "{u}");
        assert_eq!(l.config.receive_reset.skaddr, 8);
        assert_eq!(l.config.receive_reset.saddr_v6, 30);
        assert_eq!(l.config.send_reset.saddr, MISSING);
    }

    #[test]
    fn kernel_5_4_lacks_family_and_64_bit_cgroup_ids_but_detects_refusals() {
        let l = build(fixtures("5.4"));
        assert!(l.is_usable("inet_sock_set_state"));
        assert!(l.is_usable("tcp_receive_reset"));
        assert_eq!(l.config.receive_reset.family, MISSING);
        assert_eq!(l.config.receive_reset.saddr_v6, 28);
        assert!(!l.is_usable("tcp_send_reset"));
        let udp = l
            .unusable
            .iter()
            .find(|u| u.tracepoint.program == UDP_PROGRAM)
            .expect("no drop reason before 5.17");
        assert!(udp.to_string().contains("UDP refusals"), "{udp}");
        assert!(udp.reason.contains("5.17"), "{}", udp.reason);
        let cg = l
            .unusable
            .iter()
            .find(|u| u.tracepoint.name == "cgroup_mkdir")
            .unwrap();
        assert!(
            cg.reason.contains("`id` has 4 bytes, expected 8"),
            "{}",
            cg.reason
        );
        assert!(!l.unusable.iter().any(|u| u.tracepoint.required));
    }

    #[test]
    fn missing_required_tracepoint_is_reported_as_such() {
        let l = build(|tp: &Tracepoint| {
            if tp.name == "tcp_receive_reset" {
                Err(TracefsError::MissingTracepoint(tp.name.into(), "x".into()))
            } else {
                fixtures("6.18")(tp)
            }
        });
        let u = l.unusable.iter().find(|u| u.tracepoint.required).unwrap();
        assert_eq!(
            u.to_string(),
            "tracepoint tcp:tcp_receive_reset is unusable (this kernel does not have it): refused-connection events cannot work"
        );
    }

    #[test]
    fn wrong_field_size_is_not_trusted() {
        let l = build(|tp: &Tracepoint| {
            let text = std::fs::read_to_string(
                std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/fixtures/tracefs/6.18")
                    .join(format!("{}.{}.format", tp.category, tp.name)),
            )
            .unwrap()
            .replace(
                "__u8 daddr_v6[16];\toffset:46;\tsize:16;",
                "__u8 daddr_v6[8];\toffset:46;\tsize:8;",
            );
            parse_format(tp.name, &text)
        });
        let u = l
            .unusable
            .iter()
            .find(|u| u.tracepoint.name == "tcp_receive_reset")
            .unwrap();
        assert!(u.reason.contains("daddr_v6"), "{}", u.reason);
    }

    /// The registers table agrees with this kernel's own `struct pt_regs`.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn syscall_argument_registers_match_this_kernels_pt_regs() {
        let Ok(data) = std::fs::read(crate::kernel::btf::VMLINUX) else {
            eprintln!("skipped: this kernel has no BTF");
            return;
        };
        let btf = Btf::parse(&data).unwrap();
        let want = SYSCALL_ARG_REGS.unwrap();
        for (n, reg) in ["di", "si", "dx", "r10", "r8", "r9"]
            .into_iter()
            .enumerate()
        {
            assert_eq!(btf.offset("pt_regs", reg).unwrap(), want[n], "{reg}");
        }
    }
}
