//! The programs' globals (`CONFIG`, `TASK`, `UNIX`): this kernel's layout and the
//! options, with the struct offsets read from its BTF where it has them. What a
//! missing offset costs is kept, to be said once the programs run.

use aya::EbpfLoader;
use sidecar_race_ebpf::{
    layout::{CgroupFields, Config, MISSING, SockFields, TaskFields},
    udp::{IcmpConfig, UdpConfig},
    unix::{SyscallArgs, UnixConfig, UnixFields},
};

use super::{btf, function_hooks, layout::KernelLayout, options::ProbeOptions, unix_hooks};

/// The globals as bytes to override, and what their offsets allow.
pub(super) struct Globals {
    config: [u8; size_of::<Config>()],
    task: [u8; size_of::<TaskFields>()],
    unix: [u8; size_of::<UnixConfig>()],
    udp: [u8; size_of::<UdpConfig>()],
    icmp: [u8; size_of::<IcmpConfig>()],
    /// The UDP refusal program's offsets (tracefs and BTF), or why they are missing.
    pub udp_fields: Result<(), String>,
    /// The socket offsets the BTF tracepoints of sockets need, or why they are missing.
    pub sock: Result<(), String>,
    /// The cgroup offsets the BTF tracepoints of cgroups need, or why they are missing.
    pub cgroup: Result<(), String>,
    /// The Unix socket offsets the `fexit` hooks need (and the kprobes read), or why
    /// they are missing.
    pub unix_fields: Result<UnixFields, String>,
    /// Why budgets are charged per cgroup rather than per container, if they are.
    pub per_cgroup_budgets: Option<String>,
    pub process_names: ProcessNames,
}

impl Globals {
    /// The layout's config with the options and the BTF offsets filled in.
    pub(super) fn new(layout: &KernelLayout, opts: &ProbeOptions) -> Self {
        let mut config = layout.config;
        config.cgroup2_hierarchy = opts.cgroup2_hierarchy;
        config.refusal_budget = opts.refusal_budget;
        config.control_budget = opts.control_budget;
        let offsets = BtfOffsets::read();
        let udp = offsets.udp_of(layout);
        let cgroup = match &offsets.cgroup {
            Ok(f) if f.root == MISSING || f.hierarchy_id == MISSING => {
                Err("no cgroup.root or cgroup_root.hierarchy_id in the kernel's BTF".to_string())
            }
            Ok(_) => Ok(()),
            Err(why) => Err(why.clone()),
        };
        let per_cgroup_budgets = match offsets.cgroup {
            Ok(fields) => {
                config.cgroup = fields;
                layout.direct_reads().then(|| {
                    "lockdown for confidentiality: the walk up a socket's cgroups needs \
                     bpf_probe_read_kernel"
                        .to_string()
                })
            }
            Err(why) => Some(why),
        };
        let sock = offsets.sock;
        if let Ok(fields) = sock {
            config.sock = fields;
        }
        let task = match offsets.task {
            // A locked-down kernel's task is read through the BTF-typed one (5.11+).
            Ok(_) if layout.direct_reads() && !has_current_task_btf() => Err(
                "the kernel is locked down and has no bpf_get_current_task_btf (5.11+) to \
                 read the task through"
                    .to_string(),
            ),
            task => task,
        };
        let process_names = match &task {
            Ok(_) => ProcessNames::Leader,
            Err(why) => ProcessNames::Thread {
                why_not_leader: why.clone(),
            },
        };
        let unix_fields = offsets.unix;
        let unix_config = UnixConfig {
            fields: unix_fields.clone().unwrap_or(UnixFields::UNSET),
            syscalls: layout.unix_syscalls.clone().unwrap_or(SyscallArgs::UNSET),
            kprobe: function_hooks::KPROBE_REGS,
        };
        Globals {
            config: config_bytes(&config),
            task: task_bytes(&task.unwrap_or(TaskFields::UNSET)),
            unix: plain_bytes(&unix_config),
            udp: udp_bytes(udp.as_ref().unwrap_or(&UdpConfig::UNSET)),
            icmp: icmp_bytes(&layout.icmp),
            udp_fields: udp.map(|_| ()),
            sock: sock.map(|_| ()),
            cgroup,
            unix_fields,
            per_cgroup_budgets,
            process_names,
        }
    }

    /// Sets them for the object `loader` loads.
    pub(super) fn set<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        loader
            .override_global("CONFIG", &self.config, true)
            .override_global("TASK", &self.task, true)
            .override_global("UNIX", &self.unix, true)
            .override_global("UDP", &self.udp, true)
            .override_global("ICMP", &self.icmp, true);
    }
}

