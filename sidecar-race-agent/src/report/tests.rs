//! The report's ranking and fixes, from evidence to report lines.

use std::collections::BTreeMap;

use super::{
    fixes::fix,
    fleet::{Clusters, Evidence, Fleet, IncidentCount, RefusalCount, Source, WorkloadKey},
    rank::{build, workload},
};
use crate::{
    detect::{Kind, Phase, processes::ProcessCount},
    pods::pod_info::Pattern,
};

/// A source answering absurd counts (a broken exporter, a hostile endpoint) gets a
/// report with saturated numbers, not a panic.
#[test]
fn huge_counts_saturate_instead_of_overflowing() {
    let ev = Evidence {
        incidents: vec![inc("istio-proxy", Phase::Startup, Pattern::Classic, 1e300)],
        refusals: vec![
            refused("istio-proxy", Phase::Startup, 15001, 1e300),
            refused("istio-proxy", Phase::Startup, 15001, f64::INFINITY),
        ],
        stuck_job_pods: [("a".to_string(), 1e300), ("b".to_string(), 1e300)].into(),
        ..Evidence::default()
    };
    let fleet = Fleet {
        source: Source::Agents { urls: vec![] },
        workloads: [(key("checkout"), ev)].into(),
        clusters: None,
    };
    let r = build(fleet, None);
    let w = &r.workloads[0];
    assert_eq!(w.stuck_job_pods, u64::MAX);
    assert_eq!(w.fixes[0].refusals, u64::MAX);
    assert_eq!(w.incidents, u64::MAX);
}

fn key(name: &str) -> WorkloadKey {
    WorkloadKey {
        cluster: String::new(),
        namespace: "shop".into(),
        kind: "Deployment".into(),
        name: name.into(),
    }
}

fn inc(sidecar: &str, phase: Phase, pattern: Pattern, count: f64) -> IncidentCount {
    IncidentCount {
        kind: Kind::SidecarRace,
        sidecar: sidecar.into(),
        phase,
        pattern,
        count,
    }
}

fn refused(sidecar: &str, phase: Phase, port: u16, count: f64) -> RefusalCount {
    RefusalCount {
        container: "app".into(),
        sidecar: sidecar.into(),
        port,
        phase,
        count,
        processes: Vec::new(),
        guarded: false,
    }
}

fn fleet(workloads: Vec<(WorkloadKey, Evidence)>) -> Fleet {
    Fleet {
        source: Source::Prometheus {
            url: "http://p".into(),
            range: "7d".into(),
        },
        workloads: workloads.into_iter().collect(),
        clusters: None,
    }
}

#[test]
fn stuck_jobs_and_init_deadlocks_rank_as_evidence_not_misconfiguration() {
    let deadlock = Evidence {
        affected_pod_starts: 2.0,
        incidents: vec![IncidentCount {
            kind: Kind::InitDeadlock,
            ..inc("cloud-sql-proxy", Phase::Unresolved, Pattern::Classic, 2.0)
        }],
        refusals: vec![refused("cloud-sql-proxy", Phase::Unresolved, 5432, 40.0)],
        ..Evidence::default()
    };
    let stuck = Evidence {
        stuck_job_pods: [("cloud-sql-proxy".to_string(), 3.0)].into(),
        ..Evidence::default()
    };
    let unresolved = Evidence {
        incidents: vec![inc("proxy", Phase::Unresolved, Pattern::Classic, 9.0)],
        refusals: vec![refused("proxy", Phase::Unresolved, 9, 90.0)],
        ..Evidence::default()
    };
    let r = build(
        fleet(vec![
            (key("typo"), unresolved),
            (key("nightly"), stuck),
            (key("migrate"), deadlock),
        ]),
        None,
    );
    let names: Vec<&str> = r
        .workloads
        .iter()
        .map(|w| w.workload.as_deref().unwrap())
        .collect();
    assert_eq!(names, ["migrate", "nightly", "typo"]);
    let (migrate, nightly) = (&r.workloads[0], &r.workloads[1]);
    assert!(!migrate.misconfiguration && !nightly.misconfiguration);
    assert!(r.workloads[2].misconfiguration);
    assert_eq!(migrate.fixes[0].kind, Kind::InitDeadlock);
    assert_eq!(
        migrate.fixes[0].move_to_init_containers.as_deref(),
        Some("cloud-sql-proxy")
    );
    assert!(
        migrate.fixes[0].advice.contains("a deadlock"),
        "{}",
        migrate.fixes[0].advice
    );
    assert_eq!(nightly.stuck_job_pods, 3);
    assert_eq!(nightly.fixes[0].kind, Kind::StuckJob);
    assert_eq!(nightly.fixes[0].port, None);
    assert!(nightly.fixes[0].advice.contains("never completes"));
}

