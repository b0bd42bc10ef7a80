//! The detector: pure logic over timestamped facts and pod metadata. No I/O, no clock
//! of its own: time advances only with the facts and `advance(now)`.
//!
//! It decides *when* refusals happened relative to the serving listener (the phase) and
//! keeps one incident per client container and port. *Who* serves whom (roles, and so
//! the incident's kind) is read from the pod metadata when the incident is shown, so
//! names and roles that arrive late still count.

use std::{
    collections::{HashMap, VecDeque},
    net::SocketAddr,
};

use super::{
    fact::{Client, Fact},
    incident::{Episode, Hidden, Incident, IncidentLog, Phase, State, Subject},
    listener_table::ListenerTable,
    listeners::{Listener, canonical, covers, is_loopback},
};
use crate::inventory::{
    pod_info::{PodInfo, Role, RunState},
    pod_meta::PodMeta,
};

const SECOND: u64 = 1_000_000_000;

/// Clock skew allowed between the API server's deletion time and the node's kernel.
const DELETION_SKEW_NS: u64 = 5 * SECOND;

/// Targets kept per incident (both loopback families and a pod IP, say).
const TARGETS_PER_INCIDENT: usize = 4;

/// Removed container ids remembered per pod, to merge a crash loop's instances.
const REMOVED_PER_POD: usize = 64;

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
    /// Refusals to a non-loopback address wait this long for the pod's IPs (0: no
    /// pod source, never wait).
    pub pod_ip_wait_ns: u64,
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
            pod_ip_wait_ns: 10 * SECOND,
            stuck_job_after_ns: 60 * SECOND,
            history: 10_000,
            history_per_pod: 1_000,
        }
    }
}

/// Why a refusal was not counted in any incident.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotARace {
    /// Not pod-local (another pod, another node, a node port).
    Other,
    /// A container refused on a port it serves itself (e.g. its own exec probe).
    SelfRefusal,
}

/// What a fact or the passing of time changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Opened(u64),
    /// Another refusal counted in an incident.
    Refused(u64),
    /// An open incident's phase is now known better.
    Rephased {
        id: u64,
        from: Phase,
    },
    Resolved(u64),
    /// Refusals that are not a race (at once, or an incident that turned out not to be).
    NotARace {
        why: NotARace,
        refused: u64,
    },
    /// The agent saw a pod start (its cgroup created).
    PodStarted {
        pod_uid: String,
    },
}

impl Change {
    /// The incident this change is about.
    pub fn incident(&self) -> Option<u64> {
        match self {
            Change::Opened(id)
            | Change::Refused(id)
            | Change::Rephased { id, .. }
            | Change::Resolved(id) => Some(*id),
            Change::NotARace { .. } | Change::PodStarted { .. } => None,
        }
    }
}

type Key = (Client, u16);

#[derive(Default)]
struct PodState {
    /// The pod's cgroup was created while the agent watched.
    started_at: Option<u64>,
    /// Container cgroups created while the agent watched, by container id.
    containers_started: HashMap<String, u64>,
    /// Containers torn down, newest last (bounded).
    removed: VecDeque<String>,
    listeners: ListenerTable,
    open: HashMap<Key, u64>,
    /// The incident each key's last resolving listener closed, for late refusals.
    resolved_by_listener: HashMap<Key, u64>,
    /// The open stuck-Job incident of this pod.
    stuck_job: Option<u64>,
    /// Incidents hidden until the pod's IPs are known (open or already resolved).
    awaiting_ips: Vec<u64>,
}

pub struct Detector {
    cfg: DetectorConfig,
    pods: HashMap<String, PodState>,
    log: IncidentLog,
    /// Listeners not tracked: their pod had the maximum of open listeners.
    listeners_dropped: u64,
}

/// When container `container_id` of `pod` started: its cgroup's creation, else the
/// pod source's `startedAt`.
fn container_start(
    ps: Option<&PodState>,
    pod: Option<&PodInfo>,
    container_id: &str,
    meta: &dyn PodMeta,
) -> Option<u64> {
    ps.and_then(|p| p.containers_started.get(container_id).copied())
        .or_else(|| {
            pod?.statuses
                .iter()
                .find(|s| s.container_id == container_id)
                .and_then(|s| s.started_at.as_deref())
                .and_then(|t| meta.boot_ns(t))
        })
}

