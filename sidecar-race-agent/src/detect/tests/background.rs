//! What every real pod does besides racing (issue #32), on the sequences the kernel
//! and a pod source produce: glibc's probes of sockets that do not exist, an app's
//! own control socket, metadata that lands after the first facts, a sidecar replaced
//! by the kubelet, a rollout undone. None of it is an incident, splits one or hides
//! one.

use super::{
    unix::{name, unix_refused, unix_up, with_socket_volume},
    *,
};
use crate::pods::mounts::Mount;

fn refused_by(ts: u64, client: &str, path: &str, process: &str) -> Fact {
    Fact::UnixRefused {
        ts,
        pod_uid: POD.into(),
        client: Client::Container(client.into()),
        name: name(path),
        process: process.into(),
        datagram: false,
    }
}

fn unix_bound(ts: u64, container: &str, path: &str) -> Fact {
    Fact::UnixListenerUp {
        ts,
        pod_uid: POD.into(),
        container_id: Some(container.into()),
        name: name(path),
        datagram: false,
    }
}

fn unix_gone(ts: u64, container: &str, path: &str) -> Fact {
    Fact::UnixListenerDown {
        ts,
        pod_uid: POD.into(),
        container_id: Some(container.into()),
        name: name(path),
    }
}

/// The pod as the source reports it before the kubelet wrote the containers' ids.
fn without_ids(mut pod: PodInfo) -> PodInfo {
    pod.statuses.clear();
    pod
}

fn not_a_race(changes: &[Change], why: NotARace) -> u64 {
    changes
        .iter()
        .filter_map(|c| match c {
            Change::NotARace { why: w, refused } if *w == why => Some(*refused),
            _ => None,
        })
        .sum()
}

fn starts() -> Vec<Fact> {
    vec![
        started(0),
        container_started(0, APP),
        container_started(0, PROXY),
    ]
}

#[test]
fn glibc_probing_nscd_and_dev_log_beside_a_real_race_gives_only_the_race() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let mut facts = starts();
    // curl resolves names (nscd first) while it retries the proxy; syslog(3) connects
    // its datagram socket to /dev/log, which the image does not have.
    for n in 0..30 {
        let t = S + n * 50 * MS;
        facts.push(refused_by(t, APP, "/var/run/nscd/socket", "curl"));
        facts.push(refused(t + MS, APP, "127.0.0.1:15001"));
    }
    facts.push(refused_by(2 * S, APP, "/dev/log", "logger"));
    facts.push(up(3 * S, PROXY, "0.0.0.0:15001"));
    let (mut d, mut changes) = run(facts, &meta);
    changes.extend(d.advance(400 * S, &meta));
    let incs = all(&d);
    assert_eq!(incs.len(), 1, "{incs:#?}");
    assert_eq!(
        (incs[0].port, incs[0].phase, incs[0].refused_count),
        (15001, Phase::Startup, 30)
    );
    assert_eq!(not_a_race(&changes, NotARace::Other), 31);
}

/// The order every pod starts in: the kubelet starts the containers before their ids
/// (and so their mounts) reach the agent. The refusals before the metadata and those
/// after it are one race with the app's exact count.
#[test]
fn a_late_bind_on_a_shared_volume_before_and_after_the_metadata_is_one_incident() {
    for before in [
        Meta::default(),
        meta_with(without_ids(with_socket_volume())),
    ] {
        let mut d = Detector::new(DetectorConfig::default());
        let mut changes = Vec::new();
        for f in starts() {
            changes.extend(d.observe(f, &before));
        }
        let dialed = "/var/run/dapr/app.sock";
        for n in 0..5 {
            changes.extend(d.observe(unix_refused(S + n * 100 * MS, dialed), &before));
        }
        let meta = meta_with(with_socket_volume());
        changes.extend(d.advance(S + 600 * MS, &meta));
        for n in 6..9 {
            changes.extend(d.observe(unix_refused(S + n * 100 * MS, dialed), &meta));
        }
        changes.extend(d.observe(unix_up(2 * S, "/sockets/app.sock"), &meta));
        let incs = all(&d);
        assert_eq!(incs.len(), 1, "one race, one incident: {incs:#?}");
        let i = incs[0];
        assert_eq!(
            (i.phase, i.state, i.refused_count),
            (Phase::Startup, State::Resolved, 8)
        );
        assert_eq!(i.race_window_ns(), Some(S));
        assert_eq!(
            changes
                .iter()
                .filter(|c| matches!(c, Change::Opened(_)))
                .count(),
            1
        );
    }
}

