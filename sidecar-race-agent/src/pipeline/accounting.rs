//! Which of the detector's changes the sinks hear about, and when, as outcomes each
//! built once with its view: an incident's final accounting waits for its names (or
//! a deadline), refusals after it are late, a pod start waits for its workload's name.
//! Accounting keeps its own record ([`Accounts`]) and reads the other stages' state
//! as the step left them ([`Reads`]), never through the pipeline.

use std::collections::HashMap;

use super::{
    accounts::{Accounts, PendingStart},
    outcome::{Accounting, Outcome, StuckJob},
    restore_look::RestoreLook,
    suppressed::Suppressed,
    views::incident_view,
};
use crate::{
    detect::{
        Change, Detector, Incident, PodMeta, incident::Subject, render::IncidentView,
        service::SocketKey,
    },
    inventory::Inventory,
};

/// Pod starts whose workload is still unknown are counted after this, unnamed.
pub const POD_START_NAME_WAIT_NS: u64 = 10_000_000_000;

/// What accounting reads of the other stages, as one step left them.
pub(super) struct Reads<'a> {
    /// The incidents the changes name, and the listeners it saw.
    pub(super) detector: &'a Detector,
    /// The pods that name them, and whether names can still come.
    pub(super) inventory: &'a Inventory,
    /// The kernel's suppressed counts each view shows.
    pub(super) suppressed: &'a Suppressed,
    /// How long a final incident waits for its names, in ns.
    pub(super) metadata_wait_ns: u64,
    /// Listeners taken in at a restore: what they resolve was told already.
    pub(super) restore_look: &'a RestoreLook,
}

impl Reads<'_> {
    fn incident(&self, id: u64) -> Option<&Incident> {
        self.detector.incidents().get(id)
    }

    /// The view of `inc`, built at most once per step.
    fn view_once(&self, inc: &Incident, views: &mut HashMap<u64, IncidentView>) -> IncidentView {
        views
            .entry(inc.id)
            .or_insert_with(|| incident_view(inc, &self.inventory.pods, self.suppressed))
            .clone()
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
}

impl Accounts {
    /// The outcomes of `changes` (one step of the detector), at boot ns `now`
    /// (`last`: at shutdown, nothing waits for names any more).
    pub(super) fn outcomes(
        &mut self,
        changes: &[Change],
        now: u64,
        last: bool,
        reads: &Reads,
    ) -> Vec<Outcome> {
        self.settled_before_restore(changes, reads);
        let settled = self.settle(changes, now, last, reads);
        // Views as the step left the incidents, built once each.
        let mut views: HashMap<u64, IncidentView> = HashMap::new();
        let mut out = Vec::new();
        for c in changes {
            let outcome = match c {
                Change::Opened(id) => reads.incident(*id).map(|inc| {
                    let v = reads.view_once(inc, &mut views);
                    match inc.subject {
                        Subject::StuckJob { .. } => Outcome::StuckJob(StuckJob::Found(Box::new(v))),
                        Subject::Refusals => Outcome::Opened(v),
                    }
                }),
                Change::Rephased { id, .. } if !self.is_settled(*id) => reads
                    .incident(*id)
                    .map(|inc| Outcome::Rephased(reads.view_once(inc, &mut views))),
                Change::Refused(id) if self.is_settled(*id) => self
                    .account(*id, &mut views, reads)
                    .map(Outcome::LateRefusals),
                Change::Resolved(id) => reads
                    .incident(*id)
                    .filter(|inc| matches!(inc.subject, Subject::StuckJob { .. }))
                    .filter(|inc| inc.is_final())
                    .map(|_| Outcome::StuckJob(StuckJob::Ended(*id))),
                Change::PodStarted { pod_uid, start } => {
                    let starts = &mut self.starts;
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
            out.extend(self.account(id, &mut views, reads).map(Outcome::Settled));
        }
        out.extend(self.named_starts(now, reads.inventory));
        out
    }

    /// Marks settled, without an outcome, the incidents `changes` resolved with a
    /// listener taken in at a restore (the agent before told the sinks).
    fn settled_before_restore(&mut self, changes: &[Change], reads: &Reads) {
        if reads.restore_look.is_empty() {
            return;
        }
        for c in changes {
            let Change::Resolved(id) = c else { continue };
            let Some(inc) = reads.incident(*id) else {
                continue;
            };
            if reads.restore_look.resolved(inc) {
                self.settled.insert(*id, inc.refused_count);
            }
        }
    }

    /// The accounting of settled incident `id`: the refusals it gained since the last.
    fn account(
        &mut self,
        id: u64,
        views: &mut HashMap<u64, IncidentView>,
        reads: &Reads,
    ) -> Option<Accounting> {
        let inc = reads.incident(id)?;
        let view = reads.view_once(inc, views);
        let port = reads.counted_port(inc);
        let socket = counted_socket(inc);
        let counted = self.settled.entry(id).or_default();
        let new_refusals = view.refused_count.saturating_sub(*counted);
        *counted = view.refused_count;
        Some(Accounting {
            view,
            port,
            socket,
            new_refusals,
        })
    }

    /// Final incidents become due for accounting once their pod, client and listener
    /// are named, or when the wait for names is over.
    fn settle(&mut self, changes: &[Change], now: u64, last: bool, reads: &Reads) -> Vec<u64> {
        let log = reads.detector.incidents();
        for id in changes.iter().filter_map(Change::incident) {
            let Some(inc) = log.get(id) else {
                continue;
            };
            if inc.is_final()
                && inc.is_shown()
                && !self.settled.contains_key(&id)
                && !self.holding.iter().any(|(h, _)| *h == id)
            {
                // The wait counts from the incident's end: one hidden while its pod
                // was unknown has waited already.
                let since = inc.resolved_at.unwrap_or(now).min(now);
                self.holding
                    .push((id, since.saturating_add(reads.metadata_wait_ns)));
            }
        }
        let mut due = Vec::new();
        let pods = &reads.inventory.pods;
        let may_learn = reads.inventory.has_pod_source;
        self.holding.retain(|&(id, deadline)| {
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
        self.settled.extend(due.iter().map(|id| (*id, 0)));
        // Forget incidents the log has evicted since the last look.
        if log.evicted() != self.evicted_seen {
            self.evicted_seen = log.evicted();
            self.settled.retain(|id, _| log.get(*id).is_some());
        }
        due
    }

    /// Pod starts whose names are known now, or whose wait for them is over (at once
    /// without a pod source).
    fn named_starts(&mut self, now: u64, inventory: &Inventory) -> Vec<Outcome> {
        let mut named = Vec::new();
        self.starts.retain(|s| {
            let known = inventory.pods.pod(&s.pod_uid).is_some();
            if !known && inventory.has_pod_source && now < s.deadline {
                return true;
            }
            named.push(Outcome::PodStarted {
                pod_uid: s.pod_uid.clone(),
                start: s.start,
                who: inventory.pod_names(&s.pod_uid),
                template: inventory
                    .pods
                    .pod(&s.pod_uid)
                    .and_then(|p| p.template.clone()),
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