/// Since when the pod is being deleted, in boot-clock ns: `deletionTimestamp` is the
/// deadline, the deletion began `deletionGracePeriodSeconds` before it. 0 when the pod
/// is terminating but the time cannot be read.
fn terminating_since(pod: &PodInfo, meta: &dyn PodMeta) -> Option<u64> {
    let deadline = pod.deletion_timestamp.as_deref()?;
    let Some(deadline) = meta.boot_ns(deadline) else {
        return Some(0);
    };
    let grace = pod.deletion_grace_period_seconds.unwrap_or(0).max(0) as u64;
    Some(deadline.saturating_sub(grace * SECOND))
}

impl Detector {
    pub fn new(cfg: DetectorConfig) -> Self {
        Self {
            cfg,
            pods: HashMap::new(),
            log: IncidentLog::new(cfg.history, cfg.history_per_pod),
            listeners_dropped: 0,
        }
    }

    pub fn incidents(&self) -> &IncidentLog {
        &self.log
    }

    pub fn observe(&mut self, fact: Fact, meta: &dyn PodMeta) -> Vec<Change> {
        match fact {
            Fact::Refused {
                ts,
                pod_uid,
                client,
                dst,
                local_dst,
            } => self.refused(ts, pod_uid, client, dst, local_dst, meta),
            Fact::ListenerUp {
                ts,
                pod_uid,
                container_id,
                addr,
            } => self.listener_up(ts, &pod_uid, container_id, addr, meta),
            Fact::ListenerDown {
                ts,
                pod_uid,
                container_id,
                addr,
            } => {
                self.listener_down(ts, &pod_uid, container_id, addr);
                Vec::new()
            }
            Fact::PodStarted { ts, pod_uid } => {
                let ps = self.pods.entry(pod_uid.clone()).or_default();
                if ps.started_at.is_some() {
                    return Vec::new();
                }
                ps.started_at = Some(ts);
                vec![Change::PodStarted { pod_uid }]
            }
            Fact::ContainerStarted {
                ts,
                pod_uid,
                container_id,
            } => {
                let ps = self.pods.entry(pod_uid).or_default();
                ps.containers_started.insert(container_id, ts);
                Vec::new()
            }
            Fact::PodRemoved { ts, pod_uid } => self.pod_gone(ts, &pod_uid, None, meta),
            Fact::ContainerRemoved {
                ts,
                pod_uid,
                container_id,
            } => {
                if let Some(ps) = self.pods.get_mut(&pod_uid) {
                    ps.containers_started.remove(&container_id);
                    ps.removed.push_back(container_id.clone());
                    if ps.removed.len() > REMOVED_PER_POD {
                        ps.removed.pop_front();
                    }
                }
                self.pod_gone(ts, &pod_uid, Some(&Client::Container(container_id)), meta)
            }
        }
    }

    /// Time passes: open incidents without a listener become `unresolved`, what the
    /// metadata now says (terminating, deleted, the pod's IPs) is taken into account,
    /// and Job pods kept alive by a sidecar are found.
    pub fn advance(&mut self, now: u64, meta: &dyn PodMeta) -> Vec<Change> {
        let mut changes = Vec::new();
        let uids: Vec<String> = self.pods.keys().cloned().collect();
        for uid in uids {
            if meta.is_deleted(&uid) {
                changes.extend(self.pod_gone(now, &uid, None, meta));
                continue;
            }
            let ps = &self.pods[&uid];
            let mut ids: Vec<u64> = ps.open.values().copied().collect();
            let waiting: Vec<u64> = ps
                .awaiting_ips
                .iter()
                .copied()
                .filter(|id| !ids.contains(id))
                .collect();
            ids.extend(waiting);
            for id in ids {
                changes.extend(self.advance_incident(now, &uid, id, meta));
            }
        }
        changes.extend(self.stuck_jobs(now, meta));
        changes
    }