#[test]
fn ranks_by_affected_then_startup_then_refusals_then_p95_unresolved_last() {
    let ev = |affected: f64, startup: f64, refusals: f64, p95: f64| Evidence {
        pod_starts: Some(100.0),
        affected_pod_starts: affected,
        incidents: vec![inc("proxy", Phase::Startup, Pattern::Classic, startup)],
        refusals: vec![refused("proxy", Phase::Startup, 15001, refusals)],
        window_p50: None,
        window_p95: Some(p95),
        stuck_job_pods: BTreeMap::new(),
        template_change: None,
    };
    let unresolved = Evidence {
        affected_pod_starts: 0.0,
        incidents: vec![inc("proxy", Phase::Unresolved, Pattern::Classic, 50.0)],
        refusals: vec![refused("proxy", Phase::Unresolved, 9, 500.0)],
        ..Evidence::default()
    };
    let quiet = Evidence {
        pod_starts: Some(10.0),
        ..Evidence::default()
    };
    let r = build(
        fleet(vec![
            (key("a"), ev(1.0, 9.0, 9.0, 9.0)),
            (key("b"), ev(2.0, 1.0, 1.0, 1.0)),
            (key("c"), ev(1.0, 9.0, 10.0, 1.0)),
            (key("d"), ev(1.0, 9.0, 10.0, 2.0)),
            (key("e"), unresolved),
            (key("f"), quiet),
        ]),
        None,
    );
    let names: Vec<&str> = r
        .workloads
        .iter()
        .map(|w| w.workload.as_deref().unwrap())
        .collect();
    assert_eq!(names, ["b", "d", "c", "a", "e"]);
    assert_eq!(r.workloads_total, 5);
    assert_eq!(r.workloads_without_incidents, Some(1));
    assert!(r.workloads[4].misconfiguration);
    assert_eq!(r.workloads[0].rank, 1);
    assert_eq!(r.workloads[0].affected_share, Some(0.02));
    let top = build(fleet(vec![(key("a"), ev(1.0, 1.0, 1.0, 1.0))]), Some(0));
    assert_eq!((top.workloads.len(), top.workloads_total), (0, 1));
}

#[test]
fn fixes_join_incidents_with_refusals_and_follow_the_advice() {
    let ev = Evidence {
        incidents: vec![
            inc("istio-proxy", Phase::Startup, Pattern::Classic, 3.0),
            inc("istio-proxy", Phase::Drain, Pattern::Classic, 1.0),
        ],
        refusals: vec![
            refused("istio-proxy", Phase::Startup, 15001, 12.0),
            refused("istio-proxy", Phase::Drain, 15001, 2.0),
        ],
        ..Evidence::default()
    };
    let w = workload(&key("checkout"), &ev, 30).unwrap();
    assert_eq!(w.fixes.len(), 2);
    let startup = &w.fixes[0];
    assert_eq!(startup.phase, Phase::Startup);
    assert_eq!(startup.refusals, 12);
    assert_eq!(
        startup.move_to_init_containers.as_deref(),
        Some("istio-proxy")
    );
    assert_eq!(startup.startup_probe_port, Some(15001));
    assert!(
        startup
            .advice
            .starts_with("Move istio-proxy from containers")
    );
    assert_eq!(w.sidecars.len(), 1);
    assert_eq!(w.sidecars[0].phases, [Phase::Startup, Phase::Drain]);
    assert_eq!(w.phases, [Phase::Startup, Phase::Drain]);
}

