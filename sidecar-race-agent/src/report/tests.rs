//! The report's ranking and fixes, from evidence to report lines.

use std::collections::BTreeMap;

use super::{
    fixes::fix,
    fleet::{Evidence, Fleet, IncidentCount, RefusalCount, Source, WorkloadKey},
    rank::{build, workload},
};
use crate::{
    detect::{Kind, Phase, processes::ProcessCount},
    inventory::pod_info::Pattern,
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
    let w = workload(&key("checkout"), &ev).unwrap();
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
    assert!(workload(&key("x"), &ev).is_none());
}
