//! Unix-socket facts of a pod whose metadata has not arrived yet wait here, then are
//! replayed in their order once it has. The kubelet starts containers before their
//! ids and mounts reach the agent, so the first refusals, binds and listens of a pod
//! normally come first: decided then, a path on a shared volume would be keyed as
//! dialed and one race would become two incidents. Bounded in time (the detector's
//! metadata wait, counted from the oldest fact held) and in size (runs of identical
//! refusals are kept as one entry, at most `HELD_PER_POD` entries a pod); what does
//! not fit is dropped and counted.

use std::{collections::VecDeque, sync::Arc};

use serde::{Deserialize, Serialize};

use crate::{
    detect::fact::{Client, Fact},
    names::{Comm, UnixName},
    pods::pod_meta::PodMeta,
};

/// Entries (a run of identical refusals is one) a pod may hold.
pub const HELD_PER_POD: usize = 256;

/// Refusals `first..=last`, `count` of them, by one client, process and socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Burst {
    pub(super) first: u64,
    pub(super) last: u64,
    pub(super) count: u64,
}

impl Burst {
    pub(super) fn one(ts: u64) -> Self {
        Self {
            first: ts,
            last: ts,
            count: 1,
        }
    }
}

/// A held Unix fact.
#[derive(Clone, Serialize, Deserialize)]
pub(super) enum HeldFact {
    Refused {
        burst: Burst,
        client: Client,
        name: UnixName,
        process: Comm,
        /// Sent as a datagram.
        #[serde(default)]
        datagram: bool,
    },
    /// A listener up (`up`) or gone.
    Listener {
        ts: u64,
        container_id: Option<String>,
        name: UnixName,
        up: bool,
        /// A datagram socket's bind.
        #[serde(default)]
        datagram: bool,
    },
}

impl HeldFact {
    /// The Unix facts, as held; any other fact is `Err` (it is never held).
    pub(super) fn of(fact: Fact) -> Result<(Arc<str>, HeldFact), Fact> {
        let up = matches!(fact, Fact::UnixListenerUp { .. });
        let datagram = matches!(fact, Fact::UnixListenerUp { datagram: true, .. });
        Ok(match fact {
            Fact::UnixRefused {
                ts,
                pod_uid,
                client,
                name,
                process,
                datagram,
            } => (
                pod_uid,
                HeldFact::Refused {
                    burst: Burst::one(ts),
                    client,
                    name,
                    process,
                    datagram,
                },
            ),
            Fact::UnixListenerUp {
                ts,
                pod_uid,
                container_id,
                name,
                ..
            }
            | Fact::UnixListenerDown {
                ts,
                pod_uid,
                container_id,
                name,
            } => (
                pod_uid,
                HeldFact::Listener {
                    ts,
                    container_id,
                    name,
                    up,
                    datagram,
                },
            ),
            other => return Err(other),
        })
    }

    fn first_ts(&self) -> u64 {
        match self {
            HeldFact::Refused { burst, .. } => burst.first,
            HeldFact::Listener { ts, .. } => *ts,
        }
    }

    /// The container whose name the fact waits for (none: a process outside one).
    pub(super) fn container_id(&self) -> Option<&str> {
        match self {
            HeldFact::Refused { client, .. } => client.container_id(),
            HeldFact::Listener { container_id, .. } => container_id.as_deref(),
        }
    }
}

/// Whether the pod and container `id` are named by the pod source.
pub(super) fn named(meta: &dyn PodMeta, pod_uid: &str, id: Option<&str>) -> bool {
    meta.pod(pod_uid).is_some() && id.is_none_or(|id| meta.container_name(id).is_some())
}

/// One pod's held facts, oldest first.
#[derive(Default, Clone, Serialize, Deserialize)]
pub(super) struct Held {
    facts: VecDeque<HeldFact>,
}

impl Held {
    pub(super) fn is_empty(&self) -> bool {
        self.facts.is_empty()
    }

    /// Facts held (a run of refusals is one).
    pub(super) fn len(&self) -> usize {
        self.facts.len()
    }

    /// Holds `fact` behind the others; a refusal like the last one held joins its run.
    /// False when the pod holds its maximum already: the fact is dropped.
    pub(super) fn push(&mut self, fact: HeldFact) -> bool {
        if let (
            Some(HeldFact::Refused {
                burst,
                client,
                name,
                process,
                datagram,
            }),
            HeldFact::Refused {
                burst: b,
                client: c,
                name: n,
                process: p,
                datagram: d,
            },
        ) = (self.facts.back_mut(), &fact)
            && (&*client, &*name, &*process, &*datagram) == (c, n, p, d)
        {
            burst.last = burst.last.max(b.last);
            burst.count += b.count;
            return true;
        }
        if self.facts.len() >= HELD_PER_POD {
            return false;
        }
        self.facts.push_back(fact);
        true
    }

    /// The facts, when they may be decided now: every one's pod and container is
    /// named, or the oldest has waited `wait` by `now`, or `force` (the pod is gone).
    pub(super) fn take_if_due(
        &mut self,
        meta: &dyn PodMeta,
        pod_uid: &str,
        (now, wait): (u64, u64),
        force: bool,
    ) -> Option<VecDeque<HeldFact>> {
        let oldest = self.facts.front()?.first_ts();
        // The pod first (one lookup: a storm from a pod not yet listed stops here), then
        // its containers, up to the first one not named.
        let due = force
            || now.saturating_sub(oldest) >= wait
            || (meta.pod(pod_uid).is_some()
                && self.facts.iter().all(|f| {
                    f.container_id()
                        .is_none_or(|id| meta.container_name(id).is_some())
                }));
        due.then(|| std::mem::take(&mut self.facts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(ts: u64, path: &str) -> HeldFact {
        HeldFact::Refused {
            burst: Burst::one(ts),
            client: Client::Container("a".into()),
            name: UnixName::Path(path.into()),
            process: "curl".into(),
            datagram: false,
        }
    }

    #[test]
    fn a_run_of_identical_refusals_is_one_entry_and_the_pod_holds_a_bounded_number() {
        let mut h = Held::default();
        for ts in 1..=1000 {
            assert!(h.push(refused(ts, "/run/app.sock")));
        }
        assert_eq!(h.facts.len(), 1);
        let Some(HeldFact::Refused { burst, .. }) = h.facts.front() else {
            panic!("a refusal run");
        };
        assert_eq!(
            *burst,
            Burst {
                first: 1,
                last: 1000,
                count: 1000
            }
        );
        // Refusals of ever new sockets cannot be merged: the size bound holds them.
        let kept = (0..1000)
            .filter(|n| h.push(refused(2000 + n, &format!("/run/{n}.sock"))))
            .count();
        assert_eq!(h.facts.len(), HELD_PER_POD);
        assert_eq!(kept, HELD_PER_POD - 1);
    }
}
