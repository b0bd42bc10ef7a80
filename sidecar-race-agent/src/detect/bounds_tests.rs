//! The detector's tables stay bounded without losing what matters: a flooding pod
//! does not push its neighbours' incidents out, listener tables are capped, and
//! late facts still find their place.

use super::{NoMeta, *};

const MS: u64 = 1_000_000;
const S: u64 = 1_000 * MS;
const FLOODER: &str = "11111111-1111-4111-8111-111111111111";
const NEIGHBOUR: &str = "22222222-2222-4222-8222-222222222222";

fn refused(ts: u64, pod: &str, client: &str, dst: &str) -> Fact {
    Fact::Refused {
        ts,
        pod_uid: pod.into(),
        client: Client::Container(client.into()),
        dst: dst.parse().unwrap(),
        local_dst: None,
        process: "app".into(),
    }
}

fn up(ts: u64, pod: &str, container: &str, addr: &str) -> Fact {
    Fact::ListenerUp {
        ts,
        pod_uid: pod.into(),
        container_id: Some(container.into()),
        addr: addr.parse().unwrap(),
    }
}

fn down(ts: u64, pod: &str, container: &str, addr: &str) -> Fact {
    Fact::ListenerDown {
        ts,
        pod_uid: pod.into(),
        container_id: Some(container.into()),
        addr: addr.parse().unwrap(),
    }
}

fn started(ts: u64, pod: &str) -> Fact {
    Fact::PodStarted {
        ts,
        pod_uid: pod.into(),
    }
}

fn of_pod<'a>(d: &'a Detector, pod: &str) -> Vec<&'a Incident> {
    d.incidents()
        .newest_first()
        .filter(|i| i.pod_uid == pod)
        .collect()
}

#[test]
fn a_flooding_pod_does_not_evict_its_neighbours_incident() {
    let mut d = Detector::new(DetectorConfig {
        history: 100,
        history_per_pod: 60,
        ..DetectorConfig::default()
    });
    d.observe(started(0, NEIGHBOUR), &NoMeta);
    d.observe(started(0, FLOODER), &NoMeta);
    // The neighbour races on 15001 while the flooder dials 1,000 closed ports.
    let mut t = MS;
    for n in 0..1_000u16 {
        if n % 40 == 0 {
            d.observe(refused(t, NEIGHBOUR, "app", "127.0.0.1:15001"), &NoMeta);
        }
        let port = format!("127.0.0.1:{}", 20_000 + n);
        d.observe(refused(t, FLOODER, "app", &port), &NoMeta);
        t += MS;
    }
    d.observe(up(t, NEIGHBOUR, "proxy", "0.0.0.0:15001"), &NoMeta);
    let mine = of_pod(&d, NEIGHBOUR);
    assert_eq!(mine.len(), 1, "the neighbour's race is still there");
    assert_eq!(
        (mine[0].phase, mine[0].state, mine[0].refused_count),
        (Phase::Startup, State::Resolved, 25)
    );
    assert_eq!(
        of_pod(&d, FLOODER).len(),
        60,
        "the flooder keeps its own cap"
    );
    assert!(d.incidents().len() <= 100);
    assert_eq!(d.incidents().evicted(), 1_000 - 60);
}

#[test]
fn beyond_the_total_cap_the_pod_holding_the_most_gives_up_a_final_incident_first() {
    let mut d = Detector::new(DetectorConfig {
        history: 4,
        history_per_pod: 10,
        ..DetectorConfig::default()
    });
    for pod in [FLOODER, NEIGHBOUR] {
        d.observe(started(0, pod), &NoMeta);
    }
    let flooder_ports =
        |d: &Detector| -> Vec<u16> { of_pod(d, FLOODER).iter().map(|i| i.port).collect() };
    // The flooder fills the history: one race resolved (final), three open.
    d.observe(refused(MS, FLOODER, "app", "127.0.0.1:9000"), &NoMeta);
    d.observe(up(2 * MS, FLOODER, "proxy", "0.0.0.0:9000"), &NoMeta);
    for (n, port) in [9001, 9002, 9003].into_iter().enumerate() {
        let dst = format!("127.0.0.1:{port}");
        d.observe(refused((3 + n as u64) * MS, FLOODER, "app", &dst), &NoMeta);
    }
    // The neighbour's race: the flooder gives up its resolved one, not an open one.
    d.observe(
        refused(10 * MS, NEIGHBOUR, "app", "127.0.0.1:15001"),
        &NoMeta,
    );
    assert_eq!(flooder_ports(&d), [9003, 9002, 9001]);
    // More of the flooder's: it pays itself, with its oldest open one.
    d.observe(refused(11 * MS, FLOODER, "app", "127.0.0.1:9004"), &NoMeta);
    assert_eq!(flooder_ports(&d), [9004, 9003, 9002]);
    // The neighbour's second race: the flooder still holds the most.
    d.observe(
        refused(12 * MS, NEIGHBOUR, "app", "127.0.0.1:15002"),
        &NoMeta,
    );
    assert_eq!(flooder_ports(&d), [9004, 9003]);
    let mine: Vec<u16> = of_pod(&d, NEIGHBOUR).iter().map(|i| i.port).collect();
    assert_eq!(mine, [15002, 15001]);
    assert_eq!(d.incidents().evicted(), 3);
}

