//! Start-up checks, each failing with one sentence an operator can act on.

use std::{
    fmt,
    path::{Path, PathBuf},
};

use super::{
    btf,
    layout::{self, KernelLayout},
    lockdown,
    tracefs::Tracefs,
};

/// Oldest kernel with everything the programs use (ring buffer, boot-clock helper).
pub const MIN_KERNEL: (u32, u32) = (5, 8);
/// From this kernel on, BPF memory is charged to the cgroup, not to RLIMIT_MEMLOCK.
pub const MEMCG_ACCOUNTING: (u32, u32) = (5, 11);

/// What the checks found.
#[derive(Debug)]
pub struct Environment {
    pub kernel_release: String,
    /// `None`: tracefs could not be found or mounted, and the kernel's BTF serves (the
    /// tracepoints are hooked as BTF tracepoints; what needs tracefs is degraded).
    pub tracefs: Option<Tracefs>,
    pub cgroup2: PathBuf,
    pub layout: KernelLayout,
    /// Locked down for confidentiality: the one sentence of what is not seen.
    pub degraded: Option<String>,
}

/// Every missing requirement, one sentence each.
#[derive(Debug)]
pub struct MissingRequirements(pub Vec<String>);

impl fmt::Display for MissingRequirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "this node cannot run the agent:")?;
        for s in &self.0 {
            write!(f, "\n  - {s}")?;
        }
        Ok(())
    }
}

impl std::error::Error for MissingRequirements {}

/// Overrides for where things are (flags); `None` means find them.
#[derive(Debug, Clone, Default)]
pub struct Locations {
    pub tracefs: Option<PathBuf>,
    pub cgroup2: Option<PathBuf>,
}

pub fn check(locations: &Locations) -> Result<Environment, MissingRequirements> {
    let mut missing = Vec::new();
    let kernel_release = kernel_release();
    match parse_kernel_version(&kernel_release) {
        Some(v) if v < MIN_KERNEL => missing.push(format!(
            "kernel {kernel_release} is older than {}.{}, the oldest with the BPF ring buffer and boot-clock timestamps",
            MIN_KERNEL.0, MIN_KERNEL.1
        )),
        None => tracing::warn!(kernel_release, "cannot parse the kernel version; trying anyway"),
        _ => {}
    }
    if let Err(e) = raise_memlock() {
        match parse_kernel_version(&kernel_release) {
            Some(v) if v < MEMCG_ACCOUNTING => missing.push(format!(
                "cannot raise RLIMIT_MEMLOCK ({e}); kernels before 5.11 count BPF maps against it: give the agent CAP_SYS_RESOURCE or an unlimited memlock limit"
            )),
            _ => tracing::debug!("RLIMIT_MEMLOCK stays as it is ({e}); this kernel charges BPF memory to the cgroup"),
        }
    }
    // Lockdown for confidentiality locks tracefs and refuses the read helper: with
    // BTF, the BTF tracepoints read through their typed pointers; without, one sentence.
    let securityfs = lockdown::confidentiality();
    let tracefs = match (&locations.tracefs, securityfs) {
        (Some(p), _) => Ok(Tracefs::at(p)),
        (None, Some(true)) => Err("tracefs is locked".to_string()),
        (None, _) => Tracefs::find_or_mount().map_err(|e| e.to_string()),
    };
    // Without securityfs (in a pod), lockdown shows as a helper taken away (5.13+), or
    // as a tracefs the kernel left empty.
    let locked = match securityfs {
        Some(true) => Some("/sys/kernel/security/lockdown"),
        Some(false) => None,
        None if lockdown::refuses_kernel_reads() => {
            Some("the kernel refuses bpf_probe_read_kernel to tracing programs")
        }
        None if locations.tracefs.is_none()
            && tracefs
                .as_ref()
                .is_ok_and(|t| lockdown::empty_tracefs(t.root())) =>
        {
            Some("tracefs is mounted and empty")
        }
        None => None,
    };
    let has_btf = Path::new(btf::VMLINUX).exists();
    let degraded = locked.map(lockdown::degraded_sentence);
    let layout = match (locked, &tracefs) {
        (Some(how), _) if has_btf => {
            tracing::warn!("degraded: {}", degraded.as_deref().unwrap_or_default());
            Some(layout::locked_down(how))
        }
        (Some(how), _) => {
            return Err(MissingRequirements(vec![
                lockdown::confidentiality_sentence(how),
            ]));
        }
        (None, Ok(t)) => Some(layout::from_tracefs(t)),
        (None, Err(why)) if has_btf => {
            tracing::warn!(
                "degraded: {why}; the tracepoints are hooked as BTF tracepoints, which need \
                 none, and what only tracefs gives is off (below)"
            );
            Some(layout::without_tracefs(why))
        }
        (None, Err(why)) => {
            missing.push(format!(
                "{why}; without tracefs the tracepoints can only be hooked as BTF \
                 tracepoints, and this kernel has no BTF ({})",
                btf::VMLINUX
            ));
            None
        }
    };
    let cgroup2 = match &locations.cgroup2 {
        Some(p) => Some(p.clone()),
        None => match super::cgroup2::find_cgroup2() {
            Ok(p) => Some(p),
            Err(e) => {
                missing.push(e.to_string());
                None
            }
        },
    };
    if let Some(l) = &layout {
        // Without tracefs, a required tracepoint with a BTF program is tried as that.
        let served_by_btf =
            |u: &&layout::Unusable| l.without_tracefs && u.tracepoint.btf_program.is_some();
        for u in l.unusable.iter().filter(|u| u.tracepoint.required) {
            if !served_by_btf(&u) {
                missing.push(u.to_string());
            }
        }
    }
    match (cgroup2, layout) {
        (Some(cgroup2), Some(layout)) if missing.is_empty() => Ok(Environment {
            kernel_release,
            tracefs: tracefs.ok().filter(|_| !layout.without_tracefs),
            cgroup2,
            layout,
            degraded,
        }),
        _ => Err(MissingRequirements(missing)),
    }
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// `6.18.44-fc-v595` → (6, 18).
pub fn parse_kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; newer ones to the cgroup.
fn raise_memlock() -> std::io::Result<()> {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: valid pointer to an rlimit.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_versions() {
        assert_eq!(parse_kernel_version("6.18.44-fc-v595"), Some((6, 18)));
        assert_eq!(parse_kernel_version("5.4.0-150-generic"), Some((5, 4)));
        assert_eq!(parse_kernel_version("weird"), None);
        assert!(parse_kernel_version("5.4.0").unwrap() < MIN_KERNEL);
        assert!(parse_kernel_version("5.10.0").unwrap() >= MIN_KERNEL);
    }

    #[test]
    fn missing_requirements_read_as_a_list() {
        let m = MissingRequirements(vec!["a is missing".into(), "b is missing".into()]);
        assert_eq!(
            m.to_string(),
            "this node cannot run the agent:\n  - a is missing\n  - b is missing"
        );
    }

    #[test]
    fn a_tracefs_without_tracepoints_names_each_required_one() {
        let dir = std::env::temp_dir().join(format!("sr-empty-tracefs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = check(&Locations {
            tracefs: Some(dir.clone()),
            cgroup2: Some(dir.clone()),
        })
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("sock:inet_sock_set_state is unusable"),
            "{text}"
        );
        assert!(text.contains("tcp:tcp_receive_reset is unusable"), "{text}");
        assert!(
            !text.contains("tcp_send_reset"),
            "optional ones only degrade: {text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
