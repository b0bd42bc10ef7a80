//! The detector on recorded sequences of facts, for every phase and edge.

use std::collections::{HashMap, HashSet};

use super::{
    detector::NotARace,
    incident::Kind,
    render::{Filter, view},
    *,
};
use crate::pipeline::reorder::Reorder;
use crate::pods::container_id::Runtime;
use crate::pods::pod_info::{
    ContainerInfo, Pattern, PodInfo, ProbeTarget, Role, RunState, StatusInfo, Workload,
};

const MS: u64 = 1_000_000;
const S: u64 = 1_000 * MS;
const POD: &str = "6f2c1a6e-8b0f-4d8e-9a53-3c1d2e4f5a6b";
const APP: &str = "aaaa";
const APP2: &str = "abab";
const PROXY: &str = "bbbb";
const DB: &str = "cccc";

#[derive(Default)]
struct Meta {
    pods: HashMap<String, PodInfo>,
    deleted: HashSet<String>,
    /// As the pod store's (`None`: untracked, nothing derived may be kept).
    generation: Option<u64>,
}

impl PodMeta for Meta {
    fn pod(&self, uid: &str) -> Option<&PodInfo> {
        self.pods.get(uid)
    }
    fn is_deleted(&self, uid: &str) -> bool {
        self.deleted.contains(uid)
    }
    fn container_name(&self, id: &str) -> Option<&str> {
        self.pods
            .values()
            .flat_map(|p| &p.statuses)
            .find(|s| s.container_id == id)
            .map(|s| s.name.as_str())
    }
    /// Boot time 0 is 2026-11-29T10:00:00Z in these recordings.
    fn boot_ns(&self, t: jiff::Timestamp) -> Option<u64> {
        u64::try_from(t.as_nanosecond() - EPOCH_2026_11_29_10H).ok()
    }
    fn each_pod(&self, f: &mut dyn FnMut(&PodInfo)) {
        for (uid, p) in &self.pods {
            if !self.deleted.contains(uid) {
                f(p);
            }
        }
    }
    fn generation(&self) -> Option<u64> {
        self.generation
    }
}

/// 2026-11-29T10:00:00Z in Unix ns: boot time 0 of the recordings.
const EPOCH_2026_11_29_10H: i128 = 1_795_946_400_000_000_000;

/// `2026-11-29T10:00:00Z` plus `ns`.
fn at(ns: u64) -> jiff::Timestamp {
    jiff::Timestamp::from_nanosecond(EPOCH_2026_11_29_10H + ns as i128).unwrap()
}

fn container(
    name: &str,
    role: Role,
    ports: &[u16],
    startup_probe: Option<ProbeTarget>,
) -> ContainerInfo {
    ContainerInfo {
        name: name.into(),
        role,
        sidecar_by: None,
        image: None,
        ports: ports.to_vec(),
        udp_ports: vec![],
        startup_probe,
        readiness_probe: None,
        mounts: Vec::new(),
    }
}

fn status(name: &str, id: &str) -> StatusInfo {
    StatusInfo {
        name: name.into(),
        container_id: id.into(),
        runtime: Runtime::Containerd,
        state: RunState::Running,
        started_at: None,
        finished_at: None,
        ready: true,
        restart_count: 0,
        last_terminated_reason: None,
        started: None,
    }
}

/// checkout: app + app2 (clients), istio-proxy on 15001 and db-proxy on 5432.
fn checkout(proxy_role: Role, probe: Option<ProbeTarget>) -> PodInfo {
    PodInfo {
        uid: POD.into(),
        namespace: "shop".into(),
        name: "checkout-7d4b9c8f5-x2k8q".into(),
        workload: Workload {
            kind: "Deployment".into(),
            name: "checkout".into(),
        },
        containers: vec![
            container("istio-proxy", proxy_role, &[15001], probe),
            container("db-proxy", Role::ClassicSidecar, &[5432], None),
            container("app", Role::App, &[8080], None),
            container("app2", Role::App, &[], None),
        ],
        statuses: vec![
            status("app", APP),
            status("app2", APP2),
            status("istio-proxy", PROXY),
            status("db-proxy", DB),
        ],
        deletion_timestamp: None,
        deletion_grace_period_seconds: None,
        termination_grace_period_seconds: Some(30),
        host_network: false,
        pod_ips: vec!["10.244.1.17".parse().unwrap()],
        node_name: None,
        start_time: None,
        template: None,
    }
}

fn meta_with(pod: PodInfo) -> Meta {
    let mut m = Meta::default();
    m.pods.insert(pod.uid.clone(), pod);
    m
}

fn started(ts: u64) -> Fact {
    Fact::PodStarted {
        ts,
        pod_uid: POD.into(),
    }
}
fn refused(ts: u64, client: &str, dst: &str) -> Fact {
    Fact::Refused {
        ts,
        pod_uid: POD.into(),
        client: Client::Container(client.into()),
        dst: dst.parse().unwrap(),
        local_dst: None,
        process: "app".into(),
    }
}
fn up(ts: u64, container: &str, addr: &str) -> Fact {
    Fact::ListenerUp {
        ts,
        pod_uid: POD.into(),
        container_id: Some(container.into()),
        addr: addr.parse().unwrap(),
    }
}
fn down(ts: u64, container: &str, addr: &str) -> Fact {
    Fact::ListenerDown {
        ts,
        pod_uid: POD.into(),
        container_id: Some(container.into()),
        addr: addr.parse().unwrap(),
    }
}
fn removed(ts: u64) -> Fact {
    Fact::PodRemoved {
        ts,
        pod_uid: POD.into(),
    }
}

fn other() -> Change {
    Change::NotARace {
        why: NotARace::Other,
        refused: 1,
    }
}

fn container_started(ts: u64, id: &str) -> Fact {
    Fact::ContainerStarted {
        ts,
        pod_uid: POD.into(),
        container_id: id.into(),
    }
}

fn container_removed(ts: u64, id: &str) -> Fact {
    Fact::ContainerRemoved {
        ts,
        pod_uid: POD.into(),
        container_id: id.into(),
    }
}

fn run(facts: Vec<Fact>, meta: &dyn PodMeta) -> (Detector, Vec<Change>) {
    let mut d = Detector::new(DetectorConfig::default());
    let mut changes = Vec::new();
    for f in facts {
        changes.extend(d.observe(f, meta));
    }
    (d, changes)
}

fn all(d: &Detector) -> Vec<&Incident> {
    d.incidents()
        .newest_first()
        .filter(|i| i.is_shown())
        .collect()
}

fn wall(ns: u64) -> String {
    format!("t+{}ms", ns / MS)
}

/// 100 ms apart from `from` to before `to`.
fn refusals(from: u64, to: u64, client: &str, dst: &str) -> Vec<Fact> {
    (from..to)
        .step_by(100 * MS as usize)
        .map(|t| refused(t, client, dst))
        .collect()
}

