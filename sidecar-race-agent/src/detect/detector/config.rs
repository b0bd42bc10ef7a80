//! The detector's bounds and waits, with the defaults the daemon runs.

pub(super) const SECOND: u64 = 1_000_000_000;

/// Clock skew allowed between the API server's deletion time and the node's kernel.
pub(super) const DELETION_SKEW_NS: u64 = 5 * SECOND;

#[derive(Debug, Clone, Copy)]
pub struct DetectorConfig {
    /// No listener within this long after the first refusal: `unresolved`.
    pub unresolved_after_ns: u64,
    /// A refusal this soon after the listener came up belongs to the incident that
    /// listener resolved (the SYN was refused just before, the reset landed after).
    pub late_refusal_ns: u64,
    /// Without metadata, the pod's containers torn down within this long after the
    /// listener went away make it a drain (Kubernetes' default grace period).
    pub drain_grace_ns: u64,
    /// Refusals before a listener are a startup race only when the client container
    /// (and the serving one, when known) started at most this long before.
    pub startup_bound_ns: u64,
    /// Refusals wait this long for what the pod source has not told yet: the pod's
    /// IPs, the pod itself, a new client instance's name (0: no pod source, never wait).
    pub metadata_wait_ns: u64,
    /// A Job pod whose app containers finished this long ago while a classic sidecar
    /// still runs is stuck.
    pub stuck_job_after_ns: u64,
    pub history: usize,
    /// Incidents one pod may hold in the history (its oldest final ones go first).
    pub history_per_pod: usize,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        Self {
            unresolved_after_ns: 120 * SECOND,
            late_refusal_ns: SECOND / 10,
            drain_grace_ns: 30 * SECOND,
            startup_bound_ns: 120 * SECOND,
            metadata_wait_ns: 10 * SECOND,
            stuck_job_after_ns: 60 * SECOND,
            history: 10_000,
            history_per_pod: 1_000,
        }
    }
}
