//! Container instances started again in a pod that keeps running: all of them in
//! place (KEP-5532), one by an exit-code rule (KEP-5307), a crash (neither).

use super::*;
use crate::detect::{incident::DrainSubPhase, render::PodStart};

const APP_2: &str = "a2a2";
const PROXY_2: &str = "b2b2";
const APP_3: &str = "a3a3";
const PROXY_3: &str = "b3b3";

/// checkout whose app and istio-proxy run as `instances` (app id, proxy id), the
/// instance before each having ended with `reason` (none: the first instances).
fn checkout_running(app: &str, proxy: &str, reason: Option<&str>) -> Meta {
    let mut pod = checkout(Role::ClassicSidecar, None);
    for s in &mut pod.statuses {
        match s.name.as_str() {
            "app" => s.container_id = app.into(),
            "istio-proxy" => s.container_id = proxy.into(),
            _ => continue,
        }
        s.restart_count = i32::from(reason.is_some());
        s.last_terminated_reason = reason.map(str::to_string);
    }
    meta_with(pod)
}

/// The pod's first start: app refused for 0.9 s until istio-proxy listens.
fn first_start() -> Vec<Fact> {
    let mut facts = vec![
        started(0),
        container_started(10 * MS, PROXY),
        container_started(20 * MS, APP),
    ];
    facts.extend(refusals(100 * MS, S, APP, "127.0.0.1:15001"));
    facts.push(up(S, PROXY, "0.0.0.0:15001"));
    facts
}

/// Every container killed at `at` and started again 0.5 s later in the same pod
/// cgroup as `(app, proxy)`; the new app is refused 100 ms apart for 0.8 s, then the
/// new proxy listens.
fn restarted_in_place(
    at: u64,
    (old_app, old_proxy): (&str, &str),
    (app, proxy): (&str, &str),
) -> Vec<Fact> {
    let mut facts = vec![
        down(at, old_proxy, "0.0.0.0:15001"),
        container_removed(at + MS, old_app),
        container_removed(at + 2 * MS, old_proxy),
        container_started(at + 500 * MS, proxy),
        container_started(at + 510 * MS, app),
    ];
    facts.extend(refusals(
        at + 600 * MS,
        at + 1400 * MS,
        app,
        "127.0.0.1:15001",
    ));
    facts.push(up(at + 1400 * MS, proxy, "0.0.0.0:15001"));
    facts
}

fn pod_starts(changes: &[Change]) -> Vec<u32> {
    changes
        .iter()
        .filter_map(|c| match c {
            Change::PodStarted { start, .. } => Some(*start),
            _ => None,
        })
        .collect()
}

#[test]
fn all_containers_restarted_in_place_is_a_new_start_whose_race_is_startup() {
    let first = checkout_running(APP, PROXY, None);
    let (mut d, changes) = run(first_start(), &first);
    assert_eq!(pod_starts(&changes), vec![0]);
    // The kubelet's status names the new instances a while after they started.
    let mut changes = Vec::new();
    for f in restarted_in_place(60 * S, (APP, PROXY), (APP_2, PROXY_2)) {
        changes.extend(d.observe(f, &first));
    }
    let restarted = checkout_running(APP_2, PROXY_2, Some("RestartingAllContainers"));
    changes.extend(d.advance(62 * S, &restarted));
    changes.extend(d.advance(63 * S, &restarted));
    assert_eq!(pod_starts(&changes), vec![1], "one new start, told once");
    let incs = all(&d);
    assert_eq!(incs.len(), 2, "{incs:#?}");
    let (second, first_inc) = (incs[0], incs[1]);
    assert_eq!(
        (second.phase, second.state, second.refused_count),
        (Phase::Startup, State::Resolved, 8),
        "{second:#?}"
    );
    assert_eq!(
        second.race_window_ns(),
        Some(800 * MS),
        "from its own start"
    );
    assert_eq!((second.pod_start, first_inc.pod_start), (1, 0));
    let v = view(second, &restarted, &wall);
    assert_eq!(
        (v.pod_start, v.pod_start_number),
        (PodStart::RestartedInPlace, 1)
    );
    assert_eq!(v.sidecar_container_id.as_deref(), Some(PROXY_2));
    let json = serde_json::to_value(&v).unwrap();
    assert_eq!(json["pod_start"], "restarted_in_place");
    assert!(json.get("pod_start_number").is_none(), "{json:#}");
    assert_eq!(view(first_inc, &first, &wall).pod_start, PodStart::Created);

    // A second restart of all containers is the pod's third start.
    let mut changes = Vec::new();
    for f in restarted_in_place(120 * S, (APP_2, PROXY_2), (APP_3, PROXY_3)) {
        changes.extend(d.observe(f, &restarted));
    }
    let again = checkout_running(APP_3, PROXY_3, Some("RestartingAllContainers"));
    changes.extend(d.advance(122 * S, &again));
    assert_eq!(pod_starts(&changes), vec![2]);
    let second_race = all(&d)
        .into_iter()
        .find(|i| i.client_container_id() == Some(APP_2) && i.port == 15001)
        .map(|i| i.pod_start);
    assert_eq!(
        second_race,
        Some(1),
        "the second start's race stays the second's"
    );
    let third = all(&d)[0];
    assert_eq!((third.phase, third.pod_start), (Phase::Startup, 2));
}

