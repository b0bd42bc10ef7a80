//! What the pipeline's sinks were told so far: incidents waiting for their names,
//! settled incidents and their counted refusals, pod starts waiting for names.

/// What the pipeline's sinks were told so far (a checkpoint carries it: what one agent
/// published, the next does not publish again).
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct Accounts {
    /// Final incidents whose pod or client is not named yet, with the boot-clock time
    /// their accounting stops waiting.
    pub(super) holding: Vec<(u64, u64)>,
    /// Settled incidents and the refusals accounted for in each (looked up per refusal).
    pub(super) settled: foldhash::HashMap<u64, u64>,
    /// The incident log's eviction count when `settled` was last pruned.
    pub(super) evicted_seen: u64,
    /// Pod starts waiting for their names, with the boot-clock time the wait ends.
    pub(super) starts: Vec<(String, u64)>,
}

impl Accounts {
    pub(super) fn is_settled(&self, id: u64) -> bool {
        self.settled.contains_key(&id)
    }
}
