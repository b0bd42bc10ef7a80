//! Time passing and pods going: open incidents become `unresolved` or drains, hidden
//! ones are shown or discarded as the pod's IPs become known, a pod or client
//! container gone ends its incidents, and Job pods kept alive by a sidecar are found.

use std::net::SocketAddr;

use super::{
    change::{Change, NotARace},
    config::{DELETION_SKEW_NS, SECOND},
    state::Detector,
    unix::container,
};
use crate::{
    detect::{
        fact::Client,
        incident::{Episode, Hidden, Incident, Phase, State, Subject},
        processes::Processes,
    },
    pods::{
        pod_info::{PodInfo, Role, RunState},
        pod_meta::PodMeta,
    },
};

impl Detector {
    pub(super) fn advance_incident(
        &mut self,
        now: u64,
        uid: &str,
        id: u64,
        meta: &dyn PodMeta,
    ) -> Vec<Change> {
        let drain = self.drain_condition(uid, id, meta);
        self.follow_pod_source(id, meta);
        let Some(inc) = self.incidents.get(id) else {
            return vec![];
        };
        let mut changes = Vec::new();
        let since = match inc.episode {
            Episode::BeforeListener => inc.first_refused_at,
            Episode::AfterClose { closed_at } => closed_at,
        };
        // A path dialed by a container the pod source has not named yet (an API server
        // outage): re-keyed when it is named (see `rekey`), decided then.
        let unnamed_client = || {
            meta.has_source()
                && inc
                    .client_container_id()
                    .is_some_and(|c| container(meta, uid, Some(c)).is_none())
        };
        match inc.hidden {
            Some(Hidden::SocketUnproven) if unnamed_client() => return changes,
            Some(Hidden::HostNetworkPort | Hidden::SocketUnproven | Hidden::UdpPortUnproven)
                if now.saturating_sub(since) >= self.cfg.unresolved_after_ns =>
            {
                return self.discard(uid, id, NotARace::Other);
            }
            Some(h) if h.awaits_metadata() => {
                changes = self.reveal(now, uid, id, meta, false);
                let shown_open = self
                    .incidents
                    .get(id)
                    .is_some_and(|i| i.is_shown() && i.state == State::Open);
                if !shown_open {
                    return changes;
                }
            }
            _ => {}
        }
        let deleted_within_wait = self
            .deletion_began(uid, meta)
            .is_some_and(|d| d <= since.saturating_add(self.cfg.unresolved_after_ns));
        let Some(inc) = self.incidents.get_mut(id) else {
            return changes;
        };
        let from = inc.phase;
        let to = match inc.episode {
            // A listener that went away never makes an `unresolved`: the port was served.
            Episode::AfterClose { .. } if drain => Phase::Drain,
            Episode::AfterClose { .. } => from,
            // A deletion that began within the wait cuts the startup short: no listener
            // was owed any more (its end comes with the client's or the pod's removal).
            Episode::BeforeListener
                if now.saturating_sub(since) >= self.cfg.unresolved_after_ns
                    && !deleted_within_wait =>
            {
                Phase::Unresolved
            }
            Episode::BeforeListener => from,
        };
        if to != from && from != Phase::Unresolved {
            inc.phase = to;
            if inc.is_shown() {
                changes.push(Change::Rephased { id, from });
            }
        }
        changes
    }

    /// Whether incident `id` (refused after its listener went away) is a drain: the pod
    /// is being deleted (or left the pod source) and the listener went away after that
    /// began. Without any metadata for the pod this cannot be known here (see `pod_gone`).
    pub(super) fn drain_condition(&self, uid: &str, id: u64, meta: &dyn PodMeta) -> bool {
        let Some(inc) = self.incidents.get(id) else {
            return false;
        };
        let Episode::AfterClose { closed_at } = inc.episode else {
            return false;
        };
        self.deletion_began(uid, meta)
            .is_some_and(|since| closed_at.saturating_add(DELETION_SKEW_NS) >= since)
    }

    /// Since when the pod is being deleted, as far as known: its deletion timestamp,
    /// else when the pod source stopped reporting it.
    pub(super) fn deletion_began(&self, uid: &str, meta: &dyn PodMeta) -> Option<u64> {
        meta.pod(uid)
            .and_then(|p| terminating_since(p, meta))
            .or_else(|| self.pods.get(uid)?.source_gone_at)
    }