#[test]
fn the_restart_is_known_when_refused_after_the_status_came() {
    // The status told before the app's refusals: the incident belongs to the new start
    // from the first refusal on.
    let first = checkout_running(APP, PROXY, None);
    let restarted = checkout_running(APP_2, PROXY_2, Some("RestartingAllContainers"));
    let (mut d, _) = run(first_start(), &first);
    let facts = restarted_in_place(60 * S, (APP, PROXY), (APP_2, PROXY_2));
    let (before, after) = facts.split_at(5);
    for f in before.iter().cloned() {
        d.observe(f, &first);
    }
    assert_eq!(
        pod_starts(&d.advance(60 * S + 520 * MS, &restarted)),
        vec![1]
    );
    for f in after.iter().cloned() {
        d.observe(f, &restarted);
    }
    let second = all(&d)[0];
    assert_eq!(
        (second.phase, second.pod_start, second.refused_count),
        (Phase::Startup, 1, 8)
    );
}

#[test]
fn a_container_restarted_alone_is_no_pod_start() {
    // The app crashes (Error, OOMKilled) and the kubelet starts it again: the pod did
    // not start again, though the new instance was refused while the proxy restarted.
    for reason in ["Error", "OOMKilled", "Completed"] {
        let first = checkout_running(APP, PROXY, None);
        let (mut d, _) = run(first_start(), &first);
        let mut changes = Vec::new();
        for f in restarted_in_place(60 * S, (APP, PROXY), (APP_2, PROXY_2)) {
            changes.extend(d.observe(f, &first));
        }
        let crashed = checkout_running(APP_2, PROXY_2, Some(reason));
        changes.extend(d.advance(63 * S, &crashed));
        assert!(pod_starts(&changes).is_empty(), "{reason}: {changes:?}");
        assert!(all(&d).iter().all(|i| i.pod_start == 0), "{reason}");
    }
    // Instances the agent did not see start (an agent started after the restart) are
    // no start it saw either.
    let restarted = checkout_running(APP_2, PROXY_2, Some("RestartingAllContainers"));
    let (mut d, _) = run(vec![up(S, PROXY_2, "0.0.0.0:15001")], &restarted);
    assert!(pod_starts(&d.advance(2 * S, &restarted)).is_empty());
}

/// checkout with a native istio-proxy, deleted at 30 s with a 30 s grace period.
fn terminating_at_30s() -> Meta {
    let mut pod = checkout(
        Role::NativeSidecar,
        Some(ProbeTarget::TcpSocket { port: Some(15001) }),
    );
    pod.deletion_timestamp = Some(at(60 * S));
    pod.deletion_grace_period_seconds = Some(30);
    meta_with(pod)
}

