//! TCP listener hooks, and with them whether the state-transition tracepoint is
//! needed at all. The agent needs three TCP facts: a connect was refused (the reset
//! hooks, always), a socket started listening, a listener closed. `auto` takes the
//! last two at `inet_csk_listen_start` (`fexit`) and `inet_csk_listen_stop` (`fentry`)
//! where the kernel allows, else by kprobes on the same functions: then no program of
//! ours runs on a connection that succeeds, and a refusal's owner is read from its
//! socket. Only where neither can be attached (or the socket cannot be read) does
//! `inet_sock_set_state` serve, which runs on every TCP state change of the node, and
//! one `degraded:` sentence says so with its cost.

use aya::{Btf as AyaBtf, Ebpf};

use super::function_hooks::{attach_kprobes, attach_trampolines};

/// Which hooks see TCP listeners (`--tcp-hooks`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TcpHookChoice {
    /// `fexit`/`fentry` where the kernel allows them, else kprobes, else the
    /// state-transition tracepoint.
    #[default]
    Auto,
    /// `fexit`/`fentry` on listen start and stop (else the tracepoint, said so).
    Fentry,
    /// Kprobes on listen start and stop, even where `fentry` works (else the
    /// tracepoint, said so).
    Kprobes,
    /// The `inet_sock_set_state` tracepoint, as before 0.9: a program on every TCP
    /// state change of the node.
    SetState,
}

/// What the fallback costs, measured on a test host (BENCHMARKS.md: program runs per
/// successful connect, and a connect loop bare and beside the agent).
pub const SET_STATE_COST: &str = "about 10 program runs on every TCP connection of the \
     node, refused or not: 0.97 of a bare connect's CPU in BENCHMARKS.md";

/// How the agent sees TCP listeners, and so what a successful connect costs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TcpCoverage {
    /// `fexit` on listen start, `fentry` on listen stop: nothing on a connection.
    Fentry,
    /// Kprobes on the same functions (and why not `fentry`): nothing on a connection.
    Kprobes { why_not_fentry: String },
    /// `inet_sock_set_state` (and why): programs on every state change.
    SetState { why: String },
}

impl TcpCoverage {
    /// Short name for logs and status (`fentry`, `kprobes`, `set_state`).
    pub fn name(&self) -> &'static str {
        match self {
            TcpCoverage::Fentry => "fentry",
            TcpCoverage::Kprobes { .. } => "kprobes",
            TcpCoverage::SetState { .. } => "set_state",
        }
    }

    /// Whether `inet_sock_set_state` must be attached: it then sees the listeners and
    /// records each connect's owner.
    pub fn needs_set_state(&self) -> bool {
        matches!(self, TcpCoverage::SetState { .. })
    }

    /// One sentence for the operator when the fallback runs.
    pub fn degraded(&self) -> Option<String> {
        match self {
            TcpCoverage::SetState { why } => Some(format!(
                "TCP listeners and connects are seen through the inet_sock_set_state \
                 tracepoint ({why}), which costs {SET_STATE_COST}"
            )),
            _ => None,
        }
    }

    /// Why the hooks are kprobes, where they are as good: for an info line.
    pub fn note(&self) -> Option<String> {
        match self {
            TcpCoverage::Kprobes { why_not_fentry } => Some(format!(
                "TCP listeners are seen through kprobes, not fentry ({why_not_fentry}): a \
                 listen whose return no kretprobe instance could take is not seen"
            )),
            _ => None,
        }
    }
}

/// The sets of hooks, each attached all or none, in the order [`choose`] tries them.
pub trait TcpHookSets {
    fn fentry(&mut self) -> Result<(), String>;
    fn kprobes(&mut self) -> Result<(), String>;
}

/// Attaches the best set `choice` allows. `socket` says whether a socket's state,
/// local end and cgroup can be read (both sets read them; without them, the tracepoint).
pub fn choose(
    choice: TcpHookChoice,
    socket: Result<(), String>,
    sets: &mut impl TcpHookSets,
) -> TcpCoverage {
    let cannot = |asked: &str, why: String| TcpCoverage::SetState {
        why: format!("--tcp-hooks={asked} cannot be used: {why}"),
    };
    match choice {
        TcpHookChoice::SetState => TcpCoverage::SetState {
            why: "--tcp-hooks=set-state".into(),
        },
        TcpHookChoice::Fentry => match socket.and_then(|()| sets.fentry()) {
            Ok(()) => TcpCoverage::Fentry,
            Err(why) => cannot("fentry", why),
        },
        TcpHookChoice::Kprobes => match socket.and_then(|()| sets.kprobes()) {
            Ok(()) => TcpCoverage::Kprobes {
                why_not_fentry: "--tcp-hooks=kprobes".into(),
            },
            Err(why) => cannot("kprobes", why),
        },
        TcpHookChoice::Auto => {
            if let Err(why) = socket {
                return TcpCoverage::SetState { why };
            }
            let why_not_fentry = match sets.fentry() {
                Ok(()) => return TcpCoverage::Fentry,
                Err(why) => why,
            };
            match sets.kprobes() {
                Ok(()) => TcpCoverage::Kprobes { why_not_fentry },
                Err(why_not_kprobes) => TcpCoverage::SetState {
                    why: format!(
                        "neither fentry ({why_not_fentry}) nor kprobes ({why_not_kprobes}) \
                         can be used"
                    ),
                },
            }
        }
    }
}

