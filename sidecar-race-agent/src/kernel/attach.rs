//! Attaching programs, and what goes wrong when loading or attaching: [`ProbeError`]
//! with one sentence an operator can act on, the error chains and verifier verdicts
//! the hooks report.

use aya::{Ebpf, programs::TracePoint};
use thiserror::Error;

use super::layout::Tracepoint;

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
    #[error(
        "cannot hook {tracepoint} as a BTF tracepoint without tracefs ({reason}); mount \
         tracefs on the node (`mount -t tracefs nodev /sys/kernel/tracing`) or into the \
         agent's container"
    )]
    BtfOnly { tracepoint: String, reason: String },
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

impl ProbeError {
    /// Whether the kernel refused an attach for lack of permission (EPERM, EACCES):
    /// `perf_event_open` under `perf_event_paranoid` 3 or a seccomp profile.
    pub(super) fn is_permission_denied(&self) -> bool {
        match self {
            ProbeError::PerfRestricted { .. } => true,
            ProbeError::Program { cause, .. } => permission_denied(cause),
            _ => false,
        }
    }
}

pub(super) fn attach(ebpf: &mut Ebpf, tp: &Tracepoint, program: &str) -> Result<(), ProbeError> {
    let what = |verb: &str| format!("{verb} {program} on {}:{}", tp.category, tp.name);
    let program: &mut TracePoint = super::variant::program_mut(ebpf, program)
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
