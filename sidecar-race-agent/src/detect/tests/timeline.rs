//! Incidents' timelines: what the detector saw in the pod, in order, with the
//! refusals' counts, bounded; as the API shows them; restored from a checkpoint
//! written before they existed.

use super::*;
use crate::detect::{
    detector::DetectorSnapshot,
    timeline::{EntryKind, HEAD, MAX_ENTRIES, StartSource},
};

/// (kind, time, container name) of each entry as shown.
fn shape(i: &Incident, meta: &dyn PodMeta) -> Vec<(EntryKind, u64, Option<String>)> {
    view(i, meta, &wall)
        .timeline
        .into_iter()
        .map(|e| (e.kind, e.at_ns, e.container))
        .collect()
}

fn named(name: &str) -> Option<String> {
    Some(name.to_string())
}

fn counts(i: &Incident) -> Vec<u64> {
    i.timeline
        .entries()
        .iter()
        .filter(|e| e.kind.is_refusal())
        .map(|e| e.count)
        .collect()
}

/// The app starts, is refused every 100 ms from 100 ms, istio-proxy's container
/// starts at 150 ms and listens at 1.5 s.
fn startup_race() -> Vec<Fact> {
    let mut facts = vec![started(0), container_started(0, APP)];
    facts.push(refused(100 * MS, APP, "127.0.0.1:15001"));
    facts.push(container_started(150 * MS, PROXY));
    facts.extend(refusals(200 * MS, 1500 * MS, APP, "127.0.0.1:15001"));
    facts.push(up(1500 * MS, PROXY, "0.0.0.0:15001"));
    facts
}

#[test]
fn a_startup_timeline_lists_the_starts_the_first_refusal_the_listen_and_the_counts_between() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let (d, _) = run(startup_race(), &meta);
    let i = all(&d)[0];
    assert_eq!(i.refused_count, 14);
    assert_eq!(
        shape(i, &meta),
        [
            (EntryKind::ContainerStarted, 0, named("app")),
            (EntryKind::FirstRefusal, 100 * MS, named("app")),
            (EntryKind::ContainerStarted, 150 * MS, named("istio-proxy")),
            (EntryKind::LastRefusal, 1400 * MS, named("app")),
            (EntryKind::Listening, 1500 * MS, named("istio-proxy")),
        ]
    );
    assert_eq!(
        counts(i),
        [1, 13],
        "the first, then those since the proxy started"
    );
    assert_eq!(i.timeline.refused_total(), i.refused_count);
    let starts: Vec<_> = i
        .timeline
        .entries()
        .iter()
        .filter_map(|e| e.source)
        .collect();
    assert_eq!(starts, [StartSource::Kernel, StartSource::Kernel]);
    assert_eq!(
        i.timeline.entries()[1].container_id.as_deref(),
        Some(APP),
        "a refusal names the refusing instance"
    );
    // A late refusal (the SYN refused just before the listen) lands before it.
    let mut facts = startup_race();
    facts.push(refused(1499 * MS, APP, "127.0.0.1:15001"));
    let (d, _) = run(facts, &meta);
    let i = all(&d)[0];
    assert_eq!(i.timeline.entries()[3].at, 1499 * MS);
    assert_eq!(counts(i), [1, 14]);
}

#[test]
fn the_api_shows_the_timeline_with_wall_clock_times_and_names() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let (d, _) = run(startup_race(), &meta);
    let v = view(all(&d)[0], &meta, &wall);
    let json = serde_json::to_value(&v).unwrap();
    assert_eq!(
        json["timeline"],
        serde_json::json!([
            {"kind": "container_started", "at": "t+0ms", "container": "app", "container_id": APP, "source": "kernel"},
            {"kind": "first_refusal", "at": "t+100ms", "container": "app", "container_id": APP, "count": 1},
            {"kind": "container_started", "at": "t+150ms", "container": "istio-proxy", "container_id": PROXY, "source": "kernel"},
            {"kind": "last_refusal", "at": "t+1400ms", "container": "app", "container_id": APP, "count": 13},
            {"kind": "listening", "at": "t+1500ms", "container": "istio-proxy", "container_id": PROXY},
        ])
    );
    assert_eq!(
        crate::detect::timeline_view::short(&v.timeline, 1000),
        "app started +0.00s, first refusal +0.10s, istio-proxy started +0.15s, last refusal (13 since the previous) +1.40s, istio-proxy listening +1.50s"
    );
}

