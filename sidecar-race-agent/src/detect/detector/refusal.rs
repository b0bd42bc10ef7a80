//! A refused connect: counted into the client's open incident on that port (or the
//! one its listener just resolved), discarded when it is no race, or a new incident
//! whose phase follows from the listeners seen on the port.

use std::{net::SocketAddr, sync::Arc};

use super::{
    change::{Change, NotARace},
    config::DELETION_SKEW_NS,
    held::Burst,
    hidden::TARGETS_PER_INCIDENT,
    incidents::Key,
    instances::Instance,
    state::{Detector, PodState},
};
use crate::detect::{
    listener_table::ListenerTable,
    service::{Protocol, Service},
};
use crate::{
    detect::{
        fact::Client,
        incident::{Episode, Hidden, Incident, Phase},
        listeners::{Listener, canonical, covers, is_loopback},
    },
    names::Comm,
    pods::{
        pod_info::{ContainerInfo, PodInfo},
        pod_meta::PodMeta,
    },
};

/// One refusal, as the detector reads it.
struct Refusal {
    ts: u64,
    client: Client,
    dst: SocketAddr,
    local_dst: Option<SocketAddr>,
    /// Where it was refused after redirects.
    target: SocketAddr,
    process: Comm,
    protocol: Protocol,
}

/// What the listeners on the refused port say about a refusal.
struct ListenerHistory {
    /// A covering listener came up just after (the SYN was refused just before): its
    /// time and container.
    just_up: Option<(u64, Option<String>)>,
    episode: Episode,
    listener_container_id: Option<String>,
    /// Any listener was ever seen on the port in the pod.
    seen_on_port: bool,
    /// A loopback listener up on the port that does not take the refused address.
    uncovering: Option<SocketAddr>,
}

