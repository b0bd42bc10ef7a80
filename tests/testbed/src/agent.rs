//! The agent as deploy/ installs it, in the names the local cluster's set-up and the
//! cluster tier's cases both use.

pub const NAMESPACE: &str = "sidecar-race";
/// `kubectl` arguments that wait (3 minutes at most) for the agent's DaemonSet to roll
/// out.
pub const ROLLOUT_STATUS: [&str; 6] = [
    "-n",
    NAMESPACE,
    "rollout",
    "status",
    "daemonset/sidecar-race-agent",
    "--timeout=180s",
];
