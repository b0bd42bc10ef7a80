//! The exposition from the pipeline's outcomes and the totals read at scrape time.

use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::Duration,
};

use super::*;
use crate::{
    detect::DetectorConfig,
    ingest::events::{KernelEvent, Kind},
    inventory::{Attribution, sources::PodUpdate},
    kernel::counters::SuppressedCounts,
    pipeline::Pipeline,
    pipeline::outcome::Outcome,
    pods::pod_info::{PodInfo, Workload},
    test_facts::{
        CHECKOUT as UID, MS, OTHER_POD as UID2, checkout_pod, container_path, created, pipeline,
        pod_path, socket, temp_dir,
    },
};

/// Two pods race at start; one has metadata (a Deployment), one has none. Returns
/// the pipeline after its first step (3 s): the pod without metadata still waits
/// for names.
fn scenario() -> (Pipeline, Vec<Outcome>) {
    let dir = temp_dir("metrics");
    let mut p = pipeline(&dir, Some(checkout_pod()), DetectorConfig::default());
    let (a, b) = ("a".repeat(64), "b".repeat(64));
    let events = vec![
        created(0, 100, pod_path(UID)),
        created(MS, 101, container_path(UID, &a)),
        created(MS, 102, container_path(UID, &b)),
        created(0, 200, pod_path(UID2)),
        created(MS, 201, container_path(UID2, &"c".repeat(64))),
        created(MS, 202, container_path(UID2, &"d".repeat(64))),
        KernelEvent::Refused(socket(
            100 * MS,
            101,
            "127.0.0.1:40000",
            Some("127.0.0.1:15001"),
        )),
        KernelEvent::Refused(socket(
            200 * MS,
            101,
            "127.0.0.1:40001",
            Some("127.0.0.1:15001"),
        )),
        KernelEvent::Refused(socket(
            300 * MS,
            201,
            "127.0.0.1:40002",
            Some("127.0.0.1:9000"),
        )),
        KernelEvent::Refused(socket(
            310 * MS,
            201,
            "10.0.0.1:40003",
            Some("10.96.0.1:443"),
        )),
        // A container refused on its own port before it listens (its own probe).
        KernelEvent::Refused(socket(
            320 * MS,
            201,
            "127.0.0.1:40004",
            Some("127.0.0.1:9100"),
        )),
        KernelEvent::Listen(socket(1500 * MS, 102, "0.0.0.0:15001", None)),
        KernelEvent::Listen(socket(2000 * MS, 202, "127.0.0.1:9000", None)),
        KernelEvent::Listen(socket(2100 * MS, 201, "127.0.0.1:9100", None)),
    ];
    for ev in &events {
        p.kernel_event(ev);
    }
    let step = p.tick(3000 * MS);
    (p, step)
}

#[test]
fn golden_exposition() {
    let (mut p, step) = scenario();
    let mut m = Metrics::new(false, "0.1.0", "6.18.0-test");
    let now = Instant::now();
    m.consume(&step, now);
    assert!(
        !m.encode().contains(r#"port="9000""#),
        "the race of the pod without names waits for them"
    );
    // The pod without metadata is counted under `unknown` once names had their
    // chance; its refusal to a non-loopback address never became pod-local.
    let step = p.tick(14_000 * MS);
    m.consume(&step, now + Duration::from_secs(11));
    assert_eq!(p.counts().refusals_other, 1);
    let m = m.with_totals(Box::new(Fixed(Totals {
        kernel: Some(KernelTotals {
            seen: vec![(Kind::Refused.name(), 4), (Kind::Listen.name(), 2)],
            lost: 1,
            suppressed: vec![(Kind::Refused.name(), 320), (Kind::Listen.name(), 7)],
            entries_gone: vec![
                ("connecting", 0),
                ("listening", 3),
                ("budget", 0),
                ("control_budget", 0),
                ("local_refusals", 12),
                ("unix_kprobe_calls", 2),
            ],
            budget_conflicts: vec![("refusal", 9), ("control", 0)],
            recursion_misses: Some(vec![
                ("tcp_receive_reset".into(), 1),
                ("inet_sock_set_state_btf".into(), 0),
            ]),
        }),
        refusals_other: p.counts().refusals_other,
        self_refusals: p.counts().self_refusals,
        unattributed: 3,
        pod_source: ("api", 2),
        dropped_in_agent: 5,
        undecodable: 1,
        events_not_posted: None,
        bounds: BoundsTotals::default(),
        auth: Some(vec![
            ("allowed", 7),
            ("allowed_api_unreachable", 1),
            ("unauthenticated", 2),
            ("forbidden", 1),
            ("unavailable", 3),
        ]),
        start: None,
    })));
    let mut m = m;
    let app = Attribution {
        namespace: Some("shop".into()),
        workload: Some(Workload {
            kind: "Deployment".into(),
            name: "checkout".into(),
        }),
        pod: Some("checkout-7d4b9c8f5-x2k8q".into()),
        container: Some("app".into()),
        ..Attribution::default()
    };
    let suppressed = |who: &Attribution, refusals| Outcome::Suppressed {
        who: who.clone(),
        refusals,
    };
    m.consume(
        &[
            suppressed(&app, 300),
            suppressed(&Attribution::default(), 2),
            suppressed(&app, 20),
        ],
        Instant::now(),
    );
    let got = m.encode();
    let golden =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/metrics/golden.openmetrics");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&golden, &got).unwrap();
    }
    assert_eq!(
        normalized(&got),
        normalized(&std::fs::read_to_string(&golden).unwrap()),
        "run with UPDATE_GOLDEN=1 after a deliberate change"
    );
}

