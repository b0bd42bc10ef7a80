//! Unix socket races: one emptyDir at two paths, a stale socket file, a drain.

use super::*;
use crate::{
    detect::{service::SocketKey, socket_view::SocketView},
    names::UnixName,
    pods::mounts::Mount,
};

/// checkout with daprd's socket volume: the app mounts it at /var/run/dapr, the
/// sidecar (istio-proxy here, a classic sidecar) at /sockets.
pub(super) fn with_socket_volume() -> PodInfo {
    let mut pod = checkout(Role::ClassicSidecar, None);
    for c in &mut pod.containers {
        let at = match c.name.as_str() {
            "app" => "/var/run/dapr",
            "istio-proxy" => "/sockets",
            _ => continue,
        };
        c.mounts.push(Mount {
            volume: "dapr-socket".into(),
            mount_path: at.into(),
            sub_path: String::new(),
            unexpanded: None,
        });
    }
    pod
}

pub(super) fn unix_refused(ts: u64, path: &str) -> Fact {
    Fact::UnixRefused {
        ts,
        pod_uid: POD.into(),
        client: Client::Container(APP.into()),
        name: name(path),
        process: "app".into(),
        datagram: false,
    }
}

pub(super) fn unix_up(ts: u64, path: &str) -> Fact {
    Fact::UnixListenerUp {
        ts,
        pod_uid: POD.into(),
        container_id: Some(PROXY.into()),
        name: name(path),
        datagram: false,
    }
}

pub(super) fn name(path: &str) -> UnixName {
    match path.strip_prefix('@') {
        Some(abs) => UnixName::Abstract(abs.into()),
        None => UnixName::Path(path.into()),
    }
}

