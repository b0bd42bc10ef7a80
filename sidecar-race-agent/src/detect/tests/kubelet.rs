//! The orderings and identities a real kubelet produces: crash loops named late,
//! hostNetwork pods not known yet, force deletes, containers replaced under the same
//! name, listeners of the other address family.

use super::*;

/// checkout, with more container instances named by the pod source.
fn checkout_naming(instances: &[(&str, &str)]) -> Meta {
    let mut pod = checkout(Role::ClassicSidecar, None);
    for (name, id) in instances {
        pod.statuses.push(status(name, id));
    }
    meta_with(pod)
}

/// The shown incidents as (client container, refusals, instances), by container.
fn per_container(d: &Detector, meta: &dyn PodMeta) -> Vec<(String, u64, u32)> {
    let mut got: Vec<(String, u64, u32)> = all(d)
        .iter()
        .map(|i| {
            let v = view(i, meta, &wall);
            let name = v.container.unwrap_or_default();
            (name, v.refused_count, v.client_instances)
        })
        .collect();
    got.sort();
    got
}

fn observe_all(d: &mut Detector, facts: Vec<Fact>, meta: &dyn PodMeta) -> Vec<Change> {
    facts.into_iter().flat_map(|f| d.observe(f, meta)).collect()
}

#[test]
fn crash_looping_clients_named_late_keep_an_incident_each() {
    // app (a1, a2) and app2 (b1, b2) crash-loop against the proxy's port; the pod source
    // names the second instances only after they were refused.
    let early = checkout_naming(&[("app", "a1"), ("app2", "b1")]);
    let named = checkout_naming(&[("app", "a1"), ("app2", "b1"), ("app", "a2"), ("app2", "b2")]);
    let mut d = Detector::new(DetectorConfig::default());
    let mut facts = vec![
        started(0),
        container_started(0, "a1"),
        container_started(0, "b1"),
    ];
    facts.extend(refusals(100 * MS, 300 * MS, "a1", "127.0.0.1:15001"));
    facts.push(refused(150 * MS, "b1", "127.0.0.1:15001"));
    facts.extend([
        container_removed(S, "a1"),
        container_removed(S + MS, "b1"),
        container_started(2 * S, "b2"),
        container_started(2 * S + MS, "a2"),
    ]);
    facts.extend(refusals(2100 * MS, 2400 * MS, "b2", "127.0.0.1:15001"));
    facts.push(refused(2150 * MS, "a2", "127.0.0.1:15001"));
    let changes = observe_all(&mut d, facts, &early);
    assert_eq!(all(&d).len(), 2, "new instances wait for their names");
    assert!(
        !changes
            .iter()
            .any(|c| matches!(c, Change::Opened(id) if *id > 2))
    );
    d.advance(3 * S, &named);
    d.observe(up(4 * S, PROXY, "0.0.0.0:15001"), &named);
    assert!(all(&d).iter().all(|i| i.state == State::Resolved));
    assert_eq!(
        per_container(&d, &named),
        vec![("app".into(), 3, 2), ("app2".into(), 4, 2)]
    );
}

#[test]
fn a_new_instance_of_another_container_is_never_guessed_into_a_crash_loop() {
    // app crash-loops; app2 (never refused before) is replaced, and its new instance
    // is refused before the pod source names it.
    let early = checkout_naming(&[("app", "a1"), ("app2", "b1")]);
    let named = checkout_naming(&[("app", "a1"), ("app2", "b1"), ("app2", "b2")]);
    let mut d = Detector::new(DetectorConfig::default());
    let facts = vec![
        started(0),
        container_started(0, "a1"),
        refused(100 * MS, "a1", "127.0.0.1:15001"),
        container_removed(S, "a1"),
        container_removed(S, "b1"),
        container_started(2 * S, "b2"),
        refused(2100 * MS, "b2", "127.0.0.1:15001"),
        refused(2200 * MS, "b2", "127.0.0.1:15001"),
    ];
    observe_all(&mut d, facts, &early);
    let changes = d.advance(3 * S, &named);
    assert!(changes.contains(&Change::Opened(2)), "{changes:?}");
    assert_eq!(
        per_container(&d, &named),
        vec![("app".into(), 1, 1), ("app2".into(), 2, 1)]
    );
}

