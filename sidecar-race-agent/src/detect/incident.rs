//! Incidents and their bounded history.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::{
    fact::Client,
    processes::Processes,
    service::{Protocol, Service, UnixSocket},
    timeline::Timeline,
};

#[derive(Serialize, Deserialize, strum::IntoStaticStr, strum::EnumString)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
        self.into()
    }

    pub fn parse(s: &str) -> Option<Phase> {
        s.parse().ok()
    }
}

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum State {
    Open,
    Resolved,
}

impl State {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(s: &str) -> Option<State> {
        s.parse().ok()
    }
}

/// What an incident is, from the roles of the containers involved.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    PartialOrd,
    Ord,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Kind {
    /// A client refused by a sidecar's port (or, with no roles known, by another
    /// container's port): what the product is for.
    SidecarRace,
    /// A container refused by an app container's port: a sidecar forwarding inbound
    /// traffic or a rewritten probe, or an app dialing another app. The app is not ready
    /// yet; no sidecar to migrate.
    AppNotReady,
    /// An init container refused by a port of a container in `containers[]`, which
    /// cannot start before the init containers finish.
    InitDeadlock,
    /// A Job's pod kept running by a classic sidecar after its app containers finished.
    StuckJob,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(s: &str) -> Option<Kind> {
        s.parse().ok()
    }

    /// Whether it is evidence for migrating a sidecar (metrics of races, Events, the
    /// report's ranking). `app_not_ready` is not.
    pub fn is_migration_evidence(self) -> bool {
        self != Kind::AppNotReady
    }
}

/// What an incident is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Subject {
    /// Connects refused on a port of the pod.
    Refusals,
    /// A Job's pod whose app containers all finished while classic sidecar
    /// `sidecar` (a container name) kept running: the Job never completes.
    /// `first_refused_at` holds when the last app container finished.
    StuckJob { sidecar: String },
}

/// Why an incident is not shown (yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Hidden {
    /// hostNetwork pods: loopback is the node's; shown once a listener in the pod or a
    /// declared port ties the port to the pod.
    HostNetworkPort,
    /// Refused on a non-loopback address while the pod's IPs are unknown: shown once
    /// they are known and include it, else counted as `other`.
    PodIpUnknown,
    /// Refused on loopback in a pod the pod source has not reported yet: shown once it
    /// does (unless it is a hostNetwork pod's node port), or after the metadata wait.
    PodUnknown,
    /// A new instance of a client container not named yet, while an earlier instance's
    /// incident is open on the port: merged into it once named the same, else shown.
    ClientUnnamed,
    /// A Unix socket path no sidecar is known to serve while the client's metadata is
    /// unknown: shown once a listener in the pod serves it (unless the client's own),
    /// else counted as `other` when its wait for a listener is over.
    SocketUnproven,
    /// Resolved by a listener whose container is not named yet, after the refusing
    /// container instance went away: a container the kubelet replaced may be refused by
    /// its own earlier instance (a self-refusal). Decided once the listener is named.
    ListenerUnnamed,
    /// A UDP port the pod does not own (no `containerPorts` entry with `protocol:
    /// UDP`, no known sidecar's UDP port): DNS lookups, NTP and the like. Shown once a
    /// socket of the pod binds the port, else counted as `other` when its wait for one
    /// is over: never an incident on its own.
    UdpPortUnproven,
    /// Turned out not to be a race (a container refused by itself, or not pod-local).
    Discarded,
    /// Its refusals were merged into an earlier instance's incident (a crash loop).
    Merged,
}

impl Hidden {
    /// Hidden until the pod source tells more (or its wait is over).
    pub fn awaits_metadata(self) -> bool {
        matches!(
            self,
            Hidden::PodIpUnknown
                | Hidden::PodUnknown
                | Hidden::ClientUnnamed
                | Hidden::ListenerUnnamed
        )
    }
}

/// What the refusals happened relative to: the listener never seen yet, or the
/// listener that went away at `closed_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Episode {
    BeforeListener,
    AfterClose { closed_at: u64 },
}

/// One race: a client container refused on one port of its pod, in one phase.
/// Times are kernel boot-clock nanoseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// A listener on the port that does not take the refused address (the other
    /// loopback family, another address): named in the advice.
    pub uncovering_listener: Option<SocketAddr>,
    pub episode: Episode,
    pub hidden: Option<Hidden>,
    /// The refused processes by name.
    pub processes: Processes,
    /// The Unix socket refused, for a Unix socket incident (then `port` is 0).
    pub socket: Option<UnixSocket>,
    /// How the refused data travelled (incidents from before it was recorded: TCP).
    #[serde(default)]
    pub protocol: Protocol,
    /// Which start of the pod its refusals belong to: 0 as created, `n` its n-th
    /// in-place restart of all containers seen (KEP-5532).
    #[serde(default)]
    pub pod_start: u32,
    /// What a drain's outage was, when known: the sidecar restarting during the pod's
    /// termination (KEP-4438), its refusals ended by a new instance's listener.
    #[serde(default)]
    pub drain_sub_phase: Option<DrainSubPhase>,
    /// What the agent saw in the pod around the refusals, in time order (bounded).
    /// Incidents of an agent from before it was recorded restore with none.
    #[serde(default)]
    pub timeline: Timeline,
}

/// What a `drain` incident's outage was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DrainSubPhase {
    /// The sidecar was restarted while its pod terminated (KEP-4438): a listener of
    /// another container instance than the one that went away ended the refusals.
    SidecarRestarting,
}

impl Incident {
    /// A new open refusal incident of `client` in `phase`, refused once at `ts` by
    /// `process`; what it was refused on is for the caller to fill in.
    pub fn opened(
        pod_uid: String,
        client: Client,
        (phase, episode): (Phase, Episode),
        (ts, process): (u64, &str),
        listener_container_id: Option<String>,
    ) -> Incident {
        let mut processes = Processes::default();
        processes.record(process);
        let client_id = client.container_id().map(str::to_string);
        Incident {
            id: 0,
            subject: Subject::Refusals,
            phase,
            state: State::Open,
            pod_uid,
            client,
            port: 0,
            destination: SocketAddr::from(([0, 0, 0, 0], 0)),
            local_destination: None,
            targets: vec![],
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
            uncovering_listener: None,
            episode,
            hidden: None,
            processes,
            socket: None,
            protocol: Protocol::Tcp,
            pod_start: 0,
            drain_sub_phase: None,
            timeline: Timeline::first_refusal(ts, client_id),
        }
    }

    /// What the incident is keyed on besides its client.
    pub fn service(&self) -> Service {
        match &self.socket {
            Some(s) => Service::Socket(s.key.clone()),
            None => Service::port(self.protocol, self.port),
        }
    }

    /// The phase will not change any more: resolved, or `unresolved`.
    pub fn is_final(&self) -> bool {
        self.state == State::Resolved || self.phase == Phase::Unresolved
    }

    pub fn is_shown(&self) -> bool {
        self.hidden.is_none()
    }

    /// The race window as defined in docs/detection.md; none while the incident is open
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
