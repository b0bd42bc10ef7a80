//! The process name of the current task: its thread-group leader's `comm`, so the
//! names of a JVM's or a thread pool's threads do not stand for the process.
//! A thread that leads its group (every single-threaded process) costs what
//! `bpf_get_current_comm` costs; another thread two kernel reads instead (direct loads
//! where the kernel refuses the read helper).

use aya_ebpf::helpers::{bpf_get_current_comm, generated};
use sidecar_race_ebpf::{
    abi::COMM_LEN,
    layout::{MISSING, TaskFields},
};

use super::kernel_read::{direct_reads, read};

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
    // SAFETY: helpers without preconditions. With direct reads the task must be the
    // BTF-typed one (5.11+), whose fields the verifier lets the program load.
    let task = unsafe {
        if direct_reads() {
            generated::bpf_get_current_task_btf() as u64
        } else {
            generated::bpf_get_current_task()
        }
    };
    let leader = read::<u64>(task, f.group_leader).ok_or(0)?;
    read::<[u8; COMM_LEN]>(leader, f.comm).ok_or(0)
}