/// The pod running since 0 (proxy up at 1 s); at 31 s the kubelet kills the native
/// sidecar while the app still dials; with `restarted`, it starts the sidecar again
/// (a new instance) at 31.6 s, listening at 32.5 s, else the pod is removed then.
fn terminating(restarted: bool) -> Vec<Fact> {
    let mut facts = vec![
        started(0),
        container_started(0, PROXY),
        container_started(10 * MS, APP),
        up(S, PROXY, "0.0.0.0:15001"),
        down(31 * S, PROXY, "0.0.0.0:15001"),
    ];
    facts.extend(refusals(
        31 * S + 50 * MS,
        31 * S + 550 * MS,
        APP,
        "127.0.0.1:15001",
    ));
    facts.push(container_removed(31 * S + 560 * MS, PROXY));
    if restarted {
        facts.push(container_started(31 * S + 600 * MS, PROXY_2));
    }
    facts.extend(refusals(
        31 * S + 650 * MS,
        32 * S + 450 * MS,
        APP,
        "127.0.0.1:15001",
    ));
    if restarted {
        facts.push(up(32 * S + 500 * MS, PROXY_2, "0.0.0.0:15001"));
    }
    facts.push(container_removed(40 * S, APP));
    facts.push(removed(41 * S));
    facts
}

#[test]
fn a_sidecar_restarted_while_its_pod_terminates_is_one_drain_marked_restarting() {
    // KEP-4438: the kubelet restarts a native sidecar that exits while its pod
    // terminates. The refusals until the new instance listens are one drain.
    let meta = terminating_at_30s();
    let (d, _) = run(terminating(true), &meta);
    let incs = all(&d);
    assert_eq!(
        incs.len(),
        1,
        "the restart is no second incident: {incs:#?}"
    );
    let i = incs[0];
    assert_eq!(
        (i.phase, i.state, i.refused_count, i.drain_sub_phase),
        (
            Phase::Drain,
            State::Resolved,
            13,
            Some(DrainSubPhase::SidecarRestarting)
        )
    );
    let v = view(i, &meta, &wall);
    assert_eq!(v.sidecar_container_id.as_deref(), Some(PROXY_2));
    let json = serde_json::to_value(&v).unwrap();
    assert_eq!(json["drain_sub_phase"], "sidecar_restarting");
    // Killed and never restarted: a drain that ends with the pod, no sub-phase.
    let (d, _) = run(terminating(false), &meta);
    let i = all(&d)[0];
    assert_eq!((i.phase, i.drain_sub_phase), (Phase::Drain, None));
    assert!(serde_json::to_value(view(i, &meta, &wall)).unwrap()["drain_sub_phase"].is_null());
}

/// The pod running since 0 (proxy up at 1 s, the app connected); at 300 s, long past
/// the startup bound of the pod's start, both exit with a code their restart rules
/// (KEP-5307) restart them on: new instances at 300.5 s, the proxy listening at
/// 301.4 s, the new app refused until then unless `app_restarted` is false (the old app
/// keeps dialing instead).
fn restarted_by_rules(app_restarted: bool) -> Vec<Fact> {
    let client = if app_restarted { APP_2 } else { APP };
    let mut facts = vec![
        started(0),
        container_started(0, PROXY),
        container_started(10 * MS, APP),
        up(S, PROXY, "0.0.0.0:15001"),
        down(300 * S, PROXY, "0.0.0.0:15001"),
        container_removed(300 * S + 10 * MS, PROXY),
        container_started(300 * S + 500 * MS, PROXY_2),
    ];
    if app_restarted {
        facts.push(container_removed(300 * S + 20 * MS, APP));
        facts.push(container_started(300 * S + 500 * MS, APP_2));
    }
    facts.extend(refusals(
        300 * S + 600 * MS,
        301 * S + 400 * MS,
        client,
        "127.0.0.1:15001",
    ));
    facts.push(up(301 * S + 400 * MS, PROXY_2, "0.0.0.0:15001"));
    facts
}

#[test]
fn an_app_restarted_by_a_rule_that_races_its_sidecar_is_a_startup_of_that_instance() {
    let before = checkout_running(APP, PROXY, None);
    let (mut d, mut changes) = run(restarted_by_rules(true), &before);
    // Exit code 42 of containers with `restartPolicy: Never` and a rule: `Error`.
    let after = checkout_running(APP_2, PROXY_2, Some("Error"));
    changes.extend(d.advance(302 * S, &after));
    assert_eq!(
        pod_starts(&changes),
        vec![0],
        "a rule's restart is no pod start"
    );
    let incs = all(&d);
    assert_eq!(incs.len(), 1, "{incs:#?}");
    let i = incs[0];
    assert_eq!(
        (
            i.phase,
            i.state,
            i.refused_count,
            i.pod_start,
            i.client_instances
        ),
        (Phase::Startup, State::Resolved, 8, 0, 1),
        "timed from the instance's own start, not the pod's: {i:#?}"
    );
    assert_eq!(i.client_container_id(), Some(APP_2));
    assert_eq!(i.race_window_ns(), Some(800 * MS));
}