/// Deleted at 10 s with a 30 s grace period (its deadline 40 s).
fn terminating() -> PodInfo {
    let mut pod = checkout(Role::ClassicSidecar, None);
    pod.deletion_timestamp = Some(at(40 * S));
    pod.deletion_grace_period_seconds = Some(30);
    pod
}

/// Both containers start, the proxy listens at 1 s and closes at 11 s; the app is
/// refused from 11.1 s to 12 s; the pod goes at 13 s.
fn drain_race() -> Vec<Fact> {
    let mut facts = vec![
        started(0),
        container_started(0, APP),
        container_started(MS, PROXY),
        up(S, PROXY, "127.0.0.1:15001"),
        down(11 * S, PROXY, "127.0.0.1:15001"),
    ];
    facts.extend(refusals(
        11 * S + 100 * MS,
        12 * S + 100 * MS,
        APP,
        "127.0.0.1:15001",
    ));
    facts.push(removed(13 * S));
    facts
}

#[test]
fn a_drain_timeline_has_the_deletion_with_its_grace_then_the_close_then_the_refusals() {
    let meta = meta_with(terminating());
    let (d, _) = run(drain_race(), &meta);
    let i = all(&d)[0];
    assert_eq!((i.phase, i.refused_count), (Phase::Drain, 10));
    assert_eq!(
        shape(i, &meta),
        [
            (EntryKind::ContainerStarted, 0, named("app")),
            (EntryKind::ContainerStarted, MS, named("istio-proxy")),
            (EntryKind::PodDeleted, 10 * S, None),
            (EntryKind::ListenerClosed, 11 * S, named("istio-proxy")),
            (EntryKind::FirstRefusal, 11 * S + 100 * MS, named("app")),
            (EntryKind::LastRefusal, 12 * S, named("app")),
        ]
    );
    assert_eq!(i.timeline.entries()[2].grace_seconds, Some(30));
    assert_eq!(counts(i), [1, 9]);

    // The deletion seen only after the refusals began: still in its place.
    let mut d = Detector::new(DetectorConfig::default());
    let running = meta_with(checkout(Role::ClassicSidecar, None));
    for f in drain_race().into_iter().take(8) {
        d.observe(f, &running);
    }
    assert!(!all(&d)[0].timeline.has(EntryKind::PodDeleted, None));
    d.advance(11 * S + 300 * MS, &meta);
    let i = all(&d)[0];
    assert_eq!(i.phase, Phase::Drain);
    assert_eq!(shape(i, &meta)[2], (EntryKind::PodDeleted, 10 * S, None));
    assert_eq!(shape(i, &meta)[3].0, EntryKind::ListenerClosed);
}

#[test]
fn probe_results_the_pod_source_shows_are_entries_when_they_change() {
    let mut pod = checkout(Role::ClassicSidecar, None);
    let set = |pod: &mut PodInfo, started: bool, ready: bool| {
        let s = pod.statuses.iter_mut().find(|s| s.name == "istio-proxy");
        let s = s.unwrap();
        (s.started, s.ready) = (Some(started), ready);
    };
    set(&mut pod, false, false);
    let before = meta_with(pod.clone());
    let mut d = Detector::new(DetectorConfig::default());
    for f in [started(0), container_started(0, APP)] {
        d.observe(f, &before);
    }
    d.advance(50 * MS, &before);
    d.observe(refused(100 * MS, APP, "127.0.0.1:15001"), &before);
    d.advance(200 * MS, &before);
    assert!(
        !all(&d)[0].timeline.has(EntryKind::Started, None),
        "no change yet"
    );
    set(&mut pod, true, true);
    d.advance(900 * MS, &meta_with(pod));
    let i = all(&d)[0];
    let probes: Vec<_> = i
        .timeline
        .entries()
        .iter()
        .filter(|e| matches!(e.kind, EntryKind::Started | EntryKind::Ready))
        .map(|e| (e.kind, e.at, e.container.as_deref(), e.value))
        .collect();
    assert_eq!(
        probes,
        [
            (
                EntryKind::Started,
                900 * MS,
                Some("istio-proxy"),
                Some(true)
            ),
            (EntryKind::Ready, 900 * MS, Some("istio-proxy"), Some(true)),
        ]
    );
}

