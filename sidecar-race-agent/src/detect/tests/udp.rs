//! Datagram sidecars: UDP refusals, the binds found in the pod's socket table, the
//! noise rule.

use super::*;
use crate::detect::service::Protocol;

const STATSD: &str = "dddd";

/// checkout with a classic sidecar `statsd` declaring 8125/UDP.
fn with_statsd() -> PodInfo {
    let mut pod = checkout(Role::ClassicSidecar, None);
    let mut statsd = container("statsd", Role::ClassicSidecar, &[], None);
    statsd.udp_ports = vec![8125];
    pod.containers.push(statsd);
    pod.statuses.push(status("statsd", STATSD));
    pod
}

fn udp_refused(ts: u64, dst: &str) -> Fact {
    Fact::UdpRefused {
        ts,
        pod_uid: POD.into(),
        client: Client::Container(APP.into()),
        dst: dst.parse().unwrap(),
        process: "app".into(),
    }
}

fn udp_bound(ts: u64, container: &str, addr: &str) -> Fact {
    Fact::UdpBound {
        ts,
        pod_uid: POD.into(),
        container_id: Some(container.into()),
        addr: addr.parse().unwrap(),
    }
}

fn udp_refusals(from: u64, to: u64, dst: &str) -> Vec<Fact> {
    (from..to)
        .step_by(100 * MS as usize)
        .map(|t| udp_refused(t, dst))
        .collect()
}

#[test]
fn a_udp_port_bound_late_is_a_startup_race_that_a_tcp_listener_does_not_resolve() {
    let meta = meta_with(with_statsd());
    let mut facts = vec![started(0)];
    facts.extend(udp_refusals(100 * MS, 1500 * MS, "127.0.0.1:8125"));
    // A TCP listener on the same number is another service.
    facts.push(up(1200 * MS, PROXY, "127.0.0.1:8125"));
    facts.push(udp_bound(1500 * MS, STATSD, "127.0.0.1:8125"));
    let (d, _) = run(facts, &meta);
    let incs = all(&d);
    assert_eq!(incs.len(), 1);
    let i = incs[0];
    assert_eq!(
        (i.phase, i.state, i.refused_count, i.protocol),
        (Phase::Startup, State::Resolved, 14, Protocol::Udp)
    );
    assert_eq!(i.race_window_ns(), Some(1400 * MS));
    let v = view(i, &meta, &wall);
    assert_eq!(v.sidecar.as_deref(), Some("statsd"));
    assert_eq!(v.protocol, Some(Protocol::Udp));
    assert!(v.advice.contains("lost, not retried"), "{}", v.advice);
}

#[test]
fn udp_refusals_on_ports_the_pod_does_not_own_are_never_incidents_on_their_own() {
    let meta = meta_with(with_statsd());
    let mut facts = vec![started(0)];
    facts.extend(udp_refusals(100 * MS, 1000 * MS, "127.0.0.53:53"));
    facts.extend(udp_refusals(100 * MS, 1000 * MS, "127.0.0.1:9999"));
    let (mut d, _) = run(facts, &meta);
    assert!(
        all(&d).is_empty(),
        "DNS and an undeclared port: nothing shown"
    );
    let changes = d.advance(200 * S, &meta);
    assert!(all(&d).is_empty());
    assert_eq!(
        changes
            .iter()
            .filter(|c| matches!(
                c,
                Change::NotARace {
                    why: NotARace::Other,
                    ..
                }
            ))
            .count(),
        2,
        "each counted as other once its wait is over: {changes:?}"
    );
    // A socket of the pod bound on an undeclared port proves it: then a race.
    let mut facts = vec![started(0)];
    facts.extend(udp_refusals(100 * MS, 1000 * MS, "127.0.0.1:9999"));
    facts.push(udp_bound(1000 * MS, STATSD, "0.0.0.0:9999"));
    let (d, _) = run(facts, &meta);
    assert_eq!(all(&d).len(), 1);
    assert_eq!(all(&d)[0].state, State::Resolved);
}