    fn advance_incident(
        &mut self,
        now: u64,
        uid: &str,
        id: u64,
        meta: &dyn PodMeta,
    ) -> Vec<Change> {
        let drain = self.drain_condition(uid, id, meta);
        let Some(inc) = self.log.get(id) else {
            return vec![];
        };
        let mut changes = Vec::new();
        let since = match inc.episode {
            Episode::BeforeListener => inc.first_refused_at,
            Episode::AfterClose { closed_at } => closed_at,
        };
        match inc.hidden {
            Some(Hidden::HostNetworkPort)
                if now.saturating_sub(since) >= self.cfg.unresolved_after_ns =>
            {
                return self.discard(uid, id, NotARace::Other);
            }
            Some(Hidden::PodIpUnknown) => {
                let target = canonical(inc.targets[0].ip());
                let timed_out = now.saturating_sub(inc.first_refused_at) >= self.cfg.pod_ip_wait_ns;
                let own = match meta.pod(uid).filter(|p| !p.pod_ips.is_empty()) {
                    Some(p) => p.pod_ips.iter().any(|ip| canonical(*ip) == target),
                    None if timed_out => false,
                    None => return vec![],
                };
                if let Some(ps) = self.pods.get_mut(uid) {
                    ps.awaiting_ips.retain(|i| *i != id);
                }
                if !own {
                    return self.discard(uid, id, NotARace::Other);
                }
                let inc = self.log.get_mut(id).expect("checked above");
                inc.hidden = None;
                changes.push(Change::Opened(id));
                if inc.state == State::Resolved {
                    changes.push(Change::Resolved(id));
                    return changes;
                }
            }
            _ => {}
        }
        let inc = self.log.get_mut(id).expect("checked above");
        let from = inc.phase;
        let to = match inc.episode {
            // A listener that went away never makes an `unresolved`: the port was served.
            Episode::AfterClose { .. } if drain => Phase::Drain,
            Episode::AfterClose { .. } => from,
            Episode::BeforeListener
                if now.saturating_sub(since) >= self.cfg.unresolved_after_ns =>
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
    /// is being deleted and the listener went away after the deletion began. Without
    /// any metadata for the pod this cannot be known here (see `pod_gone`).
    fn drain_condition(&self, uid: &str, id: u64, meta: &dyn PodMeta) -> bool {
        let Some(inc) = self.log.get(id) else {
            return false;
        };
        let Episode::AfterClose { closed_at } = inc.episode else {
            return false;
        };
        meta.pod(uid)
            .and_then(|p| terminating_since(p, meta))
            .is_some_and(|since| closed_at.saturating_add(DELETION_SKEW_NS) >= since)
    }

    /// Whether refusals from `client` first seen at `first` are a startup race: the
    /// client container (and the serving one, when known) started at most the startup
    /// bound before. A client that is not a container is timed by the pod's start.
    fn is_startup(
        &self,
        uid: &str,
        client: &Client,
        server_container_id: Option<&str>,
        first: u64,
        meta: &dyn PodMeta,
    ) -> bool {
        let ps = self.pods.get(uid);
        let pod = meta.pod(uid);
        let recent = |t: u64| first.saturating_sub(t) <= self.cfg.startup_bound_ns;
        let client_start = match client {
            Client::Container(id) => container_start(ps, pod, id, meta),
            Client::Cgroup(_) => None,
        }
        .or_else(|| ps.and_then(|p| p.started_at));
        let server_start = server_container_id.and_then(|id| container_start(ps, pod, id, meta));
        client_start.is_some_and(recent) && server_start.is_none_or(recent)
    }

    fn refused(
        &mut self,
        ts: u64,
        pod_uid: String,
        client: Client,
        dst: SocketAddr,
        local_dst: Option<SocketAddr>,
        meta: &dyn PodMeta,
    ) -> Vec<Change> {
        let target = local_dst.unwrap_or(dst);
        let port = target.port();
        let pod = meta.pod(&pod_uid);
        let host_network = pod.is_some_and(|p| p.host_network);
        let ips_known = pod.is_some_and(|p| !p.pod_ips.is_empty());
        let own_ip = pod.is_some_and(|p| {
            p.pod_ips
                .iter()
                .any(|ip| canonical(*ip) == canonical(target.ip()))
        });
        let loopback = is_loopback(target.ip());
        // Pod-local: loopback, or the pod's own IP (on hostNetwork pods "own IP" is the
        // node's). A redirect to another pod's IP (kube-proxy DNAT) is not.
        let wait_for_ips = !loopback && !ips_known && !host_network && self.cfg.pod_ip_wait_ns > 0;
        let pod_local = loopback || (own_ip && !host_network);
        if !pod_local && !wait_for_ips {
            return vec![not_a_race(NotARace::Other)];
        }
        let key = (client.clone(), port);
        let ps = self.pods.entry(pod_uid.clone()).or_default();

        if let Some(&id) = ps.open.get(&key)
            && let Some(inc) = self.log.get_mut(id)
        {
            count(inc, ts, target);
            return if inc.is_shown() {
                vec![Change::Refused(id)]
            } else {
                vec![]
            };
        }
        // The reset of a SYN refused just before the listener came up.
        if let Some(&id) = ps.resolved_by_listener.get(&key)
            && let Some(inc) = self.log.get_mut(id)
        {
            let ready = inc.listener_ready_at.unwrap_or(0);
            if ts <= ready.saturating_add(self.cfg.late_refusal_ns) && ts >= inc.first_refused_at {
                count(inc, ts, target);
                return if inc.is_shown() {
                    vec![Change::Refused(id)]
                } else {
                    vec![]
                };
            }
        }
        // A container refused on a port it declares itself (its own exec probe).
        let client_name = match &client {
            Client::Container(id) => meta.container_name(id),
            Client::Cgroup(_) => None,
        };
        if let (Some(p), Some(name)) = (pod, client_name)
            && p.declaring(port).is_some_and(|c| c.name == name)
        {
            return vec![not_a_race(NotARace::SelfRefusal)];
        }
        let covering: Vec<&Listener> = ps
            .listeners
            .on_port(port)
            .iter()
            .filter(|l| covers(l.addr, target))
            .collect();
        let just_up = covering
            .iter()
            .filter(|l| l.is_up_at(ts))
            .filter_map(|l| l.up_at.map(|up| (up, l.container_id.clone())))
            .find(|(up, _)| ts.saturating_sub(*up) <= self.cfg.late_refusal_ns);
        if covering.iter().any(|l| l.is_up_at(ts)) && just_up.is_none() {
            // Something listens there and still refused: not a race we can explain.
            return vec![not_a_race(NotARace::Other)];
        }
        // Loopback of the other family while the port is served on loopback: a
        // dual-stack client's fallback (`localhost` tried as ::1, then 127.0.0.1).
        if loopback
            && just_up.is_none()
            && ps.listeners.on_port(port).iter().any(|l| {
                l.is_up_at(ts) && (is_loopback(l.addr.ip()) || l.addr.ip().is_unspecified())
            })
        {
            return vec![not_a_race(NotARace::Other)];
        }
        // The last time a listener for this address went away, if it ever did.
        let episode = match covering
            .iter()
            .filter_map(|l| l.down_at)
            .filter(|d| *d <= ts)
            .max()
        {
            Some(closed_at) => Episode::AfterClose { closed_at },
            None => Episode::BeforeListener,
        };
        let listener_container_id = covering.iter().rev().find_map(|l| l.container_id.clone());
        if episode == Episode::BeforeListener
            && let Some(id) = self.crash_loop_incident(&pod_uid, &client, port, meta)
        {
            let ps = self.pods.get_mut(&pod_uid).expect("pod state exists");
            ps.open.retain(|_, v| *v != id);
            ps.open.insert(key, id);
            let inc = self.log.get_mut(id).expect("open incidents are kept");
            inc.client = client;
            inc.client_instances += 1;
            count(inc, ts, target);
            return if inc.is_shown() {
                vec![Change::Refused(id)]
            } else {
                vec![]
            };
        }
        let ps = &self.pods[&pod_uid];
        let declared = pod.is_some_and(|p| p.declaring(port).is_some());
        let seen_listener = !ps.listeners.on_port(port).is_empty();
        let hidden = if host_network && local_dst.is_none() && !declared && !seen_listener {
            Some(Hidden::HostNetworkPort)
        } else if wait_for_ips {
            Some(Hidden::PodIpUnknown)
        } else {
            None
        };
        let phase = match episode {
            Episode::BeforeListener
                if self.is_startup(
                    &pod_uid,
                    &client,
                    listener_container_id.as_deref(),
                    ts,
                    meta,
                ) =>
            {
                Phase::Startup
            }
            // Not started recently (or the agent found the pod running): a listener that
            // comes later is a steady-state outage, not a startup race.
            Episode::BeforeListener => Phase::Steady,
            Episode::AfterClose { .. } => Phase::Steady,
        };
        let incident = Incident {
            id: 0,
            subject: Subject::Refusals,
            phase,
            state: State::Open,
            pod_uid: pod_uid.clone(),
            client,
            port,
            destination: dst,
            local_destination: local_dst,
            targets: vec![target],
            client_instances: 1,
            refused_count: 1,
            first_refused_at: ts,
            last_refused_at: ts,
            listener_ready_at: None,
            listener_closed_at: match episode {
                Episode::AfterClose { closed_at } => Some(closed_at),
                Episode::BeforeListener => None,
            },
            resolved_at: None,
            listener_container_id,
            episode,
            hidden,
        };
        let id = self.insert(incident);
        let ps = self.pods.get_mut(&pod_uid).expect("inserted above");
        ps.open.insert(key, id);
        if hidden == Some(Hidden::PodIpUnknown) {
            ps.awaiting_ips.push(id);
        }
        let mut changes = if hidden.is_none() {
            vec![Change::Opened(id)]
        } else {
            vec![]
        };
        if let Some(inc) = self.log.get(id)
            && let Episode::AfterClose { .. } = inc.episode
            && self.drain_condition(&pod_uid, id, meta)
        {
            self.log.get_mut(id).expect("just inserted").phase = Phase::Drain;
        }
        if let Some((up, container)) = just_up {
            changes.extend(self.resolve_by_listener(&pod_uid, id, up, container, meta));
        }
        changes
    }

    /// An open startup incident on `port` of an earlier instance of `client`'s
    /// container that has been torn down (a crash loop): the new instance's refusals
    /// join it. Instances are the same container when their names agree or are unknown.
    fn crash_loop_incident(
        &self,
        uid: &str,
        client: &Client,
        port: u16,
        meta: &dyn PodMeta,
    ) -> Option<u64> {
        let Client::Container(new_id) = client else {
            return None;
        };
        let ps = self.pods.get(uid)?;
        let new_name = meta.container_name(new_id);
        ps.open.iter().find_map(|((old, p), id)| {
            let Client::Container(old_id) = old else {
                return None;
            };
            if *p != port || !ps.removed.contains(old_id) {
                return None;
            }
            let same = match (new_name, meta.container_name(old_id)) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            };
            let inc = self.log.get(*id)?;
            (same && inc.episode == Episode::BeforeListener).then_some(*id)
        })
    }

    fn insert(&mut self, incident: Incident) -> u64 {
        let (id, evicted) = self.log.insert(incident);
        for old in evicted {
            let Some(ps) = self.pods.get_mut(&old.pod_uid) else {
                continue;
            };
            ps.open.retain(|_, v| *v != old.id);
            ps.resolved_by_listener.retain(|_, v| *v != old.id);
            ps.awaiting_ips.retain(|v| *v != old.id);
            if ps.stuck_job == Some(old.id) {
                ps.stuck_job = None;
            }
        }
        id
    }

    fn listener_up(
        &mut self,
        ts: u64,
        pod_uid: &str,
        container_id: Option<String>,
        addr: SocketAddr,
        meta: &dyn PodMeta,
    ) -> Vec<Change> {
        let ps = self.pods.entry(pod_uid.to_string()).or_default();
        if !ps.listeners.up(addr, container_id.clone(), ts) {
            self.listeners_dropped += 1;
            return Vec::new();
        }
        let ids: Vec<u64> = ps
            .open
            .iter()
            .filter(|((_, port), _)| *port == addr.port())
            .map(|(_, id)| *id)
            .collect();
        let mut changes = Vec::new();
        for id in ids {
            let Some(inc) = self.log.get(id) else {
                continue;
            };
            if inc.targets.iter().any(|t| covers(addr, *t))
                && inc.first_refused_at <= ts.saturating_add(self.cfg.late_refusal_ns)
            {
                changes.extend(self.resolve_by_listener(
                    pod_uid,
                    id,
                    ts,
                    container_id.clone(),
                    meta,
                ));
            } else if let Some(inc) = self.log.get_mut(id) {
                // A listener in the pod on that port ties the port to the pod.
                if inc.hidden == Some(Hidden::HostNetworkPort) {
                    inc.hidden = None;
                    changes.push(Change::Opened(id));
                }
            }
        }
        changes
    }

    fn resolve_by_listener(
        &mut self,
        pod_uid: &str,
        id: u64,
        ts: u64,
        container_id: Option<String>,
        meta: &dyn PodMeta,
    ) -> Vec<Change> {
        let Some(inc) = self.log.get(id) else {
            return vec![];
        };
        // A container refused by its own port before it listened (its exec probe). Not
        // once the incident is `unresolved`: that phase is final and already counted.
        if let (Client::Container(client), Some(server)) = (&inc.client, &container_id)
            && client == server
            && !inc.is_final()
        {
            return self.discard(pod_uid, id, NotARace::SelfRefusal);
        }
        let startup = inc.episode == Episode::BeforeListener
            && self.is_startup(
                pod_uid,
                &inc.client,
                container_id.as_deref(),
                inc.first_refused_at,
                meta,
            );
        let drain = self.drain_condition(pod_uid, id, meta);
        let Some(inc) = self.log.get_mut(id) else {
            return vec![];
        };
        let mut changes = Vec::new();
        if inc.hidden == Some(Hidden::HostNetworkPort) {
            inc.hidden = None;
            changes.push(Change::Opened(id));
        }
        inc.phase = match inc.episode {
            // A listener after the window does not make it a race.
            _ if inc.phase == Phase::Unresolved => Phase::Unresolved,
            Episode::BeforeListener if startup => Phase::Startup,
            Episode::BeforeListener => Phase::Steady,
            Episode::AfterClose { .. } if drain => Phase::Drain,
            Episode::AfterClose { .. } => Phase::Steady,
        };
        inc.listener_ready_at = Some(ts);
        inc.listener_container_id = container_id.or(inc.listener_container_id.take());
        inc.state = State::Resolved;
        inc.resolved_at = Some(ts);
        let key = (inc.client.clone(), inc.port);
        if inc.is_shown() {
            changes.push(Change::Resolved(id));
        }
        if let Some(ps) = self.pods.get_mut(pod_uid) {
            ps.open.remove(&key);
            ps.resolved_by_listener.insert(key, id);
        }
        changes
    }

    fn listener_down(
        &mut self,
        ts: u64,
        pod_uid: &str,
        container_id: Option<String>,
        addr: SocketAddr,
    ) {
        let ps = self.pods.entry(pod_uid.to_string()).or_default();
        ps.listeners.down(addr, container_id, ts);
    }

    /// The pod (or, with `client`, one client container) is gone: open incidents end.
    fn pod_gone(
        &mut self,
        ts: u64,
        pod_uid: &str,
        client: Option<&Client>,
        meta: &dyn PodMeta,
    ) -> Vec<Change> {
        let Some(ps) = self.pods.get(pod_uid) else {
            return vec![];
        };
        let has_meta = meta.pod(pod_uid).is_some();
        // When the deletion began is unknown (no metadata, or a deletion reported
        // without its timestamp), a teardown soon after the listener went away is a drain.
        let deletion_known = meta
            .pod(pod_uid)
            .is_some_and(|p| p.deletion_timestamp.is_some());
        let mut ids: Vec<u64> = ps
            .open
            .iter()
            .filter(|((c, _), _)| client.is_none_or(|gone| gone == c))
            .map(|(_, id)| *id)
            .collect();
        let mut unconfirmed = Vec::new();
        if client.is_none() {
            ids.extend(ps.stuck_job);
            // Resolved while waiting for the pod's IPs, which never came.
            unconfirmed.extend(ps.awaiting_ips.iter().filter(|id| !ids.contains(id)));
        }
        let grace = self.cfg.drain_grace_ns;
        let timing_drain = |closed_at: u64| {
            (!has_meta || (client.is_none() && !deletion_known))
                && ts.saturating_sub(closed_at) <= grace
        };
        let mut changes = Vec::new();
        for id in unconfirmed {
            changes.extend(self.discard(pod_uid, id, NotARace::Other));
        }
        for id in ids {
            let drain = self.drain_condition(pod_uid, id, meta);
            let Some(inc) = self.log.get_mut(id) else {
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
                    // A crashed client's startup incident still ends when the listener comes.
                    Episode::BeforeListener => continue,
                    // With metadata, a client leaving while the pod is not being deleted
                    // does not end an outage: the listener may come back.
                    Episode::AfterClose { .. } if has_meta && !drain => continue,
                    Episode::AfterClose { .. } => {}
                }
            }
            if inc.hidden.is_some() {
                let why = match inc.hidden {
                    Some(Hidden::Discarded) => continue,
                    _ => NotARace::Other,
                };
                changes.extend(self.discard(pod_uid, id, why));
                continue;
            }
            let from = inc.phase;
            inc.phase = match inc.episode {
                _ if from == Phase::Unresolved => Phase::Unresolved,
                Episode::AfterClose { .. } if drain => Phase::Drain,
                Episode::AfterClose { closed_at } if timing_drain(closed_at) => Phase::Drain,
                Episode::AfterClose { .. } => Phase::Steady,
                // No listener ever served the port during the incident.
                Episode::BeforeListener => Phase::Unresolved,
            };
            inc.state = State::Resolved;
            inc.resolved_at = Some(ts);
            if inc.phase != from {
                changes.push(Change::Rephased { id, from });
            }
            changes.push(Change::Resolved(id));
            self.forget_open(pod_uid, id);
        }
        if client.is_none() {
            self.pods.remove(pod_uid);
        }
        changes
    }

