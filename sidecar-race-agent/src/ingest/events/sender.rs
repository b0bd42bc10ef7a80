//! The task behind a socket event: the sending process and thread, its cgroup and
//! name (not a pod: which pod a cgroup belongs to is the inventory's to say).

use sidecar_race_ebpf::abi;

use crate::names::Comm;

/// The task behind a socket event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sender {
    pub cgroup_id: u64,
    pub pid: u32,
    pub tgid: u32,
    pub comm: Comm,
}

impl From<&abi::Owner> for Sender {
    fn from(o: &abi::Owner) -> Sender {
        Sender {
            cgroup_id: o.cgroup_id,
            pid: o.pid,
            tgid: o.tgid,
            comm: Comm::from_c_bytes(&o.comm),
        }
    }
}
