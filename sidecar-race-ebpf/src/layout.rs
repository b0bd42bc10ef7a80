//! Where the programs find tracepoint fields. The agent fills this from tracefs
//! `format` files at load time (Rust eBPF has no CO-RE), so no offset is compiled in.

/// Marks a field the running kernel does not have.
pub const MISSING: u16 = u16::MAX;

/// `sock:inet_sock_set_state`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InetSockSetState {
    pub skaddr: u16,
    pub oldstate: u16,
    pub newstate: u16,
    pub sport: u16,
    pub family: u16,
    pub protocol: u16,
    pub saddr_v6: u16,
    /// The destination, recorded with a connect's owner (see `abi::destination_tag`).
    pub dport: u16,
    pub daddr_v6: u16,
    pub _pad: u16,
}

/// `tcp:tcp_receive_reset`. A refused connect's both ends come from this record, so
/// nothing about the destination is read when a connect starts.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpReceiveReset {
    pub skaddr: u16,
    pub sport: u16,
    pub dport: u16,
    /// `MISSING` before 5.6: the family then follows from the v4-mapped address.
    pub family: u16,
    pub saddr_v6: u16,
    pub daddr_v6: u16,
}

/// `tcp:tcp_send_reset` in its socket-less shape (kernel 6.10+): `saddr`/`daddr` are
/// `sockaddr_in`/`sockaddr_in6` of the reset, i.e. the refusing end and the client.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpSendReset {
    pub skaddr: u16,
    pub saddr: u16,
    pub daddr: u16,
    pub _pad: u16,
}

/// `cgroup:cgroup_mkdir` and `cgroup:cgroup_rmdir` (same layout).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupDir {
    pub root: u16,
    pub level: u16,
    pub id: u16,
    /// `__data_loc char[] path`: a u32 whose low half is the offset, high half the length.
    pub path_loc: u16,
}

/// Byte offsets of socket fields from a `struct sock *`, read by the agent from the
/// kernel's BTF, for the BTF tracepoint (`tp_btf`) on `inet_sock_set_state`, whose
/// arguments are the socket and the two states rather than a filled record.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SockFields {
    /// `sk_protocol` (u16).
    pub protocol: u16,
    /// `skc_family` (u16).
    pub family: u16,
    /// `skc_num` (host order): the local port, as `inet_sport` holds it in network
    /// order; read from `struct sock` itself, as a direct load must be.
    pub sport: u16,
    /// `skc_rcv_saddr` (4 bytes): the local IPv4 address, as `inet_saddr` holds it.
    pub saddr: u16,
    /// `skc_v6_rcv_saddr` (16 bytes).
    pub v6_saddr: u16,
    /// `skc_state` (u8): whether a socket that receives a reset is still connecting.
    pub state: u16,
    /// `skc_dport` (network order), `skc_daddr` (4 bytes), `skc_v6_daddr` (16 bytes):
    /// a connect's destination, recorded with its owner.
    pub dport: u16,
    pub daddr: u16,
    pub v6_daddr: u16,
    pub _pad: [u16; 3],
}

/// Byte offsets for finding the cgroup ancestors of a socket or of the current task,
/// read by the agent from the kernel's BTF; the walk that charges a container's
/// budget (see `programs/charge.rs`). Unset (`MISSING`) without BTF: each cgroup is
/// then charged for itself.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupFields {
    /// `sock.sk_cgrp_data`: its first 8 bytes are the socket's `struct cgroup *`
    /// (5.15+), or on older kernels that pointer when its two low bits are clear.
    pub sk_cgrp: u16,
    /// `task_struct.cgroups` (`struct css_set *`).
    pub task_cgroups: u16,
    /// `css_set.dfl_cgrp` (`struct cgroup *`, the task's cgroup v2).
    pub dfl_cgrp: u16,
    /// `cgroup.level` (int; the root is level 0).
    pub level: u16,
    /// `cgroup.ancestors` (6.0+: `struct cgroup *[]`) or `cgroup.ancestor_ids` (older:
    /// `u64[]`), indexed by level, see `ancestors_are_ids`.
    pub ancestors: u16,
    /// `cgroup.kn` (`struct kernfs_node *`).
    pub kn: u16,
    /// `kernfs_node.id` (u64: the cgroup id).
    pub kn_id: u16,
    /// 1 when `ancestors` is `ancestor_ids` (ids), 0 when it holds pointers.
    pub ancestors_are_ids: u16,
    /// `cgroup.root` (`struct cgroup_root *`) and `cgroup_root.hierarchy_id` (int):
    /// which hierarchy a cgroup the BTF tracepoints are given belongs to.
    pub root: u16,
    pub hierarchy_id: u16,
    pub _pad: [u16; 2],
}