#[test]
fn loopback_refusals_of_an_unknown_pod_wait_and_a_host_network_pod_reports_nothing() {
    let unknown = Meta::default();
    let mut pod = checkout(Role::ClassicSidecar, None);
    pod.host_network = true;
    let host_network = meta_with(pod);
    let mut d = Detector::new(DetectorConfig::default());
    let changes = observe_all(
        &mut d,
        vec![
            started(0),
            refused(100 * MS, APP, "127.0.0.1:7777"),
            refused(200 * MS, APP, "127.0.0.1:7777"),
        ],
        &unknown,
    );
    assert_eq!(changes.len(), 1, "only the pod start: {changes:?}");
    assert!(all(&d).is_empty(), "waits for the pod's metadata");
    // Known now: a hostNetwork pod, and nothing in it serves 7777: the node's port.
    assert!(d.advance(2 * S, &host_network).is_empty());
    d.observe(refused(3 * S, APP, "127.0.0.1:7777"), &host_network);
    assert!(all(&d).is_empty());
    assert_eq!(
        d.advance(200 * S, &host_network),
        vec![Change::NotARace {
            why: NotARace::Other,
            refused: 3
        }]
    );
    assert!(all(&d).is_empty());
    // A pod the source never reports is shown once the wait is over.
    let mut d = Detector::new(DetectorConfig::default());
    observe_all(
        &mut d,
        vec![started(0), refused(100 * MS, APP, "127.0.0.1:7777")],
        &unknown,
    );
    assert!(d.advance(5 * S, &unknown).is_empty());
    assert_eq!(d.advance(11 * S, &unknown), vec![Change::Opened(1)]);
}

#[test]
fn refusals_waiting_for_the_pods_ips_do_not_swallow_loopback_ones() {
    let mut no_ips = checkout(Role::ClassicSidecar, None);
    no_ips.pod_ips.clear();
    let early = meta_with(no_ips);
    let known = meta_with(checkout(Role::ClassicSidecar, None));
    let mut d = Detector::new(DetectorConfig::default());
    // A remote database resets the app on 5432 while db-proxy, on the same port
    // number, is not listening yet.
    let mut facts = vec![started(0), refused(100 * MS, APP, "10.244.9.9:5432")];
    facts.extend(refusals(200 * MS, 600 * MS, APP, "127.0.0.1:5432"));
    facts.push(refused(650 * MS, APP, "10.244.9.9:5432"));
    facts.push(up(S, DB, "127.0.0.1:5432"));
    let changes = observe_all(&mut d, facts, &early);
    assert!(changes.contains(&Change::Opened(2)), "{changes:?}");
    let changes = d.advance(3 * S, &known);
    assert_eq!(
        changes,
        vec![Change::NotARace {
            why: NotARace::Other,
            refused: 2
        }]
    );
    let incs = all(&d);
    assert_eq!(incs.len(), 1, "{incs:#?}");
    assert_eq!(
        (incs[0].phase, incs[0].state, incs[0].refused_count),
        (Phase::Startup, State::Resolved, 4)
    );
}

#[test]
fn a_listener_of_the_other_family_never_resolves_the_client() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    // istio-proxy listens on [::1] only; the app dials 127.0.0.1 and never connects.
    let mut facts = vec![started(0)];
    facts.extend(refusals(100 * MS, S, APP, "127.0.0.1:15001"));
    facts.push(up(S, PROXY, "[::1]:15001"));
    facts.extend(refusals(S + 100 * MS, 2 * S, APP, "127.0.0.1:15001"));
    let (mut d, _) = run(facts, &meta);
    assert_eq!(all(&d)[0].state, State::Open);
    d.advance(121 * S, &meta);
    let i = all(&d)[0];
    assert_eq!((i.phase, i.refused_count), (Phase::Unresolved, 18));
    let advice = view(i, &meta, &wall).advice;
    assert!(
        advice.contains("istio-proxy listens on [::1]:15001")
            && advice.contains("app's connections to 127.0.0.1:15001"),
        "{advice}"
    );
    // A client that starts after the listener: no fallback either, the same verdict.
    let (mut d, _) = run(
        vec![
            started(0),
            up(S, PROXY, "[::1]:15001"),
            refused(2 * S, APP, "127.0.0.1:15001"),
        ],
        &meta,
    );
    d.advance(122 * S, &meta);
    assert_eq!(all(&d).len(), 1);
    assert_eq!(all(&d)[0].phase, Phase::Unresolved);
}

