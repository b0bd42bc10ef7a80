//! Incidents as users see them (`/api/v1/incidents`, logs): names resolved from the
//! pod metadata at the time of asking, so names that arrived late are shown.

use serde::Serialize;

use super::{
    advice::{Subject as AdviceSubject, advice, shows_workaround, workaround},
    incident::{DrainSubPhase, Incident, Kind, Phase, State, Subject},
    processes::ProcessCount,
};
use crate::{
    pods::catalog::CATALOG,
    pods::{
        pod_info::{Pattern, PodInfo, Role, Workload},
        pod_meta::PodMeta,
    },
};

pub use super::socket_view::SocketView;
use super::{
    service::{Protocol, UnixSocket},
    socket_view::served_path,
    timeline_view::{TimelineEntryView, entries},
};

/// One incident in the public JSON shape (field names are a stable interface).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IncidentView {
    pub id: u64,
    pub kind: Kind,
    pub phase: Phase,
    pub state: State,
    pub pod_uid: String,
    pub namespace: Option<String>,
    pub pod: Option<String>,
    pub workload: Option<Workload>,
    pub container: Option<String>,
    pub container_id: Option<String>,
    /// `app`, `classic_sidecar`, `native_sidecar`, `init`, `ephemeral` or `unknown`.
    #[serde(serialize_with = "role_or_unknown")]
    pub container_role: Option<Role>,
    pub sidecar: Option<String>,
    pub sidecar_container_id: Option<String>,
    #[serde(serialize_with = "role_or_unknown")]
    pub sidecar_role: Option<Role>,
    pub pattern: Pattern,
    /// How the refused data travelled: `tcp`, `udp`, `unix` or `unixgram` (null for a
    /// stuck Job). A refused datagram (`udp`, `unixgram`) is lost, never retried.
    pub protocol: Option<Protocol>,
    /// Refused on a port (null for a Unix socket incident).
    pub port: Option<u16>,
    pub destination: Option<String>,
    /// Refused on a Unix socket (then `port` and `destination` are null).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket: Option<SocketView>,
    pub local_destination: Option<String>,
    pub refused_count: u64,
    /// Instances of the client container whose refusals this incident sums (a crash loop).
    pub client_instances: u32,
    /// The refused processes by name, most refused first: at most 8, then `(other)`
    /// summing the rest.
    pub processes: Vec<ProcessCount>,
    /// A known wait tool was refused: the pod works around the start order.
    pub guarded: bool,
    pub first_refused_at: Option<String>,
    pub last_refused_at: Option<String>,
    pub listener_ready_at: Option<String>,
    pub listener_closed_at: Option<String>,
    /// For a stuck Job: when its last app container finished.
    pub apps_finished_at: Option<String>,
    pub race_window_seconds: Option<f64>,
    pub advice: String,
    /// Refusals of the client container the kernel counted instead of sending (over
    /// its refusal budget); when > 0, `refused_count` is a lower bound.
    pub refusals_suppressed: u64,
    /// The pod start its refusals belong to: `created`, or `restarted_in_place` (the
    /// kubelet restarted all of the pod's containers in the same sandbox, KEP-5532).
    pub pod_start: PodStart,
    /// Which start: 0 as created, `n` the pod's n-th in-place restart (the metrics
    /// count starts by pod and number; not shown).
    #[serde(skip)]
    pub pod_start_number: u32,
    /// For a `drain`: `sidecar_restarting` when the kubelet restarted the sidecar while
    /// the pod terminated (KEP-4438) and its new instance ended the refusals; else null.
    pub drain_sub_phase: Option<DrainSubPhase>,
    /// What the agent saw in the pod around the refusals, in time order (at most
    /// 32 entries and a `dropped` one; see docs/reference.md).
    pub timeline: Vec<TimelineEntryView>,
}

/// How the pod start an incident belongs to began.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PodStart {
    /// The pod was created (its sandbox and cgroup made).
    Created,
    /// All of its containers were restarted in place (KEP-5532).
    RestartedInPlace,
}

impl PodStart {
    fn of(number: u32) -> Self {
        if number == 0 {
            PodStart::Created
        } else {
            PodStart::RestartedInPlace
        }
    }
}

/// The containers of an incident, their roles, and so its kind: what a filter on
/// `kind` needs, without the rest of a view.
struct Parties<'a> {
    pod: Option<&'a crate::pods::pod_info::PodInfo>,
    container_id: Option<String>,
    container: Option<String>,
    sidecar: Option<String>,
    container_role: Option<Role>,
    sidecar_role: Option<Role>,
    kind: Kind,
}