#[test]
fn starts_the_pod_source_shows_are_entries_when_the_kernel_did_not_see_them() {
    let mut pod = checkout(Role::ClassicSidecar, None);
    for s in &mut pod.statuses {
        s.started_at = Some(at(2 * S));
    }
    let meta = meta_with(pod);
    // The agent started after the containers: the kernel showed the proxy's alone.
    let facts = vec![
        container_started(2 * S + 10 * MS, PROXY),
        refused(3 * S, APP, "127.0.0.1:15001"),
    ];
    let (d, _) = run(facts, &meta);
    let starts: Vec<_> = all(&d)[0]
        .timeline
        .entries()
        .iter()
        .filter(|e| e.kind == EntryKind::ContainerStarted)
        .map(|e| (e.container.as_deref(), e.source, e.at))
        .collect();
    assert!(
        starts.contains(&(Some("app"), Some(StartSource::Pod), 2 * S)),
        "{starts:?}"
    );
    assert!(
        starts.contains(&(
            Some("istio-proxy"),
            Some(StartSource::Kernel),
            2 * S + 10 * MS
        )),
        "the kernel's start, not the pod source's: {starts:?}"
    );
    assert_eq!(
        starts.iter().filter(|s| s.0 == Some("istio-proxy")).count(),
        1
    );
}

#[test]
fn a_crash_looping_neighbour_fills_the_bound_and_the_earliest_and_latest_stay() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let mut facts = vec![started(0), container_started(0, APP)];
    // 40 instances of another container start, each followed by a refusal.
    for n in 0..40u64 {
        let t = (n + 1) * 100 * MS;
        facts.push(refused(t, APP, "127.0.0.1:15001"));
        facts.push(container_started(t + 10 * MS, &format!("crash{n:02}")));
    }
    facts.push(up(5 * S, PROXY, "0.0.0.0:15001"));
    let (d, _) = run(facts, &meta);
    let i = all(&d)[0];
    let entries = i.timeline.entries();
    assert_eq!(entries.len(), MAX_ENTRIES);
    assert_eq!(
        entries[0].container.as_deref(),
        Some("app"),
        "the earliest stay"
    );
    assert_eq!(entries[1].kind, EntryKind::FirstRefusal);
    assert_eq!(
        entries.last().unwrap().kind,
        EntryKind::Listening,
        "the latest stay"
    );
    assert!(
        entries.windows(2).all(|w| w[0].at <= w[1].at),
        "in time order"
    );
    let gap = i.timeline.gap().expect("what was left out is counted");
    assert_eq!(gap.index, HEAD);
    assert_eq!(gap.entries as usize, 1 + 2 * 40 + 1 - MAX_ENTRIES);
    assert_eq!(
        i.timeline.refused_total(),
        i.refused_count,
        "no refusal lost"
    );
    let v = view(i, &meta, &wall);
    assert_eq!(v.timeline.len(), MAX_ENTRIES + 1);
    assert_eq!(v.timeline[HEAD].kind, EntryKind::Dropped);
    assert_eq!(v.timeline[HEAD].count, Some(gap.entries));
}

#[test]
fn the_first_refusal_stays_when_the_bound_is_hit_before_it() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let mut facts = vec![started(0)];
    for n in 0..(MAX_ENTRIES as u64 + 4) {
        facts.push(container_started(n * MS, &format!("init{n:02}")));
    }
    facts.push(container_started(100 * MS, APP));
    facts.extend(refusals(200 * MS, S, APP, "127.0.0.1:15001"));
    for n in 0..(MAX_ENTRIES as u64) {
        facts.push(container_started(S + n * MS, &format!("late{n:02}")));
    }
    let (d, _) = run(facts, &meta);
    let i = all(&d)[0];
    assert_eq!(i.timeline.entries().len(), MAX_ENTRIES);
    assert!(
        i.timeline.has(EntryKind::FirstRefusal, None),
        "{:?}",
        shape(i, &meta)
    );
    assert_eq!(i.timeline.refused_total(), i.refused_count);
}