/// Whether the kernel has `bpf_get_current_task_btf` (5.11+); an unreadable version
/// counts as not.
fn has_current_task_btf() -> bool {
    aya::util::KernelVersion::current().is_ok_and(|v| v >= aya::util::KernelVersion::new(5, 11, 0))
}

/// Whose `comm` the kernel records as a socket owner's name.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ProcessNames {
    /// The thread-group leader's: the process name.
    Leader,
    /// The connecting thread's own (no BTF offsets for `task_struct`), and why.
    Thread { why_not_leader: String },
}

/// The config as the bytes of the `CONFIG` global (a byte array is `aya::Pod`).
fn config_bytes(config: &Config) -> [u8; size_of::<Config>()] {
    // SAFETY: Config is repr(C) plain data with explicit padding fields.
    unsafe { std::mem::transmute_copy(config) }
}

/// The offsets the agent reads from the kernel's BTF itself (aya does not expose
/// member offsets), each set or why it is missing.
struct BtfOffsets {
    cgroup: Result<CgroupFields, String>,
    sock: Result<SockFields, String>,
    task: Result<TaskFields, String>,
    unix: Result<UnixFields, String>,
    skb: Result<UdpConfig, String>,
}

impl BtfOffsets {
    /// Reads and parses vmlinux once for every set. The file and the parse are freed
    /// on return, before aya parses the BTF again, so the two are never held at once.
    fn read() -> Self {
        let vmlinux = std::fs::read(btf::VMLINUX).map_err(|e| format!("{}: {e}", btf::VMLINUX));
        let parsed = vmlinux
            .as_deref()
            .map_err(Clone::clone)
            .and_then(|data| btf::Btf::parse(data).map_err(|e| e.to_string()));
        BtfOffsets {
            cgroup: from_btf(&parsed, btf::cgroup_fields),
            sock: from_btf(&parsed, btf::sock_fields),
            task: from_btf(&parsed, btf::task_fields),
            unix: from_btf(&parsed, unix_hooks::unix_fields),
            skb: from_btf(&parsed, |b| btf::skb_fields(b, UdpConfig::UNSET)),
        }
    }

    /// The UDP program's config: the layout's tracefs offsets with BTF's `sk_buff` ones.
    fn udp_of(&self, layout: &KernelLayout) -> Result<UdpConfig, String> {
        let skb = self.skb.clone()?;
        let c = UdpConfig {
            head: skb.head,
            network_header: skb.network_header,
            transport_header: skb.transport_header,
            skb_iif: skb.skb_iif,
            skb_protocol: skb.skb_protocol,
            ..layout.udp
        };
        if c.is_set() {
            Ok(c)
        } else {
            Err("skb:kfree_skb's record lacks what it needs".to_string())
        }
    }
}

/// The UDP config as the bytes of the `UDP` global.
fn udp_bytes(udp: &UdpConfig) -> [u8; size_of::<UdpConfig>()] {
    // SAFETY: UdpConfig is repr(C) plain data with explicit padding fields.
    unsafe { std::mem::transmute_copy(udp) }
}

/// One set of offsets from the parsed BTF, or why there is none.
fn from_btf<T, E: ToString>(
    parsed: &Result<btf::Btf, String>,
    fields: impl Fn(&btf::Btf) -> Result<T, E>,
) -> Result<T, String> {
    let btf = parsed.as_ref().map_err(Clone::clone)?;
    fields(btf).map_err(|e| e.to_string())
}

/// A plain-data global (`UNIX`) as bytes (a byte array is `aya::Pod`).
fn plain_bytes(config: &UnixConfig) -> [u8; size_of::<UnixConfig>()] {
    // SAFETY: UnixConfig is repr(C) plain data with explicit padding fields.
    unsafe { std::mem::transmute_copy(config) }
}

/// `icmp_send`'s offsets as the bytes of the `ICMP` global.
fn icmp_bytes(icmp: &IcmpConfig) -> [u8; size_of::<IcmpConfig>()] {
    // SAFETY: IcmpConfig is repr(C) plain data with explicit padding fields.
    unsafe { std::mem::transmute_copy(icmp) }
}

/// The task offsets as the bytes of the `TASK` global.
fn task_bytes(task: &TaskFields) -> [u8; size_of::<TaskFields>()] {
    // SAFETY: TaskFields is repr(C) plain data without padding.
    unsafe { std::mem::transmute_copy(task) }
}