fn parties<'a>(inc: &Incident, meta: &'a dyn PodMeta) -> Parties<'a> {
    let pod = meta.pod(&inc.pod_uid);
    let stuck_sidecar = match &inc.subject {
        Subject::StuckJob { sidecar } => Some(sidecar.clone()),
        Subject::Refusals => None,
    };
    let refusals = stuck_sidecar.is_none();
    let container_id = inc.client_container_id().map(str::to_string);
    let container = container_id
        .as_deref()
        .and_then(|id| meta.container_name(id))
        .map(str::to_string);
    // The sidecar: the container declaring the port, else the one seen listening.
    let declared = pod
        .and_then(|p| match inc.protocol {
            Protocol::Udp => p.declaring_udp(inc.port),
            _ => p.declaring(inc.port),
        })
        .map(|c| c.name.clone());
    let by_listener = inc
        .listener_container_id
        .as_deref()
        .and_then(|id| meta.container_name(id))
        .map(str::to_string);
    let sidecar = stuck_sidecar.or(declared).or(by_listener);
    let role_of = |name: Option<&str>| pod.zip(name).and_then(|(p, n)| p.role(n));
    let (container_role, sidecar_role) =
        (role_of(container.as_deref()), role_of(sidecar.as_deref()));
    // An init container waiting for a native sidecar declared after it: the kubelet
    // starts init containers in order, so the sidecar never starts.
    let native_after_init = || {
        pod.zip(container.as_deref().zip(sidecar.as_deref()))
            .is_some_and(|(p, (init, side))| p.declared_after(side, init))
    };
    let kind = match (container_role, sidecar_role) {
        _ if !refusals => Kind::StuckJob,
        (Some(Role::Init), Some(server)) if server.in_containers() => Kind::InitDeadlock,
        (Some(Role::Init), Some(Role::NativeSidecar)) if native_after_init() => Kind::InitDeadlock,
        // A known client refused by an app container (a proxy forwarding to it, or an
        // app dialing another app): the server is no sidecar.
        (Some(_), Some(Role::App)) => Kind::AppNotReady,
        _ => Kind::SidecarRace,
    };
    Parties {
        pod,
        container_id,
        container,
        sidecar,
        container_role,
        sidecar_role,
        kind,
    }
}

