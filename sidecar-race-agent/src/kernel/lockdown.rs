//! Kernel lockdown (`lockdown=` at boot, or forced by the kernel's configuration, as
//! Secure Boot setups do). `integrity` leaves everything the agent does alone;
//! `confidentiality` takes `bpf_probe_read_kernel` from eBPF programs and locks tracefs.
//! Where the kernel has BTF, the BTF tracepoints still read sockets and cgroups through
//! their typed pointers, and the agent runs without what only the helper reads; without
//! BTF it cannot run, and says so in one sentence rather than as a failed load.

use std::path::Path;

/// Where securityfs says the lockdown level (`none integrity [confidentiality]`).
const LOCKDOWN: &str = "/sys/kernel/security/lockdown";

/// The sentence for a node locked down for confidentiality without BTF, `how` saying
/// how it was told.
pub fn confidentiality_sentence(how: &str) -> String {
    format!(
        "the kernel is locked down for confidentiality ({how}) and has no BTF \
         (/sys/kernel/btf/vmlinux): it refuses eBPF programs that read kernel memory with \
         bpf_probe_read_kernel, and reads of tracefs, and without BTF the programs have no \
         other way to read sockets and cgroups; boot the node with lockdown=integrity \
         (what Secure Boot needs) or none, or a kernel built with CONFIG_DEBUG_INFO_BTF"
    )
}

/// What the agent cannot see on a node locked down for confidentiality that has BTF.
pub fn degraded_sentence(how: &str) -> String {
    format!(
        "the kernel is locked down for confidentiality ({how}): TCP refusals, listeners \
         and cgroups are read through the BTF tracepoints' typed pointers, and what only \
         bpf_probe_read_kernel reads is not seen: Unix domain sockets, the local port \
         behind a NAT redirect (tcp_send_reset needs tracefs), cgroup paths (named from \
         cgroupfs instead) and the container a sub-cgroup belongs to (budgets per cgroup)"
    )
}

/// Whether the kernel is locked down for confidentiality, as securityfs says; `None`
/// when securityfs is not mounted here (in a pod it usually is not).
pub fn confidentiality() -> Option<bool> {
    let text = std::fs::read_to_string(Path::new(LOCKDOWN)).ok()?;
    Some(selected(&text) == Some("confidentiality"))
}

/// The level in brackets of `none integrity [confidentiality]`.
fn selected(text: &str) -> Option<&str> {
    let start = text.find('[')? + 1;
    let end = start + text[start..].find(']')?;
    Some(&text[start..end])
}

/// Where securityfs cannot be read (in a pod): whether the kernel refuses a tracing
/// program the helper `bpf_probe_read_kernel`, which only lockdown for confidentiality
/// takes away (5.5+, where the helper exists). A program of seven instructions that
/// calls it is loaded and closed; `false` when it loads or fails for another reason.
pub fn refuses_kernel_reads() -> bool {
    // r1 = r10; r1 += -8; r2 = 8; r3 = 0; call bpf_probe_read_kernel; r0 = 0; exit
    const PROBE_READ_KERNEL: i32 = 113;
    let insns: [u64; 7] = [
        insn(0xbf, 1, 10, 0),
        insn(0x07, 1, 0, -8),
        insn(0xb7, 2, 0, 8),
        insn(0xb7, 3, 0, 0),
        insn(0x85, 0, 0, PROBE_READ_KERNEL),
        insn(0xb7, 0, 0, 0),
        insn(0x95, 0, 0, 0),
    ];
    let mut log = vec![0u8; 4096];
    let attr = ProgLoadAttr {
        prog_type: 5, // BPF_PROG_TYPE_TRACEPOINT
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: c"GPL".as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        rest: [0; 96],
    };
    // SAFETY: bpf(BPF_PROG_LOAD) with an attr whose pointers outlive the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            5, // BPF_PROG_LOAD
            &attr as *const ProgLoadAttr,
            size_of::<ProgLoadAttr>(),
        )
    };
    if fd >= 0 {
        // SAFETY: a descriptor the syscall just returned, closed once.
        unsafe { libc::close(fd as i32) };
        return false;
    }
    let log = String::from_utf8_lossy(&log);
    // "program of this type cannot use helper …" (6.x), "unknown func …" (older).
    log.contains("bpf_probe_read_kernel")
        && (log.contains("cannot use helper") || log.contains("unknown func"))
}

/// Where securityfs cannot be read, on kernels that still lend the helper and fail it
/// at run time (before 5.13): a tracefs that is mounted but empty, which is what the
/// kernel's tracing does when lockdown stops it at boot ("Tracing disabled due to
/// lockdown").
pub fn empty_tracefs(root: &Path) -> bool {
    root.is_dir() && !root.join("events").exists()
}

/// One eBPF instruction: opcode, registers, immediate (offset 0), as the kernel reads it.
const fn insn(code: u8, dst: u8, src: u8, imm: i32) -> u64 {
    (code as u64) | (((src << 4 | dst) as u64) << 8) | ((imm as u32 as u64) << 32)
}

/// The head of `union bpf_attr` for BPF_PROG_LOAD, the rest zero.
#[repr(C)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    rest: [u8; 96],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_program_is_encoded_as_the_kernel_reads_it() {
        // `r1 = r10`: BPF_ALU64 | BPF_MOV | BPF_X, dst 1, src 10.
        assert_eq!(insn(0xbf, 1, 10, 0), 0xa1bf);
        // `r1 += -8`: the immediate in the high half, two's complement.
        assert_eq!(insn(0x07, 1, 0, -8), 0xffff_fff8_0000_0107);
        assert_eq!(insn(0x85, 0, 0, 113), 0x0000_0071_0000_0085);
    }

    #[test]
    fn the_selected_level_is_the_one_in_brackets() {
        assert_eq!(
            selected("none [integrity] confidentiality\n"),
            Some("integrity")
        );
        assert_eq!(
            selected("none integrity [confidentiality]\n"),
            Some("confidentiality")
        );
        assert_eq!(selected("[none] integrity confidentiality"), Some("none"));
        assert_eq!(selected(""), None);
    }

    #[test]
    fn the_sentence_says_what_to_boot_with() {
        let s = confidentiality_sentence(LOCKDOWN);
        assert!(s.contains("lockdown=integrity"), "{s}");
        assert!(s.contains(LOCKDOWN), "{s}");
    }
}
