//! Records written to the ring buffer and the per-CPU counter slots.

use core::mem::size_of;

/// Length of a task's `comm` in the kernel (`TASK_COMM_LEN`).
pub const COMM_LEN: usize = 16;
/// Bytes reserved for a cgroup path; longer paths are truncated and flagged.
pub const CGROUP_PATH_LEN: usize = 512;

/// Event kinds: the first byte of every record.
pub mod kind {
    pub const REFUSED: u8 = 1;
    pub const LISTEN: u8 = 2;
    pub const LISTEN_CLOSED: u8 = 3;
    pub const CGROUP_CREATED: u8 = 4;
    pub const CGROUP_REMOVED: u8 = 5;
    /// A connect or send to a Unix socket path refused (`ENOENT`, `ECONNREFUSED`).
    pub const UNIX_REFUSED: u8 = 6;
    /// A Unix socket started listening (stream, seqpacket).
    pub const UNIX_LISTEN: u8 = 7;
    /// A listening Unix socket was released.
    pub const UNIX_LISTEN_CLOSED: u8 = 8;
    /// A UDP datagram dropped because no socket holds its port (a `SocketEvent`:
    /// `src` the sender's end, `dst` where it went; the owner is the task the drop
    /// happened in, see `programs/udp_refused.rs`).
    pub const UDP_REFUSED: u8 = 9;
    /// One past the largest kind: sizes counter arrays.
    pub const COUNT: u8 = 10;
}

/// Bits of [`Header::flags`].
pub mod flags {
    /// `SocketEvent::local_dst_*` holds where the local stack refused the SYN.
    pub const HAS_LOCAL_DST: u8 = 1 << 0;
    /// The owner was recorded when the socket started (connect/listen), not taken
    /// from the task that happened to run when the event fired.
    pub const OWNER_FROM_START: u8 = 1 << 1;
    /// `CgroupEvent::path` was cut at [`super::CGROUP_PATH_LEN`] bytes.
    pub const PATH_TRUNCATED: u8 = 1 << 2;
    /// `CgroupEvent::path` is empty: the kernel refused the string's read (lockdown
    /// for confidentiality); the agent names the cgroup by its id from cgroupfs.
    pub const PATH_UNREAD: u8 = 1 << 3;
    /// The refusal's owner was read from the socket (its cgroup; the process only when
    /// the task the reset ran in is in that cgroup, else pid 0 and no name): its
    /// connect was not recorded (the state-transition hook is not attached).
    pub const OWNER_FROM_SOCKET: u8 = 1 << 4;
}

/// Cgroups whose suppressed refusals the kernel counts one by one (the `SUPPRESSED`
/// map); the agent deletes a cgroup's entry once it has read its final value.
pub const SUPPRESSED_CGROUPS: u32 = 16_384;
/// Cgroups the refusal budget remembers (an LRU: a forgotten one starts afresh).
pub const BUDGET_CGROUPS: u32 = 16_384;
/// Bytes of the ring for control records (cgroups, listeners), which refusals never use.
pub const CONTROL_RING_BYTES: u32 = 256 * 1024;
/// Containers and pods the agent marks for the kernel to charge budgets to.
pub const CHARGE_POINTS: u32 = 16_384;
/// Levels of the cgroup tree the kernel looks at, from the top, for the container to
/// charge: a runtime puts containers far above this; how deep a container nests its
/// own cgroups does not matter.
pub const CHARGE_MAX_LEVEL: u32 = 16;

/// Address families as the kernel numbers them.
pub const AF_UNIX: u16 = 1;
pub const AF_INET: u16 = 2;
pub const AF_INET6: u16 = 10;