#[test]
fn classic_startup_race() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let mut facts = vec![started(0)];
    facts.extend(refusals(100 * MS, 1500 * MS, APP, "127.0.0.1:15001"));
    facts.push(up(1500 * MS, PROXY, "0.0.0.0:15001"));
    let (d, changes) = run(facts, &meta);
    let incs = all(&d);
    assert_eq!(incs.len(), 1);
    let i = incs[0];
    assert_eq!(
        (i.phase, i.state, i.refused_count),
        (Phase::Startup, State::Resolved, 14)
    );
    assert_eq!(i.race_window_ns(), Some(1400 * MS));
    assert_eq!(
        changes.get(1),
        Some(&Change::Opened(i.id)),
        "after PodStarted"
    );
    assert_eq!(changes.last(), Some(&Change::Resolved(i.id)));
    let v = view(i, &meta, &wall);
    assert_eq!(v.sidecar.as_deref(), Some("istio-proxy"));
    assert_eq!(v.sidecar_container_id.as_deref(), Some(PROXY));
    assert_eq!(v.container.as_deref(), Some("app"));
    assert_eq!(v.pattern, Pattern::Classic);
    assert_eq!(v.namespace.as_deref(), Some("shop"));
    assert_eq!(v.workload.as_ref().unwrap().name, "checkout");
    assert_eq!(v.race_window_seconds, Some(1.4));
    assert_eq!(v.listener_ready_at.as_deref(), Some("t+1500ms"));
    assert!(
        v.advice
            .starts_with("Move istio-proxy from containers to initContainers"),
        "{}",
        v.advice
    );
}

#[test]
fn ordered_start_gives_no_incident() {
    // A native sidecar's exec startupProbe dials its own port until it listens; the
    // kubelet starts the app only then, so the app connects at once.
    let meta = meta_with(checkout(Role::NativeSidecar, None));
    let ordered = vec![
        started(0),
        container_started(0, PROXY),
        refused(50 * MS, PROXY, "127.0.0.1:15001"),
        up(100 * MS, PROXY, "0.0.0.0:15001"),
        container_started(200 * MS, APP),
    ];
    let (d, changes) = run(ordered, &meta);
    assert!(d.incidents().is_empty());
    assert_eq!(
        changes,
        vec![
            Change::PodStarted {
                pod_uid: POD.into(),
                start: 0
            },
            Change::NotARace {
                why: NotARace::SelfRefusal,
                refused: 1
            },
        ]
    );
    // The same start with the app first: refused before the proxy listens, a race.
    let reversed = vec![
        started(0),
        container_started(0, APP),
        refused(50 * MS, APP, "127.0.0.1:15001"),
        container_started(60 * MS, PROXY),
        up(100 * MS, PROXY, "0.0.0.0:15001"),
    ];
    let (d, _) = run(reversed, &meta);
    let incs = all(&d);
    assert_eq!(incs.len(), 1, "{incs:?}");
    assert_eq!(
        (incs[0].phase, incs[0].state),
        (Phase::Startup, State::Resolved)
    );
}

#[test]
fn drain_with_metadata_and_without() {
    let mut pod = checkout(Role::ClassicSidecar, None);
    pod.deletion_timestamp = Some("2026-11-29T10:00:10Z".parse().unwrap());
    let terminating = meta_with(pod);
    for meta in [&terminating as &dyn PodMeta, &NoMeta] {
        let mut facts = vec![
            started(0),
            up(S, PROXY, "127.0.0.1:15001"),
            down(10 * S, PROXY, "127.0.0.1:15001"),
        ];
        facts.extend(refusals(
            10 * S + 100 * MS,
            12 * S + 100 * MS,
            APP,
            "127.0.0.1:15001",
        ));
        facts.push(removed(13 * S));
        let (d, _) = run(facts, meta);
        let incs = all(&d);
        assert_eq!(incs.len(), 1);
        assert_eq!(
            (incs[0].phase, incs[0].state),
            (Phase::Drain, State::Resolved)
        );
        assert_eq!(
            incs[0].race_window_ns(),
            Some(2 * S),
            "listener gone → last refusal"
        );
        assert_eq!(incs[0].listener_closed_at, Some(10 * S));
    }
    // While open, metadata turning terminating makes a steady guess a drain.
    let mut d = Detector::new(DetectorConfig::default());
    for f in [
        started(0),
        up(S, PROXY, "127.0.0.1:15001"),
        down(10 * S, PROXY, "127.0.0.1:15001"),
        refused(10 * S + MS, APP, "127.0.0.1:15001"),
    ] {
        d.observe(f, &NoMeta);
    }
    assert_eq!(all(&d)[0].phase, Phase::Steady);
    let changes = d.advance(11 * S, &terminating);
    assert_eq!(
        changes,
        vec![Change::Rephased {
            id: 1,
            from: Phase::Steady
        }]
    );
    assert_eq!(all(&d)[0].phase, Phase::Drain);
}

#[test]
fn sidecar_restart_mid_life_is_steady() {
    let meta = meta_with(checkout(
        Role::NativeSidecar,
        Some(ProbeTarget::TcpSocket { port: Some(15001) }),
    ));
    let mut facts = vec![
        started(0),
        up(S, PROXY, "0.0.0.0:15001"),
        down(60 * S, PROXY, "0.0.0.0:15001"),
    ];
    facts.extend(refusals(60 * S + 50 * MS, 61 * S, APP, "127.0.0.1:15001"));
    facts.push(up(61 * S, "dddd", "0.0.0.0:15001"));
    let (d, _) = run(facts, &meta);
    let incs = all(&d);
    assert_eq!(incs.len(), 1);
    assert_eq!(
        (incs[0].phase, incs[0].state),
        (Phase::Steady, State::Resolved)
    );
    assert_eq!(incs[0].race_window_ns(), Some(S), "gone → back");
    let v = view(incs[0], &meta, &wall);
    assert_eq!(
        v.sidecar_container_id.as_deref(),
        Some("dddd"),
        "the restarted sidecar's container"
    );
    assert!(v.advice.contains("retries with backoff"), "{}", v.advice);
}

#[test]
fn a_port_nobody_opens_is_unresolved_not_a_race() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let mut facts = vec![started(0)];
    facts.extend(refusals(100 * MS, 2 * S, APP, "127.0.0.1:9999"));
    let (mut d, _) = run(facts, &meta);
    assert_eq!(
        all(&d)[0].phase,
        Phase::Startup,
        "a startup candidate at first"
    );
    assert!(d.advance(100 * S, &meta).is_empty());
    let changes = d.advance(121 * S, &meta);
    assert_eq!(
        changes,
        vec![Change::Rephased {
            id: 1,
            from: Phase::Startup
        }]
    );
    let i = all(&d)[0];
    assert_eq!((i.phase, i.state), (Phase::Unresolved, State::Open));
    assert_eq!(i.race_window_ns(), None);
    let v = view(i, &meta, &wall);
    assert_eq!(v.sidecar, None, "nothing declares 9999");
    assert!(
        v.advice.contains("misconfiguration, not a race"),
        "{}",
        v.advice
    );
    d.observe(removed(200 * S), &meta);
    assert_eq!(
        all(&d)[0].state,
        State::Resolved,
        "resolved when the pod is gone"
    );
    assert_eq!(d.tracked_pods(), 0);
}

