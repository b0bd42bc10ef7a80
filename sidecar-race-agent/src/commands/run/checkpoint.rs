//! The daemon's side of the checkpoint: restored at start before any kernel record is
//! taken into the pipeline, written at a stop that left the rest of the ring unread,
//! and every [`EVERY`] in between, so that a killed agent (the OOM killer, a node
//! crash) loses only what it read since its last one.

use std::time::Duration;

use crate::{
    checkpoint::{CheckpointFile, LoadError},
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
/// ns `now`, then removes the file so an agent that crashes later does not read it
/// again. `adopted`: this agent adopted pins, so an agent ran before it. Logs what
/// happened, and what was lost when the agent before did not stop cleanly; never fails.
pub fn restore(file: &CheckpointFile, pipeline: &mut Pipeline, now: u64, adopted: bool) -> Restore {
    let loaded = file.load(now);
    if !matches!(loaded, Err(LoadError::Missing(_)))
        && let Err(e) = file.remove()
    {
        tracing::warn!(
            "cannot remove the checkpoint {} after reading it: {e}",
            file.path().display()
        );
    }
    match loaded {
        Err(LoadError::Missing(path)) if adopted => {
            tracing::warn!(
                path = %path.display(),
                "the agent before this one stopped without its final checkpoint and left \
                 none (killed before its first): the refusals it read are lost, those it \
                 left in the ring are read now"
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
            tracing::warn!("{e}; a killed agent would lose what it read since its last checkpoint");
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
