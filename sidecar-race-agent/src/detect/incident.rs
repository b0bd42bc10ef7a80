//! Incidents and their bounded history.

use std::{collections::VecDeque, net::SocketAddr};

use serde::Serialize;

use super::fact::Client;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Refused before the port's first listener in the pod came up.
    Startup,
    /// Refused after the listener went away while the pod was going down.
    Drain,
    /// The listener went away and came back while the pod kept running.
    Steady,
    /// No listener for the port within the window: a misconfiguration, not a race.
    Unresolved,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Startup => "startup",
            Phase::Drain => "drain",
            Phase::Steady => "steady",
            Phase::Unresolved => "unresolved",
        }
    }

    pub fn parse(s: &str) -> Option<Phase> {
        [
            Phase::Startup,
            Phase::Drain,
            Phase::Steady,
            Phase::Unresolved,
        ]
        .into_iter()
        .find(|p| p.as_str() == s)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Open,
    Resolved,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Open => "open",
            State::Resolved => "resolved",
        }
    }
}

/// What an incident is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// Connects refused on a port of the pod.
    Refusals,
    /// A Job's pod whose app containers all finished while classic sidecar
    /// `sidecar` (a container name) kept running: the Job never completes.
    /// `first_refused_at` holds when the last app container finished.
    StuckJob { sidecar: String },
}

/// Why an incident is not shown (yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hidden {
    /// hostNetwork pods: loopback is the node's; shown once a listener in the pod or a
    /// declared port ties the port to the pod.
    HostNetworkPort,
    /// Refused on a non-loopback address while the pod's IPs are unknown: shown once
    /// they are known and include it, else counted as `other`.
    PodIpUnknown,
    /// Turned out not to be a race (a container refused by itself, or not pod-local).
    Discarded,
}

/// What the refusals happened relative to: the listener never seen yet, or the
/// listener that went away at `closed_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Episode {
    BeforeListener,
    AfterClose { closed_at: u64 },
}

/// One race: a client container refused on one port of its pod, in one phase.
/// Times are kernel boot-clock nanoseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incident {
    pub id: u64,
    pub subject: Subject,
    pub phase: Phase,
    pub state: State,
    pub pod_uid: String,
    pub client: Client,
    pub port: u16,
    pub destination: SocketAddr,
    pub local_destination: Option<SocketAddr>,
    /// Distinct targets refused (after redirects), both families of a dual-stack dial:
    /// a listener covering any of them resolves the incident. At most a few.
    pub targets: Vec<SocketAddr>,
    /// Container instances of the client merged into this incident (a crash loop).
    pub client_instances: u32,
    pub refused_count: u64,
    pub first_refused_at: u64,
    pub last_refused_at: u64,
    pub listener_ready_at: Option<u64>,
    pub listener_closed_at: Option<u64>,
    pub resolved_at: Option<u64>,
    /// Container whose process was seen listening on the port in this pod.
    pub listener_container_id: Option<String>,
    pub episode: Episode,
    pub hidden: Option<Hidden>,
}

impl Incident {
    /// The phase will not change any more: resolved, or `unresolved`.
    pub fn is_final(&self) -> bool {
        self.state == State::Resolved || self.phase == Phase::Unresolved
    }

    pub fn is_shown(&self) -> bool {
        self.hidden.is_none()
    }

    /// The race window as defined in the README; none while the incident is open
    /// (a suspected race whose end is not known yet).
    pub fn race_window_ns(&self) -> Option<u64> {
        if self.state == State::Open {
            return None;
        }
        if let Subject::StuckJob { .. } = self.subject {
            return self
                .resolved_at
                .map(|end| end.saturating_sub(self.first_refused_at));
        }
        match self.phase {
            Phase::Startup => Some(
                self.listener_ready_at
                    .unwrap_or(self.last_refused_at)
                    .saturating_sub(self.first_refused_at),
            ),
            Phase::Drain => self
                .listener_closed_at
                .map(|closed| self.last_refused_at.saturating_sub(closed)),
            Phase::Steady => self.listener_closed_at.map(|closed| {
                self.listener_ready_at
                    .unwrap_or(self.last_refused_at)
                    .saturating_sub(closed)
            }),
            Phase::Unresolved => None,
        }
    }

    pub fn client_container_id(&self) -> Option<&str> {
        match &self.client {
            Client::Container(id) => Some(id),
            Client::Cgroup(_) => None,
        }
    }
}

/// Incidents by id, oldest evicted first beyond the capacity.
pub struct IncidentLog {
    incidents: VecDeque<Incident>,
    capacity: usize,
    next_id: u64,
}

impl IncidentLog {
    pub fn new(capacity: usize) -> Self {
        Self {
            incidents: VecDeque::new(),
            capacity: capacity.max(1),
            next_id: 1,
        }
    }

    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// Stores `incident` under the next id, returning the id and any evicted incident.
    pub fn insert(&mut self, mut incident: Incident) -> (u64, Option<Incident>) {
        let id = self.next_id;
        self.next_id += 1;
        incident.id = id;
        self.incidents.push_back(incident);
        let evicted = (self.incidents.len() > self.capacity)
            .then(|| self.incidents.pop_front())
            .flatten();
        (id, evicted)
    }

    fn index(&self, id: u64) -> Option<usize> {
        let first = self.incidents.front()?.id;
        let i = id.checked_sub(first)? as usize;
        (i < self.incidents.len()).then_some(i)
    }

    pub fn get(&self, id: u64) -> Option<&Incident> {
        self.index(id).map(|i| &self.incidents[i])
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut Incident> {
        self.index(id).map(|i| &mut self.incidents[i])
    }

    /// Id of the oldest incident still kept.
    pub fn oldest_id(&self) -> Option<u64> {
        self.incidents.front().map(|i| i.id)
    }

    /// Newest first.
    pub fn newest_first(&self) -> impl Iterator<Item = &Incident> {
        self.incidents.iter().rev()
    }

    pub fn len(&self) -> usize {
        self.incidents.len()
    }

    pub fn is_empty(&self) -> bool {
        self.incidents.is_empty()
    }
}