#[test]
fn one_empty_dir_at_two_paths_is_one_socket_and_a_startup_race() {
    let meta = meta_with(with_socket_volume());
    let facts = late_volume_socket();
    let (d, changes) = run(facts, &meta);
    let incs = all(&d);
    assert_eq!(incs.len(), 1, "{changes:?}");
    let i = incs[0];
    assert_eq!(
        (i.phase, i.state, i.refused_count),
        (Phase::Startup, State::Resolved, 5)
    );
    assert_eq!(i.race_window_ns(), Some(1500 * MS));
    let v = view(i, &meta, &wall);
    assert_eq!(
        v.socket,
        Some(SocketView {
            path: "/var/run/dapr/app.sock".into(),
            volume: Some("dapr-socket".into()),
            is_abstract: false,
        })
    );
    assert_eq!((v.port, v.destination.as_deref()), (None, None));
    assert_eq!(
        (v.container.as_deref(), v.sidecar.as_deref()),
        (Some("app"), Some("istio-proxy"))
    );
    assert!(
        v.advice
            .contains(r#"command: ["nc", "-zU", "/sockets/app.sock"]"#),
        "the probe names the sidecar's own path: {}",
        v.advice
    );
    let json = serde_json::to_value(&v).unwrap();
    assert_eq!(
        json["socket"],
        serde_json::json!({"path": "/var/run/dapr/app.sock", "volume": "dapr-socket", "abstract": false})
    );
}

#[test]
fn a_stale_socket_file_after_a_crash_is_steady_and_its_window_starts_at_the_first_refusal() {
    let meta = meta_with(with_socket_volume());
    // Long running: no start seen. The sidecar listened, crashed unseen (the syscall
    // fallback sees no close), came back 2 s after the first refusal.
    let facts = vec![
        unix_up(S, "/sockets/app.sock"),
        unix_refused(60 * S, "/var/run/dapr/app.sock"),
        unix_refused(61 * S, "/var/run/dapr/app.sock"),
        unix_up(62 * S, "/sockets/app.sock"),
    ];
    let (d, _) = run(facts, &meta);
    let incs = all(&d);
    assert_eq!(incs.len(), 1);
    let i = incs[0];
    assert_eq!(
        (i.phase, i.state, i.refused_count),
        (Phase::Steady, State::Resolved, 2)
    );
    assert_eq!(i.listener_closed_at, Some(60 * S));
    assert_eq!(i.race_window_ns(), Some(2 * S));
}

#[test]
fn a_socket_unlinked_while_the_pod_is_deleted_is_a_drain() {
    let mut pod = with_socket_volume();
    pod.deletion_timestamp = Some(at(30 * S));
    let meta = meta_with(pod);
    let facts = vec![
        unix_up(S, "/sockets/app.sock"),
        unix_refused(31 * S, "/var/run/dapr/app.sock"),
        unix_refused(32 * S, "/var/run/dapr/app.sock"),
    ];
    let (d, _) = run(facts, &meta);
    let i = all(&d)[0];
    assert_eq!((i.phase, i.refused_count), (Phase::Drain, 2));
}

#[test]
fn paths_on_different_volumes_or_none_are_different_sockets() {
    let meta = meta_with(with_socket_volume());
    let facts = vec![
        started(0),
        container_started(0, APP),
        unix_refused(S, "/var/run/dapr/app.sock"),
        // The sidecar binds the same file name outside the shared volume.
        unix_up(2 * S, "/tmp/app.sock"),
    ];
    let (d, _) = run(facts, &meta);
    let i = all(&d)[0];
    assert_eq!(i.state, State::Open, "nothing served the volume's socket");
}

#[test]
fn an_abstract_name_matches_across_containers_and_is_reported_as_such() {
    let meta = meta_with(with_socket_volume());
    let facts = vec![
        started(0),
        container_started(0, APP),
        unix_refused(S, "@otel-collector"),
        unix_up(S + 300 * MS, "@otel-collector"),
    ];
    let (d, _) = run(facts, &meta);
    let i = all(&d)[0];
    assert_eq!((i.phase, i.state), (Phase::Startup, State::Resolved));
    let v = view(i, &meta, &wall);
    let socket = v.socket.expect("a socket incident");
    assert_eq!(
        (socket.path.as_str(), socket.volume, socket.is_abstract),
        ("@otel-collector", None, true)
    );
}

/// The socket a refusal resolved to is reused for the next refusal of the same client
/// and name only while the pod metadata's generation holds. Refusals made before the
/// client's container was named wait for it (they are not keyed by the path as
/// dialed): with the metadata, all of them name the volume, and the sidecar's bind on
/// its own path resolves one incident with every refusal (it was two before #32).
#[test]
fn refusals_before_and_after_the_containers_are_named_are_one_incident() {
    let mut unnamed = with_socket_volume();
    unnamed.statuses.clear();
    let mut meta = meta_with(unnamed);
    meta.generation = Some(1);
    let mut d = Detector::new(DetectorConfig::default());
    for f in [
        started(0),
        container_started(0, APP),
        container_started(0, PROXY),
    ] {
        d.observe(f, &meta);
    }
    let dialed = "/var/run/dapr/app.sock";
    for n in 0..3 {
        d.observe(unix_refused(S + n * 100 * MS, dialed), &meta);
    }
    assert!(d.incidents().is_empty(), "held until the client is named");
    // The pod source now names the containers.
    meta = meta_with(with_socket_volume());
    meta.generation = Some(2);
    for n in 3..6 {
        d.observe(unix_refused(S + n * 100 * MS, dialed), &meta);
    }
    let on_volume = SocketKey::OnVolume {
        volume: "dapr-socket".into(),
        relative: "app.sock".into(),
    };
    let incs = all(&d);
    assert_eq!(incs.len(), 1, "{incs:#?}");
    assert_eq!(
        (
            incs[0].socket.as_ref().map(|s| s.key.clone()),
            incs[0].refused_count
        ),
        (Some(on_volume), 6),
    );
    d.observe(unix_up(2 * S, "/sockets/app.sock"), &meta);
    let incs = all(&d);
    assert_eq!(incs.len(), 1);
    assert_eq!(
        (incs[0].state, incs[0].phase, incs[0].refused_count),
        (State::Resolved, Phase::Startup, 6),
    );
}

/// An API server outage longer than the metadata wait: the refusals and the sidecar's
/// bind are decided without mounts (keyed by their paths, which differ), and the pod
/// source comes back only after the unresolved timeout. Re-keyed then, they meet on
/// the volume: one startup race, not refusals discarded as `other`.
#[test]
fn unix_facts_decided_during_an_outage_meet_their_listener_when_metadata_arrives() {
    let none = Meta::default();
    let mut d = Detector::new(DetectorConfig::default());
    let facts = late_volume_socket();
    let mut changes: Vec<Change> = facts
        .into_iter()
        .flat_map(|f| d.observe(f, &none))
        .collect();
    for now in (15..=150).step_by(15) {
        changes.extend(d.advance(now * S, &none));
    }
    assert!(all(&d).is_empty(), "unproven while the source is down");
    assert!(
        !changes.iter().any(|c| matches!(c, Change::NotARace { .. })),
        "{changes:?}"
    );
    let meta = meta_with(with_socket_volume());
    changes.extend(d.advance(151 * S, &meta));
    changes.extend(d.advance(400 * S, &meta));
    let incs = all(&d);
    assert_eq!(incs.len(), 1, "{changes:?}");
    assert_eq!(
        (incs[0].phase, incs[0].state, incs[0].refused_count),
        (Phase::Startup, State::Resolved, 5)
    );
    assert_eq!(incs[0].listener_ready_at, Some(2500 * MS));
    assert!(
        !changes.iter().any(|c| matches!(c, Change::NotARace { .. })),
        "{changes:?}"
    );
    let v = view(incs[0], &meta, &wall);
    assert_eq!(
        v.socket.and_then(|s| s.volume).as_deref(),
        Some("dapr-socket")
    );
}

/// The reverse: the client is named and its refusals are keyed on the volume, but the
/// sidecar's bind waited for a container name that came only after the wait, so it was
/// keyed by its own path. Once the sidecar is named its bind meets the refusals: a
/// startup race, not a false `unresolved`.
#[test]
fn a_bind_decided_before_its_container_was_named_still_resolves_the_volume_socket() {
    let mut app_only = with_socket_volume();
    app_only.statuses.retain(|s| s.name != "istio-proxy");
    let app_only = meta_with(app_only);
    let mut d = Detector::new(DetectorConfig::default());
    let facts = late_volume_socket();
    for f in facts {
        d.observe(f, &app_only);
    }
    d.advance(15 * S, &app_only);
    let meta = meta_with(with_socket_volume());
    d.advance(20 * S, &meta);
    d.advance(200 * S, &meta);
    let incs = all(&d);
    assert_eq!(incs.len(), 1, "{incs:#?}");
    assert_eq!(
        (incs[0].phase, incs[0].state, incs[0].refused_count),
        (Phase::Startup, State::Resolved, 5)
    );
}

/// A socket path nobody binds, in a pod whose source named both containers: the
/// advice says nothing listened there, not that the pod metadata is missing.
#[test]
fn a_socket_nobody_binds_is_told_with_the_pods_names() {
    let meta = meta_with(with_socket_volume());
    let mut facts = vec![started(0), container_started(0, APP)];
    facts.extend((0..5).map(|n| unix_refused(S + n * 200 * MS, "/var/run/dapr/app.sock")));
    let (mut d, _) = run(facts, &meta);
    d.advance(125 * S, &meta);
    let v = view(all(&d)[0], &meta, &wall);
    assert_eq!(
        (v.phase, v.container_role),
        (Phase::Unresolved, Some(Role::App))
    );
    assert_eq!(
        v.advice,
        "Nothing in the pod listened on socket /var/run/dapr/app.sock within the window: check the path app dials and the volume both containers mount; this is a misconfiguration, not a race."
    );
}

/// An app mount whose `subPathExpr` the agent cannot expand (a ConfigMap's value):
/// the socket is matched by the expression as written, and the advice says so.
#[test]
fn a_sub_path_expr_that_cannot_be_expanded_is_named_in_the_advice() {
    let mut pod = with_socket_volume();
    for c in &mut pod.containers {
        if c.name == "app" {
            c.mounts[0].sub_path = "$(DIR)".into();
            c.mounts[0].unexpanded = Some(
                "subPathExpr $(DIR): DIR comes from a ConfigMap key, which the agent does not read"
                    .into(),
            );
        }
    }
    let meta = meta_with(pod);
    let mut facts = vec![started(0), container_started(0, APP)];
    facts.extend((0..5).map(|n| unix_refused(S + n * 200 * MS, "/var/run/dapr/app.sock")));
    let (mut d, _) = run(facts, &meta);
    d.advance(125 * S, &meta);
    let v = view(all(&d)[0], &meta, &wall);
    assert!(
        v.advice.ends_with(" (The agent could not expand app's subPathExpr $(DIR): DIR comes from a ConfigMap key, which the agent does not read; the socket is matched by the expression as written, which may not be the directory the kubelet mounts.)"),
        "{}",
        v.advice
    );
}

/// Both containers start at 0; the app is refused 5 times from 1 s on its mount of the
/// socket volume, and the sidecar binds the same socket at 2.5 s on its own mount.
fn late_volume_socket() -> Vec<Fact> {
    let mut facts = vec![
        started(0),
        container_started(0, APP),
        container_started(0, PROXY),
    ];
    facts.extend((0..5).map(|n| unix_refused(S + n * 200 * MS, "/var/run/dapr/app.sock")));
    facts.push(unix_up(2500 * MS, "/sockets/app.sock"));
    facts
}
