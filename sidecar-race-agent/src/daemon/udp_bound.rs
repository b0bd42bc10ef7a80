//! The UDP sockets a pod's containers have bound, read from the pod's socket table
//! while one of its UDP incidents waits for a listener: no hook sees a UDP bind (the
//! kernels here refuse `fexit`, many have no kprobes, and a syscall tracepoint would put
//! every syscall on the slow path), so the sidecar's bind is known within one tick of
//! the agent's loop, and the incident's window is bounded by it, not exact.

use crate::{detect::service::Protocol, kernel::listening, pipeline::Pipeline};

use super::checkpoint::pod_cgroups;

/// Pods and ports looked at per tick at most: a storm of DNS-like noise on many ports
/// costs a bounded number of table reads.
const PORTS_PER_TICK: usize = 32;

/// Looks for the sockets the open UDP incidents wait for; each one found is taken in
/// as bound at `now`. Returns how many were found.
pub(super) fn poll(pipeline: &mut Pipeline, now: u64) -> usize {
    let mut waiting: Vec<(String, u16)> = pipeline
        .detector()
        .incidents()
        .newest_first()
        .filter(|i| !i.is_final() && i.protocol == Protocol::Udp)
        .map(|i| (i.pod_uid.clone(), i.port))
        .collect();
    if waiting.is_empty() {
        return 0;
    }
    waiting.sort();
    waiting.dedup();
    waiting.truncate(PORTS_PER_TICK);
    let mut found = Vec::new();
    for (uid, port) in waiting {
        let dirs = pod_cgroups(pipeline, &uid);
        let dirs: Vec<(u64, &std::path::Path)> =
            dirs.iter().map(|(id, d)| (*id, d.as_path())).collect();
        found.extend(listening::udp_bound(&dirs, port));
    }
    for b in &found {
        pipeline.udp_bound(b.cgroup_id, b.addr, now);
    }
    found.len()
}
