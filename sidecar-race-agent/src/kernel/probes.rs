//! Loads the embedded eBPF object with this kernel's layout, attaches what can be
//! attached, and gives access to the ring buffer and the exact per-CPU counters.

use std::{collections::BTreeMap, sync::Arc};

use aya::{
    Ebpf, EbpfLoader,
    maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf},
    programs::{BtfTracePoint, TracePoint},
};
use sidecar_race_ebpf::{
    abi::counter,
    layout::{
        CONTROL_BURST, CONTROL_REFILL_PER_SECOND, CgroupFields, Config, REFUSAL_BURST,
        REFUSAL_REFILL_PER_SECOND, RefusalBudget, SockFields, TaskFields,
    },
    unix::{SyscallArgs, UnixConfig, UnixFields},
};
use thiserror::Error;

use super::{
    btf,
    counters::{KernelCounters, LruTables},
    layout::{KernelLayout, TRACEPOINTS, Tracepoint},
    unix_hooks::{self, UnixCoverage, UnixHookChoice},
};
use crate::ingest::events::Kind;

/// The object built by `build.rs` from `sidecar-race-ebpf`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sidecar-race.bpf.o"));

#[derive(Debug, Error)]
pub enum ProbeError {
    #[error(
        "loading the eBPF programs was refused ({}); the agent needs root, or CAP_BPF, \
         CAP_PERFMON and CAP_SYS_RESOURCE on kernels older than 5.11",
        chain(.0)
    )]
    Load(aya::EbpfError),
    #[error("the eBPF object has no {0} (the agent was built from mismatched sources)")]
    Missing(String),
    // The cause is written out with its own causes here and not exposed as a source:
    // `main` prints error chains, which repeated it.
    #[error("cannot {what}: {}", chain(.cause))]
    Program {
        what: String,
        cause: aya::programs::ProgramError,
    },
    #[error(
        "cannot {what}: {}; this kernel restricts perf_event_open (kernel.perf_event_paranoid \
         is {paranoid}, a Debian/Ubuntu hardening) to CAP_SYS_ADMIN: run \
         `sysctl kernel.perf_event_paranoid=2` on the node, or give the agent CAP_SYS_ADMIN",
        chain(.cause)
    )]
    PerfRestricted {
        what: String,
        paranoid: i32,
        cause: aya::programs::ProgramError,
    },
    #[error("eBPF map {name}: {}", chain(.cause))]
    Map {
        name: &'static str,
        cause: aya::maps::MapError,
    },
    #[error(
        "--ring-buffer-bytes must be a power of two and a multiple of the page size ({page}), got {got}"
    )]
    RingSize { got: u32, page: usize },
}

/// Load-time options.
#[derive(Debug, Clone, Copy)]
pub struct ProbeOptions {
    pub ring_buffer_bytes: u32,
    /// Hierarchy id of cgroup v2 in the cgroup tracepoints (0 on every kernel today).
    pub cgroup2_hierarchy: i32,
    /// Refusal records each cgroup may send; the rest are counted in the kernel.
    pub refusal_budget: RefusalBudget,
    /// Control records (listeners, cgroups) each container may send.
    pub control_budget: RefusalBudget,
    /// Try the BTF tracepoint for `inet_sock_set_state` before the tracefs one.
    pub set_state_btf: bool,
    /// Which Unix domain socket hooks to use.
    pub unix_hooks: UnixHookChoice,
    /// Entries of every kernel LRU table instead of their built-in sizes, and the
    /// connect slots in front of `CONNECTING` down to one: for tests that fill them.
    pub lru_entries: Option<u32>,
}

/// The kernel's LRU tables, which `ProbeOptions::lru_entries` resizes.
const LRU_TABLES: [&str; 5] = [
    "CONNECTING",
    "LISTENING",
    "LOCAL_REFUSALS",
    "BUDGET",
    "CONTROL_BUDGET",
];

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            ring_buffer_bytes: 1 << 20,
            cgroup2_hierarchy: 0,
            refusal_budget: RefusalBudget::new(REFUSAL_BURST, REFUSAL_REFILL_PER_SECOND),
            control_budget: RefusalBudget::new(CONTROL_BURST, CONTROL_REFILL_PER_SECOND),
            set_state_btf: true,
            unix_hooks: UnixHookChoice::Auto,
            lru_entries: None,
        }
    }
}

/// A tracepoint that is loaded but could not be attached, and why.
#[derive(Debug, Clone)]
pub struct Degraded {
    pub tracepoint: Tracepoint,
    pub reason: String,
}

