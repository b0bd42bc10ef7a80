//! Unix domain socket hooks: which ones this kernel can take, their BTF offsets, and
//! attaching them (the syscall tracepoints' offsets are the layout's). `auto` takes
//! `fexit`/`fentry` on the AF_UNIX operations where the kernel allows them, else
//! kprobes and kretprobes on the same functions, else none, said in one sentence that
//! names the opt-in: the `connect`/`sendto`/`bind`/`listen` syscall tracepoints
//! (`--unix-hooks=syscalls`) see refusals and listeners up too, but put every syscall
//! of every process on the node on the kernel's slow path, so they are never taken
//! unasked.

use aya::{Btf as AyaBtf, Ebpf, programs::TracePoint};
use sidecar_race_ebpf::{
    layout::MISSING,
    unix::{SyscallArgs, UnixFields},
};

use super::{
    attach::{chain, verifier_gist},
    btf::{Btf, BtfError},
    function_hooks::{attach_kprobes, attach_trampolines, program_mut},
};

/// Which Unix socket hooks to use (`--unix-hooks`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum UnixHookChoice {
    /// `fexit` where the kernel allows it, else kprobes, else none (never the syscall
    /// tracepoints: they slow every syscall on the node).
    #[default]
    Auto,
    /// Kprobes and kretprobes on the AF_UNIX operations, even where `fexit` works.
    Kprobes,
    /// The connect/sendto/bind/listen syscall tracepoints: every syscall of every
    /// process on the node takes the kernel's slow path while they are attached.
    Syscalls,
    /// No Unix socket hooks: a TCP-only agent.
    Off,
}

/// What `auto` costs a node when it falls back to nothing, measured on a test host
/// (`getppid` bare, then with the syscall tracepoints attached).
/// (BENCHMARKS.md's unrelated-syscall rows: bare / beside the agent 0.738, median.)
pub const SYSCALLS_COST: &str =
    "about 35 % more CPU per syscall: 212 → 288 ns per getppid in BENCHMARKS.md";

/// What the agent sees of Unix domain sockets on this kernel.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum UnixCoverage {
    /// Refusals (connect, send), listeners up and down, with paths, inodes and netns.
    Fexit,
    /// What `fexit` sees, through kprobes (and why not `fexit`); without the kernel's
    /// BTF (and why) only refused connects with their path and error.
    Kprobes {
        why_not_fexit: String,
        without_btf: Option<String>,
    },
    /// Refusals and listeners up through the syscall tracepoints (no listener closes,
    /// no netns), and why.
    Syscalls { why_not_fexit: String },
    /// Nothing, and why.
    Missing { why: String },
}