#[test]
fn two_client_containers_get_one_incident_each() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let mut facts = vec![started(0)];
    facts.extend(refusals(100 * MS, 1000 * MS, APP, "127.0.0.1:15001"));
    facts.extend(refusals(150 * MS, 800 * MS, APP2, "127.0.0.1:15001"));
    facts.sort_by_key(Fact::ts);
    facts.push(up(S, PROXY, "0.0.0.0:15001"));
    let (d, _) = run(facts, &meta);
    let incs = all(&d);
    assert_eq!(incs.len(), 2);
    assert!(
        incs.iter()
            .all(|i| i.phase == Phase::Startup && i.state == State::Resolved)
    );
    let names: HashSet<String> = incs
        .iter()
        .map(|i| view(i, &meta, &wall).container.unwrap())
        .collect();
    assert_eq!(
        names,
        HashSet::from(["app".to_string(), "app2".to_string()])
    );
}

#[test]
fn two_sidecars_are_told_apart_by_port() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let facts = vec![
        started(0),
        refused(100 * MS, APP, "127.0.0.1:15001"),
        refused(110 * MS, APP, "127.0.0.1:5432"),
        up(500 * MS, PROXY, "0.0.0.0:15001"),
        refused(600 * MS, APP, "127.0.0.1:5432"),
        up(2 * S, DB, "127.0.0.1:5432"),
    ];
    let (d, _) = run(facts, &meta);
    let incs = all(&d);
    assert_eq!(incs.len(), 2);
    let by_port: HashMap<u16, &Incident> = incs.iter().map(|i| (i.port, *i)).collect();
    assert_eq!(by_port[&15001].race_window_ns(), Some(400 * MS));
    assert_eq!(by_port[&5432].refused_count, 2);
    assert_eq!(by_port[&5432].race_window_ns(), Some(1890 * MS));
    assert_eq!(
        view(by_port[&5432], &meta, &wall).sidecar.as_deref(),
        Some("db-proxy")
    );
}

#[test]
fn listener_addresses_must_cover_the_dialed_one() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    // Listening on 127.0.0.1 does not serve [::1]: that incident stays open.
    let (d, _) = run(
        vec![
            started(0),
            refused(MS, APP, "[::1]:15001"),
            up(S, PROXY, "127.0.0.1:15001"),
        ],
        &meta,
    );
    assert_eq!(all(&d)[0].state, State::Open);
    // :: serves both families.
    let (d, _) = run(
        vec![
            started(0),
            refused(MS, APP, "[::1]:15001"),
            refused(MS, APP2, "127.0.0.1:15001"),
            up(S, PROXY, "[::]:15001"),
        ],
        &meta,
    );
    assert!(all(&d).iter().all(|i| i.state == State::Resolved));
    // 0.0.0.0 serves IPv4 loopback and the pod IP.
    let (d, _) = run(
        vec![
            started(0),
            refused(MS, APP, "10.244.1.17:15001"),
            up(S, PROXY, "0.0.0.0:15001"),
        ],
        &meta,
    );
    assert_eq!(
        (all(&d)[0].state, all(&d)[0].phase),
        (State::Resolved, Phase::Startup)
    );
}

#[test]
fn a_refusal_landing_just_after_its_listener_joins_the_resolved_incident() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let facts = vec![
        started(0),
        refused(100 * MS, APP, "127.0.0.1:15001"),
        up(1500 * MS, PROXY, "0.0.0.0:15001"),
        // SYN refused just before listen(); its reset processed just after.
        refused(1500 * MS + 20 * MS, APP, "127.0.0.1:15001"),
    ];
    let (d, changes) = run(facts, &meta);
    let incs = all(&d);
    assert_eq!(incs.len(), 1, "no second incident: {incs:#?}");
    assert_eq!(incs[0].refused_count, 2);
    assert_eq!(incs[0].state, State::Resolved);
    assert_eq!(changes.last(), Some(&Change::Refused(incs[0].id)));
    // A first refusal that lands just after the listener came up is a tiny race.
    let (d, _) = run(
        vec![
            started(0),
            up(S, PROXY, "0.0.0.0:15001"),
            refused(S + 5 * MS, APP, "127.0.0.1:15001"),
        ],
        &meta,
    );
    assert_eq!(
        (all(&d)[0].phase, all(&d)[0].state),
        (Phase::Startup, State::Resolved)
    );
    // Well after the listener is up, a refusal is not this race.
    let (d, changes) = run(
        vec![
            started(0),
            up(S, PROXY, "0.0.0.0:15001"),
            refused(3 * S, APP, "127.0.0.1:15001"),
        ],
        &meta,
    );
    assert!(all(&d).is_empty());
    assert_eq!(changes.last(), Some(&other()));
}

#[test]
fn out_of_order_delivery_within_the_reorder_window() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let mut facts = vec![started(0)];
    facts.extend(refusals(100 * MS, 1500 * MS, APP, "127.0.0.1:15001"));
    facts.push(up(1500 * MS, PROXY, "0.0.0.0:15001"));
    let last = facts.len() - 1;
    facts.swap(last, last - 1); // the listener event arrives before the last refusal
    let mut r = Reorder::new(200 * MS);
    let mut d = Detector::new(DetectorConfig::default());
    for f in facts {
        let now = f.ts();
        r.push(f);
        for f in r.release(now, false) {
            d.observe(f, &meta);
        }
    }
    for f in r.drain() {
        d.observe(f, &meta);
    }
    let incs = all(&d);
    assert_eq!(incs.len(), 1);
    assert_eq!(
        (incs[0].refused_count, incs[0].race_window_ns()),
        (14, Some(1400 * MS))
    );
}

#[test]
fn pod_deleted_mid_incident() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    // A startup cut short by the deletion (a rollout undone): the pod leaving the
    // source ends nothing while its cgroups live; their removal ends a startup race.
    let (mut d, _) = run(vec![started(0), refused(MS, APP, "127.0.0.1:15001")], &meta);
    let mut deleted = meta_with(checkout(Role::ClassicSidecar, None));
    deleted.deleted.insert(POD.into());
    assert!(d.advance(2 * S, &deleted).is_empty());
    d.observe(refused(2 * S + MS, APP, "127.0.0.1:15001"), &deleted);
    let changes = d.observe(removed(3 * S), &deleted);
    assert!(changes.contains(&Change::Resolved(1)));
    assert_eq!(all(&d).len(), 1, "{:#?}", all(&d));
    assert_eq!(
        (all(&d)[0].phase, all(&d)[0].state, all(&d)[0].refused_count),
        (Phase::Startup, State::Resolved, 2)
    );
    // A drain in progress: a drain from the deletion on, resolved by the removal.
    let (mut d, _) = run(
        vec![
            started(0),
            up(S, PROXY, "0.0.0.0:15001"),
            down(5 * S, PROXY, "0.0.0.0:15001"),
            refused(5 * S + MS, APP, "127.0.0.1:15001"),
        ],
        &meta,
    );
    d.advance(6 * S, &deleted);
    assert_eq!(all(&d)[0].phase, Phase::Drain);
    d.observe(removed(7 * S), &deleted);
    assert_eq!(
        (all(&d)[0].phase, all(&d)[0].state),
        (Phase::Drain, State::Resolved)
    );
}

