//! The detector: pure logic over timestamped facts and pod metadata. No I/O, no clock
//! of its own: time advances only with the facts and `advance(now)`.

use std::{collections::HashMap, net::SocketAddr};

use super::{
    fact::{Client, Fact},
    incident::{Episode, Incident, IncidentLog, Phase, State},
    listeners::{Listener, canonical, covers, is_loopback},
};
use crate::inventory::pod_info::PodInfo;

const SECOND: u64 = 1_000_000_000;

/// What the detector knows of pods beyond the kernel (names and intent).
pub trait PodMeta {
    fn pod(&self, uid: &str) -> Option<&PodInfo>;
    /// The pod source reports the pod deleted.
    fn is_deleted(&self, uid: &str) -> bool;
    /// Name of a runtime container id.
    fn container_name(&self, container_id: &str) -> Option<&str>;
}

/// No pod source: detection from the kernel alone.
pub struct NoMeta;

impl PodMeta for NoMeta {
    fn pod(&self, _: &str) -> Option<&PodInfo> {
        None
    }
    fn is_deleted(&self, _: &str) -> bool {
        false
    }
    fn container_name(&self, _: &str) -> Option<&str> {
        None
    }
}

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
    pub history: usize,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        Self {
            unresolved_after_ns: 120 * SECOND,
            late_refusal_ns: SECOND / 10,
            drain_grace_ns: 30 * SECOND,
            history: 10_000,
        }
    }
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
    /// A refusal that is not pod-local: counted as `other`, never an incident.
    Other,
    /// A hostNetwork candidate whose port never tied to its pod: `other` after all.
    Discarded {
        refused: u64,
    },
    /// The agent saw a pod start (its cgroup created).
    PodStarted {
        pod_uid: String,
    },
}

type Key = (Client, u16);

#[derive(Default)]
struct PodState {
    /// The pod's cgroup was created while the agent watched.
    started_at: Option<u64>,
    listeners: Vec<Listener>,
    open: HashMap<Key, u64>,
    /// The incident each key's last resolving listener closed, for late refusals.
    resolved_by_listener: HashMap<Key, u64>,
}

/// Listener records kept per pod at most (a pod opening many ephemeral listeners).
const LISTENERS_PER_POD: usize = 256;

impl PodState {
    /// Only the last closed listener of an address matters (for refusals after it went
    /// away); older ones are dropped, and the oldest closed ones beyond the cap.
    fn forget_old_listeners(&mut self, addr: SocketAddr) {
        let last_closed = self
            .listeners
            .iter()
            .filter(|l| l.addr == addr)
            .filter_map(|l| l.down_at)
            .max();
        self.listeners
            .retain(|l| l.addr != addr || l.down_at.is_none() || l.down_at == last_closed);
        while self.listeners.len() >= LISTENERS_PER_POD {
            let Some(oldest) = self
                .listeners
                .iter()
                .enumerate()
                .filter(|(_, l)| l.down_at.is_some())
                .min_by_key(|(_, l)| l.down_at)
                .map(|(i, _)| i)
            else {
                break;
            };
            self.listeners.remove(oldest);
        }
    }
}

pub struct Detector {
    cfg: DetectorConfig,
    pods: HashMap<String, PodState>,
    log: IncidentLog,
}

impl Detector {
    pub fn new(cfg: DetectorConfig) -> Self {
        Self {
            cfg,
            pods: HashMap::new(),
            log: IncidentLog::new(cfg.history),
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
            Fact::PodRemoved { ts, pod_uid } => self.pod_gone(ts, &pod_uid, None, meta),
            Fact::ContainerRemoved {
                ts,
                pod_uid,
                container_id,
            } => self.pod_gone(ts, &pod_uid, Some(&Client::Container(container_id)), meta),
        }
    }

