//! Which hook sees UDP refusals (`--udp-hook`). Two can: `icmp:icmp_send`, which runs
//! only when the kernel answers a datagram with an ICMP error (IPv4 only; Debian's 6.1.192
//! and 6.12 have it, 5.10 not), and
//! `skb:kfree_skb` with the drop reason `NO_SOCKET` (5.17+, both families), which runs
//! on every skb the node drops. Never both: each refusal would count twice.

/// `--udp-hook`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum UdpHookChoice {
    /// `icmp_send` where the kernel has it, so nothing of ours runs on a drop: IPv6
    /// refusals are then not seen (one `degraded:` line says so). Else `kfree_skb`.
    #[default]
    Auto,
    /// `icmp_send` only: IPv4, nothing on drops; none where the kernel lacks it.
    IcmpSend,
    /// `kfree_skb` only: both families, one program run per dropped skb.
    KfreeSkb,
    /// No UDP hook.
    Off,
}

/// What `kfree_skb` costs a node, measured on a test host (BENCHMARKS.md's drop storm:
/// a loop of non-UDP drops, bare / beside the agent).
pub const KFREE_SKB_COST: &str = "one program run per dropped skb of the node: 0.955 of bare on a storm of non-UDP drops in BENCHMARKS.md";

/// The hooks to try, in order, for `choice` on a kernel whose tracefs has `icmp_send`
/// (`icmp_usable`) and a `kfree_skb` with a drop reason (`kfree_usable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPlan {
    pub icmp_send: bool,
    /// `kfree_skb`, tried only when `icmp_send` is not attached.
    pub kfree_skb_if_no_icmp: bool,
}

pub fn plan(choice: UdpHookChoice, icmp_usable: bool, kfree_usable: bool) -> UdpPlan {
    match choice {
        UdpHookChoice::Auto => UdpPlan {
            icmp_send: icmp_usable,
            kfree_skb_if_no_icmp: kfree_usable,
        },
        UdpHookChoice::IcmpSend => UdpPlan {
            icmp_send: icmp_usable,
            kfree_skb_if_no_icmp: false,
        },
        UdpHookChoice::KfreeSkb => UdpPlan {
            icmp_send: false,
            kfree_skb_if_no_icmp: kfree_usable,
        },
        UdpHookChoice::Off => UdpPlan {
            icmp_send: false,
            kfree_skb_if_no_icmp: false,
        },
    }
}

/// Why `kfree_skb` was left off while `icmp_send` sees IPv4's refusals: the reason of
/// its `degraded:` line, which names the opt-in and its cost.
pub fn kfree_skb_left_off(choice: UdpHookChoice) -> String {
    match choice {
        UdpHookChoice::IcmpSend => "--udp-hook=icmp-send".to_string(),
        _ => format!(
            "left off: icmp:icmp_send sees IPv4's UDP refusals and runs on nothing else, \
             while kfree_skb, the only hook that sees IPv6's, costs {KFREE_SKB_COST}; \
             --udp-hook=kfree-skb takes it for both families"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_takes_icmp_send_where_the_kernel_has_it_else_kfree_skb() {
        let p = plan(UdpHookChoice::Auto, true, true);
        assert!(
            p.icmp_send && p.kfree_skb_if_no_icmp,
            "kfree_skb only if icmp fails"
        );
        let p = plan(UdpHookChoice::Auto, false, true);
        assert!(!p.icmp_send && p.kfree_skb_if_no_icmp);
        let p = plan(UdpHookChoice::Auto, false, false);
        assert!(!p.icmp_send && !p.kfree_skb_if_no_icmp);
    }

    #[test]
    fn an_explicit_choice_tries_nothing_else() {
        let p = plan(UdpHookChoice::KfreeSkb, true, true);
        assert!(!p.icmp_send && p.kfree_skb_if_no_icmp);
        let p = plan(UdpHookChoice::IcmpSend, false, true);
        assert!(
            !p.icmp_send && !p.kfree_skb_if_no_icmp,
            "no icmp_send: nothing"
        );
        let p = plan(UdpHookChoice::Off, true, true);
        assert!(!p.icmp_send && !p.kfree_skb_if_no_icmp);
    }

    #[test]
    fn leaving_kfree_skb_off_names_the_opt_in_and_its_cost() {
        let why = kfree_skb_left_off(UdpHookChoice::Auto);
        assert!(why.contains("--udp-hook=kfree-skb"), "{why}");
        assert!(why.contains("IPv6"), "{why}");
        assert!(why.contains("0.955"), "{why}");
    }
}
