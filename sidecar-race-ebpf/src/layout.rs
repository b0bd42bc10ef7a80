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
    pub dport: u16,
    pub family: u16,
    pub protocol: u16,
    pub saddr_v6: u16,
    pub daddr_v6: u16,
    pub _pad: [u16; 3],
}

/// `tcp:tcp_receive_reset`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpReceiveReset {
    pub skaddr: u16,
    pub sport: u16,
    pub family: u16,
    pub saddr_v6: u16,
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
    pub _pad: u32,
}

const _: () = assert!(core::mem::size_of::<Config>() == 64);

const M: u16 = MISSING;

impl Config {
    /// Every field missing: programs do nothing until the agent fills this in.
    pub const UNSET: Config = Config {
        set_state: InetSockSetState {
            skaddr: M,
            oldstate: M,
            newstate: M,
            sport: M,
            dport: M,
            family: M,
            protocol: M,
            saddr_v6: M,
            daddr_v6: M,
            _pad: [0; 3],
        },
        receive_reset: TcpReceiveReset {
            skaddr: M,
            sport: M,
            family: M,
            saddr_v6: M,
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
        _pad: 0,
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