impl UnixCoverage {
    /// Short name for logs and status (`fexit`, `kprobes`, `syscalls`, `missing`).
    pub fn name(&self) -> &'static str {
        match self {
            UnixCoverage::Fexit => "fexit",
            UnixCoverage::Kprobes { .. } => "kprobes",
            UnixCoverage::Syscalls { .. } => "syscalls",
            UnixCoverage::Missing { .. } => "missing",
        }
    }

    /// One sentence for the operator when coverage is degraded.
    pub fn degraded(&self) -> Option<String> {
        match self {
            UnixCoverage::Fexit
            | UnixCoverage::Kprobes {
                without_btf: None, ..
            } => None,
            UnixCoverage::Kprobes {
                why_not_fexit,
                without_btf: Some(why),
            } => Some(format!(
                "Unix sockets are seen through kprobes ({why_not_fexit}) without the kernel's \
                 struct offsets ({why}): refused connects with their path and error, but no \
                 socket type or network namespace, no datagram sent to a path and no listener"
            )),
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

    /// Why the hooks are not `fexit`, where they are as good: for an info line.
    pub fn note(&self) -> Option<String> {
        match self {
            UnixCoverage::Kprobes {
                why_not_fexit,
                without_btf: None,
            } => Some(format!(
                "Unix sockets are seen through kprobes, not fexit ({why_not_fexit}): a \
                 return the kernel's kretprobe instances could not take is counted in \
                 sidecar_race_kernel_table_entries_gone_total{{table=\"unix_kprobe_calls\"}}"
            )),
            _ => None,
        }
    }
}

/// The sets of hooks, each attached all or none, in the order [`choose`] tries them.
pub trait HookSets {
    fn fexit(&mut self) -> Result<(), String>;
    fn kprobes(&mut self) -> Result<(), String>;
    fn syscalls(&mut self) -> Result<(), String>;
}

/// Attaches the best set `choice` allows. `fields` says whether the BTF offsets were
/// found (`fexit` needs them; kprobes see less without them).
pub fn choose(
    choice: UnixHookChoice,
    fields: Result<(), &str>,
    sets: &mut impl HookSets,
) -> UnixCoverage {
    let without_btf = fields.err().map(|why| format!("no BTF offsets: {why}"));
    let kprobes = |sets: &mut dyn HookSets, why_not_fexit: String| {
        sets.kprobes().map(|()| UnixCoverage::Kprobes {
            why_not_fexit,
            without_btf: without_btf.clone(),
        })
    };
    match choice {
        UnixHookChoice::Off => UnixCoverage::Missing {
            why: "--unix-hooks=off".into(),
        },
        UnixHookChoice::Syscalls => match sets.syscalls() {
            Ok(()) => UnixCoverage::Syscalls {
                why_not_fexit: match &without_btf {
                    Some(why) => format!("--unix-hooks=syscalls; {why}"),
                    None => "--unix-hooks=syscalls".into(),
                },
            },
            Err(why) => UnixCoverage::Missing {
                why: format!("the syscall tracepoints cannot be used ({why})"),
            },
        },
        UnixHookChoice::Kprobes => {
            kprobes(sets, "--unix-hooks=kprobes".into()).unwrap_or_else(|why| {
                UnixCoverage::Missing {
                    why: format!("kprobes cannot be used ({why})"),
                }
            })
        }
        UnixHookChoice::Auto => {
            let why_not_fexit = match &without_btf {
                Some(why) => why.clone(),
                None => match sets.fexit() {
                    Ok(()) => return UnixCoverage::Fexit,
                    Err(why) => why,
                },
            };
            kprobes(sets, why_not_fexit.clone()).unwrap_or_else(|why_not_kprobes| {
                UnixCoverage::Missing {
                    why: format!(
                        "neither fexit ({why_not_fexit}) nor kprobes ({why_not_kprobes}) can \
                         be used, and --unix-hooks=syscalls is not taken unasked: its syscall \
                         tracepoints put every syscall of every process on the node on the \
                         kernel's slow path ({SYSCALLS_COST})"
                    ),
                }
            })
        }
    }
}

/// The BTF offsets the `fexit`/`fentry` programs and the kprobes read.
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
/// Listeners, by entry and exit; `socket()` tells which descriptors are datagram
/// sockets, whose `bind` is their listener.
const LISTENERS: [(&str, &str); 6] = [
    ("unix_sys_enter_socket", "sys_enter_socket"),
    ("unix_sys_exit_socket", "sys_exit_socket"),
    ("unix_sys_enter_bind", "sys_enter_bind"),
    ("unix_sys_exit_bind", "sys_exit_bind"),
    ("unix_sys_enter_listen", "sys_enter_listen"),
    ("unix_sys_exit_listen", "sys_exit_listen"),
];

/// (program, kernel function) of the kprobes and kretprobes: the entries first, so
/// no return runs before its entry is in place.
const KPROBES: [(&str, &str); 9] = [
    ("unix_kprobe_enter", "unix_stream_connect"),
    ("unix_kprobe_enter", "unix_dgram_connect"),
    ("unix_kprobe_enter_sendmsg", "unix_dgram_sendmsg"),
    ("unix_kprobe_enter", "unix_listen"),
    ("unix_kretprobe_connect", "unix_stream_connect"),
    ("unix_kretprobe_connect", "unix_dgram_connect"),
    ("unix_kretprobe_sendmsg", "unix_dgram_sendmsg"),
    ("unix_kretprobe_listen", "unix_listen"),
    ("unix_kprobe_release", "unix_release"),
];

/// This kernel's hooks, as [`choose`] tries them.
struct Kernel<'a> {
    ebpf: &'a mut Ebpf,
    syscalls: &'a Result<SyscallArgs, String>,
    btf: &'a Result<AyaBtf, String>,
}