    /// Incident `id` is not a race after all: hidden, and its refusals counted as `why`.
    fn discard(&mut self, pod_uid: &str, id: u64, why: NotARace) -> Vec<Change> {
        let Some(inc) = self.log.get_mut(id) else {
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
        self.forget_open(pod_uid, id);
        if let Some(ps) = self.pods.get_mut(pod_uid) {
            ps.awaiting_ips.retain(|i| *i != id);
        }
        vec![Change::NotARace { why, refused }]
    }

    fn forget_open(&mut self, pod_uid: &str, id: u64) {
        if let Some(ps) = self.pods.get_mut(pod_uid) {
            ps.open.retain(|_, v| *v != id);
        }
    }

    /// Job pods whose app containers all finished while a classic sidecar still runs,
    /// for longer than the threshold: one incident per pod, resolved when the sidecar
    /// stops or the pod goes away.
    fn stuck_jobs(&mut self, now: u64, meta: &dyn PodMeta) -> Vec<Change> {
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
            if let Some(id) = self.pods.get_mut(&uid).and_then(|ps| ps.stuck_job.take())
                && let Some(inc) = self.log.get_mut(id)
            {
                inc.state = State::Resolved;
                inc.resolved_at = Some(now);
                changes.push(Change::Resolved(id));
            }
        }
        for (uid, sidecar, finished) in found {
            if self.pods.get(&uid).is_some_and(|ps| ps.stuck_job.is_some()) {
                continue;
            }
            let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
            let id = self.insert(Incident {
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
                episode: Episode::BeforeListener,
                hidden: None,
            });
            self.pods.entry(uid).or_default().stuck_job = Some(id);
            changes.push(Change::Opened(id));
        }
        changes
    }