/// Kernel-side counts for one kind of event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct KindCounts {
    /// Every event the kernel saw (for `refused`: every refusal).
    pub seen: u64,
    /// Those the full ring buffer could not take.
    pub lost: u64,
    /// Events over their container's budget: counted in the kernel, not sent.
    pub suppressed: u64,
}

/// Refusals the kernel counted instead of sending, per cgroup id (monotonic while the
/// entry lives), and those it had no per-cgroup room for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SuppressedCounts {
    pub by_cgroup: Vec<(u64, u64)>,
    pub unkeyed: u64,
}

pub struct Probes {
    // Keeps programs and links alive.
    _ebpf: Ebpf,
    /// Refusals.
    pub ring: Option<RingBuf<MapData>>,
    /// Control records: cgroups and listeners.
    pub control: Option<RingBuf<MapData>>,
    counters: Arc<KernelCounters>,
    suppressed: BpfHashMap<MapData, u64, u64>,
    charge_points: BpfHashMap<MapData, u64, u8>,
    /// Why budgets are charged per cgroup rather than per container, if they are.
    pub per_cgroup_budgets: Option<String>,
    pub attached: Vec<Tracepoint>,
    pub degraded: Vec<Degraded>,
    /// Which hook serves `inet_sock_set_state`.
    pub set_state_hook: SetStateHook,
    /// Whose `comm` names the task behind a socket.
    pub process_names: ProcessNames,
    /// What is seen of Unix domain sockets.
    pub unix: UnixCoverage,
}

/// Whose `comm` the kernel records as a socket owner's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessNames {
    /// The thread-group leader's: the process name.
    Leader,
    /// The connecting thread's own (no BTF offsets for `task_struct`), and why.
    Thread { why_not_leader: String },
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

/// The program on the BTF tracepoint; the tracefs one is `inet_sock_set_state`.
fn set_state_btf() -> &'static str {
    if has_cmpxchg() {
        "inet_sock_set_state_btf"
    } else {
        "inet_sock_set_state_btf_plain"
    }
}

impl Probes {
    /// Loads and attaches every usable tracepoint. Fails only when a required one
    /// cannot be attached; optional ones end up in `degraded`.
    pub fn load(layout: &KernelLayout, opts: ProbeOptions) -> Result<Self, ProbeError> {
        let page = page_size();
        let size = opts.ring_buffer_bytes;
        if !size.is_power_of_two() || !(size as usize).is_multiple_of(page) {
            return Err(ProbeError::RingSize { got: size, page });
        }
        let mut config = layout.config;
        config.cgroup2_hierarchy = opts.cgroup2_hierarchy;
        config.refusal_budget = opts.refusal_budget;
        config.control_budget = opts.control_budget;
        let offsets = BtfOffsets::read(opts.set_state_btf);
        let per_cgroup_budgets = match offsets.cgroup {
            Ok(fields) => {
                config.cgroup = fields;
                None
            }
            Err(why) => Some(why),
        };
        let sock = offsets.sock;
        if let Ok(fields) = sock {
            config.sock = fields;
        }
        let task = offsets.task;
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
        };
        let unix_bytes = plain_bytes(&unix_config);
        let config_bytes = config_bytes(&config);
        let task_bytes = task_bytes(&task.unwrap_or(TaskFields::UNSET));
        let mut ebpf = {
            // `EbpfLoader::new()` parses the kernel's BTF itself (aya's parse of a 5.5 MB
            // vmlinux is some 17 MiB of allocations) and holds it as long as the loader
            // lives: the loader goes as soon as the object is loaded, so that parse is
            // never held beside the next one.
            let mut loader = EbpfLoader::new();
            loader
                .override_global("CONFIG", &config_bytes, true)
                .override_global("TASK", &task_bytes, true)
                .override_global("UNIX", &unix_bytes, true)
                .map_max_entries("EVENTS", size);
            if let Some(entries) = opts.lru_entries {
                for table in LRU_TABLES {
                    loader.map_max_entries(table, entries);
                }
                // One slot: nearly every connect then takes the LRU path that is filled.
                loader.map_max_entries("CONNECTING_SLOTS", 1);
            }
            loader.load(OBJECT).map_err(ProbeError::Load)?
        };
        // The hooks on kernel functions name them by BTF id: one more parse (the
        // loader's is private), shared by the BTF tracepoint and the fexit hooks, and
        // made only when one of them will be tried.
        let kernel_btf =
            if sock.is_ok() || (opts.unix_hooks == UnixHookChoice::Auto && unix_fields.is_ok()) {
                aya::Btf::from_sys_fs().map_err(|e| format!("kernel BTF: {}", chain(&e)))
            } else {
                Err("not needed".to_string())
            };