impl HookSets for Kernel<'_> {
    fn fexit(&mut self) -> Result<(), String> {
        attach_trampolines(self.ebpf, self.btf, &FEXITS, &[FENTRY])
    }

    fn kprobes(&mut self) -> Result<(), String> {
        attach_kprobes(self.ebpf, &KPROBES)
    }

    fn syscalls(&mut self) -> Result<(), String> {
        self.syscalls
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|args| attach_syscalls(self.ebpf, args))
    }
}

/// Attaches the best hooks `choice` allows. `fields` says whether the BTF offsets were
/// found, `syscalls` whether the syscall tracepoints were.
pub fn attach(
    ebpf: &mut Ebpf,
    choice: UnixHookChoice,
    fields: &Result<UnixFields, String>,
    syscalls: &Result<SyscallArgs, String>,
    btf: &Result<AyaBtf, String>,
) -> UnixCoverage {
    let fields = fields.as_ref().map(|_| ()).map_err(String::as_str);
    choose(
        choice,
        fields,
        &mut Kernel {
            ebpf,
            syscalls,
            btf,
        },
    )
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::function_hooks::{Fake, KPROBE_REGS};

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

    impl HookSets for Fake {
        fn fexit(&mut self) -> Result<(), String> {
            self.try_set("fexit")
        }
        fn kprobes(&mut self) -> Result<(), String> {
            self.try_set("kprobes")
        }
        fn syscalls(&mut self) -> Result<(), String> {
            self.try_set("syscalls")
        }
    }

    const EVERY: &[&str] = &["fexit", "kprobes", "syscalls"];

    #[test]
    fn auto_takes_fexit_where_the_kernel_allows_it() {
        let mut k = Fake::taking(EVERY);
        assert_eq!(
            choose(UnixHookChoice::Auto, Ok(()), &mut k),
            UnixCoverage::Fexit
        );
        assert_eq!(k.tried, ["fexit"]);
    }

    #[test]
    fn auto_with_fexit_refused_takes_kprobes() {
        let mut k = Fake::taking(&["kprobes", "syscalls"]);
        let got = choose(UnixHookChoice::Auto, Ok(()), &mut k);
        assert_eq!(
            got,
            UnixCoverage::Kprobes {
                why_not_fexit: "fexit refused".into(),
                without_btf: None,
            }
        );
        assert_eq!(k.tried, ["fexit", "kprobes"]);
        // As good as fexit: no degraded sentence, an info line saying why not fexit.
        assert_eq!(got.degraded(), None);
        assert!(got.note().unwrap().contains("(fexit refused)"));
    }

    #[test]
    fn auto_with_neither_fexit_nor_kprobes_attaches_nothing_and_names_the_opt_in() {
        let mut k = Fake::taking(&["syscalls"]);
        let got = choose(UnixHookChoice::Auto, Ok(()), &mut k);
        // The syscall tracepoints are never tried unasked.
        assert_eq!(k.tried, ["fexit", "kprobes"]);
        assert_eq!(got.name(), "missing");
        let sentence = got.degraded().unwrap();
        assert_eq!(
            sentence,
            "Unix domain socket races are not detected on this kernel: neither fexit (fexit \
             refused) nor kprobes (kprobes refused) can be used, and --unix-hooks=syscalls is \
             not taken unasked: its syscall tracepoints put every syscall of every process on \
             the node on the kernel's slow path (about 35 % more CPU per syscall: 212 → 288 ns \
             per getppid in BENCHMARKS.md)"
        );
        assert!(!sentence.contains(". "), "one sentence: {sentence}");
    }

    #[test]
    fn auto_without_btf_skips_fexit_and_says_what_kprobes_then_miss() {
        let mut k = Fake::taking(EVERY);
        let got = choose(
            UnixHookChoice::Auto,
            Err("no /sys/kernel/btf/vmlinux"),
            &mut k,
        );
        assert_eq!(k.tried, ["kprobes"]);
        let sentence = got.degraded().unwrap();
        assert!(
            sentence.starts_with(
                "Unix sockets are seen through kprobes (no BTF offsets: no \
                 /sys/kernel/btf/vmlinux) without the kernel's struct offsets"
            ),
            "{sentence}"
        );
        assert!(sentence.contains("no listener"), "{sentence}");
        assert!(!sentence.contains(". "), "one sentence: {sentence}");
    }

    #[test]
    fn an_explicit_choice_is_honoured_and_nothing_else_is_tried() {
        let mut k = Fake::taking(EVERY);
        let got = choose(UnixHookChoice::Syscalls, Ok(()), &mut k);
        assert_eq!(k.tried, ["syscalls"]);
        assert_eq!(
            got,
            UnixCoverage::Syscalls {
                why_not_fexit: "--unix-hooks=syscalls".into()
            }
        );
        let mut k = Fake::taking(EVERY);
        let got = choose(UnixHookChoice::Kprobes, Ok(()), &mut k);
        assert_eq!(k.tried, ["kprobes"]);
        assert_eq!(got.name(), "kprobes");
        let mut k = Fake::taking(&[]);
        let got = choose(UnixHookChoice::Kprobes, Ok(()), &mut k);
        assert_eq!(k.tried, ["kprobes"]);
        assert_eq!(
            got.degraded().unwrap(),
            "Unix domain socket races are not detected on this kernel: kprobes cannot be \
             used (kprobes refused)"
        );
        let mut k = Fake::taking(EVERY);
        assert_eq!(
            choose(UnixHookChoice::Off, Ok(()), &mut k).name(),
            "missing"
        );
        assert!(k.tried.is_empty());
    }

    #[test]
    fn explicit_syscalls_without_btf_say_what_is_missing() {
        let mut k = Fake::taking(EVERY);
        let got = choose(
            UnixHookChoice::Syscalls,
            Err("no /sys/kernel/btf/vmlinux"),
            &mut k,
        );
        let sentence = got.degraded().unwrap();
        assert!(
            sentence
                .contains("(--unix-hooks=syscalls; no BTF offsets: no /sys/kernel/btf/vmlinux)"),
            "{sentence}"
        );
    }

    /// The kprobes' registers agree with this kernel's own `struct pt_regs`.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn kprobe_registers_match_this_kernels_pt_regs() {
        let Ok(data) = std::fs::read(crate::kernel::btf::VMLINUX) else {
            eprintln!("skipped: this kernel has no BTF");
            return;
        };
        let btf = Btf::parse(&data).unwrap();
        for (n, reg) in ["di", "si", "dx"].into_iter().enumerate() {
            assert_eq!(
                btf.offset("pt_regs", reg).unwrap(),
                KPROBE_REGS.args[n],
                "{reg}"
            );
        }
        assert_eq!(btf.offset("pt_regs", "ax").unwrap(), KPROBE_REGS.ret);
    }

    /// Every kprobe the agent attaches is a program of the object, and the table of
    /// calls in progress is a bounded LRU.
    #[test]
    fn the_kprobes_are_in_the_object_and_their_table_is_bounded() {
        let object = aya_obj::Object::parse(crate::kernel::probes::OBJECT).unwrap();
        for (program, _) in KPROBES {
            assert!(object.programs.contains_key(program), "{program}");
        }
        let map = &object.maps["UNIX_KPROBE_CALLS"];
        assert_eq!(
            map.max_entries(),
            sidecar_race_ebpf::unix::UNIX_KPROBE_CALLS
        );
        assert_eq!(
            map.map_type(),
            aya_obj::generated::bpf_map_type::BPF_MAP_TYPE_LRU_HASH as u32
        );
    }
}