#[test]
fn a_udp_socket_gone_at_a_deletion_is_a_drain_whether_its_bind_was_seen_or_not() {
    let mut pod = with_statsd();
    pod.deletion_timestamp = Some(at(10 * S));
    pod.deletion_grace_period_seconds = Some(30);
    let meta = meta_with(pod);
    for seen in [false, true] {
        let mut facts = vec![started(0)];
        if seen {
            facts.push(udp_bound(S, STATSD, "127.0.0.1:8125"));
        }
        facts.extend(udp_refusals(11 * S, 12 * S, "127.0.0.1:8125"));
        let (d, _) = run(facts, &meta);
        let incs = all(&d);
        assert_eq!(incs.len(), 1, "bind seen: {seen}");
        let i = incs[0];
        assert_eq!(
            (i.phase, i.refused_count),
            (Phase::Drain, 10),
            "bind seen: {seen}"
        );
        assert_eq!(
            i.listener_closed_at,
            Some(11 * S),
            "bounded by the first drop"
        );
    }
}

#[test]
fn a_unix_datagram_sent_to_a_missing_path_and_a_datagram_bind_make_unixgram_incidents() {
    use super::unix::{name, unix_refused, with_socket_volume};
    let meta = meta_with(with_socket_volume());
    let sent = |ts: u64| match unix_refused(ts, "/var/run/dapr/log.sock") {
        Fact::UnixRefused {
            ts,
            pod_uid,
            client,
            name,
            process,
            ..
        } => Fact::UnixRefused {
            ts,
            pod_uid,
            client,
            name,
            process,
            datagram: true,
        },
        other => other,
    };
    let (d, _) = run(vec![started(0), sent(100 * MS), sent(200 * MS)], &meta);
    assert_eq!(all(&d).len(), 1);
    assert_eq!(
        (all(&d)[0].protocol, all(&d)[0].refused_count),
        (Protocol::Unixgram, 2),
        "a send to a path is a datagram: open, already unixgram"
    );
    // A connect of a datagram socket (glibc's syslog) reads as a Unix refusal; the
    // datagram socket's bind that resolves it says what it was.
    let bound = Fact::UnixListenerUp {
        ts: 1500 * MS,
        pod_uid: POD.into(),
        container_id: Some(PROXY.into()),
        name: name("/sockets/log.sock"),
        datagram: true,
    };
    let connected = unix_refused(100 * MS, "/var/run/dapr/log.sock");
    let (d, _) = run(vec![started(0), connected, bound], &meta);
    let i = all(&d)[0];
    assert_eq!((i.state, i.protocol), (State::Resolved, Protocol::Unixgram));
}

/// A drain of a Unix datagram relay (case 20 on the real kubelet): the app's
/// datagram socket connect()s to the path after the relay went, and the syscall path
/// cannot say the refused socket was a datagram one. The path's last listener was a
/// datagram bind, so the drain is `unixgram` too, as its startup was.
#[test]
fn a_refused_connect_to_a_path_a_datagram_socket_held_is_a_unixgram_drain() {
    use super::unix::{name, unix_refused, with_socket_volume};
    let mut pod = with_socket_volume();
    pod.deletion_timestamp = Some(at(30 * S));
    let meta = meta_with(pod);
    let bound = |datagram| Fact::UnixListenerUp {
        ts: S,
        pod_uid: POD.into(),
        container_id: Some(PROXY.into()),
        name: name("/sockets/log.sock"),
        datagram,
    };
    let refused = || {
        vec![
            unix_refused(31 * S, "/var/run/dapr/log.sock"),
            unix_refused(32 * S, "/var/run/dapr/log.sock"),
        ]
    };
    let (d, _) = run([vec![bound(true)], refused()].concat(), &meta);
    let i = all(&d)[0];
    assert_eq!(
        (i.phase, i.protocol, i.refused_count),
        (Phase::Drain, Protocol::Unixgram, 2)
    );
    // A stream listener's path stays `unix`.
    let (d, _) = run([vec![bound(false)], refused()].concat(), &meta);
    let i = all(&d)[0];
    assert_eq!((i.phase, i.protocol), (Phase::Drain, Protocol::Unix));
}