    /// Pods the detector holds state for.
    pub fn tracked_pod_uids(&self) -> impl Iterator<Item = &str> {
        self.pods.keys().map(String::as_str)
    }

    /// The pod is gone though its removal was never seen: its open incidents end as
    /// if its cgroup had been removed at `now`, and its state is dropped.
    pub fn forget_pod(&mut self, now: u64, pod_uid: &str, meta: &dyn PodMeta) -> Vec<Change> {
        self.pod_gone(now, pod_uid, None, meta)
    }

    /// Whether a listener on `port` of the pod was seen (and is still on record).
    pub fn listened_on(&self, pod_uid: &str, port: u16) -> bool {
        self.pods
            .get(pod_uid)
            .is_some_and(|p| !p.listeners.on_port(port).is_empty())
    }

    /// Pods with state (for tests and stats).
    pub fn tracked_pods(&self) -> usize {
        self.pods.len()
    }

    /// Listener records kept for a pod (for tests).
    pub fn listeners_of(&self, pod_uid: &str) -> usize {
        self.pods.get(pod_uid).map_or(0, |p| p.listeners.len())
    }

    /// Listeners not tracked because their pod had the maximum of open listeners
    /// (`sidecar_race_listeners_dropped_total`).
    pub fn listeners_dropped(&self) -> u64 {
        self.listeners_dropped
    }
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
        finished = finished.max(meta.boot_ns(s.finished_at.as_deref()?)?);
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

fn not_a_race(why: NotARace) -> Change {
    Change::NotARace { why, refused: 1 }
}

fn count(inc: &mut Incident, ts: u64, target: SocketAddr) {
    inc.refused_count += 1;
    inc.first_refused_at = inc.first_refused_at.min(ts);
    inc.last_refused_at = inc.last_refused_at.max(ts);
    if inc.targets.len() < TARGETS_PER_INCIDENT && !inc.targets.contains(&target) {
        inc.targets.push(target);
    }
}