#[test]
fn an_incident_from_a_checkpoint_written_before_timelines_restores_and_goes_on() {
    let meta = meta_with(checkout(Role::ClassicSidecar, None));
    let mut facts = startup_race();
    let listen = facts.pop().unwrap();
    let (d, _) = run(facts, &meta);
    // The older agent's checkpoint: no timeline, no probe results.
    let mut old = serde_json::to_value(d.snapshot()).unwrap();
    for inc in old["incidents"].as_array_mut().unwrap() {
        inc.as_object_mut().unwrap().remove("timeline").unwrap();
    }
    for pod in old["pods"].as_object_mut().unwrap().values_mut() {
        let pod = pod.as_object_mut().unwrap();
        pod.remove("probes").unwrap();
        pod.remove("probe_changes").unwrap();
    }
    let snap: DetectorSnapshot = serde_json::from_value(old).unwrap();
    let mut restored = Detector::new(DetectorConfig::default());
    restored.restore(snap);
    assert!(all(&restored)[0].timeline.is_empty());
    restored.observe(refused(1450 * MS, APP, "127.0.0.1:15001"), &meta);
    restored.observe(listen, &meta);
    let i = all(&restored)[0];
    assert_eq!((i.state, i.refused_count), (State::Resolved, 15));
    assert_eq!(
        shape(i, &meta),
        [
            (EntryKind::FirstRefusal, 1450 * MS, named("app")),
            (EntryKind::Listening, 1500 * MS, named("istio-proxy")),
        ],
        "what the new agent saw"
    );
}

#[test]
fn a_full_timeline_does_not_churn_with_what_the_pod_source_shows_every_tick() {
    let mut pod = terminating();
    for s in &mut pod.statuses {
        s.started_at = Some(at(S));
    }
    let meta = meta_with(pod);
    // The earliest entries kept are these: the pod source's starts (at 1 s) and the
    // deletion (at 10 s) fall where the bound drops entries.
    let mut facts = vec![started(0)];
    for n in 0..(HEAD as u64) {
        facts.push(container_started(n * MS, &format!("init{n:02}")));
    }
    for n in 0..(2 * MAX_ENTRIES as u64) {
        let t = 10 * S + (n + 1) * 10 * MS;
        facts.push(refused(t, APP, "127.0.0.1:15001"));
        facts.push(container_started(t + MS, &format!("crash{n:02}")));
    }
    let (mut d, _) = run(facts, &meta);
    d.advance(12 * S, &meta);
    let before = all(&d)[0].timeline.clone();
    assert!(before.is_full());
    assert!(
        !before.has(EntryKind::PodDeleted, None),
        "dropped by the bound"
    );
    for t in 13..16 {
        d.advance(t * S, &meta);
    }
    let i = all(&d)[0];
    assert_eq!(i.state, State::Open);
    assert_eq!(i.timeline, before, "nothing written again");
    assert_eq!(i.timeline.refused_total(), i.refused_count);
}

#[test]
fn a_stuck_job_has_no_timeline_even_when_its_pod_is_deleted() {
    let mut pod = job_pod(RunState::Terminated, RunState::Running);
    for s in &mut pod.statuses {
        s.started_at = Some(at(S));
    }
    let stuck = meta_with(pod.clone());
    let mut d = Detector::new(DetectorConfig::default());
    d.observe(started(0), &stuck);
    assert_eq!(d.advance(71 * S, &stuck), vec![Change::Opened(1)]);
    pod.deletion_timestamp = Some(at(100 * S));
    pod.deletion_grace_period_seconds = Some(30);
    d.observe(removed(75 * S), &meta_with(pod));
    let i = all(&d)[0];
    assert_eq!(i.state, State::Resolved);
    assert!(i.timeline.is_empty(), "{:?}", i.timeline);
}