#[test]
fn host_network_pods_need_a_declared_port_or_a_listener_in_the_pod() {
    let mut pod = checkout(Role::ClassicSidecar, None);
    pod.host_network = true;
    let meta = meta_with(pod);
    // 7777 is declared by nobody and nothing in the pod listens: the node's loopback.
    let (mut d, changes) = run(vec![started(0), refused(MS, APP, "127.0.0.1:7777")], &meta);
    assert!(all(&d).is_empty());
    assert_eq!(
        changes,
        vec![Change::PodStarted {
            pod_uid: POD.into(),
            start: 0
        }]
    );
    let changes = d.advance(200 * S, &meta);
    assert_eq!(changes, vec![other()]);
    // A declared port is attributed at once.
    let (d, _) = run(vec![started(0), refused(MS, APP, "127.0.0.1:15001")], &meta);
    assert_eq!(all(&d).len(), 1);
    // A listener in the pod that appears later ties the port to the pod.
    let (d, changes) = run(
        vec![
            started(0),
            refused(MS, APP, "127.0.0.1:7777"),
            up(S, PROXY, "127.0.0.1:7777"),
        ],
        &meta,
    );
    assert_eq!(all(&d).len(), 1);
    assert!(changes.contains(&Change::Opened(1)) && changes.contains(&Change::Resolved(1)));
    // The node's own IP is not pod-local for a hostNetwork pod.
    let mut pod = checkout(Role::ClassicSidecar, None);
    pod.host_network = true;
    pod.pod_ips = vec!["192.168.49.2".parse().unwrap()];
    let (_, changes) = run(
        vec![refused(MS, APP, "192.168.49.2:15001")],
        &meta_with(pod),
    );
    assert_eq!(changes, vec![other()]);
}

#[test]
fn agent_started_while_the_pod_ran_gives_no_startup_incident() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    // No PodStarted: the pod was already there. Its proxy restarts.
    let facts = vec![
        down(5 * S, PROXY, "0.0.0.0:15001"),
        refused(5 * S + 100 * MS, APP, "127.0.0.1:15001"),
        up(6 * S, PROXY, "0.0.0.0:15001"),
        refused(9 * S, APP2, "127.0.0.1:8081"),
        up(10 * S, APP, "0.0.0.0:8081"),
    ];
    let (d, _) = run(facts, &meta);
    let incs = all(&d);
    assert!(!incs.is_empty());
    assert!(incs.iter().all(|i| i.phase != Phase::Startup), "{incs:#?}");
}

#[test]
fn an_agent_restarted_mid_startup_times_the_client_by_the_pods_start_time() {
    // The new agent saw no PodStarted and no container start, and the app's status
    // has no `startedAt` yet: only the pod's `status.startTime` says the pod is new.
    let mut pod = checkout(Role::ClassicSidecar, None);
    pod.start_time = Some(at(0));
    let mut facts = refusals(2 * S, 3500 * MS, APP, "127.0.0.1:15001");
    facts.push(up(3500 * MS, PROXY, "0.0.0.0:15001"));
    let (d, _) = run(facts.clone(), &meta_with(pod));
    let incs = all(&d);
    assert_eq!(incs.len(), 1, "{incs:#?}");
    assert_eq!(
        (incs[0].phase, incs[0].state, incs[0].refused_count),
        (Phase::Startup, State::Resolved, 15)
    );
    // A pod that started long before the refusals is no startup.
    let mut old = checkout(Role::ClassicSidecar, None);
    old.start_time = Some(at(0));
    let late: Vec<Fact> = facts
        .into_iter()
        .map(|f| match f {
            Fact::Refused { ts, .. } => refused(ts + 600 * S, APP, "127.0.0.1:15001"),
            Fact::ListenerUp { ts, .. } => up(ts + 600 * S, PROXY, "0.0.0.0:15001"),
            f => f,
        })
        .collect();
    let (d, _) = run(late, &meta_with(old));
    assert!(all(&d).iter().all(|i| i.phase != Phase::Startup));
}

#[test]
fn redirected_refusals_use_the_local_port_and_keep_the_dialed_destination() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let facts = vec![
        started(0),
        Fact::Refused {
            ts: MS,
            pod_uid: POD.into(),
            client: Client::Container(APP.into()),
            dst: "10.96.0.10:80".parse().unwrap(),
            local_dst: Some("127.0.0.1:15001".parse().unwrap()),
            process: "app".into(),
        },
        up(S, PROXY, "0.0.0.0:15001"),
    ];
    let (d, _) = run(facts, &meta);
    let v = view(all(&d)[0], &meta, &wall);
    assert_eq!(
        (v.port, v.destination.as_deref()),
        (Some(15001), Some("10.96.0.10:80"))
    );
    assert!(
        v.advice
            .starts_with("app dialed port 80, redirected to port 15001: "),
        "the advice names both ports: {}",
        v.advice
    );
    assert_eq!(v.local_destination.as_deref(), Some("127.0.0.1:15001"));
    assert_eq!(
        (v.phase, v.sidecar.as_deref()),
        (Phase::Startup, Some("istio-proxy"))
    );
}

#[test]
fn refusals_that_are_not_pod_local_are_other() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let (d, changes) = run(
        vec![
            refused(MS, APP, "10.96.0.10:80"),
            refused(MS, APP, "[2001:db8::1]:443"),
        ],
        &meta,
    );
    assert!(d.incidents().is_empty());
    assert_eq!(changes, vec![other(), other()]);
    // Without metadata the pod IP is unknown, loopback still counts.
    let (d, _) = run(
        vec![started(0), refused(MS, APP, "127.0.0.1:15001")],
        &NoMeta,
    );
    let v = view(all(&d)[0], &NoMeta, &wall);
    assert_eq!(
        (v.namespace.clone(), v.container.clone(), v.sidecar.clone()),
        (None, None, None)
    );
    assert_eq!(v.container_id.as_deref(), Some(APP));
    assert_eq!(v.pod_uid, POD);
}