/// Per-CPU counter slots. `seen` counts every event the kernel wanted to send (for
/// `REFUSED` that is every refusal), `lost` those the full ring buffer could not take.
/// Refusals over their cgroup's budget are not sent: `SUPPRESSED` counts them all,
/// `SUPPRESSED_UNKEYED` those the per-cgroup map had no room for.
///
/// Control records over their container's budget are counted per kind
/// (`control_suppressed`). `CONNECTING_GONE` and `LISTENING_GONE` count sockets that
/// left SYN_SENT or LISTEN without an entry in their LRU table: evicted by a full
/// table (or made before the programs were loaded).
///
/// The other LRU tables cannot tell an eviction where it happens, so the kernel
/// counts the entries it makes (`*_MADE`) and, for `LOCAL_REFUSALS`, those it used
/// and removed (`LOCAL_REFUSALS_USED`); the agent subtracts the entries still in
/// the table, and what is left was evicted. The Unix kprobes' calls in progress are
/// told the same way (`UNIX_KPROBE_CALLS_MADE` at a call's entry, `_USED` at its
/// return): an entry whose return never came (the kernel's kretprobe instances were
/// all taken) is replaced by the thread's next call or evicted, and counted so.
pub mod counter {
    use super::kind;
    pub const SUPPRESSED: u32 = 2 * kind::COUNT as u32;
    pub const SUPPRESSED_UNKEYED: u32 = SUPPRESSED + 1;
    const CONTROL_SUPPRESSED: u32 = SUPPRESSED_UNKEYED + 1;
    /// Control records over budget that the per-cgroup map had no room for.
    pub const CONTROL_SUPPRESSED_UNKEYED: u32 = CONTROL_SUPPRESSED + kind::COUNT as u32;
    pub const CONNECTING_GONE: u32 = CONTROL_SUPPRESSED_UNKEYED + 1;
    pub const LISTENING_GONE: u32 = CONNECTING_GONE + 1;
    pub const BUDGET_MADE: u32 = LISTENING_GONE + 1;
    pub const CONTROL_BUDGET_MADE: u32 = BUDGET_MADE + 1;
    pub const LOCAL_REFUSALS_MADE: u32 = CONTROL_BUDGET_MADE + 1;
    pub const LOCAL_REFUSALS_USED: u32 = LOCAL_REFUSALS_MADE + 1;
    pub const UNIX_KPROBE_CALLS_MADE: u32 = LOCAL_REFUSALS_USED + 1;
    pub const UNIX_KPROBE_CALLS_USED: u32 = UNIX_KPROBE_CALLS_MADE + 1;
    /// Budget writes another CPU got in first (refusals, control records).
    pub const BUDGET_CONFLICTS: u32 = UNIX_KPROBE_CALLS_USED + 1;
    pub const CONTROL_BUDGET_CONFLICTS: u32 = BUDGET_CONFLICTS + 1;
    pub const SLOTS: u32 = CONTROL_BUDGET_CONFLICTS + 1;
    pub const fn seen(kind: u8) -> u32 {
        kind as u32
    }
    pub const fn lost(kind: u8) -> u32 {
        kind::COUNT as u32 + kind as u32
    }
    pub const fn control_suppressed(kind: u8) -> u32 {
        CONTROL_SUPPRESSED + kind as u32
    }
}

/// Common prefix of every record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub kind: u8,
    pub flags: u8,
    pub _pad: [u8; 6],
    /// `bpf_ktime_get_boot_ns()` when the event happened.
    pub ts_boot_ns: u64,
}

/// The task responsible for a socket, recorded in process context.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Owner {
    /// cgroup v2 id (the inode number of the cgroup's directory).
    pub cgroup_id: u64,
    /// Kernel pid (thread id).
    pub pid: u32,
    /// Thread-group id: the process id users see.
    pub tgid: u32,
    /// The process name: the thread-group leader's `comm` where the kernel's BTF
    /// gives its offsets, else the task's own.
    pub comm: [u8; COMM_LEN],
}

/// `refused`, `listen`, `listen_closed` and `udp_refused`. Addresses are 16 bytes: IPv6, or IPv4
/// mapped into IPv6 (`::ffff:a.b.c.d`) as the kernel's tracepoints store them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SocketEvent {
    pub header: Header,
    pub owner: Owner,
    /// Family of the socket (`AF_INET` / `AF_INET6`).
    pub family: u16,
    pub src_port: u16,
    pub dst_port: u16,
    pub local_dst_port: u16,
    pub src_addr: [u8; 16],
    pub dst_addr: [u8; 16],
    /// Where the local stack refused the SYN (after NAT, e.g. a REDIRECT to 127.0.0.1:15001).
    pub local_dst_addr: [u8; 16],
    /// For listeners: when the socket entered LISTEN (boot ns), if known. 0 when unknown,
    /// and for `refused` (a connect's start is not recorded: it would cost a clock read
    /// on every connect).
    pub start_boot_ns: u64,
}