/// The metadata never comes within the wait: the held facts are decided with what is
/// known then, still as one incident.
#[test]
fn held_facts_are_decided_when_the_wait_is_over() {
    let mut d = Detector::new(DetectorConfig::default());
    let before = meta_with(without_ids(with_socket_volume()));
    for f in starts() {
        d.observe(f, &before);
    }
    for n in 0..3 {
        d.observe(unix_refused(S + n * 100 * MS, "@otel"), &before);
    }
    assert!(d.incidents().is_empty(), "held");
    d.advance(5 * S, &before);
    assert!(d.incidents().is_empty(), "still within the 10 s wait");
    let changes = d.advance(11 * S + 100 * MS, &before);
    assert_eq!(changes, vec![Change::Opened(1)]);
    assert_eq!(all(&d)[0].refused_count, 3);
}

/// The sidecar bound its socket before the agent knew the pod's mounts (the usual
/// order), and unlinked it at SIGTERM. With the syscall fallback the close is not
/// seen: the app's refusal proves the listener gone.
#[test]
fn a_drain_whose_listener_bound_before_the_metadata_is_one_drain() {
    for close_seen in [false, true] {
        let before = meta_with(without_ids(with_socket_volume()));
        let mut d = Detector::new(DetectorConfig::default());
        for f in starts() {
            d.observe(f, &before);
        }
        d.observe(unix_bound(S, PROXY, "/sockets/app.sock"), &before);
        let mut pod = with_socket_volume();
        pod.deletion_timestamp = Some(at(60 * S));
        pod.deletion_grace_period_seconds = Some(30);
        let meta = meta_with(pod);
        d.advance(2 * S, &meta);
        if close_seen {
            d.observe(unix_gone(31 * S, PROXY, "/sockets/app.sock"), &meta);
        }
        for t in [31 * S + 500 * MS, 32 * S] {
            d.observe(unix_refused(t, "/var/run/dapr/app.sock"), &meta);
        }
        d.observe(removed(33 * S), &meta);
        let incs = all(&d);
        assert_eq!(incs.len(), 1, "{incs:#?}");
        assert_eq!(
            (incs[0].phase, incs[0].state, incs[0].refused_count),
            (Phase::Drain, State::Resolved, 2),
            "close seen: {close_seen}"
        );
        let v = view(incs[0], &meta, &wall);
        assert_eq!(v.sidecar.as_deref(), Some("istio-proxy"));
    }
}

/// A container's own files: polled before it binds them itself, or a socket on a
/// volume only it mounts, are never a race. On a volume shared with a sidecar the
/// refusals wait for a listener, and its own bind makes them a self-refusal.
#[test]
fn an_app_polling_its_own_control_socket_before_it_binds_is_no_incident() {
    let mut pod = with_socket_volume();
    for c in &mut pod.containers {
        if c.name == "app" {
            c.mounts.push(Mount {
                volume: "app-tmp".into(),
                mount_path: "/tmp".into(),
                sub_path: String::new(),
                unexpanded: None,
            });
        }
    }
    let meta = meta_with(pod);
    for (path, why) in [
        ("/run/app/admin.sock", NotARace::Other),
        ("/tmp/admin.sock", NotARace::Other),
        ("/var/run/dapr/admin.sock", NotARace::SelfRefusal),
    ] {
        let mut facts = starts();
        facts.extend((0..5).map(|n| refused_by(S + n * 10 * MS, APP, path, "app")));
        facts.push(unix_bound(2 * S, APP, path));
        let (mut d, mut changes) = run(facts, &meta);
        changes.extend(d.advance(400 * S, &meta));
        assert!(all(&d).is_empty(), "{path}: {:#?}", all(&d));
        assert_eq!(not_a_race(&changes, why), 5, "{path}");
    }
}

/// Without a pod source nothing tells the volumes: a path is an incident only once
/// another container of the pod serves it, and an abstract name is the pod's.
#[test]
fn without_a_pod_source_a_path_waits_for_a_listener_in_the_pod() {
    let mut facts = starts();
    facts.push(refused_by(S, APP, "/var/run/nscd/socket", "curl"));
    facts.push(refused_by(S, APP, "/shared/app.sock", "app"));
    facts.push(refused_by(S + MS, APP, "/shared/app.sock", "app"));
    facts.push(unix_bound(2 * S, PROXY, "/shared/app.sock"));
    let (mut d, mut changes) = run(facts, &NoMeta);
    changes.extend(d.advance(400 * S, &NoMeta));
    let incs = all(&d);
    assert_eq!(incs.len(), 1, "{incs:#?}");
    assert_eq!(
        (incs[0].phase, incs[0].state, incs[0].refused_count),
        (Phase::Startup, State::Resolved, 2)
    );
    assert_eq!(not_a_race(&changes, NotARace::Other), 1, "nscd");
}