#[test]
fn a_probed_native_sidecar_that_still_races_gets_told_its_probe_misses_the_port() {
    let probe = ProbeTarget::HttpGet {
        port: Some(15021),
        path: Some("/healthz/ready".into()),
    };
    let meta = meta_with(checkout(Role::NativeSidecar, Some(probe)));
    let (d, _) = run(
        vec![
            started(0),
            refused(MS, APP, "127.0.0.1:15001"),
            up(S, PROXY, "0.0.0.0:15001"),
        ],
        &meta,
    );
    let v = view(all(&d)[0], &meta, &wall);
    assert_eq!(v.pattern, Pattern::NativeProbed);
    assert!(
        v.advice.contains("tests port 15021, not port 15001"),
        "{}",
        v.advice
    );
}

#[test]
fn history_is_bounded_and_newest_first() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let mut d = Detector::new(DetectorConfig {
        history: 3,
        ..DetectorConfig::default()
    });
    d.observe(started(0), &meta);
    for port in 1..=5u16 {
        d.observe(
            refused(port as u64 * MS, APP, &format!("127.0.0.1:{port}")),
            &meta,
        );
    }
    let ports: Vec<u16> = d.incidents().newest_first().map(|i| i.port).collect();
    assert_eq!(ports, [5, 4, 3]);
    // Evicted open incidents no longer take refusals.
    d.observe(refused(10 * MS, APP, "127.0.0.1:1"), &meta);
    assert_eq!(d.incidents().newest_first().next().unwrap().port, 1);
}

#[test]
fn filters_match_phase_state_and_namespace() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let (d, _) = run(
        vec![
            started(0),
            refused(MS, APP, "127.0.0.1:15001"),
            up(S, PROXY, "0.0.0.0:15001"),
        ],
        &meta,
    );
    let v = view(all(&d)[0], &meta, &wall);
    let f = |phase: Option<Phase>, state: Option<State>, ns: Option<&str>| Filter {
        kind: None,
        phase,
        state,
        namespace: ns.map(String::from),
    };
    let inc = all(&d)[0];
    assert!(f(Some(Phase::Startup), Some(State::Resolved), Some("shop")).matches(inc, &meta));
    assert!(!f(Some(Phase::Drain), None, None).matches(inc, &meta));
    assert!(!f(None, Some(State::Open), None).matches(inc, &meta));
    assert!(!f(None, None, Some("default")).matches(inc, &meta));
    let kind = |k| Filter {
        kind: Some(k),
        ..Filter::default()
    };
    assert!(kind(Kind::SidecarRace).matches(inc, &meta));
    assert!(!kind(Kind::StuckJob).matches(inc, &meta));
    let json = serde_json::to_value(&v).unwrap();
    for field in [
        "id",
        "kind",
        "container_role",
        "sidecar_role",
        "client_instances",
        "phase",
        "state",
        "pod_uid",
        "namespace",
        "pod",
        "workload",
        "container",
        "container_id",
        "sidecar",
        "sidecar_container_id",
        "pattern",
        "port",
        "destination",
        "local_destination",
        "refused_count",
        "first_refused_at",
        "last_refused_at",
        "listener_ready_at",
        "listener_closed_at",
        "race_window_seconds",
        "advice",
    ] {
        assert!(json.get(field).is_some(), "missing {field}");
    }
    assert_eq!(
        json["workload"],
        serde_json::json!({"kind": "Deployment", "name": "checkout"})
    );
    assert_eq!(json["phase"], "startup");
    assert_eq!(json["pattern"], "classic");
}

#[test]
fn listener_records_stay_bounded_for_a_long_lived_pod() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let mut d = Detector::new(DetectorConfig::default());
    d.observe(started(0), &meta);
    // A sidecar restarting 1000 times, and 1000 ephemeral listeners.
    for n in 0..1000u64 {
        d.observe(up(n * S, PROXY, "0.0.0.0:15001"), &meta);
        d.observe(down(n * S + S / 2, PROXY, "0.0.0.0:15001"), &meta);
        let ephemeral = format!("127.0.0.1:{}", 30_000 + n);
        d.observe(up(n * S, APP, &ephemeral), &meta);
        d.observe(down(n * S + 1, APP, &ephemeral), &meta);
    }
    assert!(d.listeners_of(POD) <= 256, "{}", d.listeners_of(POD));
    // The last close still makes the next refusal a steady (restart) one.
    d.observe(refused(1000 * S, APP, "127.0.0.1:15001"), &meta);
    d.observe(up(1000 * S + S / 10, PROXY, "0.0.0.0:15001"), &meta);
    let last = d.incidents().newest_first().next().unwrap();
    assert_eq!(
        (last.phase, last.listener_closed_at),
        (Phase::Steady, Some(999 * S + S / 2))
    );
}

// ---- Roles and direction ----

#[test]
fn a_proxy_dialing_the_app_before_it_listens_is_app_not_ready_not_a_race() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    // Envoy forwards inbound requests to the app (loopback), pilot-agent forwards the
    // kubelet's rewritten probes (the pod IP): both before the app listens on 8080.
    let mut facts = vec![started(0)];
    facts.extend(refusals(100 * MS, 900 * MS, PROXY, "127.0.0.1:8080"));
    facts.extend(refusals(150 * MS, 950 * MS, DB, "10.244.1.17:8080"));
    facts.sort_by_key(Fact::ts);
    facts.push(up(S, APP, "0.0.0.0:8080"));
    let (d, _) = run(facts, &meta);
    let incs = all(&d);
    assert_eq!(incs.len(), 2);
    for i in incs {
        let v = view(i, &meta, &wall);
        assert_eq!(v.kind, Kind::AppNotReady, "{v:#?}");
        assert_eq!(v.sidecar.as_deref(), Some("app"), "the app served the port");
        assert_eq!(
            (v.container_role, v.sidecar_role),
            (Some(Role::ClassicSidecar), Some(Role::App))
        );
        assert!(!v.kind.is_migration_evidence());
        assert!(v.advice.starts_with("Not a sidecar race"), "{}", v.advice);
        assert!(!v.advice.contains("initContainers"), "{}", v.advice);
    }
}

#[test]
fn a_container_refused_by_its_own_port_is_no_incident() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    // An exec startupProbe in the proxy dials its own declared port before it listens.
    let (d, changes) = run(
        vec![started(0), refused(MS, PROXY, "127.0.0.1:15001")],
        &meta,
    );
    assert!(d.incidents().is_empty());
    assert_eq!(
        changes.last(),
        Some(&Change::NotARace {
            why: NotARace::SelfRefusal,
            refused: 1
        })
    );
    // An undeclared port: known to be its own once it listens there.
    let (d, changes) = run(
        vec![
            started(0),
            refused(MS, PROXY, "127.0.0.1:15090"),
            refused(2 * MS, PROXY, "127.0.0.1:15090"),
            up(S, PROXY, "0.0.0.0:15090"),
        ],
        &meta,
    );
    assert!(all(&d).is_empty(), "{:#?}", all(&d));
    assert!(changes.contains(&Change::NotARace {
        why: NotARace::SelfRefusal,
        refused: 2
    }));
}

