//! The detector on recorded sequences of facts, for every phase and edge.

use std::collections::{HashMap, HashSet};

use super::{
    detector::NotARace,
    render::{Filter, Kind, view},
    reorder::Reorder,
    *,
};
use crate::inventory::cgroup_path::Runtime;
use crate::inventory::pod_info::{
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
    fn boot_ns(&self, rfc3339: &str) -> Option<u64> {
        let t = time::OffsetDateTime::parse(
            rfc3339,
            &time::format_description::well_known::Rfc3339,
        )
        .ok()?;
        u64::try_from(t.unix_timestamp_nanos() - EPOCH_2026_11_29_10H).ok()
    }
    fn each_pod(&self, f: &mut dyn FnMut(&PodInfo)) {
        for (uid, p) in &self.pods {
            if !self.deleted.contains(uid) {
                f(p);
            }
        }
    }
}

/// 2026-11-29T10:00:00Z in Unix ns: boot time 0 of the recordings.
const EPOCH_2026_11_29_10H: i128 = 1_795_946_400_000_000_000;

/// `2026-11-29T10:00:00Z` plus `ns`.
fn at(ns: u64) -> String {
    crate::clock::rfc3339_nanos(EPOCH_2026_11_29_10H + ns as i128)
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
        startup_probe,
        readiness_probe: None,
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
    let meta = meta_with(checkout(Role::NativeSidecar, None));
    let (d, changes) = run(
        vec![started(0), up(100 * MS, PROXY, "0.0.0.0:15001")],
        &meta,
    );
    assert!(d.incidents().is_empty());
    assert_eq!(
        changes,
        vec![Change::PodStarted {
            pod_uid: POD.into()
        }]
    );
}

#[test]
fn drain_with_metadata_and_without() {
    let mut pod = checkout(Role::ClassicSidecar, None);
    pod.deletion_timestamp = Some("2026-11-29T10:00:10Z".into());
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
        for f in r.release(now) {
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
    // A startup candidate whose pod goes away before any listener: unresolved.
    let (mut d, _) = run(vec![started(0), refused(MS, APP, "127.0.0.1:15001")], &meta);
    let mut deleted = meta_with(checkout(Role::ClassicSidecar, None));
    deleted.deleted.insert(POD.into());
    let changes = d.advance(2 * S, &deleted);
    assert!(changes.contains(&Change::Resolved(1)));
    assert_eq!(
        (all(&d)[0].phase, all(&d)[0].state),
        (Phase::Unresolved, State::Resolved)
    );
    // A drain in progress: the deletion resolves it as a drain.
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
            pod_uid: POD.into()
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
    let f = |phase: Option<&str>, state: Option<&str>, ns: Option<&str>| Filter {
        kind: None,
        phase: phase.map(String::from),
        state: state.map(String::from),
        namespace: ns.map(String::from),
    };
    assert!(f(Some("startup"), Some("resolved"), Some("shop")).matches(&v));
    assert!(!f(Some("drain"), None, None).matches(&v));
    assert!(!f(None, Some("open"), None).matches(&v));
    assert!(!f(None, None, Some("default")).matches(&v));
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
