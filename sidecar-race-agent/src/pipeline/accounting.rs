//! Which of the detector's changes the sinks hear about, and when, as outcomes each
//! built once with its view: an incident's final accounting waits for its names (or
//! a deadline), refusals after it are late, a pod start waits for its workload's name.

use std::collections::HashMap;

use super::{
    accounts::PendingStart,
    outcome::{Accounting, Outcome, StuckJob},
    state::Pipeline,
};
use crate::detect::{
    Change, Incident, PodMeta, incident::Subject, render::IncidentView, service::SocketKey,
};

/// Pod starts whose workload is still unknown are counted after this, unnamed.
pub const POD_START_NAME_WAIT_NS: u64 = 10_000_000_000;

impl Pipeline {
    /// The outcomes of `changes` (one step of the detector), at boot ns `now`
    /// (`last`: at shutdown, nothing waits for names any more).
    pub(super) fn outcomes(&mut self, changes: &[Change], now: u64, last: bool) -> Vec<Outcome> {
        self.settled_before_restore(changes);
        let settled = self.settle(changes, now, last);
        // Views as the step left the incidents, built once each.
        let mut views: HashMap<u64, IncidentView> = HashMap::new();
        let mut out = Vec::new();
        for c in changes {
            let outcome = match c {
                Change::Opened(id) => self.incident(*id).map(|inc| {
                    let v = self.view_once(inc, &mut views);
                    match inc.subject {
                        Subject::StuckJob { .. } => Outcome::StuckJob(StuckJob::Found(Box::new(v))),
                        Subject::Refusals => Outcome::Opened(v),
                    }
                }),
                Change::Rephased { id, .. } if !self.accounts.is_settled(*id) => self
                    .incident(*id)
                    .map(|inc| Outcome::Rephased(self.view_once(inc, &mut views))),
                Change::Refused(id) if self.accounts.is_settled(*id) => {
                    self.account(*id, &mut views).map(Outcome::LateRefusals)
                }
                Change::Resolved(id) => self
                    .incident(*id)
                    .filter(|inc| matches!(inc.subject, Subject::StuckJob { .. }))
                    .filter(|inc| inc.is_final())
                    .map(|_| Outcome::StuckJob(StuckJob::Ended(*id))),
                Change::PodStarted { pod_uid, start } => {
                    let starts = &mut self.accounts.starts;
                    if !starts
                        .iter()
                        .any(|s| s.pod_uid == *pod_uid && s.start == *start)
                    {
                        starts.push(PendingStart {
                            pod_uid: pod_uid.clone(),
                            start: *start,
                            deadline: now.saturating_add(POD_START_NAME_WAIT_NS),
                        });
                    }
                    None
                }
                _ => None,
            };
            out.extend(outcome);
        }
        for id in settled {
            out.extend(self.account(id, &mut views).map(Outcome::Settled));
        }
        out.extend(self.named_starts(now));
        out
    }

    /// Whether incident `id` had its final accounting.
    pub fn is_settled(&self, id: u64) -> bool {
        self.accounts.is_settled(id)
    }

    /// The view of `inc`, built at most once per step.
    fn view_once(&self, inc: &Incident, views: &mut HashMap<u64, IncidentView>) -> IncidentView {
        views
            .entry(inc.id)
            .or_insert_with(|| self.view(inc))
            .clone()
    }

    /// The accounting of settled incident `id`: the refusals it gained since the last.
    fn account(&mut self, id: u64, views: &mut HashMap<u64, IncidentView>) -> Option<Accounting> {
        let inc = self.incident(id)?;
        let view = self.view_once(inc, views);
        let port = self.counted_port(inc);
        let socket = counted_socket(inc);
        let counted = self.accounts.settled.entry(id).or_default();
        let new_refusals = view.refused_count.saturating_sub(*counted);
        *counted = view.refused_count;
        Some(Accounting {
            view,
            port,
            socket,
            new_refusals,
        })
    }

    /// The port to count `inc`'s refusals under, when a container of the pod declares
    /// it or a listener was seen on it.
    fn counted_port(&self, inc: &Incident) -> Option<u16> {
        let declared = self
            .inventory
            .pods
            .pod(&inc.pod_uid)
            .is_some_and(|pod| pod.containers.iter().any(|c| c.ports.contains(&inc.port)));
        let listened = inc.listener_ready_at.is_some()
            || inc.listener_closed_at.is_some()
            || self.detector.listened_on(&inc.pod_uid, inc.port);
        (declared || listened).then_some(inc.port)
    }

    /// Final incidents become due for accounting once their pod, client and listener
    /// are named, or when the wait for names is over.
    fn settle(&mut self, changes: &[Change], now: u64, last: bool) -> Vec<u64> {
        let log = self.detector.incidents();
        let a = &mut self.accounts;
        for id in changes.iter().filter_map(Change::incident) {
            let Some(inc) = log.get(id) else {
                continue;
            };
            if inc.is_final()
                && inc.is_shown()
                && !a.settled.contains_key(&id)
                && !a.holding.iter().any(|(h, _)| *h == id)
            {
                // The wait counts from the incident's end: one hidden while its pod
                // was unknown has waited already.
                let since = inc.resolved_at.unwrap_or(now).min(now);
                a.holding
                    .push((id, since.saturating_add(self.metadata_wait_ns)));
            }
        }
        let mut due = Vec::new();
        let pods = &self.inventory.pods;
        let may_learn = self.inventory.has_pod_source;
        a.holding.retain(|&(id, deadline)| {
            let Some(inc) = log.get(id) else {
                return false; // evicted
            };
            if !inc.is_shown() {
                return false;
            }
            // The listener's name too: it decides the sidecar, so the kind counted.
            let named = pods.pod(&inc.pod_uid).is_some()
                && [
                    inc.client_container_id(),
                    inc.listener_container_id.as_deref(),
                ]
                .into_iter()
                .flatten()
                .all(|c| pods.container_name(c).is_some());
            if named || !may_learn || last || now >= deadline {
                due.push(id);
                false
            } else {
                true
            }
        });
        // Settled from now on: refusals counted in this step are late ones too.
        a.settled.extend(due.iter().map(|id| (*id, 0)));
        // Forget incidents the log has evicted since the last look.
        if log.evicted() != a.evicted_seen {
            a.evicted_seen = log.evicted();
            a.settled.retain(|id, _| log.get(*id).is_some());
        }
        due
    }

    /// Pod starts whose names are known now, or whose wait for them is over (at once
    /// without a pod source).
    fn named_starts(&mut self, now: u64) -> Vec<Outcome> {
        let inventory = &self.inventory;
        let mut named = Vec::new();
        self.accounts.starts.retain(|s| {
            let known = inventory.pods.pod(&s.pod_uid).is_some();
            if !known && inventory.has_pod_source && now < s.deadline {
                return true;
            }
            named.push(Outcome::PodStarted {
                pod_uid: s.pod_uid.clone(),
                start: s.start,
                who: inventory.pod_names(&s.pod_uid),
            });
            false
        });
        named
    }
}

/// The `socket` label to count a Unix socket incident's refusals under: sockets on a
/// pod volume (bounded by the pod spec) and sockets a listener was seen on; else
/// none (`other`), so a client dialing arbitrary paths cannot mint series.
fn counted_socket(inc: &Incident) -> Option<String> {
    let s = inc.socket.as_ref()?;
    let listened = inc.listener_ready_at.is_some() || inc.listener_closed_at.is_some();
    (matches!(s.key, SocketKey::OnVolume { .. }) || listened).then(|| s.label())
}
