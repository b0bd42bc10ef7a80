//! The daemon's side of the checkpoint: restored at start before any kernel record is
//! taken into the pipeline, written at a stop that left the rest of the ring unread,
//! and every [`EVERY`] in between, so that a killed agent (the OOM killer, a node
//! crash) loses only what it read since its last one.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use crate::{
    checkpoint::{CheckpointFile, LoadError},
    detect::service::{Protocol, SocketKey, UnixSocket},
    ingest::events::{Sender, SocketFact, UnixFact, UnixHook, UnixName},
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
/// TCP incidents look for a listener on their port, Unix socket incidents for one
/// bound to their socket's file name (or abstract name); the detector then keys it on
/// the pod's volumes as any listen record. Returns how many were found.
fn listening_now(pipeline: &mut Pipeline, now: u64) -> usize {
    let mut waiting: Vec<(String, u16)> = Vec::new();
    let mut waiting_unix: Vec<(String, UnixSocket)> = Vec::new();
    for i in pipeline.detector().incidents().newest_first() {
        if i.is_final() {
            continue;
        }
        // UDP incidents wait for a bound socket, looked for on every tick (udp_bound).
        match &i.socket {
            None if i.protocol == Protocol::Tcp => waiting.push((i.pod_uid.clone(), i.port)),
            None => {}
            Some(socket) => waiting_unix.push((i.pod_uid.clone(), socket.clone())),
        }
    }
    waiting.sort();
    waiting.dedup();
    let mut found = Vec::new();
    for (uid, port) in waiting {
        let dirs = pod_cgroups(pipeline, &uid);
        let dirs: Vec<(u64, &std::path::Path)> =
            dirs.iter().map(|(id, d)| (*id, d.as_path())).collect();
        found.extend(listening::tcp_listeners(&dirs, port));
    }
    let mut found_unix = Vec::new();
    for (uid, socket) in &waiting_unix {
        let dirs = pod_cgroups(pipeline, uid);
        let dirs: Vec<(u64, &std::path::Path)> =
            dirs.iter().map(|(id, d)| (*id, d.as_path())).collect();
        for l in listening::unix_listeners(&dirs, |name| may_serve(socket, name)) {
            if !found_unix.contains(&l) {
                found_unix.push(l);
            }
        }
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
    for l in &found_unix {
        tracing::info!(
            socket = %l.name,
            pid = l.pid,
            "a Unix socket listener the agent before this one saw come up after its last \
             checkpoint is listening: the incidents it covers resolve as of now, as that \
             agent told them"
        );
        pipeline.unix_listening_at_restore(&unix_listen_at(now, l));
    }
    found.len() + found_unix.len()
}

/// Whether a listener bound to `name` may serve the incident's `socket`: the same
/// abstract name, or a path with the same file name (the two containers may mount
/// the volume at different places; the detector decides on the volume).
fn may_serve(socket: &UnixSocket, name: &UnixName) -> bool {
    let file_name = |p: &str| std::path::Path::new(p).file_name().map(|f| f.to_owned());
    match (&socket.key, name) {
        (SocketKey::Abstract(want), UnixName::Abstract(got)) => **want == **got,
        (SocketKey::Abstract(_), _) | (_, UnixName::Abstract(_) | UnixName::Unnamed) => false,
        (_, UnixName::Path(got)) => {
            file_name(got).is_some() && file_name(&socket.path) == file_name(got)
        }
    }
}

/// A Unix listen record as the kernel would have written it at `ts`.
fn unix_listen_at(ts: u64, l: &listening::UnixListening) -> UnixFact {
    UnixFact {
        ts_boot_ns: ts,
        owner: sender(l.cgroup_id, l.pid),
        name: l.name.clone(),
        refusal: None,
        sock_type: None,
        netns: None,
        inode: None,
        hook: Some(UnixHook::Listener),
        start_boot_ns: 0,
    }
}

/// Who holds a listener found in the tables: its process, as a record names it.
fn sender(cgroup_id: u64, pid: u32) -> Sender {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    Sender {
        cgroup_id,
        pid,
        tgid: pid,
        comm: comm.trim().into(),
    }
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
    SocketFact {
        ts_boot_ns: ts,
        owner: sender(cgroup_id, pid),
        ipv6: addr.is_ipv6(),
        src: addr,
        dst: None,
        local_dst: None,
        start_boot_ns: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn socket(key: SocketKey, path: &str) -> UnixSocket {
        UnixSocket {
            is_abstract: matches!(key, SocketKey::Abstract(_)),
            key,
            path: path.into(),
            volume: None,
        }
    }

    #[test]
    fn a_listener_may_serve_a_socket_of_its_file_name_or_abstract_name() {
        let on_volume = socket(
            SocketKey::OnVolume {
                volume: "sock".into(),
                relative: "app.sock".into(),
            },
            "/app-view/app.sock",
        );
        let path = |p: &str| UnixName::Path(p.into());
        // The sidecar mounts the volume elsewhere: the detector decides on the volume.
        assert!(may_serve(&on_volume, &path("/vol/app.sock")));
        assert!(!may_serve(&on_volume, &path("/vol/db.sock")));
        assert!(!may_serve(
            &on_volume,
            &UnixName::Abstract("app.sock".into())
        ));
        let abs = socket(SocketKey::Abstract("otel".into()), "@otel");
        assert!(may_serve(&abs, &UnixName::Abstract("otel".into())));
        assert!(!may_serve(&abs, &UnixName::Abstract("other".into())));
        assert!(!may_serve(&abs, &path("/run/otel")));
        assert!(!may_serve(&on_volume, &UnixName::Unnamed));
    }
}