impl CgroupFields {
    pub const UNSET: CgroupFields = CgroupFields {
        sk_cgrp: MISSING,
        task_cgroups: MISSING,
        dfl_cgrp: MISSING,
        level: MISSING,
        ancestors: MISSING,
        kn: MISSING,
        kn_id: MISSING,
        ancestors_are_ids: 0,
        root: MISSING,
        hierarchy_id: MISSING,
        _pad: [0; 2],
    };
}

/// A port the kernel keeps in network order (`skc_dport`, `inet_sport`), loaded as a
/// `u16` on a target of the given byte order, in host order. On a big-endian target
/// the load already is the number; on a little-endian one its two bytes are swapped.
#[inline(always)]
pub const fn port_to_host(loaded: u16, big_endian_target: bool) -> u16 {
    if big_endian_target {
        loaded
    } else {
        loaded.swap_bytes()
    }
}

/// Byte offsets in `struct task_struct`, read by the agent from the kernel's BTF: a
/// task's process name is its thread-group leader's `comm`. Its own global (`TASK`),
/// apart from [`Config`]: without BTF the programs fall back to the thread's `comm`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskFields {
    /// `group_leader` (`struct task_struct *`).
    pub group_leader: u16,
    /// `comm` (`char[TASK_COMM_LEN]`).
    pub comm: u16,
}

impl TaskFields {
    pub const UNSET: TaskFields = TaskFields {
        group_leader: MISSING,
        comm: MISSING,
    };
}

/// Everything the programs need to know about this kernel, as a read-only global.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    pub set_state: InetSockSetState,
    pub receive_reset: TcpReceiveReset,
    pub send_reset: TcpSendReset,
    pub cgroup_mkdir: CgroupDir,
    pub cgroup_rmdir: CgroupDir,
    /// Hierarchy id of cgroup v2 in `cgroup_mkdir`'s `root` field (0: the default hierarchy).
    pub cgroup2_hierarchy: i32,
    /// Non-zero: kernel memory is read by direct loads through the BTF-typed pointers
    /// the BTF tracepoints get, never with `bpf_probe_read_kernel`, which a kernel
    /// locked down for confidentiality refuses. Only the BTF tracepoints are loaded
    /// then, and what they cannot read that way is left out (see `programs/`).
    pub direct_reads: u32,
    /// The per-cgroup refusal budget, see [`RefusalBudget`].
    pub refusal_budget: RefusalBudget,
    /// For the `tp_btf` program; unset when it is not used.
    pub sock: SockFields,
    /// The budget of control records (listeners, cgroups) per container.
    pub control_budget: RefusalBudget,
    /// For charging a container rather than each of its sub-cgroups.
    pub cgroup: CgroupFields,
}

// No padding the compiler adds: every field ends where the next one's alignment starts.
const _: () = assert!(core::mem::size_of::<Config>() == 144);
const _: () = assert!(core::mem::offset_of!(Config, refusal_budget) == 64);
const _: () = assert!(core::mem::offset_of!(Config, control_budget) == 104);

/// Control records (listener up/down, cgroup made/removed) a container may send in
/// one burst: a pod's start makes a handful.
pub const CONTROL_BURST: u32 = 200;
/// Control records a container may send per second once its burst is spent.
pub const CONTROL_REFILL_PER_SECOND: u32 = 100;

/// Low bits of a stored budget value that hold a tag of the charged cgroup id
/// instead of time (65 µs of a timestamp in ns: nothing next to a budget's interval).
/// A compare-and-exchange then only lands on an entry that still belongs to that
/// cgroup and holds the value read: an LRU entry recycled for another cgroup under
/// eviction pressure has another tag.
pub const BUDGET_TAG_MASK: u64 = 0xffff;