    /// The pod (or, with `client`, one client container) is gone: open incidents end.
    pub(super) fn pod_gone(
        &mut self,
        ts: u64,
        pod_uid: &str,
        client: Option<&Client>,
        meta: &dyn PodMeta,
    ) -> Vec<Change> {
        if !self.pods.contains_key(pod_uid) {
            return vec![];
        }
        // Facts still held for the pod's metadata happened before it went.
        let mut changes = match client {
            None => self.release_held(pod_uid, ts, meta, true),
            Some(_) => Vec::new(),
        };
        // When the deletion began is unknown (no metadata, or a deletion reported
        // without its timestamp), a teardown soon after the sidecar's container went
        // (else its listener) is a drain.
        let deletion_known = self.deletion_began(pod_uid, meta).is_some();
        let (ids, unconfirmed) = self.incidents.ending_with(pod_uid, client);
        let grace = self.cfg.drain_grace_ns;
        if client.is_none() {
            // Whatever still waits for metadata is decided with what is known now.
            for id in ids.iter().chain(&unconfirmed) {
                changes.extend(self.reveal(ts, pod_uid, *id, meta, true));
            }
        }
        for id in ids {
            self.follow_pod_source(id, meta);
            let drain = self.drain_condition(pod_uid, id, meta);
            let sidecar_gone = self.incidents.get(id).and_then(|inc| {
                let ps = self.pods.get(pod_uid)?;
                ps.removed_at(inc.listener_container_id.as_deref()?)
            });
            let Some(inc) = self.incidents.get_mut(id) else {
                continue;
            };
            if let Subject::StuckJob { .. } = inc.subject {
                inc.state = State::Resolved;
                inc.resolved_at = Some(ts);
                changes.push(Change::Resolved(id));
                continue;
            }
            if client.is_some() {
                match inc.episode {
                    // A client gone while its pod is deleted does not dial again: a startup
                    // cut short (a rollout undone) ends with its refusals.
                    Episode::BeforeListener if deletion_known => {}
                    // A crashed client's startup incident still ends when the listener comes.
                    Episode::BeforeListener => continue,
                    // A client leaving while the pod is not being deleted does not end an
                    // outage: the listener may come back (the pod's removal decides).
                    Episode::AfterClose { .. } if !drain => continue,
                    Episode::AfterClose { .. } => {}
                }
            }
            match inc.hidden {
                None => {}
                Some(Hidden::Discarded | Hidden::Merged) => continue,
                Some(_) => {
                    changes.extend(self.discard(pod_uid, id, NotARace::Other));
                    continue;
                }
            }
            let timing_drain = |closed_at: u64| {
                client.is_none()
                    && !deletion_known
                    && ts.saturating_sub(sidecar_gone.unwrap_or(closed_at)) <= grace
            };
            let from = inc.phase;
            inc.phase = match inc.episode {
                _ if from == Phase::Unresolved => Phase::Unresolved,
                Episode::AfterClose { .. } if drain => Phase::Drain,
                Episode::AfterClose { closed_at } if timing_drain(closed_at) => Phase::Drain,
                Episode::AfterClose { .. } => Phase::Steady,
                // Cut short by the pod's end (a rollout undone, a scale-down): the
                // refusals stay what they were, a startup race most often.
                Episode::BeforeListener => from,
            };
            inc.state = State::Resolved;
            inc.resolved_at = Some(ts);
            if inc.phase != from {
                changes.push(Change::Rephased { id, from });
            }
            changes.push(Change::Resolved(id));
            self.incidents.close(pod_uid, id);
        }
        if client.is_none() {
            self.pods.remove(pod_uid);
            self.incidents.forget_pod(pod_uid);
        }
        changes
    }

