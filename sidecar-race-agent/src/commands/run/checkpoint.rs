//! The daemon's side of the checkpoint: restored at start before any kernel record is
//! taken into the pipeline, written at a stop that left the rest of the ring unread,
//! and every [`EVERY`] in between, so that a killed agent (the OOM killer, a node
//! crash) loses only what it read since its last one.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use crate::{
    checkpoint::{CheckpointFile, LoadError},
    detect::service::Protocol,
    ingest::events::{Sender, SocketFact},
    inventory::{PodOwner, cgroup_path},
    kernel::listening,
    pipeline::{Pipeline, PipelineSnapshot, Restored},
};

/// What became of the checkpoint at start.
#[derive(Debug)]
pub enum Restore {
    /// The previous agent left none (first start, or it did not stop cleanly).
    Missing,
    /// Stale, corrupt or unreadable: the agent starts clean, for this reason.
    Discarded(String),
    Restored(Restored),
}

impl Restore {
    /// Whether state was carried over from the previous agent.
    pub fn is_restored(&self) -> bool {
        matches!(self, Restore::Restored(_))
    }
}

/// How often a running agent writes its state (when it read anything since).
pub const EVERY: Duration = Duration::from_secs(5);

/// Reads the checkpoint into `pipeline` (fresh, nothing taken from the ring yet) at boot
/// ns `now`, the file removed before it is parsed so an agent that crashes while or
/// after it restores does not read it again. `adopted`: this agent adopted pins, so an agent ran before it. Logs what
/// happened, and what was lost when the agent before did not stop cleanly; never fails.
pub fn restore(file: &CheckpointFile, pipeline: &mut Pipeline, now: u64, adopted: bool) -> Restore {
    match file.take(now) {
        Err(LoadError::Missing(path)) if adopted => {
            tracing::warn!(
                path = %path.display(),
                "the agent before this one left no checkpoint (killed before its first, or \
                 its last save failed and removed the one before): the refusals it read and \
                 did not account for are lost, those it left in the ring are read now"
            );
            Restore::Missing
        }
        Err(LoadError::Missing(path)) => {
            tracing::info!(
                path = %path.display(),
                "no checkpoint from a previous agent: starting clean"
            );
            Restore::Missing
        }
        Err(e) => {
            tracing::warn!("{e}; starting clean");
            Restore::Discarded(e.to_string())
        }
        Ok(loaded) => {
            if !loaded.header.last {
                tracing::warn!(
                    written_at = %loaded.header.written_at,
                    "the agent before this one stopped without its final checkpoint \
                     (killed, or its node crashed): the refusals it read after its last \
                     periodic checkpoint ({}) are lost",
                    loaded.header.written_at
                );
            }
            let restored = pipeline.restore(loaded.state, now);
            if !loaded.header.last {
                listening_now(pipeline, now);
            }
            let s = restored.summary;
            tracing::info!(
                path = %file.path().display(),
                written_by = %loaded.header.agent_version,
                written_at = %loaded.header.written_at,
                pods = s.pods,
                incidents = s.incidents,
                open_incidents = s.open_incidents,
                held_facts = s.held_facts,
                reorder_facts = s.reorder_facts,
                dead_pods = restored.dead_pods,
                dead_facts = restored.dead_facts,
                "restored the previous agent's state ({} pods, {} incidents, {} open; {} facts held for metadata, {} in the reorder window); {} pods gone from the node meanwhile were ended; records written to the ring while no agent ran are read now",
                s.pods,
                s.incidents,
                s.open_incidents,
                s.held_facts,
                s.reorder_facts,
                restored.dead_pods,
            );
            Restore::Restored(restored)
        }
    }
}

/// Writes `state` (the pipeline's, taken at boot ns `now`) between reads, outside the
/// pipeline's lock; a failure is logged (when the last one did not fail too) and left
/// to the next.
pub fn save_periodic(
    file: &CheckpointFile,
    mut state: PipelineSnapshot,
    now: u64,
    failing: &mut bool,
) {
    match file.save(&mut state, now, false) {
        Ok(saved) => {
            *failing = false;
            tracing::debug!(bytes = saved.bytes, "wrote a periodic checkpoint");
        }
        Err(e) if !*failing => {
            *failing = true;
            tracing::warn!(
                "{e}; until a checkpoint is written again, a killed agent loses what it read"
            );
        }
        Err(_) => {}
    }
}

