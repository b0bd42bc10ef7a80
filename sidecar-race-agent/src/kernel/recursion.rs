//! Runs of our programs the kernel skipped because one of them was already running on
//! that CPU (a reset in softirq interrupting a connect's program, say): each program's
//! `recursion_misses` in its fdinfo. A skipped run is a refusal or a forget not seen,
//! so they are exported rather than assumed to be 0. The kernel counts them for
//! trampolines (`fentry`/`fexit`) from 5.12, but for tracepoints and kprobes only from
//! 6.7 (`bpf_prog_inc_misses_counter` in their dispatch): below 6.7 they are reported
//! unavailable, not 0.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use aya::Ebpf;

/// The kernel release from which every hook of ours counts its skipped runs.
const COUNTED_FROM: (u8, u8) = (6, 7);

/// Our loaded programs, by name, with a duplicate of each one's fd (so a scrape after
/// the programs were dropped never reads another file's fdinfo).
pub struct RecursionMisses {
    programs: Vec<(String, OwnedFd)>,
}

impl std::fmt::Debug for RecursionMisses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.programs.iter().map(|(name, _)| name))
            .finish()
    }
}

impl RecursionMisses {
    /// The programs `ebpf` loaded; `None` where the kernel does not count every hook's
    /// skipped runs.
    pub(super) fn of(ebpf: &Ebpf) -> Option<Self> {
        Self::of_programs(
            ebpf.programs()
                .filter_map(|(name, program)| {
                    let fd = program.fd().ok()?.as_fd().try_clone_to_owned().ok()?;
                    Some((name.to_string(), fd))
                })
                .collect(),
        )
    }

    /// These programs (adopted ones, by their names in the object); `None` where the
    /// kernel does not count every hook's skipped runs.
    pub(super) fn of_programs(programs: Vec<(String, OwnedFd)>) -> Option<Self> {
        let counted = aya::util::KernelVersion::current()
            .is_ok_and(|v| v >= aya::util::KernelVersion::new(COUNTED_FROM.0, COUNTED_FROM.1, 0));
        counted.then_some(Self { programs })
    }

    /// Each program's skipped runs so far (a program whose fdinfo cannot be read is
    /// left out).
    pub fn read(&self) -> Vec<(String, u64)> {
        self.programs
            .iter()
            .filter_map(|(name, fd)| {
                let path = format!("/proc/self/fdinfo/{}", fd.as_raw_fd());
                let misses = parse(&std::fs::read_to_string(path).ok()?)?;
                Some((name.clone(), misses))
            })
            .collect()
    }
}

/// `recursion_misses` of a program fd's fdinfo.
fn parse(fdinfo: &str) -> Option<u64> {
    super::fdinfo::field(fdinfo, "recursion_misses")
}
