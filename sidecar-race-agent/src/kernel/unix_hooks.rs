//! Unix domain socket hooks: which ones this kernel can take, their BTF offsets, and
//! attaching them (the syscall tracepoints' offsets are the layout's). `fexit`/`fentry`
//! on the AF_UNIX operations where the kernel has BTF; else the `connect`/`sendto`
//! syscall tracepoints filtered to AF_UNIX, which see refusals but not listeners; else
//! the capability is missing, said in one sentence.

use aya::{
    Btf as AyaBtf, Ebpf,
    programs::{FEntry, FExit, TracePoint},
};
use sidecar_race_ebpf::{
    layout::MISSING,
    unix::{SyscallArgs, UnixFields},
};

use super::{
    attach::{chain, verifier_gist},
    btf::{Btf, BtfError},
};

/// Which Unix socket hooks to use (`--unix-hooks`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum UnixHookChoice {
    /// `fexit` where the kernel has BTF, else the syscall tracepoints.
    #[default]
    Auto,
    /// The syscall tracepoints even where BTF exists (what a kernel without BTF gets).
    Syscalls,
    /// No Unix socket hooks: a TCP-only agent (the syscall fallback runs on every
    /// connect and sendto of the node, TCP's included).
    Off,
}

/// What the agent sees of Unix domain sockets on this kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnixCoverage {
    /// Refusals (connect, send), listeners up and down, with paths, inodes and netns.
    Fexit,
    /// Refusals and listeners up through the syscall tracepoints (no listener closes,
    /// no netns), and why.
    Syscalls { why_not_fexit: String },
    /// Nothing, and why.
    Missing { why: String },
}

impl UnixCoverage {
    /// Short name for logs and status (`fexit`, `syscalls`, `missing`).
    pub fn name(&self) -> &'static str {
        match self {
            UnixCoverage::Fexit => "fexit",
            UnixCoverage::Syscalls { .. } => "syscalls",
            UnixCoverage::Missing { .. } => "missing",
        }
    }

    /// One sentence for the operator when coverage is degraded.
    pub fn degraded(&self) -> Option<String> {
        match self {
            UnixCoverage::Fexit => None,
            UnixCoverage::Syscalls { why_not_fexit } => Some(format!(
                "Unix sockets are seen through the connect/sendto/bind/listen syscall \
                 tracepoints ({why_not_fexit}): a Unix listener's close is not seen, only \
                 inferred from the refusals that follow it, and abstract names carry no \
                 network namespace"
            )),
            UnixCoverage::Missing { why } => Some(format!(
                "Unix domain socket races are not detected on this kernel: {why}"
            )),
        }
    }
}

/// The BTF offsets the `fexit`/`fentry` programs read.
pub fn unix_fields(btf: &Btf) -> Result<UnixFields, BtfError> {
    let common = btf.offset("sock", "__sk_common")?;
    let c = |m| Ok::<_, BtfError>(common + btf.offset("sock_common", m)?);
    if btf.offset("unix_sock", "sk")? != 0 {
        return Err(BtfError::NoMember("unix_sock", "sk"));
    }
    Ok(UnixFields {
        socket_sk: btf.offset("socket", "sk")?,
        socket_type: btf.offset("socket", "type")?,
        sk_state: c("skc_state")?,
        sk_net: c("skc_net")?,
        net_inum: btf.offset("net", "ns")? + btf.offset("ns_common", "inum")?,
        unix_addr: btf.offset("unix_sock", "addr")?,
        addr_len: btf.offset("unix_address", "len")?,
        addr_name: btf.offset("unix_address", "name")?,
        path_dentry: btf.offset("unix_sock", "path")? + btf.offset("path", "dentry")?,
        dentry_inode: btf.offset("dentry", "d_inode")?,
        inode_ino: btf.offset("inode", "i_ino")?,
        msg_name: btf.offset("msghdr", "msg_name")?,
        msg_namelen: btf.offset("msghdr", "msg_namelen")?,
        _pad: 0,
    })
}

/// (program, kernel function) of the `fexit` hooks, then the `fentry` one.
const FEXITS: [(&str, &str); 4] = [
    ("unix_stream_connect", "unix_stream_connect"),
    ("unix_dgram_connect", "unix_dgram_connect"),
    ("unix_dgram_sendmsg", "unix_dgram_sendmsg"),
    ("unix_listen", "unix_listen"),
];
const FENTRY: (&str, &str) = ("unix_release", "unix_release");
/// (program, syscall tracepoint): connects and sends by their exits alone, reading
/// the arguments from the task's registers (5.15+ with BTF)...
const CALLS_BY_REGISTERS: [(&str, &str); 2] = [
    ("unix_sys_exit_connect_regs", "sys_exit_connect"),
    ("unix_sys_exit_sendto_regs", "sys_exit_sendto"),
];
/// ... else by entry and exit, paired through a per-thread map.
const CALLS_PAIRED: [(&str, &str); 4] = [
    ("unix_sys_enter_connect", "sys_enter_connect"),
    ("unix_sys_enter_sendto", "sys_enter_sendto"),
    ("unix_sys_exit", "sys_exit_connect"),
    ("unix_sys_exit", "sys_exit_sendto"),
];
/// Listeners, by entry and exit.
const LISTENERS: [(&str, &str); 4] = [
    ("unix_sys_enter_bind", "sys_enter_bind"),
    ("unix_sys_exit_bind", "sys_exit_bind"),
    ("unix_sys_enter_listen", "sys_enter_listen"),
    ("unix_sys_exit_listen", "sys_exit_listen"),
];