/// The structured fields say what the sentence says, for every phase and pattern.
#[test]
fn structured_fix_agrees_with_the_sentence() {
    let phases = [
        Phase::Startup,
        Phase::Drain,
        Phase::Steady,
        Phase::Unresolved,
    ];
    let patterns = [
        Pattern::Classic,
        Pattern::Native,
        Pattern::NativeProbed,
        Pattern::Unknown,
    ];
    for phase in phases {
        for pattern in patterns {
            let f = fix(
                &inc("proxy", phase, pattern, 1.0),
                &refused("proxy", phase, 15001, 1.0),
            );
            let says_move = f.advice.contains("initContainers");
            assert_eq!(
                f.move_to_init_containers.is_some(),
                says_move,
                "{phase:?} {pattern:?}: {}",
                f.advice
            );
            if f.startup_probe_port.is_some() {
                assert!(f.advice.contains("port 15001"), "{}", f.advice);
                assert!(f.advice.contains("startupProbe"), "{}", f.advice);
            }
        }
    }
}

#[test]
fn guarded_workloads_rank_below_unguarded_ones_and_guarded_fixes_come_last() {
    let guarded = |container: &str, phase: Phase, n: f64| RefusalCount {
        container: container.into(),
        processes: vec![ProcessCount {
            name: "nc".into(),
            count: n as u64,
        }],
        guarded: true,
        ..refused("proxy", phase, 15001, n)
    };
    // Most affected starts, but every refusal was a wait tool's.
    let waits = Evidence {
        affected_pod_starts: 5.0,
        incidents: vec![inc("proxy", Phase::Startup, Pattern::Classic, 5.0)],
        refusals: vec![guarded("wait", Phase::Startup, 40.0)],
        ..Evidence::default()
    };
    let plain = Evidence {
        affected_pod_starts: 1.0,
        incidents: vec![inc("proxy", Phase::Startup, Pattern::Classic, 1.0)],
        refusals: vec![refused("proxy", Phase::Startup, 15001, 3.0)],
        ..Evidence::default()
    };
    // A guarded startup and an unguarded drain: unguarded evidence, fixes reordered.
    let mixed = Evidence {
        affected_pod_starts: 2.0,
        incidents: vec![
            inc("proxy", Phase::Startup, Pattern::Classic, 2.0),
            inc("proxy", Phase::Drain, Pattern::Classic, 1.0),
        ],
        refusals: vec![
            guarded("wait", Phase::Startup, 9.0),
            refused("proxy", Phase::Drain, 15001, 1.0),
        ],
        ..Evidence::default()
    };
    let r = build(
        fleet(vec![
            (key("waits"), waits),
            (key("plain"), plain),
            (key("mixed"), mixed),
        ]),
        None,
    );
    let order: Vec<(&str, bool)> = r
        .workloads
        .iter()
        .map(|w| (w.workload.as_deref().unwrap(), w.guarded))
        .collect();
    assert_eq!(order, [("mixed", false), ("plain", false), ("waits", true)]);
    let mixed = &r.workloads[0];
    let phases: Vec<(Phase, bool)> = mixed.fixes.iter().map(|f| (f.phase, f.guarded)).collect();
    assert_eq!(phases, [(Phase::Drain, false), (Phase::Startup, true)]);
    let startup = &mixed.fixes[1];
    assert_eq!(startup.processes[0].name, "nc");
    assert!(
        startup
            .advice
            .contains("The pod works around the start order: nc waits until port 15001"),
        "{}",
        startup.advice
    );
    assert!(!mixed.fixes[0].advice.contains("works around"));
}

#[test]
fn zero_counts_are_no_evidence() {
    let ev = Evidence {
        pod_starts: Some(5.0),
        incidents: vec![inc("proxy", Phase::Startup, Pattern::Classic, 0.0)],
        ..Evidence::default()
    };
    assert!(workload(&key("x"), &ev, 30).is_none());
}

fn in_cluster(cluster: &str, name: &str) -> WorkloadKey {
    WorkloadKey {
        cluster: cluster.into(),
        ..key(name)
    }
}

fn racing(affected: f64, refusals: f64, p95: f64) -> Evidence {
    Evidence {
        pod_starts: Some(affected + 1.0),
        affected_pod_starts: affected,
        incidents: vec![inc("proxy", Phase::Startup, Pattern::Classic, affected)],
        refusals: vec![refused("proxy", Phase::Startup, 15001, refusals)],
        window_p95: Some(p95),
        ..Evidence::default()
    }
}