impl Detector {
    pub(super) fn refused(
        &mut self,
        ts: u64,
        pod_uid: Arc<str>,
        client: Client,
        (protocol, dst, local_dst): (Protocol, SocketAddr, Option<SocketAddr>),
        process: Comm,
        meta: &dyn PodMeta,
    ) -> Vec<Change> {
        let target = local_dst.unwrap_or(dst);
        let r = Refusal {
            ts,
            client,
            dst,
            local_dst,
            target,
            process,
            protocol,
        };
        let port = target.port();
        let udp = protocol == Protocol::Udp;
        let service = Service::port(protocol, port);
        let key = (r.client.clone(), service.clone());
        let loopback = is_loopback(target.ip());
        // Loopback is pod-local whatever the pod's IPs: a refusal counted into a known
        // incident needs nothing of the pod's metadata (a storm's usual path).
        if loopback {
            self.pods.entry(pod_uid.clone()).or_default();
            if let Some(changes) = self.count_into_known(&pod_uid, &key, &r, false) {
                return changes;
            }
        }
        let pod = meta.pod(&pod_uid);
        let host_network = pod.is_some_and(|p| p.host_network);
        let ips_known = pod.is_some_and(|p| !p.pod_ips.is_empty());
        let own_ip = pod.is_some_and(|p| {
            p.pod_ips
                .iter()
                .any(|ip| canonical(*ip) == canonical(target.ip()))
        });
        let may_wait = self.cfg.metadata_wait_ns > 0 && meta.has_source();
        // Pod-local: loopback, or the pod's own IP (on hostNetwork pods "own IP" is the
        // node's). A redirect to another pod's IP (kube-proxy DNAT) is not.
        let wait_for_ips = !loopback && !ips_known && !host_network && may_wait;
        let pod_local = loopback || (own_ip && !host_network);
        if !pod_local && !wait_for_ips {
            return vec![not_a_race(NotARace::Other, 1)];
        }
        if !loopback {
            self.pods.entry(pod_uid.clone()).or_default();
            if let Some(changes) = self.count_into_known(&pod_uid, &key, &r, wait_for_ips) {
                return changes;
            }
        }
        // A container refused on a port it declares itself (its own exec probe).
        let client_name = match &r.client {
            Client::Container(id) => meta.container_name(id),
            Client::Cgroup(_) => None,
        };
        if let (Some(p), Some(name)) = (pod, client_name)
            && declaring(p, udp, port).is_some_and(|c| c.name == name)
        {
            return vec![not_a_race(NotARace::SelfRefusal, 1)];
        }
        let dialed_before = self
            .incidents
            .resolved_by_listener(&pod_uid, &key)
            .map(|(_, inc)| inc.targets.clone())
            .unwrap_or_default();
        let late_refusal_ns = self.cfg.late_refusal_ns;
        // The client instance's own start: listeners gone before it never served it
        // (a container restarted by a rule, or all of them restarted in place).
        let client_since = match &r.client {
            Client::Container(id) => container_start(self.pods.get(&*pod_uid), pod, id, meta),
            Client::Cgroup(_) => None,
        };
        let ps = self.pod_state(&pod_uid);
        let seen = (&dialed_before[..], late_refusal_ns, client_since);
        let table = if udp {
            // A datagram refused proves that no socket holds the port now: a bound
            // socket seen earlier went away at or before this refusal (its close is
            // not hooked; bounded by the refusal).
            ps.udp_listeners.gone_before(r.target, ts);
            &ps.udp_listeners
        } else {
            &ps.listeners
        };
        let mut history = match listener_history(table, &r, loopback, seen) {
            Ok(history) => history,
            Err(why) => return vec![not_a_race(why, 1)],
        };
        // No hook sees a UDP socket close: in a pod being deleted, a datagram refused
        // on a port with no socket seen there is refused after its socket went away, at
        // or before this refusal (the close time is bounded by it, not known).
        if udp
            && history.episode == Episode::BeforeListener
            && !history.seen_on_port
            && self
                .deletion_began(&pod_uid, meta)
                .is_some_and(|d| d <= ts.saturating_add(DELETION_SKEW_NS))
        {
            history.episode = Episode::AfterClose { closed_at: ts };
        }
        let mut instance_unnamed = false;
        if history.episode == Episode::BeforeListener {
            match self.crash_loop_incident(&pod_uid, &r.client, &service, meta) {
                Instance::Of(id) => {
                    if let Some(inc) = self.incidents.reopen_under(&pod_uid, id, key.clone()) {
                        inc.client = r.client.clone();
                        inc.client_instances += 1;
                        return counted(inc, id, &r);
                    }
                }
                Instance::Unnamed => instance_unnamed = may_wait,
                Instance::None => {}
            }
        }
        let declared = pod.is_some_and(|p| declaring(p, udp, port).is_some());
        let hidden = if wait_for_ips {
            Some(Hidden::PodIpUnknown)
        } else if pod.is_none() && may_wait {
            Some(Hidden::PodUnknown)
        } else if host_network && local_dst.is_none() && !declared && !history.seen_on_port {
            Some(Hidden::HostNetworkPort)
        } else if instance_unnamed {
            Some(Hidden::ClientUnnamed)
        } else if udp && !pod.is_some_and(|p| p.owns_udp(port)) && !history.seen_on_port {
            // The noise rule: DNS, NTP and the like are refused on ports no container
            // of the pod owns; shown only once a socket of the pod binds the port.
            Some(Hidden::UdpPortUnproven)
        } else {
            None
        };
        self.open_incident(pod_uid, key, r, history, hidden, meta)
    }

    /// Counts the refusal into the client's open incident on the port, or into the
    /// one a listener resolved just before (the reset of a SYN refused just before
    /// the listener came up); `None` when there is neither.
    /// A refusal waiting for the pod's IPs counts only into an incident that waits too.
    fn count_into_known(
        &mut self,
        pod_uid: &str,
        key: &Key,
        r: &Refusal,
        wait_for_ips: bool,
    ) -> Option<Vec<Change>> {
        if wait_for_ips {
            let (id, inc) = self.incidents.open_awaiting_ips(pod_uid, key)?;
            return Some(counted(inc, id, r));
        }
        if let Some((id, inc)) = self.incidents.open(pod_uid, key) {
            return Some(counted(inc, id, r));
        }
        let late = self.cfg.late_refusal_ns;
        let (id, inc) = self.incidents.resolved_by_listener(pod_uid, key)?;
        let ready = inc.listener_ready_at.unwrap_or(0);
        (r.ts <= ready.saturating_add(late) && r.ts >= inc.first_refused_at)
            .then(|| counted(inc, id, r))
    }

