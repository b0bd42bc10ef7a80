//! Programs that return at once (`r0 = 0; exit`), attached beside the agent's on the
//! same hooks while the statistics are on: their run time per run is what the
//! statistics themselves cost (two clock reads and the bookkeeping around each run),
//! measured on this machine in the same run, so it can be taken out of the agent's
//! figure. Loaded with the bpf(2) syscall directly: xtask carries no eBPF loader.

use std::{
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    process::Command,
};

use anyhow::{Context, bail};

use super::bpf_stats::{ProgStats, parse_fdinfo};

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
const PROG_TYPE_TRACEPOINT: u32 = 5;
const PROG_TYPE_TRACING: u32 = 26;
const TRACE_RAW_TP: u32 = 23;
/// `_IOW('$', 8, u32)` and `_IO('$', 0)`.
const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_TYPE_TRACEPOINT: u32 = 2;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;

/// Where a null program goes: the kinds of hook the agent's programs use.
#[derive(Debug, Clone, Copy)]
pub enum Hook {
    /// A tracefs tracepoint (`category`, `name`), through a perf event.
    Tracepoint(&'static str, &'static str),
    /// A BTF tracepoint (`tp_btf`).
    BtfTracepoint(&'static str),
}

impl Hook {
    /// The prog type `bpftool prog show` gives an agent program on such a hook.
    pub fn bpftool_type(self) -> &'static str {
        match self {
            Hook::Tracepoint(..) => "tracepoint",
            Hook::BtfTracepoint(_) => "tracing",
        }
    }
}

/// Every hook the agent's hot-path programs use, or may use on this kernel: the ones
/// a kernel lacks are skipped. The syscall tracepoints are the Unix socket fallback's
/// (they see TCP's connects too). No `fexit` null program (the other UDS hooks): this
/// host's kernel refuses every `fexit` program (EPERM at load, the agent's too, and
/// bpftrace finds no kfunc support), so programs of type `tracing` are charged the BTF
/// tracepoint's per-run cost. `skb:kfree_skb` is the UDP refusals' hook (it runs on
/// every drop of the node).
pub const HOOKS: [Hook; 8] = [
    Hook::BtfTracepoint("inet_sock_set_state"),
    Hook::Tracepoint("sock", "inet_sock_set_state"),
    Hook::BtfTracepoint("tcp_receive_reset"),
    Hook::Tracepoint("tcp", "tcp_receive_reset"),
    Hook::Tracepoint("tcp", "tcp_send_reset"),
    Hook::Tracepoint("syscalls", "sys_enter_connect"),
    Hook::Tracepoint("syscalls", "sys_exit_connect"),
    Hook::Tracepoint("skb", "kfree_skb"),
];

/// One attached null program; detached when dropped.
pub struct NullProgram {
    pub hook: Hook,
    prog: OwnedFd,
    _attachment: OwnedFd,
}

impl NullProgram {
    /// Attaches one null program on each of `hooks` this kernel has.
    pub fn attach_all(hooks: &[Hook]) -> Vec<NullProgram> {
        let btf_ids = BtfIds::of_vmlinux();
        hooks
            .iter()
            .filter_map(|&hook| match NullProgram::attach(hook, &btf_ids) {
                Ok(p) => Some(p),
                Err(e) => {
                    eprintln!("bench: no null program on {hook:?}: {e:#}");
                    None
                }
            })
            .collect()
    }

    fn attach(hook: Hook, btf: &BtfIds) -> anyhow::Result<NullProgram> {
        let (prog, attachment) = match hook {
            Hook::Tracepoint(category, name) => {
                let prog = load(PROG_TYPE_TRACEPOINT, 0, 0)?;
                let pfd = perf_tracepoint(category, name)?;
                // SAFETY: ioctls on a perf event fd we own, with a program fd we own.
                unsafe {
                    if libc::ioctl(pfd.as_raw_fd(), PERF_EVENT_IOC_SET_BPF, prog.as_raw_fd()) != 0
                        || libc::ioctl(pfd.as_raw_fd(), PERF_EVENT_IOC_ENABLE, 0) != 0
                    {
                        bail!("attach to {category}:{name}: {}", errno());
                    }
                }
                (prog, pfd)
            }
            Hook::BtfTracepoint(name) => {
                let id = btf.find(&format!("TYPEDEF 'btf_trace_{name}'"))?;
                let prog = load(PROG_TYPE_TRACING, TRACE_RAW_TP, id)?;
                let link = raw_tracepoint_open(&prog)?;
                (prog, link)
            }
        };
        Ok(NullProgram {
            hook,
            prog,
            _attachment: attachment,
        })
    }

