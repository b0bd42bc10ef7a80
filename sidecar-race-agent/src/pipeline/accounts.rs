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
    pub(super) starts: Vec<PendingStart>,
}

/// A pod start waiting for its names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(from = "PendingRepr")]
pub(super) struct PendingStart {
    pub(super) pod_uid: String,
    /// 0 as created, `n` its n-th in-place restart (KEP-5532).
    pub(super) start: u32,
    /// The boot-clock time the wait for names ends.
    pub(super) deadline: u64,
}

/// A pending start as a checkpoint holds it: a format-1 agent before in-place restarts
/// wrote `[uid, deadline]`.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum PendingRepr {
    Created(String, u64),
    Start {
        pod_uid: String,
        start: u32,
        deadline: u64,
    },
}

impl From<PendingRepr> for PendingStart {
    fn from(r: PendingRepr) -> Self {
        match r {
            PendingRepr::Created(pod_uid, deadline) => PendingStart {
                pod_uid,
                start: 0,
                deadline,
            },
            PendingRepr::Start {
                pod_uid,
                start,
                deadline,
            } => PendingStart {
                pod_uid,
                start,
                deadline,
            },
        }
    }
}

impl Accounts {
    pub(super) fn is_settled(&self, id: u64) -> bool {
        self.settled.contains_key(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_starts_of_a_checkpoint_from_before_in_place_restarts_are_read() {
        // A format-1 checkpoint written before pod starts had numbers: `[uid, deadline]`.
        let read: Vec<PendingStart> = serde_json::from_str(
            r#"[["uid-a", 5], {"pod_uid": "uid-b", "start": 2, "deadline": 7}]"#,
        )
        .unwrap();
        let pending = |uid: &str, start, deadline| PendingStart {
            pod_uid: uid.into(),
            start,
            deadline,
        };
        assert_eq!(read, vec![pending("uid-a", 0, 5), pending("uid-b", 2, 7)]);
        let again: Vec<PendingStart> =
            serde_json::from_str(&serde_json::to_string(&read).unwrap()).unwrap();
        assert_eq!(again, read);
    }
}