#[test]
fn a_sidecar_restarted_by_a_rule_mid_life_is_steady_never_drain() {
    let before = checkout_running(APP, PROXY, None);
    let after = checkout_running(APP, PROXY_2, Some("Error"));
    for meta in [&before as &dyn PodMeta, &after, &NoMeta] {
        let (mut d, mut changes) = run(restarted_by_rules(false), meta);
        changes.extend(d.advance(302 * S, meta));
        // The pod goes later, its deletion unknown without metadata: still no drain.
        changes.extend(d.observe(container_removed(400 * S, APP), meta));
        changes.extend(d.observe(removed(401 * S), meta));
        assert!(
            !changes.iter().any(|c| matches!(c, Change::Rephased { .. })),
            "{changes:?}"
        );
        let incs = all(&d);
        assert_eq!(incs.len(), 1, "{incs:#?}");
        let i = incs[0];
        assert_eq!(
            (
                i.phase,
                i.state,
                i.refused_count,
                i.drain_sub_phase,
                i.pod_start
            ),
            (Phase::Steady, State::Resolved, 8, None, 0)
        );
        assert_eq!(i.race_window_ns(), Some(1400 * MS), "gone → back");
        assert_eq!(
            view(i, meta, &wall).sidecar_container_id.as_deref(),
            Some(PROXY_2)
        );
    }
}

#[test]
fn a_restart_named_piecemeal_is_one_start_from_its_first_instance() {
    let first = checkout_running(APP, PROXY, None);
    let (mut d, _) = run(first_start(), &first);
    let mut facts = restarted_in_place(60 * S, (APP, PROXY), (APP_2, PROXY_2));
    // The new proxy dials the app's port before the new app exists (at 60.505 s).
    facts.insert(4, refused(60 * S + 505 * MS, PROXY_2, "127.0.0.1:8080"));
    for f in facts {
        d.observe(f, &first);
    }
    let restarted = checkout_running(APP_2, PROXY_2, Some("RestartingAllContainers"));
    // The app's new instance is named first, the proxy's still its old one.
    let mut app_first = checkout_running(APP_2, PROXY_2, Some("RestartingAllContainers"));
    let proxy = app_first.pods.get_mut(POD).unwrap().statuses.iter_mut();
    for s in proxy.filter(|s| s.name == "istio-proxy") {
        (s.container_id, s.last_terminated_reason) = (PROXY.into(), None);
    }
    let on_8080 = |d: &Detector| all(d).iter().find(|i| i.port == 8080).map(|i| i.pod_start);
    assert_eq!(pod_starts(&d.advance(61 * S, &app_first)), vec![1]);
    assert_eq!(
        on_8080(&d),
        Some(0),
        "before the app's instance, as known then"
    );
    assert!(
        pod_starts(&d.advance(62 * S, &restarted)).is_empty(),
        "the same restart"
    );
    assert_eq!(
        on_8080(&d),
        Some(1),
        "the restart began with the proxy's instance"
    );
    // The next restart under way: the app's third instance named while the proxy's
    // status still names its second. One new start, and the old instance never joins it.
    d.observe(container_started(120 * S, APP_3), &restarted);
    let under_way = checkout_running(APP_3, PROXY_2, Some("RestartingAllContainers"));
    let changes: Vec<Change> = (0..3)
        .flat_map(|k| d.advance(121 * S + k * S, &under_way))
        .collect();
    assert_eq!(pod_starts(&changes), vec![2]);
    let second_race = all(&d)
        .into_iter()
        .find(|i| i.client_container_id() == Some(APP_2) && i.port == 15001)
        .map(|i| i.pod_start);
    assert_eq!(
        second_race,
        Some(1),
        "the second start's race stays the second's"
    );
    d.observe(refused(122 * S, APP_3, "127.0.0.1:9999"), &under_way);
    let newest = all(&d)[0];
    assert_eq!(
        (newest.port, newest.pod_start),
        (9999, 2),
        "after the third start began"
    );
}