/// Found by the detector's property test: an `unresolved` incident (final, already
/// counted) was discarded as a self-refusal when its own container listened later,
/// counting its refusals twice and taking it out of the API.
#[test]
fn an_unresolved_incident_stays_when_its_own_container_listens_later() {
    let (mut d, _) = run(vec![refused(0, PROXY, "127.0.0.1:15090")], &NoMeta);
    d.advance(120 * S, &NoMeta);
    assert_eq!(all(&d)[0].phase, Phase::Unresolved);
    let changes = d.observe(up(121 * S, PROXY, "0.0.0.0:15090"), &NoMeta);
    assert!(
        !changes.iter().any(|c| matches!(c, Change::NotARace { .. })),
        "its refusals are counted once: {changes:?}"
    );
    let shown = all(&d);
    assert_eq!(shown.len(), 1, "still in the API");
    assert_eq!(shown[0].phase, Phase::Unresolved, "a final phase stays");
}

/// Found by the detector's property test: a refusal to a pod IP waiting for the pod's
/// IPs, then discarded as the container's own port, was counted as not a race a second
/// time when the pod went away.
#[test]
fn a_discarded_incident_is_counted_once() {
    let mut facts = vec![refused(0, APP, "10.0.0.2:9090")];
    facts.push(up(MS, APP, "10.0.0.2:9090"));
    facts.push(removed(2 * MS));
    let (_, changes) = run(facts, &NoMeta);
    let not_a_race: u64 = changes
        .iter()
        .map(|c| match c {
            Change::NotARace { refused, .. } => *refused,
            _ => 0,
        })
        .sum();
    assert_eq!(not_a_race, 1, "one refusal, counted once: {changes:?}");
}

#[test]
fn roles_unknown_without_metadata_are_said_in_the_incident() {
    let (d, _) = run(
        vec![
            started(0),
            refused(MS, APP, "127.0.0.1:15001"),
            up(S, PROXY, "0.0.0.0:15001"),
        ],
        &NoMeta,
    );
    let v = view(all(&d)[0], &NoMeta, &wall);
    assert_eq!(v.kind, Kind::SidecarRace);
    assert_eq!((v.container_role, v.sidecar_role), (None, None));
    let json = serde_json::to_value(&v).unwrap();
    assert_eq!(
        (&json["container_role"], &json["sidecar_role"]),
        (&"unknown".into(), &"unknown".into())
    );
    assert!(
        v.advice.contains("container roles are unknown"),
        "{}",
        v.advice
    );
}

// ---- When is it a startup race ----

#[test]
fn containers_started_after_the_agent_in_an_existing_pod_race_at_startup() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    // No PodStarted: the pod's cgroup existed (agent restarted, sandbox re-created).
    let mut facts = vec![
        container_started(100 * S, APP),
        container_started(100 * S, PROXY),
    ];
    facts.extend(refusals(
        100 * S + 100 * MS,
        101 * S,
        APP,
        "127.0.0.1:15001",
    ));
    facts.push(up(101 * S + 500 * MS, PROXY, "0.0.0.0:15001"));
    let (d, _) = run(facts, &meta);
    let i = all(&d)[0];
    assert_eq!((i.phase, i.state), (Phase::Startup, State::Resolved));
}

#[test]
fn startup_is_bounded_by_the_containers_start() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    // The app started long ago and dials a port for the first time: not startup.
    let (d, _) = run(
        vec![
            started(0),
            container_started(0, APP),
            container_started(0, PROXY),
            refused(600 * S, APP, "127.0.0.1:15001"),
            up(601 * S, PROXY, "0.0.0.0:15001"),
        ],
        &meta,
    );
    assert_eq!(all(&d)[0].phase, Phase::Steady);
    // The same from the pod source's startedAt, without cgroup events.
    let mut pod = checkout(Role::ClassicSidecar, None);
    for s in &mut pod.statuses {
        s.started_at = Some(at(0));
    }
    let meta = meta_with(pod);
    let (d, _) = run(
        vec![
            refused(600 * S, APP, "127.0.0.1:15001"),
            up(601 * S, PROXY, "0.0.0.0:15001"),
        ],
        &meta,
    );
    assert_eq!(all(&d)[0].phase, Phase::Steady);
    let (d, _) = run(
        vec![
            refused(30 * S, APP, "127.0.0.1:15001"),
            up(31 * S, PROXY, "0.0.0.0:15001"),
        ],
        &meta,
    );
    assert_eq!(all(&d)[0].phase, Phase::Startup, "30 s after startedAt");
    // A serving container restarted recently does not make an old client's refusal startup.
    let (d, _) = run(
        vec![
            started(0),
            container_started(0, APP),
            container_started(599 * S, PROXY),
            refused(600 * S, APP, "127.0.0.1:15001"),
            up(601 * S, PROXY, "0.0.0.0:15001"),
        ],
        &meta,
    );
    assert_eq!(all(&d)[0].phase, Phase::Steady);
}

#[test]
fn a_crash_looping_app_is_one_startup_incident_per_port() {
    // The pod source names each instance (the kubelet's restarts of `app`).
    let mut pod = checkout(Role::ClassicSidecar, None);
    for id in ["a1", "a2", "a3"] {
        pod.statuses.push(status("app", id));
    }
    let meta = meta_with(pod);
    let mut facts = vec![started(0)];
    for (n, id) in ["a1", "a2", "a3"].into_iter().enumerate() {
        let t = n as u64 * 10 * S;
        facts.push(container_started(t, id));
        facts.extend(refusals(t + 100 * MS, t + 400 * MS, id, "127.0.0.1:15001"));
        facts.push(container_removed(t + 500 * MS, id));
    }
    facts.push(up(25 * S, PROXY, "0.0.0.0:15001"));
    let (d, changes) = run(facts, &meta);
    let incs = all(&d);
    assert_eq!(incs.len(), 1, "{incs:#?}");
    let i = incs[0];
    assert_eq!((i.phase, i.state), (Phase::Startup, State::Resolved));
    assert_eq!((i.refused_count, i.client_instances), (9, 3));
    assert_eq!(
        changes
            .iter()
            .filter(|c| matches!(c, Change::Opened(_)))
            .count(),
        1
    );
    // Two different containers (names known) are never merged.
    let (d, _) = run(
        vec![
            started(0),
            refused(MS, APP, "127.0.0.1:15001"),
            container_removed(2 * MS, APP),
            refused(3 * MS, APP2, "127.0.0.1:15001"),
        ],
        &meta,
    );
    assert_eq!(all(&d).len(), 2);
}

// ---- Drain, steady and unresolved ----