/// The tag of `cgroup_id` in its budget entry (the id folded to 16 bits).
#[inline(always)]
pub const fn budget_tag(cgroup_id: u64) -> u64 {
    (cgroup_id ^ (cgroup_id >> 16) ^ (cgroup_id >> 32) ^ (cgroup_id >> 48)) & BUDGET_TAG_MASK
}

/// A budget entry: the theoretical arrival time, its low bits replaced by the tag.
#[inline(always)]
pub const fn budget_entry(tat: u64, cgroup_id: u64) -> u64 {
    (tat & !BUDGET_TAG_MASK) | budget_tag(cgroup_id)
}

impl RefusalBudget {
    /// The entry to store after a record of `cgroup_id` at `now`, given what its entry
    /// holds (`None`: over budget). An entry carrying another cgroup's tag (a write
    /// through a recycled LRU entry) counts as a fresh budget, so it never holds this
    /// cgroup back. Shared by the kernel programs and the unit tests.
    #[inline(always)]
    pub const fn charge(&self, entry: u64, cgroup_id: u64, now: u64) -> Option<u64> {
        let tat = match budget_tat(entry, cgroup_id) {
            Some(t) => t,
            None => 0,
        };
        match self.admit(tat, now) {
            Some(next) => Some(budget_entry(next, cgroup_id)),
            None => None,
        }
    }
}

/// The theoretical arrival time in an entry of `cgroup_id`; `None` when the entry
/// carries another cgroup's tag.
#[inline(always)]
pub const fn budget_tat(entry: u64, cgroup_id: u64) -> Option<u64> {
    if entry & BUDGET_TAG_MASK == budget_tag(cgroup_id) {
        Some(entry & !BUDGET_TAG_MASK)
    } else {
        None
    }
}

/// Refusal records a cgroup (a container) may send in one burst, by default.
pub const REFUSAL_BURST: u32 = 200;
/// Refusal records a cgroup may send per second once its burst is spent, by default.
pub const REFUSAL_REFILL_PER_SECOND: u32 = 100;

/// A token bucket per cgroup for refusal records, as a GCRA: one timestamp per
/// cgroup (its "theoretical arrival time"). Refusals beyond it are counted per cgroup
/// in the kernel instead of sent, so one container cannot fill the ring for the rest.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefusalBudget {
    /// Nanoseconds one record costs (1 s / refill rate); 0 turns the budget off.
    pub interval_ns: u64,
    /// How far ahead of now a cgroup may run: (burst - 1) intervals.
    pub tolerance_ns: u64,
}

impl RefusalBudget {
    pub const OFF: RefusalBudget = RefusalBudget {
        interval_ns: 0,
        tolerance_ns: 0,
    };

    /// `burst` records at once, then `per_second`; a burst of 0 is no budget at all.
    pub const fn new(burst: u32, per_second: u32) -> RefusalBudget {
        if burst == 0 || per_second == 0 {
            return RefusalBudget::OFF;
        }
        let interval_ns = 1_000_000_000 / per_second as u64;
        RefusalBudget {
            interval_ns,
            tolerance_ns: (burst as u64 - 1) * interval_ns,
        }
    }

    /// Whether a record at `now` fits, given the cgroup's `tat` (0: none yet), and the
    /// `tat` to store after it. Shared by the kernel programs and the unit tests.
    #[inline(always)]
    pub const fn admit(&self, tat: u64, now: u64) -> Option<u64> {
        if self.interval_ns == 0 {
            return Some(0);
        }
        if tat > now.saturating_add(self.tolerance_ns) {
            return None;
        }
        let base = if tat > now { tat } else { now };
        Some(base + self.interval_ns)
    }
}

const M: u16 = MISSING;

impl Config {
    /// Every field missing: programs do nothing until the agent fills this in.
    pub const UNSET: Config = Config {
        set_state: InetSockSetState {
            skaddr: M,
            oldstate: M,
            newstate: M,
            sport: M,
            family: M,
            protocol: M,
            saddr_v6: M,
            dport: M,
            daddr_v6: M,
            _pad: 0,
        },
        receive_reset: TcpReceiveReset {
            skaddr: M,
            sport: M,
            dport: M,
            family: M,
            saddr_v6: M,
            daddr_v6: M,
        },
        send_reset: TcpSendReset {
            skaddr: M,
            saddr: M,
            daddr: M,
            _pad: 0,
        },
        cgroup_mkdir: CgroupDir::UNSET,
        cgroup_rmdir: CgroupDir::UNSET,
        cgroup2_hierarchy: 0,
        direct_reads: 0,
        refusal_budget: RefusalBudget::OFF,
        sock: SockFields {
            protocol: M,
            family: M,
            sport: M,
            saddr: M,
            v6_saddr: M,
            state: M,
            dport: M,
            daddr: M,
            v6_daddr: M,
            _pad: [0; 3],
        },
        control_budget: RefusalBudget::OFF,
        cgroup: CgroupFields::UNSET,
    };
}