/// checkout raced in east (3 starts) and west (1), ledger in west (2); catalog
/// started pods in both without racing, and cluster north only started pods.
fn two_clusters() -> Fleet {
    let quiet = Evidence {
        pod_starts: Some(5.0),
        ..Evidence::default()
    };
    Fleet {
        clusters: Some(Clusters {
            label: "cluster".into(),
            label_from: Default::default(),
            windows: [
                (key("checkout"), (Some(1.2), Some(1.8))),
                (key("ledger"), (None, Some(1.0))),
            ]
            .into(),
        }),
        ..fleet(vec![
            (in_cluster("east", "checkout"), racing(3.0, 30.0, 1.5)),
            (in_cluster("west", "checkout"), racing(1.0, 10.0, 1.9)),
            (in_cluster("west", "ledger"), racing(2.0, 20.0, 1.0)),
            (in_cluster("west", "catalog"), quiet.clone()),
            (in_cluster("east", "catalog"), quiet.clone()),
            (in_cluster("north", "idle"), quiet),
        ])
    }
}

/// One workload name in two clusters stays two lines, each ranked on its own
/// cluster's evidence and naming it; the roll-up sums them into one line with the
/// fleet-wide quantiles, one fix holding both clusters' refusals, and the clusters it
/// raced in, worst first.
#[test]
fn clusters_rank_apart_and_roll_up_by_workload() {
    let r = build(two_clusters(), None);
    let lines: Vec<(&str, &str, u64)> = r
        .workloads
        .iter()
        .map(|w| {
            (
                w.cluster.as_deref().unwrap(),
                w.workload.as_deref().unwrap(),
                w.affected_pod_starts,
            )
        })
        .collect();
    assert_eq!(
        lines,
        [
            ("east", "checkout", 3),
            ("west", "ledger", 2),
            ("west", "checkout", 1)
        ]
    );
    assert_eq!(r.workloads_total, 3);
    assert_eq!(
        r.workloads_without_incidents,
        Some(3),
        "catalog twice, idle"
    );
    assert_eq!(r.workloads[2].refusals, 10);
    assert_eq!(r.workloads[2].race_window_p95_seconds, Some(1.9));

    let f = r.fleet.as_ref().expect("a roll-up");
    assert_eq!(f.cluster_label, "cluster");
    assert_eq!(f.clusters, ["east", "north", "west"]);
    assert_eq!((f.workloads_total, f.workloads_without_incidents), (2, 2));
    let checkout = &f.workloads[0];
    assert_eq!(checkout.clusters, ["east", "west"]);
    let w = &checkout.line;
    assert_eq!((w.rank, w.cluster.as_deref()), (1, None));
    assert_eq!(w.workload.as_deref(), Some("checkout"));
    assert_eq!((w.pod_starts, w.affected_pod_starts), (Some(6), 4));
    assert_eq!((w.incidents, w.startup_incidents, w.refusals), (4, 4, 40));
    assert_eq!(
        (w.race_window_p50_seconds, w.race_window_p95_seconds),
        (Some(1.2), Some(1.8))
    );
    assert_eq!(w.fixes.len(), 1, "{:?}", w.fixes);
    assert_eq!(w.fixes[0].refusals, 40);
    assert_eq!(w.fixes[0].startup_probe_port, Some(15001));
    assert_eq!(w.sidecars[0].incidents, 4);
    let ledger = &f.workloads[1];
    assert_eq!(ledger.clusters, ["west"]);
    assert_eq!((ledger.line.rank, ledger.line.affected_pod_starts), (2, 2));

    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["workloads"][0]["cluster"], "east");
    assert_eq!(json["fleet"]["workloads"][0]["clusters"][1], "west");
    assert_eq!(json["fleet"]["workloads"][0]["refusals"], 40);
    assert!(json["fleet"]["workloads"][0].get("cluster").is_none());

    // --top cuts both rankings; a workload's clusters are all its lines'.
    let top = build(two_clusters(), Some(1));
    let f = top.fleet.unwrap();
    assert_eq!((top.workloads.len(), f.workloads.len()), (1, 1));
    assert_eq!((top.workloads_total, f.workloads_total), (3, 2));
    assert_eq!(f.workloads[0].clusters, ["east", "west"]);
}

/// Equal evidence: one workload's clusters stay together.
#[test]
fn ties_keep_a_workloads_clusters_together() {
    let r = build(
        fleet(vec![
            (in_cluster("b", "a"), racing(1.0, 1.0, 1.0)),
            (in_cluster("a", "b"), racing(1.0, 1.0, 1.0)),
            (in_cluster("a", "a"), racing(1.0, 1.0, 1.0)),
        ]),
        None,
    );
    let order: Vec<(&str, &str)> = r
        .workloads
        .iter()
        .map(|w| {
            (
                w.workload.as_deref().unwrap(),
                w.cluster.as_deref().unwrap(),
            )
        })
        .collect();
    assert_eq!(order, [("a", "a"), ("a", "b"), ("b", "a")]);
}

