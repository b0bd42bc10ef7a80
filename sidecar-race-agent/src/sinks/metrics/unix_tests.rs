//! Unix socket refusals in the exposition: `socket="<volume>/<name>"` for a socket on
//! a pod volume (or one a listener served); a path no sidecar can serve is no series.

use std::time::Instant;

use super::*;
use crate::{
    detect::DetectorConfig,
    ingest::events::{KernelEvent, Sender, UnixFact, UnixName, UnixRefusal},
    pods::pod_info::PodInfo,
    test_facts::{CHECKOUT as UID, MS, container_path, created, pipeline, pod_path, temp_dir},
};

/// The checkout fixture with one emptyDir mounted at /var/run/dapr in `app` and at
/// /sockets in `istio-proxy`, parsed from JSON as a pod source delivers it.
fn pod_with_socket_volume() -> PodInfo {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pods/classic-deployment.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["spec"]["volumes"] = serde_json::json!([{"name": "dapr-socket", "emptyDir": {}}]);
    v["spec"]["containers"][0]["volumeMounts"] =
        serde_json::json!([{"name": "dapr-socket", "mountPath": "/var/run/dapr"}]);
    v["spec"]["containers"][1]["volumeMounts"] =
        serde_json::json!([{"name": "dapr-socket", "mountPath": "/sockets"}]);
    PodInfo::from_json(v).unwrap()
}

fn unix(kind: fn(UnixFact) -> KernelEvent, ts: u64, cgroup: u64, path: &str) -> KernelEvent {
    kind(UnixFact {
        ts_boot_ns: ts,
        owner: Sender {
            cgroup_id: cgroup,
            pid: 7,
            tgid: 7,
            comm: "app".into(),
        },
        name: UnixName::Path(path.into()),
        refusal: Some(UnixRefusal::NoSuchPath),
        sock_type: Some("stream"),
        netns: None,
        inode: None,
        hook: None,
        start_boot_ns: 0,
    })
}

#[test]
fn a_socket_on_a_pod_volume_is_its_own_series_and_arbitrary_paths_are_other() {
    let dir = temp_dir("metrics-unix");
    let mut p = pipeline(
        &dir,
        Some(pod_with_socket_volume()),
        DetectorConfig::default(),
    );
    let (a, b) = ("a".repeat(64), "b".repeat(64));
    let events = [
        created(0, 100, pod_path(UID)),
        created(MS, 101, container_path(UID, &a)),
        created(MS, 102, container_path(UID, &b)),
        unix(
            KernelEvent::UnixRefused,
            100 * MS,
            101,
            "/var/run/dapr/app.sock",
        ),
        unix(
            KernelEvent::UnixRefused,
            200 * MS,
            101,
            "/var/run/dapr/app.sock",
        ),
        unix(
            KernelEvent::UnixRefused,
            300 * MS,
            101,
            "/tmp/random-1234.sock",
        ),
        unix(KernelEvent::UnixListen, 900 * MS, 102, "/sockets/app.sock"),
    ];
    for ev in &events {
        p.kernel_event(ev);
    }
    let mut m = Metrics::new(false, "0.1.0", "6.18.0-test");
    let step = p.tick(3_000 * MS);
    m.consume(&step, Instant::now());
    // A path on the app's own filesystem is no race: counted, never a series.
    let step = p.tick(200_000 * MS);
    m.consume(&step, Instant::now());
    let om = m.encode();
    assert!(
        om.contains(r#"sidecar_race_refused_connections_total{namespace="shop",workload_kind="Deployment",workload="checkout",container="app",sidecar="istio-proxy",socket="dapr-socket/app.sock",phase="startup",protocol="unix"} 2"#),
        "{om}"
    );
    assert!(!om.contains("unresolved"), "{om}");
    assert!(!om.contains("random-1234"), "{om}");
    assert_eq!(p.counts().refusals_other, 1);
}