/// Refusals the kernel suppressed reach the metrics as outcomes of the pipeline, like
/// every other count: a named container's at once, an unnamed one's once the wait for
/// its name is over (here: the final reading).
#[test]
fn suppressed_refusals_reach_the_metrics_as_outcomes() {
    let (mut p, step) = scenario();
    let mut m = Metrics::new(false, "0.1.0", "k");
    let now = Instant::now();
    m.consume(&step, now);
    let mut counts = SuppressedCounts {
        by_cgroup: vec![(101, 500), (201, 40)],
        unkeyed: 2,
    };
    let reading = p.read_suppressed(&counts, false);
    m.consume(&reading.outcomes, now);
    // The kernel's entries the reading let go are deleted (the test's cgroup tree has
    // no directories: the pipeline's tick took its cgroups for removed).
    counts
        .by_cgroup
        .retain(|(id, _)| !reading.forget.contains(id));
    let app = r#"namespace="shop",workload_kind="Deployment",workload="checkout",container="app""#;
    let unknown =
        r#"namespace="unknown",workload_kind="unknown",workload="unknown",container="unknown""#;
    let count = |om: &str, labels: &str, n: u64| {
        om.contains(&format!(
            "sidecar_race_refusals_suppressed_total{{{labels}}} {n}\n"
        ))
    };
    let om = m.encode();
    assert!(count(&om, app, 500), "{om}");
    assert!(
        count(&om, unknown, 2),
        "the unnamed container's refusals wait for its name: {om}"
    );
    let reading = p.read_suppressed(&counts, true);
    m.consume(&reading.outcomes, now);
    let om = m.encode();
    assert!(count(&om, unknown, 42), "{om}");
    assert!(count(&om, app, 500), "counted once: {om}");
}

/// Totals that never change.
#[derive(Debug)]
struct Fixed(Totals);

impl TotalsSource for Fixed {
    fn totals(&self) -> Totals {
        self.0.clone()
    }
}

/// Events not posted, as the publisher counts them, read anew at each scrape.
#[derive(Debug, Default)]
struct Publisher {
    dropped: AtomicU64,
    failed: AtomicU64,
}

impl TotalsSource for Arc<Publisher> {
    fn totals(&self) -> Totals {
        Totals {
            events_not_posted: Some((self.dropped.load(Relaxed), self.failed.load(Relaxed))),
            ..Totals::default()
        }
    }
}

