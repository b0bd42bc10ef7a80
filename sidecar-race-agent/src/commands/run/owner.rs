//! Who owns the node's kept state: with `--pin=auto` the agent takes the node lock,
//! then adopts or makes its pins; with `--pin=off` (or without the lock) it runs
//! unpinned, and removes what an earlier agent pinned when nobody else holds the node.

use std::time::Duration;

use crate::{
    agent::{self, AgentOptions},
    cli::{PinMode, StateArgs},
    kernel::pins::Pins,
    node_lock::{LockError, NodeLock},
};

/// How long a new agent waits for the one before it to release the node.
const LOCK_WAIT: Duration = Duration::from_secs(60);

/// Starts the agent as the node's one owner of pinned state (`--pin=auto`: the lock,
/// then pins adopted or made), or unpinned, removing what an earlier agent pinned.
pub(super) fn start_owned(
    state: &StateArgs,
    agent_opts: &AgentOptions,
) -> anyhow::Result<(agent::Agent, Option<NodeLock>)> {
    let (pin, state) = (state.pin, &state.place);
    let mut agent_opts = agent_opts.clone();
    if pin == PinMode::Off {
        let agent = agent::start(&agent_opts)?;
        unpin_leftovers(&state.bpffs, &state.state_dir);
        return Ok((agent, None));
    }
    let lock = match NodeLock::acquire(&state.state_dir, LOCK_WAIT) {
        Ok(lock) => lock,
        // Another agent holds the node: two would read one ring.
        Err(e @ LockError::Held { .. }) => return Err(e.into()),
        Err(e) => {
            tracing::warn!(
                "degraded: {e}: nothing is pinned and no checkpoint kept, so a restart of \
                 the agent loses what happens until the next one runs"
            );
            return Ok((agent::start(&agent_opts)?, None));
        }
    };
    agent_opts.pins = match Pins::new(&state.bpffs, &state.state_dir) {
        Ok(pins) => Some(pins),
        Err(why) => {
            tracing::warn!(
                "degraded: the programs and maps are not pinned ({why}): a restart of the \
                 agent loses what happens until the next one runs"
            );
            None
        }
    };
    Ok((agent::start(&agent_opts)?, Some(lock)))
}

/// With `--pin=off`, pins an earlier agent left would keep its programs running
/// unread: they go, unless another agent holds the node.
fn unpin_leftovers(bpffs: &std::path::Path, state_dir: &std::path::Path) {
    if !bpffs.join("sidecar-race").exists() {
        return;
    }
    match NodeLock::acquire(state_dir, Duration::ZERO) {
        Ok(_lock) => {
            if let Ok(pins) = Pins::new(bpffs, state_dir) {
                for key in pins.remove_others(None) {
                    tracing::info!(%key, "--pin=off: unpinned what an earlier agent pinned");
                }
            }
        }
        Err(e) => tracing::warn!("--pin=off: left the pins of another agent alone: {e}"),
    }
}
