//! The agent's bounds end to end through the pipeline, metrics and the API view: what
//! a user sees when one pod floods, a pod's removal is lost, or the pod source lists
//! a pod it cannot read.

use std::time::Instant;

use crate::{
    detect::{DetectorConfig, Phase, State, render::Filter},
    ingest::events::KernelEvent,
    inventory::cgroups::id_of,
    inventory::sources::PodUpdate,
    pipeline::Pipeline,
    sinks::metrics::Metrics,
    test_facts::*,
};

const FLOODER: &str = OTHER_POD;

fn refused(ts: u64, cgroup: u64, dst: &str) -> KernelEvent {
    KernelEvent::Refused(socket(ts, cgroup, "127.0.0.1:40000", Some(dst)))
}

#[test]
fn a_flooding_neighbour_does_not_split_or_evict_a_race_in_metrics_and_api() {
    let dir = temp_dir("flood");
    let cfg = DetectorConfig {
        history: 100,
        history_per_pod: 60,
        ..DetectorConfig::default()
    };
    let mut p = pipeline(&dir, Some(checkout_pod()), cfg);
    let (app, proxy) = ("a".repeat(64), "b".repeat(64));
    for ev in [
        created(0, 100, pod_path(CHECKOUT)),
        created(MS, 101, container_path(CHECKOUT, &app)),
        created(MS, 102, container_path(CHECKOUT, &proxy)),
        created(0, 200, pod_path(FLOODER)),
        created(MS, 201, container_path(FLOODER, &"c".repeat(64))),
    ] {
        p.kernel_event(&ev);
    }
    let mut m = Metrics::new(false, "0.1.0", "k");
    let now = Instant::now();
    // 30 refusals of checkout's app to its proxy, while the neighbour dials 3,000
    // closed local ports; ticks in between, as the agent runs.
    let mut t = 10 * MS;
    for n in 0..3_000u32 {
        if n % 100 == 0 {
            p.kernel_event(&refused(t, 101, "127.0.0.1:15001"));
            m.consume(&p.tick(t), now);
        }
        let dst = format!("127.0.0.1:{}", 20_000 + n);
        p.kernel_event(&refused(t, 201, &dst));
        t += MS;
    }
    p.kernel_event(&KernelEvent::Listen(socket(t, 102, "0.0.0.0:15001", None)));
    m.consume(&p.tick(t + MS), now);
    let mine: Vec<_> = p
        .incidents(&Filter::default(), usize::MAX)
        .0
        .into_iter()
        .filter(|v| v.pod_uid == CHECKOUT)
        .collect();
    assert_eq!(mine.len(), 1, "one race, not split by evictions: {mine:#?}");
    assert_eq!(
        (mine[0].phase, mine[0].state, mine[0].refused_count),
        (Phase::Startup, State::Resolved, 30)
    );
    let om = m.encode();
    assert!(
        om.contains(r#"sidecar_race_refused_connections_total{namespace="shop",workload_kind="Deployment",workload="checkout",container="app",sidecar="istio-proxy",port="15001",phase="startup",protocol="tcp"} 30"#),
        "{om}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn detector_state_of_a_pod_whose_removal_was_lost_is_pruned() {
    let root = temp_dir("lostrm");
    let pod_dir = root.join(pod_path(FLOODER).trim_start_matches('/'));
    let container = "d".repeat(64);
    let container_dir = root.join(container_path(FLOODER, &container).trim_start_matches('/'));
    std::fs::create_dir_all(&container_dir).unwrap();
    let mut p = pipeline(&root, None, DetectorConfig::default());
    let cg = id_of(&container_dir).unwrap();
    p.kernel_event(&created(0, id_of(&pod_dir).unwrap(), pod_path(FLOODER)));
    p.kernel_event(&created(MS, cg, container_path(FLOODER, &container)));
    p.kernel_event(&refused(2 * MS, cg, "127.0.0.1:15001"));
    p.tick(3 * MS);
    assert_eq!(p.detector().tracked_pods(), 1);
    // Still on the node: a rescan keeps it.
    p.inventory_mut().cgroups.scan_at(4 * MS).unwrap();
    assert!(p.forget_gone_pods(4 * MS).is_empty());
    assert_eq!(p.detector().tracked_pods(), 1);
    // The pod's cgroups go away and the rmdir events are lost.
    std::fs::remove_dir(&container_dir).unwrap();
    std::fs::remove_dir(&pod_dir).unwrap();
    p.inventory_mut().cgroups.scan_at(5 * MS).unwrap();
    p.forget_gone_pods(5 * MS);
    assert_eq!(p.detector().tracked_pods(), 0);
    // Cut short before any listener: the startup race it was, ended.
    let v = &p.incidents(&Filter::default(), usize::MAX).0[0];
    assert_eq!((v.state, v.phase), (State::Resolved, Phase::Startup));
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn a_pod_the_source_cannot_read_in_a_relist_keeps_its_open_race() {
    let dir = temp_dir("unparsable");
    let mut p = pipeline(&dir, Some(checkout_pod()), DetectorConfig::default());
    let app = "a".repeat(64);
    p.kernel_event(&created(0, 100, pod_path(CHECKOUT)));
    p.kernel_event(&created(MS, 101, container_path(CHECKOUT, &app)));
    p.kernel_event(&refused(2 * MS, 101, "127.0.0.1:15001"));
    p.tick(3 * MS);
    let open = |p: &Pipeline| {
        p.incidents(&Filter::default(), usize::MAX)
            .0
            .iter()
            .filter(|v| v.state == State::Open)
            .count()
    };
    assert_eq!(open(&p), 1);
    // The next relist has the pod, but in a shape the agent cannot read.
    p.pod_update(PodUpdate::Replace {
        pods: vec![],
        unparsable: vec![CHECKOUT.into()],
    });
    p.tick(4 * MS);
    assert_eq!(open(&p), 1, "not taken as deleted");
    // A relist without it: gone from the source, not from the node (its cgroups
    // live): the race stays open for what the pod still does.
    p.pod_update(PodUpdate::Replace {
        pods: vec![],
        unparsable: vec![],
    });
    p.tick(5 * MS);
    assert_eq!(open(&p), 1);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Checkout's app refuses on `ports` and a listener comes on each of `served` (its
/// proxy): the metrics after everything settled (unresolved ones after 2 minutes).
fn refusals_on_ports(ports: &[u16], served: &[u16], m: Metrics) -> (Metrics, String) {
    let dir = temp_dir("ports");
    let mut p = pipeline(&dir, Some(checkout_pod()), DetectorConfig::default());
    let (app, proxy) = ("a".repeat(64), "b".repeat(64));
    p.kernel_event(&created(0, 100, pod_path(CHECKOUT)));
    p.kernel_event(&created(MS, 101, container_path(CHECKOUT, &app)));
    p.kernel_event(&created(MS, 102, container_path(CHECKOUT, &proxy)));
    let mut t = 10 * MS;
    for port in ports {
        p.kernel_event(&refused(t, 101, &format!("127.0.0.1:{port}")));
        t += MS;
    }
    for port in served {
        let addr = format!("0.0.0.0:{port}");
        p.kernel_event(&KernelEvent::Listen(socket(t, 102, &addr, None)));
        t += MS;
    }
    let mut m = m;
    let now = Instant::now();
    m.consume(&p.tick(t), now);
    m.consume(&p.tick(t + 200 * 1_000 * MS), now);
    let om = m.encode();
    std::fs::remove_dir_all(dir).unwrap();
    (m, om)
}

#[test]
fn the_port_label_is_other_unless_declared_or_seen_listening() {
    // 15001 is declared by istio-proxy; 7070 is not declared but gets a listener;
    // 31337 is neither (a client dialing a closed port).
    let (_, om) = refusals_on_ports(
        &[15001, 7070, 31337],
        &[15001, 7070],
        Metrics::new(false, "0", "k"),
    );
    let series = |port: &str| {
        om.lines()
            .filter(|l| l.starts_with("sidecar_race_refused_connections_total{"))
            .filter(|l| l.contains(&format!(r#"port="{port}""#)))
            .count()
    };
    assert_eq!((series("15001"), series("7070")), (1, 1), "{om}");
    assert_eq!(series("31337"), 0, "{om}");
    assert_eq!(series("other"), 1, "{om}");
}

#[test]
fn series_beyond_the_cap_fold_into_overflow_and_are_counted() {
    let m = Metrics::new(false, "0", "k").with_max_series(2);
    let (_, om) = refusals_on_ports(&[7001, 7002, 7003], &[7001, 7002, 7003], m);
    let refused: Vec<&str> = om
        .lines()
        .filter(|l| l.starts_with("sidecar_race_refused_connections_total{"))
        .collect();
    assert_eq!(refused.len(), 3, "two series and the overflow one: {om}");
    assert!(
        om.contains(r#"sidecar_race_refused_connections_total{namespace="overflow",workload_kind="overflow",workload="overflow",container="overflow",sidecar="overflow",port="overflow",phase="overflow",protocol="overflow"} 1"#),
        "{om}"
    );
    assert!(
        om.contains(
            r#"sidecar_race_series_overflow_total{metric="sidecar_race_refused_connections"} 1"#
        ),
        "{om}"
    );
}

/// The bounds' totals where they live: the log budget's count is read at scrape time.
#[derive(Debug)]
struct Bounds(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl crate::sinks::metrics::TotalsSource for Bounds {
    fn totals(&self) -> crate::sinks::metrics::Totals {
        crate::sinks::metrics::Totals {
            bounds: crate::sinks::metrics::BoundsTotals {
                incidents_evicted: 3,
                facts_out_of_order: 2,
                listeners_dropped: 1,
                unix_facts_dropped: 4,
                log_lines_suppressed: self.0.load(std::sync::atomic::Ordering::Relaxed),
            },
            ..Default::default()
        }
    }
}

#[test]
fn what_the_bounds_dropped_is_exported() {
    use crate::sinks::log_budget::LogBudget;
    let t0 = Instant::now();
    let mut budget = LogBudget::new(t0);
    let m =
        Metrics::new(false, "0", "k").with_totals(Box::new(Bounds(budget.suppressed_counter())));
    let logged = (0..100).filter(|_| budget.allow(FLOODER, t0)).count() as u64;
    let om = m.encode();
    for line in [
        "sidecar_race_incidents_evicted_total 3".to_string(),
        "sidecar_race_facts_out_of_order_total 2".to_string(),
        "sidecar_race_listeners_dropped_total 1".to_string(),
        "sidecar_race_unix_facts_dropped_total 4".to_string(),
        format!("sidecar_race_log_lines_suppressed_total {}", 100 - logged),
    ] {
        assert!(om.lines().any(|l| l == line), "{line} in {om}");
    }
    assert!(logged < 100);
}

/// The incident API filters before it renders: `?kind=stuck_job&limit=1` over a large
/// history without stuck Jobs renders none of it (before, every incident was rendered
/// to learn its kind, under the pipeline lock). Counted, not timed.
#[test]
fn a_kind_filter_that_matches_nothing_does_not_render_the_history() {
    let dir = temp_dir("filterfirst");
    let cfg = DetectorConfig {
        history: 10_000,
        history_per_pod: 10_000,
        ..DetectorConfig::default()
    };
    let mut p = pipeline(&dir, Some(checkout_pod()), cfg);
    let app = "a".repeat(64);
    p.kernel_event(&created(0, 100, pod_path(CHECKOUT)));
    p.kernel_event(&created(MS, 101, container_path(CHECKOUT, &app)));
    let mut t = 10 * MS;
    for port in 0..2_000u32 {
        let dst = format!("127.0.0.1:{}", 20_000 + port);
        p.kernel_event(&refused(t, 101, &dst));
        t += MS;
    }
    p.tick(t + 300 * 1_000 * MS);
    let all = Filter::default();
    let (views, _) = p.incidents(&all, usize::MAX);
    assert_eq!(views.len(), 2_000);
    let stuck = Filter {
        kind: Some(crate::detect::Kind::StuckJob),
        ..Filter::default()
    };
    let rendered = |f: &Filter, limit: usize| {
        let before = crate::pipeline::views_rendered();
        let (list, _) = p.incidents(f, limit);
        (crate::pipeline::views_rendered() - before, list.len())
    };
    assert_eq!(rendered(&all, usize::MAX), (2_000, 2_000));
    assert_eq!(
        rendered(&stuck, 1),
        (0, 0),
        "no stuck Job here, none rendered"
    );
    let first = Filter {
        kind: Some(crate::detect::Kind::SidecarRace),
        ..Filter::default()
    };
    assert_eq!(rendered(&first, 1), (1, 1), "only the answer is rendered");
    std::fs::remove_dir_all(dir).unwrap();
}