/// `subPath`, and paths written with `//` or `.`: the same socket on the volume.
#[test]
fn sub_path_and_odd_spellings_meet_on_the_volume() {
    let mut pod = checkout(Role::ClassicSidecar, None);
    for c in &mut pod.containers {
        let (at, sub) = match c.name.as_str() {
            "app" => ("/run/proxy", "proxy"),
            "istio-proxy" => ("/shared", ""),
            _ => continue,
        };
        c.mounts.push(Mount {
            volume: "sockets".into(),
            mount_path: at.into(),
            sub_path: sub.into(),
            unexpanded: None,
        });
    }
    let meta = meta_with(pod);
    let mut facts = starts();
    facts.push(refused_by(S, APP, "/run/proxy//./grpc.sock", "app"));
    facts.push(refused_by(S + MS, APP, "/run/proxy/grpc.sock", "app"));
    facts.push(unix_bound(2 * S, PROXY, "/shared/proxy/grpc.sock"));
    let (d, _) = run(facts, &meta);
    let incs = all(&d);
    assert_eq!(incs.len(), 1, "{incs:#?}");
    assert_eq!(
        (incs[0].phase, incs[0].state, incs[0].refused_count),
        (Phase::Startup, State::Resolved, 2)
    );
}

/// #19 round 2: a native sidecar's exec startupProbe is refused by its first instance
/// (the port is not declared); the kubelet replaces the container, and the new
/// instance listens before the pod source names it. Its own probe: no race.
#[test]
fn a_replaced_sidecars_own_probe_is_a_self_refusal() {
    let mut pod = checkout(Role::NativeSidecar, None);
    pod.containers[0].ports.clear();
    let meta = meta_with(pod.clone());
    let mut facts = starts();
    facts.extend(refusals(S, 3 * S, PROXY, "127.0.0.1:15001"));
    facts.push(container_removed(4 * S, PROXY));
    facts.push(container_started(4 * S + 100 * MS, "eeee"));
    facts.push(up(5 * S, "eeee", "0.0.0.0:15001"));
    let (mut d, mut changes) = run(facts, &meta);
    // The source now names the new instance (and still the old, as the store keeps
    // replaced ids resolvable).
    pod.statuses.push(status("istio-proxy", "eeee"));
    let named = meta_with(pod);
    changes.extend(d.advance(6 * S, &named));
    assert!(all(&d).is_empty(), "{:#?}", all(&d));
    assert_eq!(not_a_race(&changes, NotARace::SelfRefusal), 20);
    assert!(
        !changes.iter().any(|c| matches!(c, Change::Resolved(_))),
        "{changes:?}"
    );
}

/// A replaced sidecar serving an app that raced it is still a race once named.
#[test]
fn a_replaced_sidecar_serving_another_container_is_still_a_race() {
    let mut pod = checkout(Role::NativeSidecar, None);
    pod.containers[0].ports.clear();
    let meta = meta_with(pod.clone());
    let mut facts = starts();
    facts.extend(refusals(S, 2 * S, APP, "127.0.0.1:15001"));
    facts.push(container_removed(3 * S, PROXY));
    facts.push(up(4 * S, "eeee", "0.0.0.0:15001"));
    let (mut d, _) = run(facts, &meta);
    pod.statuses.push(status("istio-proxy", "eeee"));
    d.advance(5 * S, &meta_with(pod));
    let incs = all(&d);
    assert_eq!(incs.len(), 1);
    assert_eq!(
        (incs[0].phase, incs[0].state),
        (Phase::Startup, State::Resolved)
    );
}

/// #19 round 2: a rollout undone while the proxy has not listened yet. The API server
/// writes `deletionTimestamp` in the future (the deletion plus the grace period), the
/// kubelet stops the containers a second later, the pod leaves the source, and its
/// cgroup goes much later or its removal is not seen.
#[test]
fn a_startup_cut_short_by_a_graceful_deletion_is_a_startup_race() {
    for pod_cgroup_removed in [false, true] {
        let meta = meta_with(checkout(Role::ClassicSidecar, None));
        let mut facts = starts();
        facts.extend(refusals(S, 3 * S, APP, "127.0.0.1:15001"));
        let (mut d, mut changes) = run(facts, &meta);
        let mut pod = checkout(Role::ClassicSidecar, None);
        pod.deletion_timestamp = Some(at(33 * S));
        pod.deletion_grace_period_seconds = Some(30);
        let deleting = meta_with(pod);
        changes.extend(d.advance(3 * S + 100 * MS, &deleting));
        changes.extend(d.observe(container_removed(4 * S, APP), &deleting));
        changes.extend(d.observe(container_removed(4 * S, PROXY), &deleting));
        let mut gone = meta_with(checkout(Role::ClassicSidecar, None));
        gone.deleted.insert(POD.into());
        changes.extend(d.advance(5 * S, &gone));
        if pod_cgroup_removed {
            changes.extend(d.observe(removed(200 * S), &gone));
        }
        changes.extend(d.advance(300 * S, &gone));
        let i = d.incidents().get(1).expect("the startup incident");
        assert_eq!(
            (i.phase, i.state, i.refused_count),
            (Phase::Startup, State::Resolved, 20),
            "cgroup removal seen: {pod_cgroup_removed}"
        );
        assert!(
            !changes.iter().any(|c| matches!(c, Change::Rephased { .. })),
            "{changes:?}"
        );
    }
}