#[test]
fn events_not_posted_are_read_at_scrape_time_by_reason() {
    let m = Metrics::new(false, "0.1.0", "6.18.0-test");
    assert!(!m.encode().contains("k8s_events_not_posted_total{"));
    let publisher = Arc::new(Publisher::default());
    let m = m.with_totals(Box::new(publisher.clone()));
    let classic = m.encode_classic();
    assert!(
        classic.contains(r#"sidecar_race_k8s_events_not_posted_total{reason="dropped"} 0"#),
        "both series exist from the start, so an alert can rate() them: {classic}"
    );
    assert!(
        classic.contains(r#"sidecar_race_k8s_events_not_posted_total{reason="failed"} 0"#),
        "{classic}"
    );
    publisher.dropped.store(7, Relaxed);
    publisher.failed.store(2, Relaxed);
    let classic = m.encode_classic();
    assert!(
        classic.contains(r#"sidecar_race_k8s_events_not_posted_total{reason="dropped"} 7"#),
        "{classic}"
    );
    assert!(
        classic.contains(r#"sidecar_race_k8s_events_not_posted_total{reason="failed"} 2"#),
        "{classic}"
    );
    assert!(
        classic.contains("# TYPE sidecar_race_k8s_events_not_posted_total counter\n"),
        "{classic}"
    );
}

/// Series of a family come out in hash order, and the collector's families after the
/// registered ones: compare each family's lines sorted, and the families sorted.
fn normalized(exposition: &str) -> Vec<Vec<String>> {
    let mut families: Vec<Vec<String>> = Vec::new();
    for line in exposition.lines() {
        if line.starts_with("# HELP ") || line == "# EOF" || families.is_empty() {
            families.push(Vec::new());
        }
        families.last_mut().unwrap().push(line.to_string());
    }
    for f in &mut families {
        f.sort();
    }
    families.sort();
    families
}

/// The second pod's metadata as the pod source reports it late: its containers
/// `c…` (the client) and `d…` (serving 9000, a declared port of `log-proxy`).
fn late_pod() -> PodInfo {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pods/classic-deployment.json");
    let text = std::fs::read_to_string(fixture)
        .unwrap()
        .replace("6f2c1a6e-8b0f-4d8e-9a53-3c1d2e4f5a6b", UID2)
        .replace(&"a".repeat(64), &"c".repeat(64))
        .replace(&"b".repeat(64), &"d".repeat(64))
        .replace("checkout", "billing");
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["spec"]["containers"][1]["name"] = "log-proxy".into();
    v["spec"]["containers"][1]["ports"] = serde_json::json!([{"containerPort": 9000}]);
    v["status"]["containerStatuses"][1]["name"] = "log-proxy".into();
    PodInfo::from_json(v).unwrap()
}

#[test]
fn metadata_that_arrives_after_the_race_labels_its_series() {
    let (mut p, step) = scenario();
    let mut m = Metrics::new(false, "0.1.0", "k");
    let now = Instant::now();
    m.consume(&step, now);
    // The pod source names the pod 5 s later, within the wait.
    p.pod_update(PodUpdate::Apply(Box::new(late_pod())));
    let step = p.tick(8_000 * MS);
    m.consume(&step, now + Duration::from_secs(5));
    let om = m.encode();
    assert!(
        om.contains(r#"sidecar_race_incidents_total{namespace="shop",workload_kind="Deployment",workload="billing",sidecar="log-proxy",phase="startup",pattern="classic",kind="sidecar_race",protocol="tcp"} 1"#),
        "{om}"
    );
    assert!(
        om.contains(r#"sidecar_race_refused_connections_total{namespace="shop",workload_kind="Deployment",workload="billing",container="app",sidecar="log-proxy",port="9000",phase="startup",protocol="tcp"} 1"#),
        "{om}"
    );
    assert!(
        !om.contains(r#""unknown""#) && !om.contains(r#"="""#),
        "{om}"
    );
}

#[test]
fn pod_label_and_classic_format() {
    let (_p, step) = scenario();
    let mut m = Metrics::new(true, "0.1.0", "k");
    m.consume(&step, Instant::now());
    let om = m.encode();
    assert!(om.contains(r#"sidecar_race_affected_pod_starts_total{namespace="shop",workload_kind="Deployment",workload="checkout",pod="checkout-7d4b9c8f5-x2k8q"} 1"#), "{om}");
    let classic = m.encode_classic();
    assert!(classic.contains("# TYPE sidecar_race_incidents_total counter\n"));
    assert!(classic.contains("# HELP sidecar_race_refused_connections_total "));
    assert!(!classic.contains("# EOF"));
    assert!(classic.contains("# TYPE sidecar_race_window_seconds histogram\n"));
}

/// A Job run every 90 s for a month: each run is a new workload name. Series of runs
/// not seen for the TTL (1 h) are dropped and free their slots, so the 30,000th run
/// is still labelled with its own name, not folded into `overflow`.
#[test]
fn thirty_thousand_job_runs_keep_new_workloads_labelled() {
    let mut m = Metrics::new(false, "0.1.0", "k");
    let t0 = Instant::now();
    let runs = 30_000u64;
    for run in 0..runs {
        let now = t0 + Duration::from_secs(run * 90);
        let who = Attribution {
            namespace: Some("batch".into()),
            workload: Some(Workload {
                kind: "Job".into(),
                name: format!("report-{run}"),
            }),
            pod: Some(format!("report-{run}-x7k2p")),
            ..Attribution::default()
        };
        let app = Attribution {
            container: Some("app".into()),
            ..who.clone()
        };
        m.consume(
            &[
                Outcome::PodStarted {
                    pod_uid: format!("uid-{run}"),
                    start: 0,
                    who,
                    template: None,
                },
                Outcome::Suppressed {
                    who: app,
                    refusals: 1,
                },
            ],
            now,
        );
    }
    let om = m.encode();
    let last = runs - 1;
    assert!(
        om.contains(&format!(
            r#"sidecar_race_pod_starts_total{{namespace="batch",workload_kind="Job",workload="report-{last}"}} 1"#
        )),
        "{om}"
    );
    assert!(
        om.contains(&format!(
            r#"sidecar_race_refusals_suppressed_total{{namespace="batch",workload_kind="Job",workload="report-{last}",container="app"}} 1"#
        )),
        "{om}"
    );
    assert!(!om.contains(r#""overflow""#), "nothing folded");
    let live = om
        .lines()
        .filter(|l| l.starts_with("sidecar_race_pod_starts_total{"))
        .count();
    // An hour of runs, plus the sweep's granularity.
    assert!((40..=42).contains(&live), "{live} series of pod starts");
}

#[derive(Debug)]
struct Started(StartTotals);

impl TotalsSource for Started {
    fn totals(&self) -> Totals {
        Totals {
            start: Some(self.0.clone()),
            ..Totals::default()
        }
    }
}

#[test]
fn how_the_agent_started_is_exported_with_the_records_from_before_its_start() {
    let m = Metrics::new(false, "0.1.0", "6.18.0-test");
    assert!(!m.encode().contains("agent_start_info"), "only `run` says");
    let m = m.with_totals(Box::new(Started(StartTotals {
        kernel_state: "adopted",
        checkpoint: "restored",
        records_before_start: 23,
    })));
    let classic = m.encode_classic();
    assert!(
        classic.contains(
            r#"sidecar_race_agent_start_info{kernel_state="adopted",checkpoint="restored"} 1"#
        ),
        "{classic}"
    );
    assert!(
        classic.contains("sidecar_race_records_before_start_total 23"),
        "{classic}"
    );
}

/// checkout as the pod source shows it after Kubernetes restarted all of its
/// containers in place (KEP-5532): the same pod, new container ids, each instance
/// before ended `RestartingAllContainers`.
fn restarted_in_place(app: &str, proxy: &str) -> PodInfo {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pods/classic-deployment.json");
    let text = std::fs::read_to_string(fixture)
        .unwrap()
        .replace(&"a".repeat(64), app)
        .replace(&"b".repeat(64), proxy);
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    for s in v["status"]["containerStatuses"].as_array_mut().unwrap() {
        s["restartCount"] = 1.into();
        s["lastState"] = serde_json::json!({"terminated": {
            "exitCode": 137, "reason": "RestartingAllContainers"}});
    }
    PodInfo::from_json(v).unwrap()
}

fn removed(ts: u64, id: u64, path: String) -> KernelEvent {
    let KernelEvent::CgroupCreated(fact) = created(ts, id, path) else {
        unreachable!()
    };
    KernelEvent::CgroupRemoved(fact)
}

#[test]
fn an_in_place_restart_of_all_containers_is_a_second_pod_start() {
    let dir = temp_dir("metrics-in-place");
    let mut p = pipeline(&dir, Some(checkout_pod()), DetectorConfig::default());
    let mut m = Metrics::new(false, "0.1.0", "k");
    let now = Instant::now();
    let (a, b) = ("a".repeat(64), "b".repeat(64));
    let (a2, b2) = ("e".repeat(64), "f".repeat(64));
    let refused = |ts, cgroup| {
        KernelEvent::Refused(socket(
            ts,
            cgroup,
            "127.0.0.1:40000",
            Some("127.0.0.1:15001"),
        ))
    };
    let first = [
        created(0, 100, pod_path(UID)),
        created(MS, 101, container_path(UID, &a)),
        created(MS, 102, container_path(UID, &b)),
        refused(100 * MS, 101),
        KernelEvent::Listen(socket(500 * MS, 102, "0.0.0.0:15001", None)),
    ];
    for ev in &first {
        p.kernel_event(ev);
    }
    m.consume(&p.tick(2_000 * MS), now);
    // 20 s later every container is killed and started again in the same pod cgroup.
    let again = [
        KernelEvent::ListenClosed(socket(20_000 * MS, 102, "0.0.0.0:15001", None)),
        removed(20_001 * MS, 101, container_path(UID, &a)),
        removed(20_002 * MS, 102, container_path(UID, &b)),
        created(20_500 * MS, 103, container_path(UID, &b2)),
        created(20_510 * MS, 104, container_path(UID, &a2)),
        refused(20_600 * MS, 104),
        refused(20_700 * MS, 104),
        KernelEvent::Listen(socket(21_000 * MS, 103, "0.0.0.0:15001", None)),
    ];
    for ev in &again {
        p.kernel_event(ev);
    }
    p.pod_update(PodUpdate::Apply(Box::new(restarted_in_place(&a2, &b2))));
    m.consume(&p.tick(23_000 * MS), now);
    m.consume(&p.tick(24_000 * MS), now);
    let om = m.encode();
    let owner = r#"namespace="shop",workload_kind="Deployment",workload="checkout""#;
    for line in [
        format!("sidecar_race_pod_starts_total{{{owner}}} 2"),
        format!("sidecar_race_affected_pod_starts_total{{{owner}}} 2"),
        format!(
            r#"sidecar_race_incidents_total{{{owner},sidecar="istio-proxy",phase="startup",pattern="classic",kind="sidecar_race",protocol="tcp"}} 2"#
        ),
        format!(
            r#"sidecar_race_refused_connections_total{{{owner},container="app",sidecar="istio-proxy",port="15001",phase="startup",protocol="tcp"}} 3"#
        ),
    ] {
        assert!(om.contains(&line), "{line} not in\n{om}");
    }
}

/// `report` dates a workload's template change from the earliest pod of its newest
/// template: one series per workload and template (never per pod), holding the least
/// creation time seen, whatever order the starts come in.
#[test]
fn each_template_is_dated_by_its_earliest_pod() {
    let mut m = Metrics::new(true, "0.1.0", "k");
    let who = |pod: &str| Attribution {
        namespace: Some("shop".into()),
        workload: Some(Workload {
            kind: "Deployment".into(),
            name: "checkout".into(),
        }),
        pod: Some(pod.into()),
        ..Attribution::default()
    };
    let start = |uid: &str, hash: &str, created: &str| Outcome::PodStarted {
        pod_uid: uid.into(),
        start: 0,
        who: who(&format!("checkout-{hash}-{uid}")),
        template: Some(crate::pods::pod_info::PodTemplate {
            hash: hash.into(),
            created: Some(created.parse().unwrap()),
        }),
    };
    m.consume(
        &[
            start("a2", "5f7b8c9d6", "2026-12-01T10:00:05Z"),
            start("a1", "5f7b8c9d6", "2026-12-01T10:00:00Z"),
            start("b1", "6c4d9f8b7", "2026-12-02T09:30:00.250Z"),
            start("b2", "6c4d9f8b7", "2026-12-02T09:31:00Z"),
        ],
        Instant::now(),
    );
    let om = m.encode();
    let series: Vec<&str> = om
        .lines()
        .filter(|l| l.starts_with("sidecar_race_pod_template_created_timestamp_seconds{"))
        .collect();
    let mut series = series;
    series.sort();
    assert_eq!(
        series,
        [
            r#"sidecar_race_pod_template_created_timestamp_seconds{namespace="shop",workload_kind="Deployment",workload="checkout",template="5f7b8c9d6"} 1796119200.0"#,
            r#"sidecar_race_pod_template_created_timestamp_seconds{namespace="shop",workload_kind="Deployment",workload="checkout",template="6c4d9f8b7"} 1796203800.25"#,
        ],
        "{om}"
    );
    // Pods without a template (Jobs, bare pods) add no series.
    let mut bare = Metrics::new(false, "0.1.0", "k");
    bare.consume(
        &[Outcome::PodStarted {
            pod_uid: "j".into(),
            start: 0,
            who: who("report-1-x"),
            template: None,
        }],
        Instant::now(),
    );
    assert!(
        !bare
            .encode()
            .contains("sidecar_race_pod_template_created_timestamp_seconds{")
    );
}