#[test]
fn a_sidecar_restarted_mid_life_while_the_app_exits_is_steady_never_drain() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let mut d = Detector::new(DetectorConfig::default());
    let mut facts = vec![
        started(0),
        up(S, PROXY, "0.0.0.0:15001"),
        down(60 * S, PROXY, "0.0.0.0:15001"),
    ];
    facts.extend(refusals(
        60 * S + 50 * MS,
        60 * S + 500 * MS,
        APP,
        "127.0.0.1:15001",
    ));
    facts.push(container_removed(61 * S, APP));
    for f in facts {
        d.observe(f, &meta);
    }
    assert!(d.advance(62 * S, &meta).is_empty());
    assert_eq!(
        (all(&d)[0].phase, all(&d)[0].state),
        (Phase::Steady, State::Open)
    );
    d.observe(up(63 * S, "dddd", "0.0.0.0:15001"), &meta);
    let i = all(&d)[0];
    assert_eq!((i.phase, i.state), (Phase::Steady, State::Resolved));
    assert_eq!(i.race_window_ns(), Some(3 * S), "the outage");
}

#[test]
fn an_outage_longer_than_the_unresolved_timeout_is_steady() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let mut d = Detector::new(DetectorConfig::default());
    for f in [
        started(0),
        up(S, PROXY, "0.0.0.0:15001"),
        down(10 * S, PROXY, "0.0.0.0:15001"),
        refused(11 * S, APP, "127.0.0.1:15001"),
        refused(150 * S, APP, "127.0.0.1:15001"),
    ] {
        d.observe(f, &meta);
    }
    assert!(d.advance(200 * S, &meta).is_empty(), "never unresolved");
    d.observe(up(250 * S, PROXY, "0.0.0.0:15001"), &meta);
    let i = all(&d)[0];
    assert_eq!((i.phase, i.state), (Phase::Steady, State::Resolved));
    assert_eq!(i.race_window_ns(), Some(240 * S));
}

#[test]
fn unresolved_is_final() {
    let mut pod = checkout(Role::ClassicSidecar, None);
    let meta = meta_with(pod.clone());
    let (mut d, _) = run(vec![started(0), refused(MS, APP, "127.0.0.1:15001")], &meta);
    assert_eq!(all(&d)[0].race_window_ns(), None, "open: no window yet");
    assert_eq!(
        d.advance(121 * S, &meta),
        vec![Change::Rephased {
            id: 1,
            from: Phase::Startup
        }]
    );
    assert!(all(&d)[0].is_final());
    // A listener afterwards, more refusals, then the pod deleted much later: still
    // unresolved, never drain with a 400 s window.
    d.observe(refused(200 * S, APP, "127.0.0.1:15001"), &meta);
    pod.deletion_timestamp = Some(at(430 * S));
    pod.deletion_grace_period_seconds = Some(30);
    let terminating = meta_with(pod);
    assert!(d.advance(401 * S, &terminating).is_empty());
    d.observe(removed(402 * S), &terminating);
    let i = all(&d)[0];
    assert_eq!(
        (i.phase, i.state, i.refused_count),
        (Phase::Unresolved, State::Resolved, 2)
    );
    assert_eq!(i.race_window_ns(), None);
}

#[test]
fn a_listener_gone_long_before_the_deletion_is_not_a_drain() {
    let mut pod = checkout(Role::ClassicSidecar, None);
    pod.deletion_timestamp = Some(at(330 * S));
    pod.deletion_grace_period_seconds = Some(30);
    let terminating = meta_with(pod);
    let (d, _) = run(
        vec![
            started(0),
            up(S, PROXY, "0.0.0.0:15001"),
            down(10 * S, PROXY, "0.0.0.0:15001"),
            refused(11 * S, APP, "127.0.0.1:15001"),
            removed(301 * S),
        ],
        &terminating,
    );
    assert_eq!(all(&d)[0].phase, Phase::Steady, "deletion began at 300 s");
    // Gone at the deletion: a drain.
    let (d, _) = run(
        vec![
            started(0),
            up(S, PROXY, "0.0.0.0:15001"),
            down(300 * S + MS, PROXY, "0.0.0.0:15001"),
            refused(300 * S + 100 * MS, APP, "127.0.0.1:15001"),
            removed(301 * S),
        ],
        &terminating,
    );
    assert_eq!(all(&d)[0].phase, Phase::Drain);
}

// ---- Lifecycle failures ----

fn with_init(mut pod: PodInfo) -> PodInfo {
    pod.containers
        .insert(0, container("wait-for-mesh", Role::Init, &[], None));
    pod.statuses.push(status("wait-for-mesh", "eeee"));
    pod
}

#[test]
fn an_init_container_waiting_for_a_classic_sidecar_is_a_deadlock() {
    let meta = meta_with(with_init(checkout(Role::ClassicSidecar, None)));
    let mut facts = vec![started(0)];
    facts.extend(refusals(100 * MS, 10 * S, "eeee", "127.0.0.1:15001"));
    let (mut d, _) = run(facts, &meta);
    d.advance(121 * S, &meta);
    let v = view(all(&d)[0], &meta, &wall);
    assert_eq!(v.kind, Kind::InitDeadlock);
    assert_eq!(v.phase, Phase::Unresolved);
    assert_eq!(
        (v.container.as_deref(), v.sidecar.as_deref()),
        (Some("wait-for-mesh"), Some("istio-proxy"))
    );
    assert!(
        v.advice.contains("make istio-proxy a native sidecar")
            || v.advice.contains("Make istio-proxy a native sidecar"),
        "{}",
        v.advice
    );
    assert!(
        v.advice.contains("listed before wait-for-mesh"),
        "{}",
        v.advice
    );
    assert!(!v.advice.contains("check the address"), "{}", v.advice);
}

#[test]
fn an_init_container_declared_before_its_native_sidecar_is_a_deadlock() {
    // initContainers: [wait-for-mesh, istio-proxy (restartPolicy: Always)]: the kubelet
    // starts them in order, so the proxy never starts and nothing ever listens.
    let meta = meta_with(with_init(checkout(Role::NativeSidecar, None)));
    let mut facts = vec![started(0)];
    facts.extend(refusals(100 * MS, 10 * S, "eeee", "127.0.0.1:15001"));
    let (mut d, _) = run(facts, &meta);
    d.advance(121 * S, &meta);
    let v = view(all(&d)[0], &meta, &wall);
    assert_eq!((v.kind, v.phase), (Kind::InitDeadlock, Phase::Unresolved));
    assert!(
        v.advice
            .contains("Move istio-proxy above wait-for-mesh in initContainers"),
        "{}",
        v.advice
    );
    // The native sidecar declared first: it starts first, and the init container
    // waiting for it is an ordinary (native) startup race.
    let mut pod = checkout(Role::NativeSidecar, None);
    pod.containers
        .insert(1, container("wait-for-mesh", Role::Init, &[], None));
    pod.statuses.push(status("wait-for-mesh", "eeee"));
    let meta = meta_with(pod);
    let (d, _) = run(
        vec![
            started(0),
            refused(MS, "eeee", "127.0.0.1:15001"),
            up(S, PROXY, "0.0.0.0:15001"),
        ],
        &meta,
    );
    let v = view(all(&d)[0], &meta, &wall);
    assert_eq!((v.kind, v.pattern), (Kind::SidecarRace, Pattern::Native));
}

