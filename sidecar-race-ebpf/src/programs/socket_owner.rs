//! The owner of a connecting socket whose connect was not recorded: where the
//! state-transition hook is not attached (the reset hooks alone see refusals), or its
//! entry was evicted. The socket says which cgroup it belongs to (the one that created
//! it); the task running when the reset arrives names the process only when it is in
//! that cgroup. On loopback the reset is handled in the connecting task's own context
//! (the SYN's softirq runs as its send returns), so this is the connecting process;
//! handled elsewhere (ksoftirqd under load) the process is unknown (pid 0, no name)
//! and the container still exact.

use aya_ebpf::helpers::generated;
use sidecar_race_ebpf::abi::{COMM_LEN, Owner};

use super::{charge::socket_cgroup_id, helpers::current_owner};

#[inline(always)]
pub fn of_connecting(sk: u64) -> Owner {
    // SAFETY: helper without preconditions.
    let current = unsafe { generated::bpf_get_current_cgroup_id() };
    match socket_cgroup_id(sk) {
        Some(cgroup_id) if cgroup_id != current => Owner {
            cgroup_id,
            pid: 0,
            tgid: 0,
            comm: [0; COMM_LEN],
        },
        _ => current_owner(),
    }
}