/// A full history never pays with the incident it has just stored: the newcomer's
/// refusal is counted in it, and an older incident of a pod holding as many leaves.
#[test]
fn a_newcomer_at_the_total_cap_keeps_its_incident() {
    let mut d = Detector::new(DetectorConfig {
        history: 1,
        history_per_pod: 10,
        ..DetectorConfig::default()
    });
    for pod in [FLOODER, NEIGHBOUR] {
        d.observe(started(0, pod), &NoMeta);
    }
    d.observe(refused(MS, FLOODER, "app", "127.0.0.1:9000"), &NoMeta);
    d.observe(
        refused(2 * MS, NEIGHBOUR, "app", "127.0.0.1:15001"),
        &NoMeta,
    );
    let mine = of_pod(&d, NEIGHBOUR);
    assert_eq!(mine.len(), 1, "the neighbour's incident is kept");
    assert_eq!(mine[0].refused_count, 1);
    assert!(of_pod(&d, FLOODER).is_empty());
    assert_eq!(d.incidents().evicted(), 1);
}

/// Among pods holding as many incidents, the oldest incident leaves first: a node that
/// sees one race per pod start keeps its newest races, whatever the pods' uids.
#[test]
fn among_equal_holders_the_oldest_incident_leaves_first() {
    let mut d = Detector::new(DetectorConfig {
        history: 2,
        history_per_pod: 10,
        ..DetectorConfig::default()
    });
    let pods = [
        "aaaaaaaa-0000-4000-8000-000000000001",
        "ffffffff-0000-4000-8000-000000000002",
        "77777777-0000-4000-8000-000000000003",
    ];
    for (n, pod) in pods.into_iter().enumerate() {
        let t = (n as u64 + 1) * 10 * MS;
        d.observe(started(t, pod), &NoMeta);
        d.observe(refused(t + MS, pod, "app", "127.0.0.1:15001"), &NoMeta);
    }
    assert!(of_pod(&d, pods[0]).is_empty(), "the oldest race left");
    assert_eq!(of_pod(&d, pods[1]).len(), 1);
    assert_eq!(of_pod(&d, pods[2]).len(), 1);
}

/// The agent lags: its tick comes seconds after the kernel time of the facts it holds,
/// and the refusals from another CPU are still queued when the listener is held.
#[test]
fn a_lagging_tick_does_not_release_a_listener_before_earlier_refusals_from_another_cpu() {
    let window = 200 * MS;
    let mut r = crate::pipeline::reorder::Reorder::new(window);
    let mut d = Detector::new(DetectorConfig::default());
    let feed = |facts: Vec<Fact>, d: &mut Detector| {
        for f in facts {
            d.observe(f, &NoMeta);
        }
    };
    r.push(started(0, NEIGHBOUR));
    r.push(up(1_500 * MS, NEIGHBOUR, "proxy", "0.0.0.0:15001"));
    // Five seconds late, with more records still coming: the listener must wait.
    feed(r.release(5 * S, false), &mut d);
    for t in (100..1_500).step_by(100) {
        r.push(refused(t * MS, NEIGHBOUR, "app", "127.0.0.1:15001"));
    }
    // The stream went quiet: everything is released, in kernel-time order.
    feed(r.release(6 * S, true), &mut d);
    d.advance(200 * S, &NoMeta);
    let mine = of_pod(&d, NEIGHBOUR);
    assert_eq!(mine.len(), 1);
    assert_eq!(
        (mine[0].phase, mine[0].state, mine[0].refused_count),
        (Phase::Startup, State::Resolved, 14)
    );
    assert_eq!(r.out_of_order(), 0);
    // A record that still comes behind what was released is counted.
    r.push(refused(1_450 * MS, NEIGHBOUR, "app", "127.0.0.1:15001"));
    assert_eq!(r.out_of_order(), 1);
}

#[test]
fn open_listeners_beyond_the_cap_are_counted_and_not_tracked() {
    use super::listener_table::OPEN_LISTENERS_PER_POD;
    let mut d = Detector::new(DetectorConfig::default());
    d.observe(started(0, NEIGHBOUR), &NoMeta);
    let cap = OPEN_LISTENERS_PER_POD as u16;
    for n in 0..cap + 100 {
        let addr = format!("0.0.0.0:{}", 20_000 + n);
        d.observe(up(MS, NEIGHBOUR, "app", &addr), &NoMeta);
    }
    assert_eq!(d.listeners_of(NEIGHBOUR), OPEN_LISTENERS_PER_POD);
    assert_eq!(d.listeners_dropped(), 100);
    // A race on the proxy's port still resolves once a listener made room.
    d.observe(
        refused(2 * MS, NEIGHBOUR, "app", "127.0.0.1:15001"),
        &NoMeta,
    );
    d.observe(down(3 * MS, NEIGHBOUR, "app", "0.0.0.0:20000"), &NoMeta);
    d.observe(up(4 * MS, NEIGHBOUR, "proxy", "0.0.0.0:15001"), &NoMeta);
    let mine = of_pod(&d, NEIGHBOUR);
    assert_eq!((mine[0].port, mine[0].state), (15001, State::Resolved));
}