    /// Incident `id` is not a race after all: hidden, and its refusals counted as `why`.
    pub(super) fn discard(&mut self, pod_uid: &str, id: u64, why: NotARace) -> Vec<Change> {
        let Some(inc) = self.incidents.get_mut(id) else {
            return vec![];
        };
        // Its refusals were counted as not a race the first time.
        if inc.hidden == Some(Hidden::Discarded) {
            return vec![];
        }
        // Nothing counted it yet: accounting waits for an incident to be final, and a
        // final incident is never discarded.
        inc.hidden = Some(Hidden::Discarded);
        inc.state = State::Resolved;
        let refused = inc.refused_count;
        self.incidents.close(pod_uid, id);
        self.incidents.stop_awaiting(pod_uid, id);
        vec![Change::NotARace { why, refused }]
    }

    /// Job pods whose app containers all finished while a classic sidecar still runs,
    /// for longer than the threshold: one incident per pod, resolved when the sidecar
    /// stops or the pod goes away.
    pub(super) fn stuck_jobs(&mut self, now: u64, meta: &dyn PodMeta) -> Vec<Change> {
        let mut found: Vec<(String, String, u64)> = Vec::new();
        let mut unstuck: Vec<String> = Vec::new();
        meta.each_pod(&mut |pod| {
            if !pod.is_job() {
                return;
            }
            match stuck_since(pod, meta) {
                Some((sidecar, finished)) => {
                    if now.saturating_sub(finished) >= self.cfg.stuck_job_after_ns {
                        found.push((pod.uid.clone(), sidecar, finished));
                    }
                }
                None => unstuck.push(pod.uid.clone()),
            }
        });
        let mut changes = Vec::new();
        for uid in unstuck {
            if let Some(inc) = self.incidents.take_stuck_job(&uid) {
                inc.state = State::Resolved;
                inc.resolved_at = Some(now);
                changes.push(Change::Resolved(inc.id));
            }
        }
        for (uid, sidecar, finished) in found {
            if self.incidents.has_stuck_job(&uid) {
                continue;
            }
            let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
            self.pod_state(&uid);
            let id = self.incidents.insert_stuck_job(Incident {
                id: 0,
                subject: Subject::StuckJob { sidecar },
                phase: Phase::Drain,
                state: State::Open,
                pod_uid: uid.clone(),
                client: Client::Cgroup(0),
                port: 0,
                destination: unspecified,
                local_destination: None,
                targets: vec![],
                client_instances: 0,
                refused_count: 0,
                first_refused_at: finished,
                last_refused_at: finished,
                listener_ready_at: None,
                listener_closed_at: None,
                resolved_at: None,
                listener_container_id: None,
                uncovering_listener: None,
                socket: None,
                protocol: crate::detect::service::Protocol::Tcp,
                episode: Episode::BeforeListener,
                hidden: None,
                processes: Processes::default(),
                pod_start: 0,
                drain_sub_phase: None,
                timeline: Default::default(),
            });
            changes.push(Change::Opened(id));
        }
        changes
    }
}

/// Since when the pod is being deleted, in boot-clock ns: `deletionTimestamp` is the
/// deadline, the deletion began `deletionGracePeriodSeconds` before it. 0 when the pod
/// is terminating but the time cannot be read.
fn terminating_since(pod: &PodInfo, meta: &dyn PodMeta) -> Option<u64> {
    let deadline = pod.deletion_timestamp?;
    let Some(deadline) = meta.boot_ns(deadline) else {
        return Some(0);
    };
    let grace = pod.deletion_grace_period_seconds.unwrap_or(0).max(0) as u64;
    Some(deadline.saturating_sub(grace * SECOND))
}

/// A Job pod's running classic sidecar and when its last app container finished, if
/// every app container has finished and a classic sidecar still runs.
fn stuck_since(pod: &PodInfo, meta: &dyn PodMeta) -> Option<(String, u64)> {
    let mut finished = 0;
    let mut apps = 0;
    for c in pod.containers.iter().filter(|c| c.role == Role::App) {
        let s = pod.status(&c.name)?;
        if s.state != RunState::Terminated {
            return None;
        }
        finished = finished.max(meta.boot_ns(s.finished_at?)?);
        apps += 1;
    }
    if apps == 0 {
        return None;
    }
    let sidecar = pod
        .containers
        .iter()
        .filter(|c| c.role == Role::ClassicSidecar)
        .find(|c| {
            pod.status(&c.name)
                .is_some_and(|s| s.state == RunState::Running)
        })?;
    Some((sidecar.name.clone(), finished))
}