pub(super) fn job_pod(app_state: RunState, sidecar_state: RunState) -> PodInfo {
    let mut pod = checkout(Role::ClassicSidecar, None);
    pod.workload = Workload {
        kind: "Job".into(),
        name: "reindex".into(),
    };
    pod.containers
        .retain(|c| c.name == "app" || c.name == "istio-proxy");
    pod.statuses
        .retain(|s| s.name == "app" || s.name == "istio-proxy");
    for s in &mut pod.statuses {
        s.state = if s.name == "app" {
            app_state
        } else {
            sidecar_state
        };
        if s.state == RunState::Terminated {
            s.finished_at = Some(at(10 * S));
        }
    }
    pod
}

#[test]
fn a_job_pod_kept_alive_by_its_classic_sidecar_is_stuck() {
    let stuck = meta_with(job_pod(RunState::Terminated, RunState::Running));
    let mut d = Detector::new(DetectorConfig::default());
    assert!(d.advance(30 * S, &stuck).is_empty(), "under the threshold");
    assert_eq!(d.advance(71 * S, &stuck), vec![Change::Opened(1)]);
    assert!(d.advance(72 * S, &stuck).is_empty(), "one incident per pod");
    let v = view(all(&d)[0], &stuck, &wall);
    assert_eq!(v.kind, Kind::StuckJob);
    assert_eq!(
        (v.sidecar.as_deref(), v.port, v.state),
        (Some("istio-proxy"), None, State::Open)
    );
    assert_eq!(v.apps_finished_at.as_deref(), Some("t+10000ms"));
    assert!(v.advice.contains("the Job never completes"), "{}", v.advice);
    // The sidecar finally stops: resolved, the window is how long it outlived the app.
    let done = meta_with(job_pod(RunState::Terminated, RunState::Terminated));
    assert_eq!(d.advance(100 * S, &done), vec![Change::Resolved(1)]);
    assert_eq!(all(&d)[0].race_window_ns(), Some(90 * S));
    // Apps still running, or a Deployment's pod: never stuck.
    let running = meta_with(job_pod(RunState::Running, RunState::Running));
    assert!(
        Detector::new(DetectorConfig::default())
            .advance(500 * S, &running)
            .is_empty()
    );
    let mut deployment = job_pod(RunState::Terminated, RunState::Running);
    deployment.workload.kind = "Deployment".into();
    assert!(
        Detector::new(DetectorConfig::default())
            .advance(500 * S, &meta_with(deployment))
            .is_empty()
    );
}

// ---- Fixes to known wrong results ----

#[test]
fn dual_stack_loopback_dialing_is_one_startup_incident_resolved_by_either_family() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let mut facts = vec![started(0)];
    for n in 0..10u64 {
        let dst = if n % 2 == 0 {
            "[::1]:15001"
        } else {
            "127.0.0.1:15001"
        };
        facts.push(refused(100 * MS + n * 100 * MS, APP, dst));
    }
    facts.push(up(1500 * MS, PROXY, "127.0.0.1:15001"));
    // `localhost` tries ::1 first on every later connect: the fallback is not a race.
    facts.push(refused(2 * S, APP, "[::1]:15001"));
    let (d, changes) = run(facts, &meta);
    let incs = all(&d);
    assert_eq!(incs.len(), 1, "{incs:#?}");
    assert_eq!(
        (incs[0].phase, incs[0].state),
        (Phase::Startup, State::Resolved)
    );
    assert_eq!(incs[0].refused_count, 10);
    assert_eq!(changes.last(), Some(&other()));
}

#[test]
fn a_redirect_to_another_pods_ip_is_not_pod_local() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let (d, changes) = run(
        vec![
            started(0),
            Fact::Refused {
                ts: MS,
                pod_uid: POD.into(),
                client: Client::Container(APP.into()),
                dst: "10.96.0.20:80".parse().unwrap(),
                // kube-proxy DNAT to a pod on this node, refused there.
                local_dst: Some("10.244.1.99:8080".parse().unwrap()),
                process: "app".into(),
            },
            // The client pod happens to listen on 8080 too.
            up(S, APP, "0.0.0.0:8080"),
        ],
        &meta,
    );
    assert!(d.incidents().is_empty());
    assert_eq!(changes[1], other());
}

#[test]
fn refusals_to_the_pod_ip_wait_for_the_pods_ips() {
    let mut no_ips = checkout(Role::ClassicSidecar, None);
    no_ips.pod_ips.clear();
    let early = meta_with(no_ips);
    let known = meta_with(checkout(Role::ClassicSidecar, None));
    let mut d = Detector::new(DetectorConfig::default());
    for f in [
        started(0),
        refused(100 * MS, APP, "10.244.1.17:15001"),
        up(S, PROXY, "0.0.0.0:15001"),
    ] {
        d.observe(f, &early);
    }
    assert!(all(&d).is_empty(), "held while the IPs are unknown");
    assert!(d.advance(2 * S, &early).is_empty());
    let changes = d.advance(3 * S, &known);
    assert_eq!(changes, vec![Change::Opened(1), Change::Resolved(1)]);
    assert_eq!(
        (all(&d)[0].phase, all(&d)[0].state),
        (Phase::Startup, State::Resolved)
    );
    // Not the pod's IP after all: other.
    let mut d = Detector::new(DetectorConfig::default());
    d.observe(started(0), &early);
    d.observe(refused(100 * MS, APP, "10.244.7.7:15001"), &early);
    assert_eq!(d.advance(3 * S, &known), vec![other()]);
    // The IPs never come: other after the wait.
    let mut d = Detector::new(DetectorConfig::default());
    d.observe(started(0), &early);
    d.observe(refused(100 * MS, APP, "10.244.1.17:15001"), &early);
    assert!(d.advance(5 * S, &early).is_empty());
    assert_eq!(d.advance(11 * S, &early), vec![other()]);
    assert!(all(&d).is_empty());
}

#[test]
fn an_app_dialing_another_unrecognised_app_is_not_a_sidecar_race() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let (d, _) = run(
        vec![
            started(0),
            refused(MS, APP2, "127.0.0.1:8080"),
            up(S, APP, "0.0.0.0:8080"),
        ],
        &meta,
    );
    let v = view(all(&d)[0], &meta, &wall);
    assert_eq!(v.kind, Kind::AppNotReady);
    assert_eq!(
        (v.container_role, v.sidecar_role),
        (Some(Role::App), Some(Role::App))
    );
    assert!(
        v.advice
            .contains("name it in the pod annotation sidecar-race.io/sidecars"),
        "{}",
        v.advice
    );
    // Named as a sidecar by the annotation (or --sidecar-names): a race.
    let mut pod = checkout(Role::ClassicSidecar, None);
    pod.mark_site_sidecars(&["app".to_string()]);
    let meta = meta_with(pod);
    let v = view(all(&d)[0], &meta, &wall);
    assert_eq!((v.kind, v.pattern), (Kind::SidecarRace, Pattern::Classic));
}

mod background;
mod kubelet;
mod restarts;
mod timeline;
mod udp;
mod unix;
