//! The process name of the current task: its thread-group leader's `comm`, so the
//! names of a JVM's or a thread pool's threads do not stand for the process.
//! A thread that leads its group (every single-threaded process) costs what
//! `bpf_get_current_comm` costs; another thread two kernel reads instead.

use aya_ebpf::helpers::{bpf_get_current_comm, bpf_probe_read_kernel, generated};
use sidecar_race_ebpf::{
    abi::COMM_LEN,
    layout::{MISSING, TaskFields},
};

/// Filled by the agent from the kernel's BTF at load time; unset without BTF.
#[unsafe(no_mangle)]
static TASK: TaskFields = TaskFields::UNSET;

/// The current task's process name; the thread's own `comm` when the leader's cannot
/// be read (no BTF).
#[inline(always)]
pub fn current_process_name(pid: u32, tgid: u32) -> [u8; COMM_LEN] {
    if pid != tgid
        && let Ok(name) = leader_comm()
    {
        return name;
    }
    bpf_get_current_comm().unwrap_or([0; COMM_LEN])
}

#[inline(always)]
fn leader_comm() -> Result<[u8; COMM_LEN], i32> {
    // SAFETY: a plain read of a global that nothing writes after load; volatile so
    // the compiler does not fold in the `UNSET` initialiser.
    let f = unsafe { core::ptr::read_volatile(&raw const TASK) };
    if f.group_leader == MISSING || f.comm == MISSING {
        return Err(0);
    }
    // SAFETY: helper without preconditions; the offsets come from this kernel's BTF
    // and bpf_probe_read_kernel checks every access.
    unsafe {
        let task = generated::bpf_get_current_task() as *const u8;
        let leader: *const u8 =
            bpf_probe_read_kernel(task.add(f.group_leader as usize) as *const *const u8)?;
        bpf_probe_read_kernel(leader.add(f.comm as usize) as *const [u8; COMM_LEN])
    }
}