/// The text formats: a CLUSTER column, the roll-up's table first with its CLUSTERS,
/// and each fix list entry naming its cluster.
#[test]
fn text_formats_name_the_clusters() {
    use super::render::{Format, render};
    let r = build(two_clusters(), None);
    let t = render(&r, Format::Table);
    assert!(
        t.starts_with("Sidecar races in the last 7d, from Prometheus at http://p: 2 workloads in 3 clusters (east, north, west), ranked by"),
        "{t}"
    );
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(
        lines[2],
        "Across clusters (label `cluster`), each workload's evidence summed over its clusters: 2 workloads.",
        "{t}"
    );
    assert!(
        lines[4].starts_with("#  WORKLOAD                  CLUSTERS    SIDECARS"),
        "{t}"
    );
    assert!(
        lines[5].starts_with("1  Deployment shop/checkout  east, west  proxy (classic)"),
        "{t}"
    );
    assert_eq!(
        lines[8], "By cluster, one line per workload and cluster: 3 lines.",
        "{t}"
    );
    assert!(lines[10].starts_with("#  CLUSTER  WORKLOAD"), "{t}");
    assert!(
        lines[11].starts_with("1  east     Deployment shop/checkout"),
        "{t}"
    );
    assert!(
        lines[13].starts_with("3  west     Deployment shop/checkout"),
        "{t}"
    );
    assert!(
        t.contains("\nFixes:\n1. Deployment shop/checkout in cluster east\n   - startup: app → proxy:15001 (classic, 30 refusals): Move"),
        "{t}"
    );
    assert!(
        t.ends_with("\n2 other workloads started pods without any incident.\n"),
        "{t}"
    );

    let md = render(&r, Format::Markdown);
    assert!(md.contains("\n### Across clusters\n\n"), "{md}");
    assert!(
        md.contains("| # | Workload | Clusters | Sidecars | Pod starts |"),
        "{md}"
    );
    assert!(
        md.contains("| 1 | Deployment shop/checkout | east, west | `proxy` (classic) | 6 | 4 |"),
        "{md}"
    );
    assert!(md.contains("\n### By cluster\n\n"), "{md}");
    assert!(md.contains("| # | Cluster | Workload | Sidecars |"), "{md}");
    assert!(
        md.contains("| 3 | west | Deployment shop/checkout | `proxy` (classic) | 2 | 1 |"),
        "{md}"
    );
    assert!(
        md.contains("1. **Deployment shop/checkout in cluster east**"),
        "{md}"
    );
}

/// A manifest is deployed to every cluster: the plan joins it with the roll-up, one
/// patch per workload, its probe on the port of the summed evidence.
#[test]
fn the_plan_joins_manifests_with_the_roll_up() {
    use crate::lint;
    let manifest = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: checkout\n  namespace: shop\nspec:\n  selector:\n    matchLabels:\n      app: checkout\n  template:\n    metadata:\n      labels:\n        app: checkout\n    spec:\n      containers:\n      - name: app\n        image: example.com/app:1\n      - name: proxy\n        image: example.com/proxy:1\n        ports:\n        - containerPort: 15001\n";
    let opts = lint::Options {
        site_sidecars: vec!["proxy".into()],
        ..lint::Options::default()
    };
    let (workloads, errors) = lint::load(
        &[lint::input::Source {
            name: "checkout.yaml".into(),
            text: manifest.into(),
        }],
        &opts,
    );
    assert!(errors.is_empty(), "{errors:?}");
    let p = super::plan::plan(build(two_clusters(), None), &workloads, &opts, true);
    assert_eq!(p.raced_in_manifests, 1);
    let patches = p.patches.as_ref().unwrap();
    assert_eq!(patches.len(), 1, "{patches:?}");
    assert_eq!(patches[0].rank, 1);
    assert!(
        patches[0].patch.contains("port: 15001"),
        "{}",
        patches[0].patch
    );
    let text = super::plan::render(&p, super::render::Format::Table);
    assert!(
        text.contains("1 of the 2 raced workloads found in the manifests"),
        "{text}"
    );
}
