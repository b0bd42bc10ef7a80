//! Kubernetes Events through kube's real client against a fake API server at the HTTP
//! level (no real API server can run here): request bodies asserted, one Event per
//! recurring race (series updated), rate-limited per node.

use std::{
    collections::HashSet,
    net::SocketAddr,
    sync::{Arc, Mutex, atomic::Ordering::Relaxed},
    time::Duration,
};

use axum::{
    Json, Router,
    body::Bytes,
    extract::{Path, State},
    http::{Method, StatusCode},
    routing::{patch, post},
};
use serde_json::{Value, json};
use sidecar_race_agent::{
    detect::{
        Kind, Phase, State as IncidentState,
        incident::DrainSubPhase,
        render::{IncidentView, PodStart, SocketView},
        timeline::{EntryKind, StartSource},
        timeline_view::TimelineEntryView,
    },
    pods::pod_info::{Pattern, Role, Workload},
    sinks::k8s_events::{EventPublisher, notice_for},
};

/// The fake API server's requests, and the Events it stores (by namespace/name) as
/// a real one does: a create of an existing name is 409, a patch of a missing one 404.
#[derive(Default)]
struct Seen {
    requests: Vec<(Method, String, Value)>,
    stored: HashSet<String>,
}

type Shared = Arc<Mutex<Seen>>;

fn status(code: StatusCode, reason: &str) -> (StatusCode, Json<Value>) {
    (
        code,
        Json(
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": reason, "reason": reason, "code": code.as_u16()}),
        ),
    )
}

async fn create(
    State(s): State<Shared>,
    Path(ns): Path<String>,
    body: Bytes,
) -> (StatusCode, Json<Value>) {
    let v: Value = serde_json::from_slice(&body).unwrap();
    let mut s = s.lock().unwrap();
    s.requests.push((Method::POST, ns.clone(), v.clone()));
    let key = format!("{ns}/{}", v["metadata"]["name"].as_str().unwrap());
    if !s.stored.insert(key) {
        return status(StatusCode::CONFLICT, "AlreadyExists");
    }
    (StatusCode::CREATED, Json(v))
}