    /// A new incident of `r`, resolved at once when a covering listener came up just
    /// after the refusal.
    fn open_incident(
        &mut self,
        pod_uid: Arc<str>,
        key: Key,
        r: Refusal,
        history: ListenerHistory,
        hidden: Option<Hidden>,
        meta: &dyn PodMeta,
    ) -> Vec<Change> {
        let episode = history.episode;
        let phase = match episode {
            Episode::BeforeListener
                if self.is_startup(
                    &pod_uid,
                    &r.client,
                    history.listener_container_id.as_deref(),
                    r.ts,
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
        let mut incident = Incident::opened(
            pod_uid.to_string(),
            r.client,
            (phase, episode),
            (r.ts, &r.process),
            history.listener_container_id,
        );
        incident.port = r.target.port();
        incident.protocol = r.protocol;
        incident.destination = r.dst;
        incident.local_destination = r.local_dst;
        incident.targets = vec![r.target];
        incident.uncovering_listener = history.uncovering;
        incident.hidden = hidden;
        let (id, mut changes) = self.insert_refusals(incident, key, meta);
        if let Some((up, container)) = history.just_up {
            changes.extend(self.resolve_by_listener(&pod_uid, id, up, container, meta));
        }
        changes
    }

    /// Stores a new refusal incident (a port's or a Unix socket's) open under `key`,
    /// a drain when its listener went away while the pod was being deleted; its id
    /// and the change to report.
    pub(super) fn insert_refusals(
        &mut self,
        incident: Incident,
        key: Key,
        meta: &dyn PodMeta,
    ) -> (u64, Vec<Change>) {
        let (pod_uid, shown) = (incident.pod_uid.clone(), incident.is_shown());
        let after_close = matches!(incident.episode, Episode::AfterClose { .. });
        let mut incident = incident;
        incident.pod_start = self.start_at(&pod_uid, incident.first_refused_at);
        let id = self.incidents.insert_open(incident, key);
        self.seed_timeline(id, meta);
        if after_close
            && self.drain_condition(&pod_uid, id, meta)
            && let Some(inc) = self.incidents.get_mut(id)
        {
            inc.phase = Phase::Drain;
        }
        (
            id,
            if shown {
                vec![Change::Opened(id)]
            } else {
                vec![]
            },
        )
    }

    /// Whether refusals from `client` first seen at `first` are a startup race: the
    /// client container (and the serving one, when known) started at most the startup
    /// bound before. A client that is not a container is timed by the pod's start: as
    /// this agent saw it, else the pod's `status.startTime` (an agent restarted
    /// mid-startup saw neither start).
    pub(super) fn is_startup(
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
        .or_else(|| self.latest_start(uid))
        .or_else(|| pod.and_then(|p| p.start_time).and_then(|t| meta.boot_ns(t)));
        let server_start = server_container_id.and_then(|id| container_start(ps, pod, id, meta));
        client_start.is_some_and(recent) && server_start.is_none_or(recent)
    }
}

/// What the pod's listeners on the refused port say about `r`, or why it is no race
/// (something listens there and still refused, or a dual-stack client's fallback).
/// `seen`: the addresses the client dialed before, the late-refusal bound, and when
/// the client instance started, if known: listeners gone before that are not its.
fn listener_history(
    table: &ListenerTable,
    r: &Refusal,
    loopback: bool,
    (dialed_before, late_refusal_ns, client_since): (&[SocketAddr], u64, Option<u64>),
) -> Result<ListenerHistory, NotARace> {
    let (ts, port) = (r.ts, r.target.port());
    let all_on_port = table.on_port(port);
    let gone_before_client =
        |l: &Listener| client_since.is_some_and(|s| l.down_at.is_some_and(|d| d < s));
    let on_port: Vec<&Listener> = all_on_port
        .iter()
        .filter(|l| !gone_before_client(l))
        .collect();
    let covering: Vec<&Listener> = on_port
        .iter()
        .copied()
        .filter(|l| covers(l.addr, r.target))
        .collect();
    let just_up = covering
        .iter()
        .filter(|l| l.is_up_at(ts))
        .filter_map(|l| l.up_at.map(|up| (up, l.container_id.clone())))
        .find(|(up, _)| ts.saturating_sub(*up) <= late_refusal_ns);
    if covering.iter().any(|l| l.is_up_at(ts)) && just_up.is_none() {
        // Something listens there and still refused: not a race we can explain.
        return Err(NotARace::Other);
    }
    // Up on the port yet not taking this loopback address: on loopback or the wildcard
    // of the other family, else on another address (the pod IP), named in the advice.
    let local = |l: &Listener| is_loopback(l.addr.ip()) || l.addr.ip().is_unspecified();
    let up_elsewhere: Vec<&Listener> = on_port
        .iter()
        .copied()
        .filter(|l| l.is_up_at(ts) && !covers(l.addr, r.target))
        .filter(|_| loopback && just_up.is_none())
        .collect();
    let uncovering = up_elsewhere
        .iter()
        .find(|l| local(l))
        .or_else(|| up_elsewhere.first())
        .copied();
    // A dual-stack client's fallback: `localhost` tried as ::1, then 127.0.0.1 served;
    // or a client seen dialing the served address before. Else it never connects.
    if let Some(l) = uncovering
        && (local(l) && canonical(r.target.ip()).is_ipv6() && canonical(l.addr.ip()).is_ipv4()
            || dialed_before.iter().any(|d| covers(l.addr, *d)))
    {
        return Err(NotARace::Other);
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
    let listener_container_id = covering
        .iter()
        .rev()
        .find_map(|l| l.container_id.clone())
        .or_else(|| uncovering.and_then(|l| l.container_id.clone()));
    Ok(ListenerHistory {
        just_up,
        episode,
        listener_container_id,
        seen_on_port: !all_on_port.is_empty(),
        uncovering: uncovering.map(|l| l.addr),
    })
}

/// The container that declares `port` (of UDP when `udp`), if exactly one does.
fn declaring(p: &PodInfo, udp: bool, port: u16) -> Option<&ContainerInfo> {
    if udp {
        p.declaring_udp(port)
    } else {
        p.declaring(port)
    }
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
                .and_then(|s| s.started_at)
                .and_then(|t| meta.boot_ns(t))
        })
}

pub(super) fn not_a_race(why: NotARace, refused: u64) -> Change {
    Change::NotARace { why, refused }
}

/// Counts refusal `r` into incident `id`: a change when it is shown.
fn counted(inc: &mut Incident, id: u64, r: &Refusal) -> Vec<Change> {
    let target = r.target;
    if inc.targets.len() < TARGETS_PER_INCIDENT && !inc.targets.contains(&target) {
        inc.targets.push(target);
    }
    count_refusal(inc, id, r.ts, &r.process)
}

/// Counts a refusal at `ts` by `process` into incident `id` (a port's or a Unix
/// socket's): a change when it is shown.
pub(super) fn count_refusal(inc: &mut Incident, id: u64, ts: u64, process: &str) -> Vec<Change> {
    count_burst(inc, id, Burst::one(ts), process)
}

/// Counts `burst` refusals by `process` into incident `id`: a change when it is shown.
pub(super) fn count_burst(inc: &mut Incident, id: u64, burst: Burst, process: &str) -> Vec<Change> {
    inc.refused_count += burst.count;
    let client = inc.client.container_id();
    inc.timeline.refused(burst.last, burst.count, client);
    inc.processes.record_n(process, burst.count);
    inc.first_refused_at = inc.first_refused_at.min(burst.first);
    inc.last_refused_at = inc.last_refused_at.max(burst.last);
    if inc.is_shown() {
        vec![Change::Refused(id)]
    } else {
        vec![]
    }
}