        let mut attached = Vec::new();
        let mut degraded = Vec::new();
        let set_state_hook = match sock.and_then(|_| attach_btf(&mut ebpf, &kernel_btf)) {
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
            match attach(&mut ebpf, &tp, program_for(&tp)) {
                Ok(()) => attached.push(tp),
                Err(e) if tp.required => return Err(e),
                Err(e) => degraded.push(Degraded {
                    tracepoint: tp,
                    reason: e.to_string(),
                }),
            }
        }
        let unix = unix_hooks::attach(
            &mut ebpf,
            opts.unix_hooks,
            &unix_fields,
            &layout.unix_syscalls,
            &kernel_btf,
        );
        drop(kernel_btf);
        return_freed_memory();
        let ring =
            RingBuf::try_from(take(&mut ebpf, "EVENTS")?).map_err(|cause| ProbeError::Map {
                name: "EVENTS",
                cause,
            })?;
        let control =
            RingBuf::try_from(take(&mut ebpf, "CONTROL")?).map_err(|cause| ProbeError::Map {
                name: "CONTROL",
                cause,
            })?;
        let counters = PerCpuArray::try_from(take(&mut ebpf, "COUNTERS")?).map_err(|cause| {
            ProbeError::Map {
                name: "COUNTERS",
                cause,
            }
        })?;
        let suppressed = hash_map(&mut ebpf, "SUPPRESSED")?;
        let charge_points = hash_map(&mut ebpf, "CHARGE_POINTS")?;
        let tables = LruTables {
            budget: hash_map(&mut ebpf, "BUDGET")?,
            control_budget: hash_map(&mut ebpf, "CONTROL_BUDGET")?,
            local_refusals: hash_map(&mut ebpf, "LOCAL_REFUSALS")?,
        };
        Ok(Self {
            _ebpf: ebpf,
            ring: Some(ring),
            control: Some(control),
            counters: Arc::new(KernelCounters::new(counters, tables)),
            suppressed,
            charge_points,
            per_cgroup_budgets,
            attached,
            degraded,
            set_state_hook,
            process_names,
            unix,
        })
    }

    /// Exact kernel counts per kind, summed over CPUs.
    pub fn counts(&self) -> Result<BTreeMap<Kind, KindCounts>, ProbeError> {
        self.counters.counts()
    }

    /// The per-CPU counters, to read them elsewhere (the metrics, at scrape time).
    pub fn counters(&self) -> Arc<KernelCounters> {
        self.counters.clone()
    }

    /// The per-cgroup suppressed counts as they are now.
    pub fn suppressed(&self) -> Result<SuppressedCounts, ProbeError> {
        let map_err = |cause| ProbeError::Map {
            name: "SUPPRESSED",
            cause,
        };
        let by_cgroup = self
            .suppressed
            .iter()
            .collect::<Result<Vec<_>, _>>()
            .map_err(map_err)?;
        let unkeyed = self.counters.sum(counter::SUPPRESSED_UNKEYED)?;
        Ok(SuppressedCounts { by_cgroup, unkeyed })
    }

    /// Deletes a removed cgroup's entry, once its final value was read.
    pub fn forget_suppressed(&mut self, cgroup_id: u64) {
        let _ = self.suppressed.remove(&cgroup_id);
    }

    /// Marks a container or pod cgroup for the kernel to charge budgets to.
    pub fn mark_charge_point(&mut self, cgroup_id: u64) -> Result<(), ProbeError> {
        self.charge_points
            .insert(cgroup_id, 1, 0)
            .map_err(|cause| ProbeError::Map {
                name: "CHARGE_POINTS",
                cause,
            })
    }

    pub fn unmark_charge_point(&mut self, cgroup_id: u64) {
        let _ = self.charge_points.remove(&cgroup_id);
    }
}

/// Whether this kernel has `BPF_ATOMIC` compare-and-exchange (5.12+). A kernel whose
/// version cannot be read is taken not to: the budget is then written plainly.
fn has_cmpxchg() -> bool {
    aya::util::KernelVersion::current().is_ok_and(|v| v >= aya::util::KernelVersion::new(5, 12, 0))
}

fn take(ebpf: &mut Ebpf, name: &str) -> Result<aya::maps::Map, ProbeError> {
    ebpf.take_map(name)
        .ok_or_else(|| ProbeError::Missing(format!("{name} map")))
}

/// A hash or LRU hash map of the object, typed.
fn hash_map<K: aya::Pod, V: aya::Pod>(
    ebpf: &mut Ebpf,
    name: &'static str,
) -> Result<BpfHashMap<MapData, K, V>, ProbeError> {
    BpfHashMap::try_from(take(ebpf, name)?).map_err(|cause| ProbeError::Map { name, cause })
}

