//! The pipeline's accounting on recorded kernel events and pod-source updates.

use std::path::PathBuf;

use crate::{
    detect::{DetectorConfig, Kind},
    ingest::events::KernelEvent,
    inventory::sources::PodUpdate,
    pipeline::{Pipeline, outcome::Outcome},
    pods::pod_info::PodInfo,
    test_facts::{CHECKOUT, MS, container_path, created, pipeline, pod_path, socket, temp_dir},
};

/// The fixture pod with one more app container, `worker` (`e…`), as the pod source
/// reports it once the container runs.
fn checkout_with_worker() -> PodInfo {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pods/classic-deployment.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    let containers = v["spec"]["containers"].as_array_mut().unwrap();
    containers.push(serde_json::json!({"name": "worker", "image": "x"}));
    let statuses = v["status"]["containerStatuses"].as_array_mut().unwrap();
    let mut worker = statuses[0].clone();
    worker["name"] = "worker".into();
    worker["containerID"] = format!("containerd://{}", "e".repeat(64)).into();
    statuses.push(worker);
    PodInfo::from_json(v).unwrap()
}

fn settled(outcomes: &[Outcome]) -> Vec<Kind> {
    outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Settled(a) => Some(a.view.kind),
            _ => None,
        })
        .collect()
}

/// checkout's pod and containers made (the worker's at `worker_at`), the app refused
/// on 9090 at 100 ms, the worker listening there at 1 s.
fn worker_races_app(p: &mut Pipeline, (app, worker): (&str, &str), worker_at: u64) {
    for ev in [
        created(0, 100, pod_path(CHECKOUT)),
        created(MS, 101, container_path(CHECKOUT, app)),
        created(worker_at, 103, container_path(CHECKOUT, worker)),
        KernelEvent::Refused(socket(
            100 * MS,
            101,
            "127.0.0.1:40000",
            Some("127.0.0.1:9090"),
        )),
        KernelEvent::Listen(socket(S, 103, "0.0.0.0:9090", None)),
    ] {
        p.kernel_event(&ev);
    }
}

#[test]
fn accounting_waits_for_the_listeners_name_so_it_counts_the_kind_shown_later() {
    let dir = temp_dir("listener-name");
    let (app, worker) = ("a".repeat(64), "e".repeat(64));
    let mut p = pipeline(
        &dir,
        Some(crate::test_facts::checkout_pod()),
        DetectorConfig::default(),
    );
    worker_races_app(&mut p, (&app, &worker), MS);
    // The app is named, the container that listened is not yet: not counted yet.
    let step = p.tick(2 * S);
    assert!(settled(&step).is_empty(), "{step:#?}");
    p.pod_update(PodUpdate::Apply(Box::new(checkout_with_worker())));
    let step = p.tick(3 * S);
    assert_eq!(settled(&step), vec![Kind::AppNotReady]);
    let (shown, _) = p.incidents(&Default::default(), 10);
    assert_eq!(shown[0].kind, Kind::AppNotReady, "the API says the same");
    std::fs::remove_dir_all(dir).unwrap();
}

const S: u64 = 1_000 * MS;

#[test]
fn the_api_shows_the_timeline_in_rfc_3339_with_the_incidents_own_times() {
    let dir = temp_dir("timeline-api");
    let (app, worker) = ("a".repeat(64), "e".repeat(64));
    let mut p = pipeline(
        &dir,
        Some(crate::test_facts::checkout_pod()),
        DetectorConfig::default(),
    );
    p.pod_update(PodUpdate::Apply(Box::new(checkout_with_worker())));
    worker_races_app(&mut p, (&app, &worker), 2 * MS);
    p.tick(2 * S);
    let (shown, _) = p.incidents(&Default::default(), 10);
    let v = serde_json::to_value(&shown[0]).unwrap();
    let timeline = v["timeline"].as_array().unwrap();
    let kinds: Vec<&str> = timeline
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "container_started",
            "container_started",
            "first_refusal",
            "listening"
        ],
        "{v:#}"
    );
    assert_eq!(timeline[0]["container"], "app");
    assert_eq!(timeline[1]["container"], "worker");
    // One clock offset for the whole incident: an entry's time is the incident's own
    // field to the ns (with one offset a call, they were a few ns apart, and two
    // entries at one kernel time could read out of order: case 3 on the real kubelet).
    assert_eq!(timeline[2]["at"], v["first_refused_at"], "{v:#}");
    assert_eq!(timeline[3]["at"], v["listener_ready_at"], "{v:#}");
    let boot = |t: &serde_json::Value| crate::clock::rfc3339_to_boot_ns(t.as_str().unwrap());
    assert!(timeline.iter().all(|e| boot(&e["at"]).is_some()), "{v:#}");
    std::fs::remove_dir_all(dir).unwrap();
}