/// Writes the pipeline's state at the stop, at boot ns `now`; false (logged) when it
/// could not be.
pub fn save(file: &CheckpointFile, pipeline: &Pipeline, now: u64) -> bool {
    let mut state = pipeline.snapshot();
    match file.save(&mut state, now, true) {
        Ok(saved) => {
            if saved.dropped_incidents > 0 {
                tracing::warn!(
                    dropped = saved.dropped_incidents,
                    "the checkpoint was over its cap: its {} oldest published incidents were left out",
                    saved.dropped_incidents
                );
            }
            let s = saved.summary;
            tracing::info!(
                path = %file.path().display(),
                bytes = saved.bytes,
                pods = s.pods,
                incidents = s.incidents,
                open_incidents = s.open_incidents,
                held_facts = s.held_facts,
                reorder_facts = s.reorder_facts,
                "wrote the checkpoint; open incidents carry over to the next agent, unread records stay in the ring"
            );
            true
        }
        Err(e) => {
            tracing::error!(
                "{e}; open incidents are accounted now and the next agent starts clean"
            );
            false
        }
    }
}

/// After a periodic checkpoint (the agent before was killed), the listeners the open
/// incidents wait for, as the kernel's tables show them now: the record of one that
/// came up after that checkpoint was read by the killed agent and is gone from the
/// ring, and without it the race would end `unresolved` ("nothing listened"). Each is
/// taken in as a listen at `now` (it listened by then), behind the records still in
/// the ring (the reorder window): a listen recorded there comes first, with its time.
/// Returns how many were found.
fn listening_now(pipeline: &mut Pipeline, now: u64) -> usize {
    let mut waiting: Vec<(String, u16)> = pipeline
        .detector()
        .incidents()
        .newest_first()
        .filter(|i| !i.is_final() && i.socket.is_none() && i.protocol == Protocol::Tcp)
        .map(|i| (i.pod_uid.clone(), i.port))
        .collect();
    waiting.sort();
    waiting.dedup();
    let mut found = Vec::new();
    for (uid, port) in waiting {
        let dirs = pod_cgroups(pipeline, &uid);
        let dirs: Vec<(u64, &std::path::Path)> =
            dirs.iter().map(|(id, d)| (*id, d.as_path())).collect();
        found.extend(listening::tcp_listeners(&dirs, port));
    }
    for l in &found {
        tracing::info!(
            addr = %l.addr,
            pid = l.pid,
            "a listener the agent before this one saw come up after its last checkpoint is \
             listening: the incidents it covers resolve as of now, as that agent told them"
        );
        pipeline.listening_at_restore(&listen_at(now, l.cgroup_id, l.pid, l.addr));
    }
    found.len()
}

/// The live cgroups of pod `uid` with their directories.
pub(super) fn pod_cgroups(pipeline: &Pipeline, uid: &str) -> Vec<(u64, PathBuf)> {
    let cgroups = &pipeline.inventory().cgroups;
    let mount = cgroups.mount();
    cgroups
        .live()
        .filter(|(_, path)| {
            PodOwner::of(&cgroup_path::parse(path)).is_some_and(|o| &*o.pod_uid == uid)
        })
        .map(|(id, path)| (id, mount.join(path.trim_start_matches('/'))))
        .collect()
}

/// A listen record as the kernel would have written it at `ts`.
fn listen_at(ts: u64, cgroup_id: u64, pid: u32, addr: SocketAddr) -> SocketFact {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    SocketFact {
        ts_boot_ns: ts,
        owner: Sender {
            cgroup_id,
            pid,
            tgid: pid,
            comm: comm.trim().into(),
        },
        ipv6: addr.is_ipv6(),
        src: addr,
        dst: None,
        local_dst: None,
        start_boot_ns: 0,
    }
}