/// Attaches the best hooks `choice` allows. `fields` says whether the BTF offsets were
/// found, `syscalls` whether the syscall tracepoints were.
pub fn attach(
    ebpf: &mut Ebpf,
    choice: UnixHookChoice,
    fields: &Result<UnixFields, String>,
    syscalls: &Result<SyscallArgs, String>,
    btf: &Result<AyaBtf, String>,
) -> UnixCoverage {
    if choice == UnixHookChoice::Off {
        return UnixCoverage::Missing {
            why: "--unix-hooks=off".into(),
        };
    }
    let why_not_fexit = match (choice, fields) {
        (UnixHookChoice::Syscalls | UnixHookChoice::Off, _) => "--unix-hooks=syscalls".to_string(),
        (UnixHookChoice::Auto, Err(why)) => format!("no BTF offsets: {why}"),
        (UnixHookChoice::Auto, Ok(_)) => match attach_fexit(ebpf, btf) {
            Ok(()) => return UnixCoverage::Fexit,
            Err(why) => why,
        },
    };
    match syscalls
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|args| attach_syscalls(ebpf, args))
    {
        Ok(()) => UnixCoverage::Syscalls { why_not_fexit },
        Err(why_not_syscalls) => UnixCoverage::Missing {
            why: format!(
                "neither fexit ({why_not_fexit}) nor the syscall tracepoints ({why_not_syscalls}) \
                 can be used"
            ),
        },
    }
}

fn attach_fexit(ebpf: &mut Ebpf, btf: &Result<AyaBtf, String>) -> Result<(), String> {
    let btf = btf.as_ref().map_err(Clone::clone)?;
    let result = (|| {
        for (program, function) in FEXITS {
            let p: &mut FExit = program_mut(ebpf, program)?;
            p.load(function, btf)
                .map_err(|e| format!("load {program}: {}", chain(&e)))?;
            p.attach()
                .map_err(|e| format!("attach {program}: {}", chain(&e)))?;
        }
        let (program, function) = FENTRY;
        let p: &mut FEntry = program_mut(ebpf, program)?;
        p.load(function, btf)
            .map_err(|e| format!("load {program}: {}", chain(&e)))?;
        p.attach()
            .map(|_| ())
            .map_err(|e| format!("attach {program}: {}", chain(&e)))
    })();
    if result.is_err() {
        // All or none: the fallback must not see what a half-attached set also sees.
        for (program, _) in FEXITS {
            if let Ok(p) = program_mut::<FExit>(ebpf, program) {
                let _ = p.unload();
            }
        }
        if let Ok(p) = program_mut::<FEntry>(ebpf, FENTRY.0) {
            let _ = p.unload();
        }
    }
    result
}

fn attach_syscalls(ebpf: &mut Ebpf, syscalls: &SyscallArgs) -> Result<(), String> {
    let by_registers = if syscalls.regs_connect_addr == MISSING {
        Err("the agent does not know this architecture's syscall registers".to_string())
    } else {
        load_all(ebpf, &CALLS_BY_REGISTERS).map_err(|e| verifier_gist(&e))
    };
    let calls: &[(&str, &str)] = match by_registers {
        Ok(()) => &CALLS_BY_REGISTERS,
        Err(why) => {
            tracing::info!(
                "Unix connects and sends are seen by syscall entry and exit, not by exit \
                 alone ({why})"
            );
            &CALLS_PAIRED
        }
    };
    attach_all(ebpf, calls)?;
    attach_all(ebpf, &LISTENERS)
}

fn load_all(ebpf: &mut Ebpf, programs: &[(&str, &str)]) -> Result<(), String> {
    for (program, _) in programs {
        let p: &mut TracePoint = program_mut(ebpf, program)?;
        if p.fd().is_err() {
            p.load()
                .map_err(|e| format!("load {program}: {}", chain(&e)))?;
        }
    }
    Ok(())
}

fn attach_all(ebpf: &mut Ebpf, programs: &[(&str, &str)]) -> Result<(), String> {
    load_all(ebpf, programs)?;
    for &(program, event) in programs {
        let p: &mut TracePoint = program_mut(ebpf, program)?;
        p.attach("syscalls", event)
            .map_err(|e| format!("attach {program} to syscalls:{event}: {}", chain(&e)))?;
    }
    Ok(())
}

fn program_mut<'a, P>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut P, String>
where
    &'a mut P: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or_else(|| format!("no program {name} in the object"))?
        .try_into()
        .map_err(|e| chain(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_load_is_told_by_its_verifier_verdict_not_its_whole_log() {
        let error = "load unix_sys_exit_connect_regs: the BPF_PROG_LOAD syscall returned \
                     Invalid argument (os error 22). Verifier output: 0: (bf) r3 = r1\n\
                     95: (85) call unknown#158\ninvalid func unknown#158\n\
                     verification time 7612 usec\nstack depth 64+0\n: Invalid argument";
        assert_eq!(
            verifier_gist(error),
            "load unix_sys_exit_connect_regs: the BPF_PROG_LOAD syscall returned Invalid \
             argument (os error 22): invalid func unknown#158"
        );
        assert_eq!(verifier_gist("no program x"), "no program x");
    }

    #[test]
    fn less_than_fexit_is_one_sentence_saying_why() {
        assert_eq!(UnixCoverage::Fexit.degraded(), None);
        let off = UnixCoverage::Missing {
            why: "--unix-hooks=off".into(),
        }
        .degraded()
        .unwrap();
        assert_eq!(
            off,
            "Unix domain socket races are not detected on this kernel: --unix-hooks=off"
        );
        let fallback = UnixCoverage::Syscalls {
            why_not_fexit: "no BTF offsets: no struct unix_sock in the kernel's BTF".into(),
        }
        .degraded()
        .unwrap();
        assert!(
            fallback.contains("(no BTF offsets: no struct unix_sock"),
            "{fallback}"
        );
        assert!(!fallback.contains(". "), "one sentence: {fallback}");
    }
}
