//! What removing a runtime's containers leaves for `down` to clean after it.

#[derive(Default)]
pub struct Removed {
    /// Network namespaces mounted outside the state directory.
    pub netns: Vec<String>,
    /// The pods' UIDs (their logs in /var/log/pods).
    pub pod_uids: Vec<String>,
    /// The containers' and sandboxes' IDs (their cached CNI results).
    pub ids: Vec<String>,
}