/// Loads and attaches the BTF tracepoint program; the reason as text when it cannot.
fn attach_btf(ebpf: &mut Ebpf, btf: &Result<aya::Btf, String>) -> Result<(), String> {
    let btf = btf.as_ref().map_err(Clone::clone)?;
    let name = set_state_btf();
    let program: &mut BtfTracePoint = ebpf
        .program_mut(name)
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

/// The program to load for `tp` on this kernel: the refusal program updates its budget,
/// and the connect program claims its slot, by compare-and-exchange where the kernel
/// has it; older verifiers refuse the instruction.
fn program_for(tp: &Tracepoint) -> &'static str {
    match tp.program {
        "tcp_receive_reset" if !has_cmpxchg() => "tcp_receive_reset_plain",
        "inet_sock_set_state" if !has_cmpxchg() => "inet_sock_set_state_plain",
        program => program,
    }
}

fn attach(ebpf: &mut Ebpf, tp: &Tracepoint, program: &str) -> Result<(), ProbeError> {
    let what = |verb: &str| format!("{verb} {program} on {}:{}", tp.category, tp.name);
    let program: &mut TracePoint = ebpf
        .program_mut(program)
        .ok_or_else(|| ProbeError::Missing(format!("program {program}")))?
        .try_into()
        .map_err(|cause| ProbeError::Program {
            what: what("use"),
            cause,
        })?;
    program.load().map_err(|cause| ProbeError::Program {
        what: what("load"),
        cause,
    })?;
    program
        .attach(tp.category, tp.name)
        .map_err(|cause| match perf_event_paranoid() {
            Some(paranoid) if paranoid > 2 && permission_denied(&cause) => {
                ProbeError::PerfRestricted {
                    what: what("attach"),
                    paranoid,
                    cause,
                }
            }
            _ => ProbeError::Program {
                what: what("attach"),
                cause,
            },
        })?;
    Ok(())
}

/// `e` followed by its sources, `: `-separated.
pub(super) fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        out.push_str(": ");
        out.push_str(&s.to_string());
        next = s.source();
    }
    out
}

/// A load error without the verifier's whole log: its first line and the line that
/// says why (e.g. `invalid func unknown#158` on a kernel without the helper).
pub(super) fn verifier_gist(error: &str) -> String {
    let Some((head, log)) = error.split_once("Verifier output:") else {
        return error.to_string();
    };
    let why = log
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("verification time"))
        .filter(|l| !l.is_empty())
        .last()
        .unwrap_or("");
    format!("{}: {why}", head.trim_end().trim_end_matches('.'))
}

/// Whether an error was caused by EACCES or EPERM.
fn permission_denied(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && matches!(io.raw_os_error(), Some(libc::EACCES | libc::EPERM))
        {
            return true;
        }
        next = err.source();
    }
    false
}

/// Values above 2 exist only with the Debian/Ubuntu patch that then refuses
/// perf_event_open to all but CAP_SYS_ADMIN.
fn perf_event_paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
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
}

impl BtfOffsets {
    /// Reads and parses vmlinux once for every set (the socket's only with
    /// `set_state_btf`). The file and the parse are freed on return, before aya parses
    /// the BTF again, so the two are never held at once.
    fn read(set_state_btf: bool) -> Self {
        let vmlinux = std::fs::read(btf::VMLINUX).map_err(|e| format!("{}: {e}", btf::VMLINUX));
        let parsed = vmlinux
            .as_deref()
            .map_err(Clone::clone)
            .and_then(|data| btf::Btf::parse(data).map_err(|e| e.to_string()));
        BtfOffsets {
            cgroup: from_btf(&parsed, btf::cgroup_fields),
            sock: if set_state_btf {
                from_btf(&parsed, btf::sock_fields)
            } else {
                Err("turned off".to_string())
            },
            task: from_btf(&parsed, btf::task_fields),
            unix: from_btf(&parsed, unix_hooks::unix_fields),
        }
    }
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

/// The task offsets as the bytes of the `TASK` global.
fn task_bytes(task: &TaskFields) -> [u8; size_of::<TaskFields>()] {
    // SAFETY: TaskFields is repr(C) plain data without padding.
    unsafe { std::mem::transmute_copy(task) }
}

/// Gives the pages of freed allocations back to the kernel. The BTF parses above are
/// freed, but glibc keeps free memory below live allocations resident (it only trims
/// the top of its heap): without this the agent kept some 17 MiB of them for its whole
/// life.
fn return_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim has no preconditions; it only releases free pages.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}