    /// Run time and count so far (with `kernel.bpf_stats_enabled` on).
    pub fn stats(&self) -> ProgStats {
        std::fs::read_to_string(format!("/proc/self/fdinfo/{}", self.prog.as_raw_fd()))
            .ok()
            .and_then(|t| parse_fdinfo(&t))
            .map_or_else(ProgStats::default, |(_, s)| s)
    }
}

/// Type ids in the kernel's BTF, from `bpftool btf dump` (empty without BTF).
struct BtfIds(String);

impl BtfIds {
    fn of_vmlinux() -> BtfIds {
        let out = Command::new("bpftool")
            .args(["btf", "dump", "file", "/sys/kernel/btf/vmlinux"])
            .output();
        BtfIds(out.map_or_else(
            |_| String::new(),
            |o| String::from_utf8_lossy(&o.stdout).into(),
        ))
    }

    /// The id of the line `[ID] <what> ...`.
    fn find(&self, what: &str) -> anyhow::Result<u32> {
        self.0
            .lines()
            .find_map(|l| {
                let (id, rest) = l.strip_prefix('[')?.split_once("] ")?;
                rest.starts_with(what).then(|| id.parse().ok())?
            })
            .with_context(|| format!("no {what} in the kernel's BTF"))
    }
}

/// Loads `r0 = 0; exit` as a program of `prog_type`.
fn load(prog_type: u32, attach_type: u32, attach_btf_id: u32) -> anyhow::Result<OwnedFd> {
    let insns: [u64; 2] = [0x0000_0000_0000_00b7, 0x0000_0000_0000_0095];
    let license = c"GPL";
    let mut attr = [0u8; 128];
    let mut put32 = |at: usize, v: u32| attr[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    put32(0, prog_type);
    put32(4, insns.len() as u32);
    put32(68, attach_type);
    put32(108, attach_btf_id);
    attr[8..16].copy_from_slice(&(insns.as_ptr() as u64).to_ne_bytes());
    attr[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
    attr[48..52].copy_from_slice(b"null");
    bpf(BPF_PROG_LOAD, &mut attr).context("load a null program")
}

fn raw_tracepoint_open(prog: &OwnedFd) -> anyhow::Result<OwnedFd> {
    let mut attr = [0u8; 128];
    attr[8..12].copy_from_slice(&(prog.as_raw_fd() as u32).to_ne_bytes());
    bpf(BPF_RAW_TRACEPOINT_OPEN, &mut attr).context("attach a null program")
}

fn bpf(cmd: libc::c_long, attr: &mut [u8; 128]) -> anyhow::Result<OwnedFd> {
    // SAFETY: bpf(2) with a zero-padded attribute buffer of the size we pass; the
    // pointers in it outlive the call.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) };
    if fd < 0 {
        bail!("bpf({cmd}): {}", errno());
    }
    // SAFETY: a new fd the kernel just gave us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A perf event on a tracefs tracepoint, to attach a program to (all CPUs run it).
fn perf_tracepoint(category: &str, name: &str) -> anyhow::Result<OwnedFd> {
    let id_file = format!("/sys/kernel/tracing/events/{category}/{name}/id");
    let id: u64 = std::fs::read_to_string(&id_file)
        .with_context(|| id_file.clone())?
        .trim()
        .parse()?;
    // perf_event_attr in its first published size (PERF_ATTR_SIZE_VER0): type,
    // size, config, sample_period; wakeup_events at 48.
    let mut attr = [0u8; 64];
    attr[0..4].copy_from_slice(&PERF_TYPE_TRACEPOINT.to_ne_bytes());
    attr[4..8].copy_from_slice(&64u32.to_ne_bytes());
    attr[8..16].copy_from_slice(&id.to_ne_bytes());
    attr[16..24].copy_from_slice(&1u64.to_ne_bytes());
    attr[48..52].copy_from_slice(&1u32.to_ne_bytes());
    // SAFETY: perf_event_open(2) with an attribute buffer of the size it declares.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            -1,
            0,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        bail!("perf_event_open {category}:{name}: {}", errno());
    }
    // SAFETY: a new fd the kernel just gave us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}