/// Renders `inc`; `wall` turns kernel boot-clock ns into RFC 3339.
pub fn view(inc: &Incident, meta: &dyn PodMeta, wall: &dyn Fn(u64) -> String) -> IncidentView {
    let Parties {
        pod,
        container_id,
        container,
        sidecar,
        container_role,
        sidecar_role,
        kind,
    } = parties(inc, meta);
    let refusals = kind != Kind::StuckJob;
    let sidecar_container_id = inc.listener_container_id.clone().or_else(|| {
        let (pod, name) = (pod?, sidecar.as_deref()?);
        pod.status(name).map(|s| s.container_id.clone())
    });
    // For app_not_ready the pattern is the dialing sidecar's.
    let pattern_of = match kind {
        Kind::AppNotReady => container.as_deref(),
        _ => sidecar.as_deref(),
    };
    let pattern = match (pod, pattern_of) {
        (Some(p), Some(name)) => p.pattern(name),
        _ => Pattern::Unknown,
    };
    let sidecar_info = pod
        .zip(sidecar.as_deref())
        .and_then(|(p, name)| p.container(name));
    let startup_probe = sidecar_info.and_then(|c| c.startup_probe.as_ref());
    let wait_tool = inc.processes.wait_tool();
    let socket_in_sidecar = inc.socket.as_ref().and_then(|s| {
        let served_by = pod?.container(sidecar.as_deref()?)?;
        served_path(s, served_by)
    });
    let unexpanded = pod
        .zip(inc.socket.as_ref())
        .and_then(|(p, s)| unexpanded_mount(p, container.as_deref(), s));
    let subject = AdviceSubject {
        kind,
        phase: inc.phase,
        pattern,
        container: container.as_deref(),
        sidecar: sidecar.as_deref(),
        port: inc.port,
        dialed_port: inc.local_destination.map(|_| inc.destination.port()),
        startup_probe,
        // No serving container at all (nothing listened): the client's role is all
        // the pod source has to tell.
        roles_known: container_role.is_some() && (sidecar.is_none() || sidecar_role.is_some()),
        client_is_sidecar: container_role.is_some_and(Role::is_sidecar),
        listening_on: inc.uncovering_listener,
        dialed: inc.targets.first().copied(),
        socket: inc
            .socket
            .as_ref()
            .map(|s| (s.path.as_str(), socket_in_sidecar.as_deref())),
        known: sidecar_info.and_then(|c| CATALOG.known(&c.name, c.image.as_deref())),
        unexpanded: unexpanded.as_deref(),
        protocol: inc.protocol,
    };
    let mut advice = advice(&subject);
    if let Some(tool) = wait_tool.filter(|_| shows_workaround(kind, inc.phase)) {
        advice.push_str(&workaround(tool, sidecar.as_deref(), &subject));
    }
    IncidentView {
        id: inc.id,
        kind,
        phase: inc.phase,
        state: inc.state,
        pod_uid: inc.pod_uid.clone(),
        namespace: pod.map(|p| p.namespace.clone()),
        pod: pod.map(|p| p.name.clone()),
        workload: pod.map(|p| p.workload.clone()),
        container,
        container_id,
        container_role,
        sidecar,
        sidecar_container_id,
        sidecar_role,
        pattern,
        protocol: refusals.then_some(inc.protocol),
        port: (refusals && inc.socket.is_none()).then_some(inc.port),
        destination: (refusals && inc.socket.is_none()).then(|| inc.destination.to_string()),
        socket: inc.socket.as_ref().map(SocketView::of),
        local_destination: inc.local_destination.map(|d| d.to_string()),
        refused_count: inc.refused_count,
        client_instances: inc.client_instances,
        processes: inc.processes.top(),
        guarded: wait_tool.is_some(),
        first_refused_at: refusals.then(|| wall(inc.first_refused_at)),
        last_refused_at: refusals.then(|| wall(inc.last_refused_at)),
        listener_ready_at: inc.listener_ready_at.map(wall),
        listener_closed_at: inc.listener_closed_at.map(wall),
        apps_finished_at: (!refusals).then(|| wall(inc.first_refused_at)),
        race_window_seconds: inc.race_window_ns().map(|ns| ns as f64 / 1e9),
        advice,
        // Known to the pipeline, which reads the kernel's counts.
        refusals_suppressed: 0,
        pod_start: PodStart::of(inc.pod_start),
        pod_start_number: inc.pod_start,
        drain_sub_phase: inc.drain_sub_phase,
        timeline: entries(&inc.timeline, meta, wall),
    }
}

/// A mount of the socket's volume whose `subPathExpr` could not be expanded: the
/// client's first, else another container's (the one that may serve it).
fn unexpanded_mount(pod: &PodInfo, client: Option<&str>, s: &UnixSocket) -> Option<String> {
    let volume = s.volume.as_deref()?;
    let clients = pod
        .containers
        .iter()
        .filter(|c| Some(c.name.as_str()) == client);
    let others = pod
        .containers
        .iter()
        .filter(|c| Some(c.name.as_str()) != client);
    clients.chain(others).find_map(|c| {
        let m = c.mounts.iter().find(|m| m.volume == volume)?;
        Some(format!("{}'s {}", c.name, m.unexpanded.as_deref()?))
    })
}

/// The name of a container's role, `unknown` when the pod metadata does not say.
pub fn role_name(role: Option<Role>) -> &'static str {
    role.map_or("unknown", Role::as_str)
}

fn role_or_unknown<S: serde::Serializer>(role: &Option<Role>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(role_name(*role))
}

/// `?kind=&phase=&namespace=&state=` of `/api/v1/incidents`, parsed.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub kind: Option<Kind>,
    pub phase: Option<Phase>,
    pub namespace: Option<String>,
    pub state: Option<State>,
}

impl Filter {
    /// Whether `inc` matches, decided before any view is built: an answer of one
    /// incident does not render the whole history (under the pipeline lock).
    pub fn matches(&self, inc: &Incident, meta: &dyn PodMeta) -> bool {
        self.phase.is_none_or(|p| p == inc.phase)
            && self.state.is_none_or(|s| s == inc.state)
            && self
                .namespace
                .as_deref()
                .is_none_or(|n| meta.pod(&inc.pod_uid).map(|p| p.namespace.as_str()) == Some(n))
            && self.kind.is_none_or(|k| k == parties(inc, meta).kind)
    }
}
