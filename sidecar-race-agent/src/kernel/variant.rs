//! Which form of a program this kernel gets. A program that charges a budget is in the
//! object twice: `name` updates the budget by compare-and-exchange (5.12+), and
//! `name_plain` writes it plainly for older kernels, whose verifiers refuse that
//! instruction even where it is never reached (SECURITY.md: the race that is left).

use std::sync::OnceLock;

use aya::{Ebpf, programs::Program};

/// What the plain form's name adds.
const PLAIN: &str = "_plain";

/// Whether this kernel has `BPF_ATOMIC` compare-and-exchange (5.12+). A kernel whose
/// version cannot be read is taken not to: budgets are then written plainly.
fn has_cmpxchg() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        aya::util::KernelVersion::current()
            .is_ok_and(|v| v >= aya::util::KernelVersion::new(5, 12, 0))
    })
}

/// The program `name` in the form this kernel loads: its plain form where the kernel
/// has no compare-and-exchange and the object has one.
pub(super) fn program_mut<'a>(ebpf: &'a mut Ebpf, name: &str) -> Option<&'a mut Program> {
    match plain_name(name, has_cmpxchg()) {
        Some(plain) if ebpf.program(&plain).is_some() => ebpf.program_mut(&plain),
        _ => ebpf.program_mut(name),
    }
}

/// The plain form's name, where the kernel needs it.
fn plain_name(name: &str, has_cmpxchg: bool) -> Option<String> {
    (!has_cmpxchg).then(|| format!("{name}{PLAIN}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every program that charges a budget has a plain form in the object, so a kernel
    /// before 5.12 never gets a program its verifier refuses.
    #[test]
    fn every_program_that_charges_a_budget_has_its_plain_form() {
        let ebpf =
            aya_obj::Object::parse(crate::kernel::probes::OBJECT).expect("the object parses");
        let names: std::collections::BTreeSet<&str> =
            ebpf.programs.keys().map(String::as_str).collect();
        let charging = [
            "tcp_receive_reset",
            "tcp_receive_reset_btf",
            "inet_sock_set_state",
            "inet_sock_set_state_btf",
            "cgroup_mkdir",
            "cgroup_rmdir",
            "cgroup_mkdir_btf",
            "cgroup_rmdir_btf",
            "unix_stream_connect",
            "unix_dgram_connect",
            "unix_dgram_sendmsg",
            "unix_listen",
            "unix_release",
            "unix_kretprobe_connect",
            "unix_kretprobe_sendmsg",
            "unix_kretprobe_listen",
            "unix_kprobe_release",
            "unix_sys_exit",
            "unix_sys_exit_listen",
            "udp_kfree_skb",
            "udp_kfree_skb_btf",
            "udp_icmp_send",
            "udp_icmp_send_btf",
            "unix_sys_exit_bind",
            "tcp_listen_start",
            "tcp_listen_stop",
            "tcp_kretprobe_listen_start",
            "tcp_kprobe_listen_stop",
        ];
        for name in charging {
            assert!(names.contains(name), "{name} in the object");
            let plain = plain_name(name, false).expect("a plain name");
            assert!(names.contains(plain.as_str()), "{plain} in the object");
        }
        assert_eq!(
            plain_name("cgroup_mkdir", true),
            None,
            "5.12+: the form with it"
        );
    }
}