/// (program, kernel function): listen start at its return, listen stop at its entry.
const FEXIT: (&str, &str) = ("tcp_listen_start", "inet_csk_listen_start");
const FENTRY: (&str, &str) = ("tcp_listen_stop", "inet_csk_listen_stop");
/// (program, kernel function) of the kprobes: the entry before its return.
const KPROBES: [(&str, &str); 3] = [
    ("tcp_kprobe_listen_start", "inet_csk_listen_start"),
    ("tcp_kretprobe_listen_start", "inet_csk_listen_start"),
    ("tcp_kprobe_listen_stop", "inet_csk_listen_stop"),
];

/// This kernel's hooks, as [`choose`] tries them.
struct Kernel<'a> {
    ebpf: &'a mut Ebpf,
    btf: &'a Result<AyaBtf, String>,
}

impl TcpHookSets for Kernel<'_> {
    fn fentry(&mut self) -> Result<(), String> {
        attach_trampolines(self.ebpf, self.btf, &[FEXIT], &[FENTRY])
    }

    fn kprobes(&mut self) -> Result<(), String> {
        attach_kprobes(self.ebpf, &KPROBES)
    }
}

/// Attaches the best hooks `choice` allows; `socket` as in [`choose`].
pub fn attach(
    ebpf: &mut Ebpf,
    choice: TcpHookChoice,
    socket: Result<(), String>,
    btf: &Result<AyaBtf, String>,
) -> TcpCoverage {
    choose(choice, socket, &mut Kernel { ebpf, btf })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::function_hooks::Fake;

    impl TcpHookSets for Fake {
        fn fentry(&mut self) -> Result<(), String> {
            self.try_set("fentry")
        }
        fn kprobes(&mut self) -> Result<(), String> {
            self.try_set("kprobes")
        }
    }

    const EVERY: &[&str] = &["fentry", "kprobes"];

    #[test]
    fn auto_takes_fentry_where_the_kernel_allows_it_and_then_needs_no_tracepoint() {
        let mut k = Fake::taking(EVERY);
        let got = choose(TcpHookChoice::Auto, Ok(()), &mut k);
        assert_eq!(got, TcpCoverage::Fentry);
        assert_eq!(k.tried, ["fentry"]);
        assert!(!got.needs_set_state());
        assert_eq!((got.degraded(), got.note()), (None, None));
    }

    #[test]
    fn auto_with_fentry_refused_takes_kprobes_and_notes_why() {
        let mut k = Fake::taking(&["kprobes"]);
        let got = choose(TcpHookChoice::Auto, Ok(()), &mut k);
        assert_eq!(k.tried, ["fentry", "kprobes"]);
        assert_eq!(got.name(), "kprobes");
        assert!(!got.needs_set_state());
        assert_eq!(got.degraded(), None);
        assert!(got.note().unwrap().contains("(fentry refused)"));
    }

    #[test]
    fn auto_with_neither_falls_back_to_the_tracepoint_in_one_sentence_with_its_cost() {
        let mut k = Fake::taking(&[]);
        let got = choose(TcpHookChoice::Auto, Ok(()), &mut k);
        assert_eq!(k.tried, ["fentry", "kprobes"]);
        assert!(got.needs_set_state());
        let sentence = got.degraded().unwrap();
        assert_eq!(
            sentence,
            "TCP listeners and connects are seen through the inet_sock_set_state tracepoint \
             (neither fentry (fentry refused) nor kprobes (kprobes refused) can be used), \
             which costs about 10 program runs on every TCP connection of the node, refused \
             or not: 0.97 of a bare connect's CPU in BENCHMARKS.md"
        );
        assert!(!sentence.contains(". "), "one sentence: {sentence}");
    }

    #[test]
    fn a_socket_that_cannot_be_read_tries_nothing_and_says_why() {
        let mut k = Fake::taking(EVERY);
        let got = choose(
            TcpHookChoice::Auto,
            Err("the kernel is locked down for confidentiality".into()),
            &mut k,
        );
        assert!(k.tried.is_empty());
        assert!(
            got.degraded()
                .unwrap()
                .contains("tracepoint (the kernel is locked down for confidentiality)"),
            "{got:?}"
        );
    }

    #[test]
    fn an_explicit_choice_is_honoured_and_its_failure_named() {
        let mut k = Fake::taking(EVERY);
        let got = choose(TcpHookChoice::Kprobes, Ok(()), &mut k);
        assert_eq!(k.tried, ["kprobes"]);
        assert_eq!(
            got,
            TcpCoverage::Kprobes {
                why_not_fentry: "--tcp-hooks=kprobes".into()
            }
        );
        let mut k = Fake::taking(&[]);
        let got = choose(TcpHookChoice::Fentry, Ok(()), &mut k);
        assert_eq!(k.tried, ["fentry"]);
        assert!(
            got.degraded()
                .unwrap()
                .contains("(--tcp-hooks=fentry cannot be used: fentry refused)"),
            "{got:?}"
        );
        let mut k = Fake::taking(EVERY);
        let got = choose(TcpHookChoice::SetState, Ok(()), &mut k);
        assert!(k.tried.is_empty());
        assert!(got.needs_set_state());
    }

    /// The programs the sets attach are in the object, in the forms each kernel loads.
    #[test]
    fn every_hook_names_a_program_of_the_object() {
        let object =
            aya_obj::Object::parse(crate::kernel::probes::OBJECT).expect("the object parses");
        for (program, _) in [FEXIT, FENTRY].into_iter().chain(KPROBES) {
            assert!(object.programs.contains_key(program), "{program}");
        }
    }
}