#[test]
fn a_sidecar_listening_on_the_pod_ip_is_named_when_the_app_dials_loopback() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    // istio-proxy listens on the pod IP only, before and after the app's refusals.
    for first_up in [0, 3 * S] {
        let mut facts = vec![started(0), up(first_up, PROXY, "10.244.1.17:15001")];
        facts.extend(refusals(S, 2 * S, APP, "127.0.0.1:15001"));
        facts.sort_by_key(Fact::ts);
        let (mut d, _) = run(facts, &meta);
        d.advance(125 * S, &meta);
        let i = all(&d)[0];
        assert_eq!(i.phase, Phase::Unresolved, "listener up at {first_up}");
        let advice = view(i, &meta, &wall).advice;
        assert_eq!(
            advice,
            "istio-proxy listens on 10.244.1.17:15001, which does not take app's connections to 127.0.0.1:15001: make istio-proxy listen on 0.0.0.0 (or on 127.0.0.1, the address app dials) or have app dial the pod IP (10.244.1.17:15001); this is a misconfiguration, not a race."
        );
    }
}

#[test]
fn a_pod_force_deleted_while_it_runs_drains_once_never_unresolved() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    // A relist misses the pod (or it was force-deleted): gone from the source with no
    // deletion timestamp, while its containers still run.
    let mut gone = meta_with(checkout(Role::ClassicSidecar, None));
    gone.deleted.insert(POD.into());
    let mut d = Detector::new(DetectorConfig::default());
    observe_all(
        &mut d,
        vec![started(0), up(S, PROXY, "0.0.0.0:15001")],
        &meta,
    );
    assert!(d.advance(10 * S, &gone).is_empty());
    d.observe(down(11 * S, PROXY, "0.0.0.0:15001"), &gone);
    for n in 1..=9 {
        d.observe(
            refused(11 * S + n * 200 * MS, APP, "127.0.0.1:15001"),
            &gone,
        );
        d.advance(11 * S + n * 200 * MS + MS, &gone);
    }
    d.observe(container_removed(14 * S, APP), &gone);
    d.observe(removed(15 * S), &gone);
    let incs = all(&d);
    assert_eq!(incs.len(), 1, "{incs:#?}");
    assert_eq!(
        (incs[0].phase, incs[0].state, incs[0].refused_count),
        (Phase::Drain, State::Resolved, 9)
    );
}

#[test]
fn without_metadata_a_sidecar_restarting_in_place_while_the_app_restarts_is_steady() {
    // The app running when the proxy went is refused in a steady outage; its new
    // instance, started while nothing listened, is refused before any listener of its
    // own life: a startup race of that instance (KEP-5307: a container restarted by a
    // rule is a new instance, timed from its own start).
    let mut d = Detector::new(DetectorConfig::default());
    let mut facts = vec![
        started(0),
        container_started(0, PROXY),
        container_started(0, APP),
        up(S, PROXY, "0.0.0.0:15001"),
        // The proxy crashes and restarts in its container; the app exits meanwhile.
        down(60 * S, PROXY, "0.0.0.0:15001"),
    ];
    facts.extend(refusals(
        60 * S + 50 * MS,
        60 * S + 500 * MS,
        APP,
        "127.0.0.1:15001",
    ));
    facts.extend([
        container_removed(61 * S, APP),
        container_started(62 * S, APP2),
        refused(62 * S + 100 * MS, APP2, "127.0.0.1:15001"),
        up(63 * S, PROXY, "0.0.0.0:15001"),
    ]);
    let changes = observe_all(&mut d, facts, &NoMeta);
    assert!(
        !changes.iter().any(|c| matches!(c, Change::Rephased { .. })),
        "{changes:?}"
    );
    let phases: Vec<(&str, Phase, State)> = all(&d)
        .iter()
        .map(|i| (i.client_container_id().unwrap(), i.phase, i.state))
        .collect();
    assert_eq!(
        phases,
        vec![
            (APP2, Phase::Startup, State::Resolved),
            (APP, Phase::Steady, State::Resolved)
        ]
    );
}

#[test]
fn a_sidecar_refused_by_its_probe_then_replaced_is_a_self_refusal() {
    // istio-proxy's exec probe dials an undeclared port of its own; the kubelet
    // replaces the container (bbb2) and the new instance listens there.
    let meta = checkout_naming(&[("istio-proxy", "bbb2")]);
    let mut facts = vec![started(0)];
    facts.extend(refusals(100 * MS, 400 * MS, PROXY, "127.0.0.1:15020"));
    facts.extend([
        container_removed(S, PROXY),
        container_started(S + 100 * MS, "bbb2"),
        up(2 * S, "bbb2", "0.0.0.0:15020"),
    ]);
    let (d, changes) = run(facts, &meta);
    assert!(all(&d).is_empty(), "{:#?}", all(&d));
    assert!(changes.contains(&Change::NotARace {
        why: NotARace::SelfRefusal,
        refused: 3
    }));
}