    /// Time passes: open incidents without a listener become `unresolved`, and what
    /// the metadata now says (terminating, deleted) is taken into account.
    pub fn advance(&mut self, now: u64, meta: &dyn PodMeta) -> Vec<Change> {
        let mut changes = Vec::new();
        let uids: Vec<String> = self.pods.keys().cloned().collect();
        for uid in uids {
            if meta.is_deleted(&uid) {
                changes.extend(self.pod_gone(now, &uid, None, meta));
                continue;
            }
            let terminating = meta.pod(&uid).is_some_and(PodInfo::is_terminating);
            let ids: Vec<u64> = self.pods[&uid].open.values().copied().collect();
            for id in ids {
                let Some(inc) = self.log.get_mut(id) else {
                    continue;
                };
                let from = inc.phase;
                let since = match inc.episode {
                    Episode::BeforeListener => inc.first_refused_at,
                    Episode::AfterClose { closed_at } => closed_at,
                };
                if inc.awaiting_attribution
                    && now.saturating_sub(since) >= self.cfg.unresolved_after_ns
                {
                    let refused = inc.refused_count;
                    self.forget_open(&uid, id);
                    changes.push(Change::Discarded { refused });
                    continue;
                }
                let to = match (inc.episode, terminating) {
                    (Episode::AfterClose { .. }, true) => Phase::Drain,
                    _ if now.saturating_sub(since) >= self.cfg.unresolved_after_ns => {
                        Phase::Unresolved
                    }
                    _ => from,
                };
                if to != from {
                    inc.phase = to;
                    if !inc.awaiting_attribution {
                        changes.push(Change::Rephased { id, from });
                    }
                }
            }
        }
        changes
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
        let own_ip = pod.is_some_and(|p| {
            p.pod_ips
                .iter()
                .any(|ip| canonical(*ip) == canonical(target.ip()))
        });
        let host_network = pod.is_some_and(|p| p.host_network);
        // On hostNetwork pods "own IP" is the node's: only loopback/redirect with proof counts.
        let pod_local =
            local_dst.is_some() || is_loopback(target.ip()) || (own_ip && !host_network);
        if !pod_local {
            return vec![Change::Other];
        }
        let key = (client.clone(), port);
        let ps = self.pods.entry(pod_uid.clone()).or_default();

        if let Some(&id) = ps.open.get(&key)
            && let Some(inc) = self.log.get_mut(id)
        {
            count(inc, ts);
            return if inc.awaiting_attribution {
                vec![]
            } else {
                vec![Change::Refused(id)]
            };
        }
        // The reset of a SYN refused just before the listener came up.
        if let Some(&id) = ps.resolved_by_listener.get(&key)
            && let Some(inc) = self.log.get_mut(id)
        {
            let ready = inc.listener_ready_at.unwrap_or(0);
            if ts <= ready.saturating_add(self.cfg.late_refusal_ns) && ts >= inc.first_refused_at {
                count(inc, ts);
                return vec![Change::Refused(id)];
            }
        }
        let covering: Vec<&Listener> = ps
            .listeners
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
            return vec![Change::Other];
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
        let declared = pod.is_some_and(|p| p.declaring(port).is_some());
        let seen_listener = ps.listeners.iter().any(|l| l.addr.port() == port);
        let awaiting_attribution =
            host_network && local_dst.is_none() && !declared && !seen_listener;
        let terminating = pod.is_some_and(PodInfo::is_terminating);
        let phase = match episode {
            Episode::BeforeListener if ps.started_at.is_some() => Phase::Startup,
            // Watched from before its start or not, the pod had no listener we saw:
            // a pod the agent found running gets no startup incident.
            Episode::BeforeListener => Phase::Steady,
            Episode::AfterClose { .. } if terminating => Phase::Drain,
            Episode::AfterClose { .. } => Phase::Steady,
        };
        let listener_container_id = covering.iter().rev().find_map(|l| l.container_id.clone());
        let incident = Incident {
            id: 0,
            phase,
            state: State::Open,
            pod_uid: pod_uid.clone(),
            client,
            port,
            destination: dst,
            local_destination: local_dst,
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
            awaiting_attribution,
        };
        let (id, evicted) = self.log.insert(incident);
        if let Some(old) = evicted
            && let Some(ps) = self.pods.get_mut(&old.pod_uid)
        {
            ps.open.retain(|_, v| *v != old.id);
            ps.resolved_by_listener.retain(|_, v| *v != old.id);
        }
        let ps = self.pods.get_mut(&pod_uid).expect("inserted above");
        ps.open.insert(key, id);
        let mut changes = if awaiting_attribution {
            vec![]
        } else {
            vec![Change::Opened(id)]
        };
        if let Some((up, container)) = just_up {
            changes.extend(self.resolve_by_listener(&pod_uid, id, up, container, meta));
        }
        changes
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
        ps.forget_old_listeners(addr);
        ps.listeners.push(Listener {
            addr,
            container_id: container_id.clone(),
            up_at: Some(ts),
            down_at: None,
        });
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
            let target = inc.local_destination.unwrap_or(inc.destination);
            if covers(addr, target)
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
                if inc.awaiting_attribution {
                    inc.awaiting_attribution = false;
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
        let started = self.pods.get(pod_uid).and_then(|p| p.started_at).is_some();
        let terminating = meta.pod(pod_uid).is_some_and(PodInfo::is_terminating);
        let Some(inc) = self.log.get_mut(id) else {
            return vec![];
        };
        let mut changes = Vec::new();
        if inc.awaiting_attribution {
            inc.awaiting_attribution = false;
            changes.push(Change::Opened(id));
        }
        inc.phase = match inc.episode {
            // A listener after the window does not make it a race.
            _ if inc.phase == Phase::Unresolved => Phase::Unresolved,
            Episode::BeforeListener if started => Phase::Startup,
            Episode::BeforeListener => Phase::Steady,
            Episode::AfterClose { .. } if terminating => Phase::Drain,
            Episode::AfterClose { .. } => Phase::Steady,
        };
        inc.listener_ready_at = Some(ts);
        inc.listener_container_id = container_id.or(inc.listener_container_id.take());
        inc.state = State::Resolved;
        inc.resolved_at = Some(ts);
        let key = (inc.client.clone(), inc.port);
        changes.push(Change::Resolved(id));
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
        match ps
            .listeners
            .iter_mut()
            .rev()
            .find(|l| l.addr == addr && l.down_at.is_none())
        {
            Some(l) => l.down_at = Some(ts),
            None => ps.listeners.push(Listener {
                addr,
                container_id,
                up_at: None,
                down_at: Some(ts),
            }),
        }
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
        let terminating = meta.pod(pod_uid).is_some_and(PodInfo::is_terminating);
        let ids: Vec<u64> = ps
            .open
            .iter()
            .filter(|((c, _), _)| client.is_none_or(|gone| gone == c))
            .map(|(_, id)| *id)
            .collect();
        let mut changes = Vec::new();
        for id in ids {
            let Some(inc) = self.log.get_mut(id) else {
                continue;
            };
            if client.is_some() && inc.episode == Episode::BeforeListener {
                continue; // a crashed client's startup incident still ends when the listener comes
            }
            if inc.awaiting_attribution {
                let refused = inc.refused_count;
                self.forget_open(pod_uid, id);
                changes.push(Change::Discarded { refused });
                continue;
            }
            let from = inc.phase;
            inc.phase = match inc.episode {
                Episode::AfterClose { closed_at }
                    if terminating || ts.saturating_sub(closed_at) <= self.cfg.drain_grace_ns =>
                {
                    Phase::Drain
                }
                _ => Phase::Unresolved,
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

    fn forget_open(&mut self, pod_uid: &str, id: u64) {
        if let Some(ps) = self.pods.get_mut(pod_uid) {
            ps.open.retain(|_, v| *v != id);
        }
    }

    /// Pods with state (for tests and stats).
    pub fn tracked_pods(&self) -> usize {
        self.pods.len()
    }

    /// Listener records kept for a pod (for tests).
    pub fn listeners_of(&self, pod_uid: &str) -> usize {
        self.pods.get(pod_uid).map_or(0, |p| p.listeners.len())
    }
}

fn count(inc: &mut Incident, ts: u64) {
    inc.refused_count += 1;
    inc.first_refused_at = inc.first_refused_at.min(ts);
    inc.last_refused_at = inc.last_refused_at.max(ts);
}