impl CgroupDir {
    pub const UNSET: CgroupDir = CgroupDir {
        root: M,
        level: M,
        id: M,
        path_loc: M,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn a_burst_passes_then_the_refill_rate() {
        let b = RefusalBudget::new(3, 10);
        let (mut tat, now) = (0, 5 * S);
        let mut admitted = 0;
        for _ in 0..10 {
            if let Some(t) = b.admit(tat, now) {
                tat = t;
                admitted += 1;
            }
        }
        assert_eq!(admitted, 3, "the burst, all at once");
        assert_eq!(b.admit(tat, now + S / 10 - 1), None);
        assert!(b.admit(tat, now + S / 10).is_some(), "one more per 100 ms");
        // A second later the whole burst is back, not more.
        let later = now + 2 * S;
        let n = (0..10)
            .scan(tat, |t, _| {
                Some(b.admit(*t, later).inspect(|next| *t = *next))
            })
            .flatten()
            .count();
        assert_eq!(n, 3);
    }

    #[test]
    fn a_budget_entry_keeps_its_time_and_names_its_cgroup() {
        let (a, b) = (4_242u64, 4_243u64);
        let e = budget_entry(7 * S + 123_456, a);
        let tat = budget_tat(e, a).expect("its own entry");
        assert!(tat <= 7 * S + 123_456 && 7 * S + 123_456 - tat <= BUDGET_TAG_MASK);
        assert_eq!(budget_tat(e, b), None, "a recycled entry of another cgroup");
        // Ids that differ only in high bits still differ in their tags.
        assert_ne!(budget_tag(1), budget_tag(1 + (1 << 40)));
    }

    #[test]
    fn ports_in_network_order_come_out_in_host_order_on_either_byte_order() {
        // Port 15001 (0x3a99) as the kernel stores it: bytes 0x3a, 0x99.
        let stored = 15001u16.to_be_bytes();
        let on_little_endian = u16::from_le_bytes(stored);
        let on_big_endian = u16::from_be_bytes(stored);
        assert_eq!(on_little_endian, 39226, "what a missing swap shows");
        assert_eq!(port_to_host(on_little_endian, false), 15001);
        assert_eq!(port_to_host(on_big_endian, true), 15001);
        for port in [0u16, 1, 80, 255, 256, 15001, 65535] {
            let b = port.to_be_bytes();
            assert_eq!(port_to_host(u16::from_le_bytes(b), false), port);
            assert_eq!(port_to_host(u16::from_be_bytes(b), true), port);
        }
    }

    #[test]
    fn a_stale_write_of_another_cgroup_never_holds_a_cgroup_back() {
        let b = RefusalBudget::new(3, 10);
        let (flooder, quiet) = (77u64, 4_242u64);
        let now = 5 * S;
        // The flooder's entry, far ahead of now after its burst.
        let mut flooder_entry = budget_entry(0, flooder);
        for _ in 0..3 {
            flooder_entry = b.charge(flooder_entry, flooder, now).unwrap();
        }
        assert_eq!(b.charge(flooder_entry, flooder, now), None, "over budget");
        // That value written through a stale pointer into the quiet cgroup's entry:
        // the quiet cgroup still gets its whole burst.
        let mut entry = flooder_entry;
        for i in 0..3 {
            entry = b
                .charge(entry, quiet, now)
                .unwrap_or_else(|| panic!("record {i} held back by a foreign time"));
        }
        assert_eq!(
            b.charge(entry, quiet, now),
            None,
            "then its own budget applies"
        );
    }

    #[test]
    fn a_burst_of_zero_is_no_budget() {
        let b = RefusalBudget::new(0, 100);
        assert_eq!(b, RefusalBudget::OFF);
        assert!((0..1000).all(|i| b.admit(0, i).is_some()));
    }
}