async fn update(
    State(s): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> (StatusCode, Json<Value>) {
    let v: Value = serde_json::from_slice(&body).unwrap();
    let mut s = s.lock().unwrap();
    let key = format!("{ns}/{name}");
    s.requests.push((Method::PATCH, key.clone(), v));
    if !s.stored.contains(&key) {
        return status(StatusCode::NOT_FOUND, "NotFound");
    }
    (
        StatusCode::OK,
        Json(
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": name, "namespace": ns}}),
        ),
    )
}

async fn fake_api() -> (SocketAddr, Shared) {
    let seen: Shared = Arc::default();
    let app = Router::new()
        .route(
            "/apis/events.k8s.io/v1/namespaces/{ns}/events",
            post(create),
        )
        .route(
            "/apis/events.k8s.io/v1/namespaces/{ns}/events/{name}",
            patch(update),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
}

fn client(addr: SocketAddr) -> kube::Client {
    kube::Client::try_from(kube::Config::new(format!("http://{addr}").parse().unwrap())).unwrap()
}

fn incident(phase: Phase, container: &str, port: u16) -> IncidentView {
    IncidentView {
        id: 1,
        kind: Kind::SidecarRace,
        phase,
        state: IncidentState::Resolved,
        pod_uid: "6f2c1a6e-8b0f-4d8e-9a53-3c1d2e4f5a6b".into(),
        namespace: Some("shop".into()),
        pod: Some("checkout-7d4b9c8f5-x2k8q".into()),
        workload: Some(Workload { kind: "Deployment".into(), name: "checkout".into() }),
        container: Some(container.into()),
        container_id: Some("a".repeat(64)),
        container_role: Some(Role::App),
        sidecar: Some("istio-proxy".into()),
        sidecar_container_id: Some("b".repeat(64)),
        sidecar_role: Some(Role::ClassicSidecar),
        pattern: Pattern::Classic,
        protocol: Some(sidecar_race_agent::detect::service::Protocol::Tcp),
        port: Some(port),
        destination: Some(format!("127.0.0.1:{port}")),
        local_destination: None,
        socket: None,
        refused_count: 15,
        client_instances: 1,
        processes: vec![],
        guarded: false,
        first_refused_at: Some("2026-11-29T10:00:00.100000000Z".into()),
        last_refused_at: Some("2026-11-29T10:00:01.500000000Z".into()),
        apps_finished_at: None,
        listener_ready_at: Some("2026-11-29T10:00:01.600000000Z".into()),
        listener_closed_at: None,
        race_window_seconds: Some(1.5),
        advice: "Move istio-proxy from containers to initContainers with restartPolicy: Always and give it a startupProbe that tests port 15001, so app starts only once istio-proxy serves.".into(),
        refusals_suppressed: 0,
        pod_start: PodStart::Created,
        pod_start_number: 0,
        drain_sub_phase: None,
        timeline: vec![],
    }
}

async fn wait_requests(seen: &Shared, n: usize) -> Vec<(Method, String, Value)> {
    for _ in 0..100 {
        if seen.lock().unwrap().requests.len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    seen.lock().unwrap().requests.clone()
}

#[tokio::test]
async fn one_event_per_race_then_its_series_is_updated() {
    let (addr, seen) = fake_api().await;
    let publisher = EventPublisher::spawn(client(addr), "node-a".into(), 30);
    let notice = notice_for(&incident(Phase::Startup, "app", 15001)).unwrap();
    publisher.notify(notice.clone());
    publisher.notify(notice);
    let requests = wait_requests(&seen, 2).await;
    assert_eq!(requests.len(), 2, "{requests:#?}");

    let (method, ns, body) = &requests[0];
    assert_eq!((method, ns.as_str()), (&Method::POST, "shop"));
    assert_eq!(body["apiVersion"], "events.k8s.io/v1");
    assert_eq!(body["kind"], "Event");
    assert_eq!(body["type"], "Warning");
    assert_eq!(body["reason"], "SidecarStartupRace");
    assert_eq!(body["action"], "Detected");
    assert_eq!(body["reportingController"], "sidecar-race.io/agent");
    assert_eq!(body["reportingInstance"], "sidecar-race-agent-node-a");
    assert_eq!(
        body["regarding"],
        json!({"apiVersion": "v1", "kind": "Pod", "namespace": "shop", "name": "checkout-7d4b9c8f5-x2k8q",
               "uid": "6f2c1a6e-8b0f-4d8e-9a53-3c1d2e4f5a6b", "fieldPath": "spec.containers{app}"})
    );
    let note = body["note"].as_str().unwrap();
    assert!(note.starts_with("app was refused 15 times on 127.0.0.1:15001 by istio-proxy (classic sidecar) before it listened (startup); race window 1.50 s."), "{note}");
    assert!(
        note.contains("Fix: Move istio-proxy from containers to initContainers"),
        "{note}"
    );
    assert!(body["eventTime"].as_str().unwrap().ends_with('Z'));
    let name = body["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("checkout-7d4b9c8f5-x2k8q."), "{name}");

    let (method, path, patch) = &requests[1];
    assert_eq!(method, &Method::PATCH);
    assert_eq!(
        path,
        &format!("shop/{name}"),
        "the same Event, not a new one"
    );
    assert_eq!(patch["series"]["count"], 2);
    assert!(patch["series"]["lastObservedTime"].is_string());
    assert_eq!(publisher.stats.created.load(Relaxed), 1);
    assert_eq!(publisher.stats.updated.load(Relaxed), 1);
}

#[tokio::test]
async fn reasons_follow_the_phase_and_unresolved_is_not_an_event() {
    assert_eq!(
        notice_for(&incident(Phase::Drain, "app", 15001))
            .unwrap()
            .reason,
        "SidecarDrainRace"
    );
    assert_eq!(
        notice_for(&incident(Phase::Steady, "app", 15001))
            .unwrap()
            .reason,
        "SidecarRestartRace"
    );
    assert!(notice_for(&incident(Phase::Unresolved, "app", 15001)).is_none());
    let mut nameless = incident(Phase::Startup, "app", 15001);
    nameless.namespace = None;
    assert!(
        notice_for(&nameless).is_none(),
        "an Event needs the pod's namespace and name"
    );
    let mut on_socket = incident(Phase::Startup, "app", 15001);
    on_socket.port = None;
    on_socket.destination = None;
    on_socket.socket = Some(SocketView {
        path: "/var/run/dapr/app.sock".into(),
        volume: Some("dapr-socket".into()),
        is_abstract: false,
    });
    let n = notice_for(&on_socket).unwrap();
    assert!(
        n.note.starts_with("app was refused ")
            && n.note.contains(" on socket /var/run/dapr/app.sock by "),
        "{}",
        n.note
    );
    assert!(n.key.ends_with("/var/run/dapr/app.sock"), "{}", n.key);
    let mut long = incident(Phase::Startup, "app", 15001);
    long.advice = "x".repeat(5000);
    assert!(notice_for(&long).unwrap().note.len() <= 1024);
}

/// An entry of `kind` at `ms` after the first, about `container`.
fn entry(
    kind: EntryKind,
    ms: u64,
    container: Option<&str>,
    count: Option<u64>,
) -> TimelineEntryView {
    TimelineEntryView {
        kind,
        at: format!("t+{ms}ms"),
        at_ns: 5_000_000_000 + ms * 1_000_000,
        container: container.map(str::to_string),
        container_id: None,
        source: (kind == EntryKind::ContainerStarted).then_some(StartSource::Kernel),
        count,
        refused: None,
        grace_seconds: None,
        value: None,
    }
}

/// The app started, refused from 120 ms, the proxy started at 300 ms and listened
/// at 1.46 s after 22 more refusals; the sandbox (unnamed) started first.
fn startup_timeline() -> Vec<TimelineEntryView> {
    vec![
        entry(EntryKind::ContainerStarted, 0, None, None),
        entry(EntryKind::ContainerStarted, 0, Some("app"), None),
        entry(EntryKind::FirstRefusal, 120, Some("app"), Some(1)),
        entry(EntryKind::ContainerStarted, 300, Some("istio-proxy"), None),
        entry(EntryKind::LastRefusal, 1400, Some("app"), Some(22)),
        entry(EntryKind::Listening, 1460, Some("istio-proxy"), None),
    ]
}

#[test]
fn the_note_ends_with_the_timeline_in_short_form() {
    let plain = notice_for(&incident(Phase::Startup, "app", 15001)).unwrap();
    assert!(!plain.note.contains("Timeline"), "{}", plain.note);
    let mut v = incident(Phase::Startup, "app", 15001);
    v.timeline = startup_timeline();
    let n = notice_for(&v).unwrap();
    assert_eq!(
        n.note,
        format!(
            "{} Timeline: app started +0.00s, first refusal +0.12s, istio-proxy started +0.30s, last refusal (22 since the previous) +1.40s, istio-proxy listening +1.46s",
            plain.note
        )
    );
}

#[test]
fn a_long_note_cuts_its_timeline_never_the_evidence_or_the_fix() {
    let mut v = incident(Phase::Startup, "app", 15001);
    v.advice = "y".repeat(820);
    let bare = notice_for(&v).unwrap().note;
    v.timeline = startup_timeline();
    let n = notice_for(&v).unwrap();
    assert!(n.note.len() <= 1024, "{}", n.note.len());
    assert!(
        n.note.starts_with(&bare),
        "the note before the timeline is whole"
    );
    let timeline = n.note.strip_prefix(&bare).unwrap();
    assert!(
        timeline.starts_with(" Timeline: app started +0.00s, ") && timeline.ends_with(", …"),
        "{timeline}"
    );
    // No room at all: the note alone, as before.
    v.advice = "z".repeat(5000);
    let n = notice_for(&v).unwrap();
    assert!(
        n.note.len() <= 1024 && !n.note.contains("Timeline"),
        "{}",
        n.note
    );
}

#[test]
fn a_drain_the_sidecar_restarted_in_says_so() {
    let mut v = incident(Phase::Drain, "app", 15001);
    v.drain_sub_phase = Some(DrainSubPhase::SidecarRestarting);
    let n = notice_for(&v).unwrap();
    assert_eq!(n.reason, "SidecarDrainRace");
    assert!(
        n.note.contains(
            "after it stopped listening (drain) until the kubelet restarted it during the pod's termination"
        ),
        "{}",
        n.note
    );
}

#[test]
fn a_race_after_an_in_place_restart_of_all_containers_says_so() {
    let created = notice_for(&incident(Phase::Startup, "app", 15001)).unwrap();
    assert!(
        !created.note.contains("restarted in place"),
        "{}",
        created.note
    );
    let mut restarted = incident(Phase::Startup, "app", 15001);
    restarted.pod_start = PodStart::RestartedInPlace;
    restarted.pod_start_number = 1;
    let n = notice_for(&restarted).unwrap();
    assert_eq!(n.reason, "SidecarStartupRace");
    assert!(
        n.note.contains(
            "before it listened (startup), after all of the pod's containers were restarted in place; race window 1.50 s"
        ),
        "{}",
        n.note
    );
}

#[tokio::test]
async fn posting_is_rate_limited_per_node() {
    let (addr, seen) = fake_api().await;
    let publisher = EventPublisher::spawn(client(addr), "node-a".into(), 3);
    for port in 1..=8u16 {
        publisher.notify(notice_for(&incident(Phase::Startup, "app", port)).unwrap());
    }
    let requests = wait_requests(&seen, 3).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(requests.len(), 3, "a burst of 3 per minute: {requests:#?}");
    assert!(requests.iter().all(|(m, _, _)| m == Method::POST));
    assert_eq!(publisher.stats.dropped.load(Relaxed), 5);
}

#[tokio::test]
async fn an_api_server_that_fails_is_counted_not_fatal() {
    let unused = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let publisher = EventPublisher::spawn(client(unused), "node-a".into(), 30);
    publisher.notify(notice_for(&incident(Phase::Startup, "app", 15001)).unwrap());
    for _ in 0..100 {
        if publisher.stats.failed.load(Relaxed) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(publisher.stats.failed.load(Relaxed), 1);
}

#[test]
fn only_migration_evidence_becomes_an_event() {
    let mut v = incident(Phase::Startup, "istio-proxy", 8080);
    v.kind = Kind::AppNotReady;
    assert_eq!(
        notice_for(&v),
        None,
        "a proxy dialing a not-ready app is no race"
    );
    v.kind = Kind::InitDeadlock;
    v.phase = Phase::Unresolved;
    let n = notice_for(&v).expect("a deadlock is reported");
    assert_eq!(n.reason, "InitWaitsForClassicSidecar");
    assert!(
        n.note
            .contains("cannot start before the init containers finish"),
        "{}",
        n.note
    );
    v.kind = Kind::SidecarRace;
    assert_eq!(
        notice_for(&v),
        None,
        "an unresolved race is a misconfiguration"
    );
    v.kind = Kind::StuckJob;
    v.port = None;
    v.destination = None;
    let n = notice_for(&v).expect("a stuck Job is reported");
    assert_eq!(n.reason, "JobKeptAliveBySidecar");
}

#[tokio::test]
async fn a_recurrence_after_the_event_expired_creates_it_again() {
    let (addr, seen) = fake_api().await;
    let publisher = EventPublisher::spawn(client(addr), "node-a".into(), 30);
    let notice = notice_for(&incident(Phase::Startup, "app", 15001)).unwrap();
    publisher.notify(notice.clone());
    let first = wait_requests(&seen, 1).await;
    let name = first[0].2["metadata"]["name"].as_str().unwrap().to_string();
    // The API server's event TTL (1 h by default) passes.
    seen.lock().unwrap().stored.clear();
    publisher.notify(notice);
    let requests = wait_requests(&seen, 3).await;
    let steps: Vec<(&Method, &str)> = requests
        .iter()
        .map(|(m, path, body)| {
            let name = body["metadata"]["name"].as_str().unwrap_or(path);
            (m, name.rsplit('/').next().unwrap())
        })
        .collect();
    assert_eq!(
        steps,
        [
            (&Method::POST, name.as_str()),
            (&Method::PATCH, name.as_str()),
            (&Method::POST, name.as_str())
        ],
        "the update finds no Event (404), so the Event is created again"
    );
    assert!(
        seen.lock()
            .unwrap()
            .stored
            .contains(&format!("shop/{name}")),
        "the Event exists again"
    );
    assert_eq!(publisher.stats.created.load(Relaxed), 2);
    assert_eq!(publisher.stats.failed.load(Relaxed), 0);
}

#[tokio::test]
async fn a_race_posted_before_a_restart_updates_the_existing_event() {
    let (addr, seen) = fake_api().await;
    let notice = notice_for(&incident(Phase::Startup, "app", 15001)).unwrap();
    // The agent before the restart posted it.
    let before = EventPublisher::spawn(client(addr), "node-a".into(), 30);
    before.notify(notice.clone());
    let first = wait_requests(&seen, 1).await;
    let name = first[0].2["metadata"]["name"].as_str().unwrap().to_string();

    let after = EventPublisher::spawn(client(addr), "node-a".into(), 30);
    after.notify(notice.clone());
    let requests = wait_requests(&seen, 3).await;
    assert_eq!(requests.len(), 3, "{requests:#?}");
    assert_eq!(requests[1].0, Method::POST);
    assert_eq!(requests[1].2["metadata"]["name"], name.as_str());
    let (method, path, patch) = &requests[2];
    assert_eq!(
        (method, path.as_str()),
        (&Method::PATCH, format!("shop/{name}").as_str()),
        "the create finds the Event (409), so its series is updated"
    );
    assert_eq!(patch["series"]["count"], 2);
    assert_eq!(after.stats.updated.load(Relaxed), 1);
    assert_eq!(after.stats.failed.load(Relaxed), 0);

    // Its next recurrence is an update too.
    after.notify(notice);
    let requests = wait_requests(&seen, 4).await;
    assert_eq!(requests[3].0, Method::PATCH);
    assert_eq!(requests[3].2["series"]["count"], 3);
}