/// `cgroup_created` and `cgroup_removed` on the cgroup v2 hierarchy.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupEvent {
    pub header: Header,
    pub cgroup_id: u64,
    pub level: u32,
    /// Bytes of `path` used, without the terminating NUL.
    pub path_len: u32,
    /// Relative to the cgroup2 mount, starting with `/`.
    pub path: [u8; CGROUP_PATH_LEN],
}

pub const HEADER_SIZE: usize = 16;
pub const OWNER_SIZE: usize = 32;
pub const SOCKET_EVENT_SIZE: usize = 112;
pub const CGROUP_EVENT_SIZE: usize = 32 + CGROUP_PATH_LEN;

const _: () = assert!(size_of::<Header>() == HEADER_SIZE);
const _: () = assert!(size_of::<Owner>() == OWNER_SIZE);
const _: () = assert!(size_of::<SocketEvent>() == SOCKET_EVENT_SIZE);
const _: () = assert!(size_of::<CgroupEvent>() == CGROUP_EVENT_SIZE);

/// Maps an IPv4 address into the IPv6 form the kernel's tracepoints use.
pub const fn v4_mapped(v4: [u8; 4]) -> [u8; 16] {
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, v4[0], v4[1], v4[2], v4[3],
    ]
}

/// A connect's destination (address in v6 form, host-order port) folded into 8 bytes:
/// recorded with the connect's owner and compared when a reset arrives, so an entry
/// left behind by an earlier socket at the same kernel address (its exit from SYN_SENT
/// never seen: a run the kernel skipped, a full table) cannot lend its owner to a
/// refusal on the way somewhere else. Never 0, which marks "not recorded".
#[inline(always)]
pub const fn destination_tag(addr: &[u8; 16], port: u16) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ port as u64;
    let mut i = 0;
    while i < 16 {
        h = (h ^ addr[i] as u64).wrapping_mul(PRIME);
        i += 1;
    }
    if h == 0 { 1 } else { h }
}

/// Whether an entry recorded for a connect to `recorded` is the one a reset on its way
/// to `seen` belongs to (a destination that could not be read, 0, is not compared).
#[inline(always)]
pub const fn same_connect(recorded: u64, seen: u64) -> bool {
    recorded == seen || recorded == 0 || seen == 0
}

/// Key of the map that remembers where the local stack refused a SYN, by the client end.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientEnd {
    pub addr: [u8; 16],
    pub port: u16,
    pub _pad: [u8; 6],
}
const _: () = assert!(size_of::<ClientEnd>() == 24);

#[cfg(test)]
mod tests {
    use super::*;

    const LOOPBACK: [u8; 16] = v4_mapped([127, 0, 0, 1]);

    #[test]
    fn a_destination_tag_tells_ports_and_addresses_apart() {
        let proxy = destination_tag(&LOOPBACK, 15001);
        assert_eq!(proxy, destination_tag(&LOOPBACK, 15001), "the same connect");
        assert_ne!(proxy, destination_tag(&LOOPBACK, 15002), "another port");
        assert_ne!(
            proxy,
            destination_tag(&v4_mapped([127, 0, 0, 2]), 15001),
            "another address"
        );
        let mut v6_loopback = [0; 16];
        v6_loopback[15] = 1;
        assert_ne!(
            proxy,
            destination_tag(&v6_loopback, 15001),
            "::1 is not 127.0.0.1"
        );
        assert_ne!(
            destination_tag(&[0; 16], 0),
            0,
            "0 stays free for unrecorded"
        );
    }

    #[test]
    fn an_entry_left_by_a_connect_elsewhere_lends_no_owner() {
        let (ours, stale) = (
            destination_tag(&LOOPBACK, 15001),
            destination_tag(&LOOPBACK, 8080),
        );
        assert!(same_connect(ours, ours));
        assert!(
            !same_connect(stale, ours),
            "a stale entry to another destination"
        );
        assert!(
            same_connect(0, ours),
            "a destination the program could not read"
        );
        assert!(
            same_connect(ours, 0),
            "a reset whose destination could not be read"
        );
    }
}
